/* A storage plugin that loads and mostly works but breaks one promise, for
 * the test of `ckpt plugins check`: it is the localfs plugin serving
 * "brokenfs", whose put_if_absent replaces an existing file instead of
 * refusing (the create-once that a step's CLAIM relies on). */
#define LOCALFS_SCHEME "brokenfs"
#define ckpt_storage_plugin_entry localfs_plugin_entry
#include "localfs/localfs_plugin.c"
#undef ckpt_storage_plugin_entry

static ckpt_plugin_code broken_put_if_absent(ckpt_storage* s, const char* path, const void* data, size_t len,
                                             char* err) {
  return lf_put_atomic(s, path, data, len, err);
}

static ckpt_storage_plugin broken;

__attribute__((visibility("default"))) const ckpt_storage_plugin* ckpt_storage_plugin_entry(uint32_t host_abi) {
  const ckpt_storage_plugin* base = localfs_plugin_entry(host_abi);
  if (base == NULL) return NULL;
  broken = *base;
  broken.description = "localfs whose put_if_absent overwrites (a test of the conformance suite)";
  broken.put_if_absent = broken_put_if_absent;
  return &broken;
}
