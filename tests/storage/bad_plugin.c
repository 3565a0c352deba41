/* Plugins the loader must refuse with a clear error, one per build flag. */
#include <stddef.h>

#include "ckpt/plugin_abi.h"

#if defined(BAD_NO_ENTRY)
int ckpt_not_the_entry_point(void) { return 0; }
#else
static ckpt_plugin_code no_open(const char* uri, ckpt_storage** out, char* err) {
  (void)uri;
  (void)out;
  (void)err;
  return CKPT_PLUGIN_ERR_INTERNAL;
}
static ckpt_storage_plugin table = {
#if defined(BAD_WRONG_ABI)
    .abi_version = CKPT_PLUGIN_ABI_VERSION + 41,
#else
    .abi_version = CKPT_PLUGIN_ABI_VERSION,
#endif
    .struct_size = sizeof(ckpt_storage_plugin),
    .scheme = "broken",
    .open = no_open, /* and nothing else: incomplete */
};
const ckpt_storage_plugin* ckpt_storage_plugin_entry(uint32_t host_abi) {
  (void)host_abi;
  return &table;
}
#endif
