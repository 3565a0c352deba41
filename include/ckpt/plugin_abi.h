/* The storage-plugin ABI: what a shared object exports so libckpt can use it
 * as a storage backend without being rebuilt.
 *
 * Plain C, no ckpt headers or libraries needed to build a plugin. A plugin
 * exports one function,
 *
 *     const ckpt_storage_plugin* ckpt_storage_plugin_entry(uint32_t host_abi);
 *
 * which returns a table that lives as long as the shared object (a static).
 * `host_abi` is the CKPT_PLUGIN_ABI_VERSION the host was built with; a plugin
 * that cannot serve it returns NULL. The host refuses a table whose
 * `abi_version` differs from its own or whose `struct_size` is smaller than
 * the version's table.
 *
 * Errors: every fallible call returns a ckpt_plugin_code and, when not CKPT_PLUGIN_OK,
 * writes a NUL-terminated message into `err` (at most CKPT_PLUGIN_ERROR_BYTES
 * including the NUL). Messages should name the path and byte offset.
 *
 * Thread safety: every function may be called from several threads at once,
 * except that a writable file's finish/abort run alone on that file, after
 * its writes have returned. Writes to one file may overlap in time but never
 * in byte range. Paths are relative to the storage root, '/'-separated, and
 * never contain ".." or start with '/'.
 *
 * See docs/plugins.md.
 */
#ifndef CKPT_PLUGIN_ABI_H_
#define CKPT_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_PLUGIN_ABI_VERSION 1u
#define CKPT_PLUGIN_ENTRY "ckpt_storage_plugin_entry"
#define CKPT_PLUGIN_ERROR_BYTES 512

typedef enum ckpt_plugin_code {
  CKPT_PLUGIN_OK = 0,
  CKPT_PLUGIN_ERR_NOT_FOUND = 1,    /* the file or directory does not exist */
  CKPT_PLUGIN_ERR_INVALID = 2,      /* bad URI or argument */
  CKPT_PLUGIN_ERR_OUT_OF_RANGE = 3, /* read past the end of a file */
  CKPT_PLUGIN_ERR_IO = 4,           /* EIO and other I/O failures */
  CKPT_PLUGIN_ERR_NO_SPACE = 5,     /* ENOSPC, quota */
  CKPT_PLUGIN_ERR_PERMISSION = 6,
  CKPT_PLUGIN_ERR_UNAVAILABLE = 7, /* transient: worth retrying */
  CKPT_PLUGIN_ERR_INTERNAL = 8,
  CKPT_PLUGIN_ERR_EXISTS = 9 /* put_if_absent: the name is taken */
} ckpt_plugin_code;

/* Capability bits reported by `ckpt plugins`. */
#define CKPT_PLUGIN_CAP_DIRECT_IO 0x1u     /* writes can bypass the page cache */
#define CKPT_PLUGIN_CAP_ATOMIC_RENAME 0x2u /* put_atomic is a rename on one filesystem */
#define CKPT_PLUGIN_CAP_RANGED_READS 0x4u  /* read_at reads only the requested range */
#define CKPT_PLUGIN_CAP_DURABLE 0x8u       /* finish/put_atomic survive power loss */

typedef struct ckpt_storage ckpt_storage; /* plugin-defined */
typedef struct ckpt_wfile ckpt_wfile;     /* plugin-defined */
typedef struct ckpt_rfile ckpt_rfile;     /* plugin-defined */

/* Receives directory entries from `list`, in any order. */
typedef void (*ckpt_list_fn)(void* ctx, const char* name, int is_dir);

typedef struct ckpt_storage_plugin {
  uint32_t abi_version; /* CKPT_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(ckpt_storage_plugin) as the plugin saw it */
  const char* scheme;   /* URI scheme served, e.g. "s3" */
  const char* description;
  const char* version; /* the plugin's own version string */
  uint32_t caps;       /* CKPT_PLUGIN_CAP_* */
  uint32_t reserved;

  /* Opens the storage named by the whole URI ("scheme://location?query"). */
  ckpt_plugin_code (*open)(const char* uri, ckpt_storage** out, char* err);
  void (*close)(ckpt_storage* storage);

  /* Creates or truncates a file, creating parent directories. */
  ckpt_plugin_code (*open_writable)(ckpt_storage* storage, const char* path, ckpt_wfile** out, char* err);
  /* Writes `len` bytes at `offset` (blocking; the host calls it from its
   * own I/O threads, several at once). */
  ckpt_plugin_code (*write_at)(ckpt_wfile* file, uint64_t offset, const void* data, size_t len, char* err);
  /* Sets the length to `final_size`, makes data and length durable, closes
   * and frees the file (also when it fails). */
  ckpt_plugin_code (*finish)(ckpt_wfile* file, uint64_t final_size, char* err);
  /* Closes and frees a file that will not be finished; its content is
   * unspecified and the host removes it. */
  void (*abort)(ckpt_wfile* file);

  /* Opens an existing file; NOT_FOUND when absent. Sets *size. */
  ckpt_plugin_code (*open_readable)(ckpt_storage* storage, const char* path, ckpt_rfile** out, uint64_t* size,
                                    char* err);
  /* Reads exactly `len` bytes at `offset`; OUT_OF_RANGE past the end. */
  ckpt_plugin_code (*read_at)(ckpt_rfile* file, uint64_t offset, void* dst, size_t len, char* err);
  void (*close_readable)(ckpt_rfile* file);

  /* Replaces `path` with `data` atomically and durably. */
  ckpt_plugin_code (*put_atomic)(ckpt_storage* storage, const char* path, const void* data, size_t len, char* err);
  ckpt_plugin_code (*file_size)(ckpt_storage* storage, const char* path, uint64_t* size, char* err);
  /* Entries of a directory ("" is the root); NOT_FOUND when absent. */
  ckpt_plugin_code (*list)(ckpt_storage* storage, const char* dir, ckpt_list_fn emit, void* ctx, char* err);
  /* Removes one file; NOT_FOUND when absent. */
  ckpt_plugin_code (*remove)(ckpt_storage* storage, const char* path, char* err);
  /* Removes a directory tree; OK when absent. */
  ckpt_plugin_code (*remove_all)(ckpt_storage* storage, const char* dir, char* err);
  /* Makes a directory's entries durable (may be a no-op where meaningless). */
  ckpt_plugin_code (*sync_dir)(ckpt_storage* storage, const char* dir, char* err);

  /* Optional, after every required entry: tables built before it existed
   * end before it (their struct_size says so) and still load. Creates
   * `path` with `data` only if no file of that name exists, atomically and
   * durably; CKPT_PLUGIN_ERR_EXISTS when one does. Of several callers racing for
   * one name exactly one succeeds. Without it the backend cannot take part
   * in one-writer-per-step claims. */
  ckpt_plugin_code (*put_if_absent)(ckpt_storage* storage, const char* path, const void* data, size_t len, char* err);
} ckpt_storage_plugin;

/* The size of a table with every required entry and none of the optional
 * ones: the smallest struct_size the host accepts. */
#define CKPT_PLUGIN_REQUIRED_SIZE offsetof(ckpt_storage_plugin, put_if_absent)

typedef const ckpt_storage_plugin* (*ckpt_storage_plugin_entry_fn)(uint32_t host_abi);

#ifdef __cplusplus
}
#endif

#endif /* CKPT_PLUGIN_ABI_H_ */
