/* localfs: a filesystem storage plugin written against the C plugin ABI only
 * (include/ckpt/plugin_abi.h), as a template for third-party backends.
 *
 * URI: localfs:///absolute/root[?fsync=0]
 * Files are plain files under the root; put_atomic writes a temporary file,
 * fsyncs it and renames it over the target; finish truncates and fsyncs.
 * fsync=0 skips the fsyncs (scratch data only).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/plugin_abi.h"

/* The scheme served; a copy built elsewhere can serve another name. */
#ifndef LOCALFS_SCHEME
#define LOCALFS_SCHEME "localfs"
#endif

struct ckpt_storage {
  char root[PATH_MAX];
  int fsync;
};

struct ckpt_wfile {
  int fd;
  int fsync;
  char path[PATH_MAX];
};

struct ckpt_rfile {
  int fd;
  char path[PATH_MAX];
};

static ckpt_plugin_code fail(char* err, ckpt_plugin_code code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, CKPT_PLUGIN_ERROR_BYTES, fmt, ap);
  va_end(ap);
  return code;
}

static ckpt_plugin_code from_errno(int e) {
  switch (e) {
    case ENOENT:
      return CKPT_PLUGIN_ERR_NOT_FOUND;
    case ENOSPC:
    case EDQUOT:
      return CKPT_PLUGIN_ERR_NO_SPACE;
    case EACCES:
    case EPERM:
    case EROFS:
      return CKPT_PLUGIN_ERR_PERMISSION;
    case EINVAL:
    case ENAMETOOLONG:
      return CKPT_PLUGIN_ERR_INVALID;
    case EAGAIN:
    case EINTR:
      return CKPT_PLUGIN_ERR_UNAVAILABLE;
    default:
      return CKPT_PLUGIN_ERR_IO;
  }
}

static ckpt_plugin_code sys_fail(char* err, const char* what, const char* path) {
  const int e = errno;
  return fail(err, from_errno(e), "%s %s: %s", what, path, strerror(e));
}

static int full_path(const ckpt_storage* s, const char* rel, char* out) {
  const int n = snprintf(out, PATH_MAX, "%s%s%s", s->root, rel[0] ? "/" : "", rel);
  return n > 0 && n < PATH_MAX;
}

/* mkdir -p of the directory part of `path`. */
static int make_parents(char* path) {
  for (char* p = path + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    const int r = mkdir(path, 0755);
    const int e = errno;
    *p = '/';
    if (r != 0 && e != EEXIST) return -1;
  }
  return 0;
}

static int sync_parent(const char* path) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s", path);
  char* slash = strrchr(dir, '/');
  if (slash == NULL) return 0;
  *slash = '\0';
  const int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  const int r = fsync(fd);
  close(fd);
  return r;
}

static ckpt_plugin_code lf_open(const char* uri, ckpt_storage** out, char* err) {
  const char* prefix = LOCALFS_SCHEME "://";
  if (strncmp(uri, prefix, strlen(prefix)) != 0) {
    return fail(err, CKPT_PLUGIN_ERR_INVALID, "'%s' is not a %s URI", uri, prefix);
  }
  const char* loc = uri + strlen(prefix);
  if (loc[0] != '/') return fail(err, CKPT_PLUGIN_ERR_INVALID, "'%s': the root must be an absolute path", uri);
  ckpt_storage* s = calloc(1, sizeof(*s));
  if (s == NULL) return fail(err, CKPT_PLUGIN_ERR_INTERNAL, "out of memory");
  const size_t n = strcspn(loc, "?");
  if (n >= sizeof(s->root)) {
    free(s);
    return fail(err, CKPT_PLUGIN_ERR_INVALID, "'%s': path too long", uri);
  }
  memcpy(s->root, loc, n);
  while (n > 1 && s->root[strlen(s->root) - 1] == '/') s->root[strlen(s->root) - 1] = '\0';
  s->fsync = strstr(loc + n, "fsync=0") == NULL;
  char probe[PATH_MAX];
  snprintf(probe, sizeof(probe), "%s/x", s->root);
  if (make_parents(probe) != 0) {
    const ckpt_plugin_code c = sys_fail(err, "creating", s->root);
    free(s);
    return c;
  }
  *out = s;
  return CKPT_PLUGIN_OK;
}

static void lf_close(ckpt_storage* s) { free(s); }

static ckpt_plugin_code lf_open_writable(ckpt_storage* s, const char* path, ckpt_wfile** out, char* err) {
  ckpt_wfile* f = calloc(1, sizeof(*f));
  if (f == NULL) return fail(err, CKPT_PLUGIN_ERR_INTERNAL, "out of memory");
  if (!full_path(s, path, f->path) || make_parents(f->path) != 0) {
    const ckpt_plugin_code c = sys_fail(err, "creating the directory of", path);
    free(f);
    return c;
  }
  f->fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd < 0) {
    const ckpt_plugin_code c = sys_fail(err, "creating", f->path);
    free(f);
    return c;
  }
  f->fsync = s->fsync;
  *out = f;
  return CKPT_PLUGIN_OK;
}

static ckpt_plugin_code lf_write_at(ckpt_wfile* f, uint64_t offset, const void* data, size_t len, char* err) {
  const char* p = data;
  while (len > 0) {
    const ssize_t n = pwrite(f->fd, p, len, (off_t)offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      return fail(err, from_errno(e), "write at offset %llu in %s: %s", (unsigned long long)offset, f->path,
                  strerror(e));
    }
    p += n;
    offset += (uint64_t)n;
    len -= (size_t)n;
  }
  return CKPT_PLUGIN_OK;
}

static ckpt_plugin_code lf_finish(ckpt_wfile* f, uint64_t final_size, char* err) {
  ckpt_plugin_code c = CKPT_PLUGIN_OK;
  if (ftruncate(f->fd, (off_t)final_size) != 0) {
    c = sys_fail(err, "truncating", f->path);
  } else if (f->fsync && fsync(f->fd) != 0) {
    c = sys_fail(err, "fsync of", f->path);
  }
  if (close(f->fd) != 0 && c == CKPT_PLUGIN_OK) c = sys_fail(err, "closing", f->path);
  if (c == CKPT_PLUGIN_OK && f->fsync && sync_parent(f->path) != 0)
    c = sys_fail(err, "syncing the directory of", f->path);
  free(f);
  return c;
}

static void lf_abort(ckpt_wfile* f) {
  close(f->fd);
  free(f);
}

static ckpt_plugin_code lf_open_readable(ckpt_storage* s, const char* path, ckpt_rfile** out, uint64_t* size,
                                         char* err) {
  ckpt_rfile* f = calloc(1, sizeof(*f));
  if (f == NULL) return fail(err, CKPT_PLUGIN_ERR_INTERNAL, "out of memory");
  if (!full_path(s, path, f->path)) {
    free(f);
    return fail(err, CKPT_PLUGIN_ERR_INVALID, "path too long: %s", path);
  }
  /* Non-blocking, so that a FIFO without a writer cannot hold the open;
     only a regular file is read. */
  f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (f->fd < 0 || fstat(f->fd, &st) != 0) {
    const ckpt_plugin_code c = sys_fail(err, "opening", f->path);
    if (f->fd >= 0) close(f->fd);
    free(f);
    return c;
  }
  if (!S_ISREG(st.st_mode)) {
    close(f->fd);
    const ckpt_plugin_code c = fail(err, CKPT_PLUGIN_ERR_INVALID, "%s is not a regular file", f->path);
    free(f);
    return c;
  }
  (void)fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_NONBLOCK);
  *size = (uint64_t)st.st_size;
  *out = f;
  return CKPT_PLUGIN_OK;
}

static ckpt_plugin_code lf_read_at(ckpt_rfile* f, uint64_t offset, void* dst, size_t len, char* err) {
  char* p = dst;
  while (len > 0) {
    const ssize_t n = pread(f->fd, p, len, (off_t)offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      return fail(err, from_errno(e), "read at offset %llu in %s: %s", (unsigned long long)offset, f->path,
                  strerror(e));
    }
    if (n == 0) {
      return fail(err, CKPT_PLUGIN_ERR_OUT_OF_RANGE, "%s is truncated at offset %llu", f->path,
                  (unsigned long long)offset);
    }
    p += n;
    offset += (uint64_t)n;
    len -= (size_t)n;
  }
  return CKPT_PLUGIN_OK;
}

static void lf_close_readable(ckpt_rfile* f) {
  close(f->fd);
  free(f);
}

/* Writes `data` durably to a fresh temporary file next to `path`; its full
 * name goes to `tmp` (PATH_MAX + 64 bytes). The caller names or removes it. */
static ckpt_plugin_code write_temp(ckpt_storage* s, const char* path, const void* data, size_t len, char* full,
                                   char* tmp, char* err) {
  static unsigned long counter = 0;
  const unsigned long n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
  char rel_tmp[PATH_MAX + 64];
  if (!full_path(s, path, full) || make_parents(full) != 0) return sys_fail(err, "creating the directory of", path);
  snprintf(tmp, PATH_MAX + 64, "%s.tmp-%ld-%lu", full, (long)getpid(), n);
  snprintf(rel_tmp, sizeof(rel_tmp), "%s.tmp-%ld-%lu", path, (long)getpid(), n);
  ckpt_wfile* f = NULL;
  ckpt_plugin_code c = lf_open_writable(s, rel_tmp, &f, err);
  if (c != CKPT_PLUGIN_OK) return c;
  c = lf_write_at(f, 0, data, len, err);
  if (c != CKPT_PLUGIN_OK) {
    lf_abort(f);
    unlink(tmp);
    return c;
  }
  c = lf_finish(f, len, err);
  if (c != CKPT_PLUGIN_OK) unlink(tmp);
  return c;
}

#ifndef LOCALFS_REQUIRED_ENTRIES_ONLY
/* link(2) names the temporary file only if the name is free: atomic and
 * exclusive. */
static ckpt_plugin_code lf_put_if_absent(ckpt_storage* s, const char* path, const void* data, size_t len, char* err) {
  char full[PATH_MAX], tmp[PATH_MAX + 64];
  ckpt_plugin_code c = write_temp(s, path, data, len, full, tmp, err);
  if (c != CKPT_PLUGIN_OK) return c;
  if (link(tmp, full) != 0) {
    c = errno == EEXIST ? fail(err, CKPT_PLUGIN_ERR_EXISTS, "%s already exists", full) : sys_fail(err, "linking", full);
  }
  unlink(tmp);
  if (c != CKPT_PLUGIN_OK) return c;
  if (s->fsync && sync_parent(full) != 0) return sys_fail(err, "syncing the directory of", full);
  return CKPT_PLUGIN_OK;
}
#endif

static ckpt_plugin_code lf_put_atomic(ckpt_storage* s, const char* path, const void* data, size_t len, char* err) {
  char full[PATH_MAX], tmp[PATH_MAX + 64];
  ckpt_plugin_code c = write_temp(s, path, data, len, full, tmp, err);
  if (c != CKPT_PLUGIN_OK) return c;
  if (rename(tmp, full) != 0) {
    c = sys_fail(err, "renaming over", full);
    unlink(tmp);
    return c;
  }
  if (s->fsync && sync_parent(full) != 0) return sys_fail(err, "syncing the directory of", full);
  return CKPT_PLUGIN_OK;
}

static ckpt_plugin_code lf_file_size(ckpt_storage* s, const char* path, uint64_t* size, char* err) {
  char full[PATH_MAX];
  struct stat st;
  if (!full_path(s, path, full) || stat(full, &st) != 0) return sys_fail(err, "stat of", path);
  if (S_ISDIR(st.st_mode)) return fail(err, CKPT_PLUGIN_ERR_INVALID, "%s is a directory", full);
  *size = (uint64_t)st.st_size;
  return CKPT_PLUGIN_OK;
}

static ckpt_plugin_code lf_list(ckpt_storage* s, const char* dir, ckpt_list_fn emit, void* ctx, char* err) {
  char full[PATH_MAX];
  if (!full_path(s, dir, full)) return fail(err, CKPT_PLUGIN_ERR_INVALID, "path too long: %s", dir);
  DIR* d = opendir(full);
  if (d == NULL) return sys_fail(err, "listing", full);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (strstr(e->d_name, ".tmp-") != NULL) continue; /* a put_atomic in progress */
    char child[PATH_MAX];
    struct stat st;
    const int n = snprintf(child, sizeof(child), "%s/%s", full, e->d_name);
    const int is_dir = n > 0 && n < PATH_MAX && stat(child, &st) == 0 && S_ISDIR(st.st_mode);
    emit(ctx, e->d_name, is_dir);
  }
  closedir(d);
  return CKPT_PLUGIN_OK;
}

static ckpt_plugin_code lf_remove(ckpt_storage* s, const char* path, char* err) {
  char full[PATH_MAX];
  if (!full_path(s, path, full) || unlink(full) != 0) return sys_fail(err, "removing", path);
  return CKPT_PLUGIN_OK;
}

static int remove_tree(const char* full) {
  DIR* d = opendir(full);
  if (d == NULL) return errno == ENOENT ? 0 : (errno == ENOTDIR ? unlink(full) : -1);
  struct dirent* e;
  int r = 0;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char child[PATH_MAX];
    snprintf(child, sizeof(child), "%s/%s", full, e->d_name);
    struct stat st;
    if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) {
      r |= remove_tree(child);
    } else if (unlink(child) != 0 && errno != ENOENT) {
      r = -1;
    }
  }
  closedir(d);
  if (rmdir(full) != 0 && errno != ENOENT) r = -1;
  return r;
}

static ckpt_plugin_code lf_remove_all(ckpt_storage* s, const char* dir, char* err) {
  char full[PATH_MAX];
  if (!full_path(s, dir, full) || remove_tree(full) != 0) return sys_fail(err, "removing", dir);
  return CKPT_PLUGIN_OK;
}

static ckpt_plugin_code lf_sync_dir(ckpt_storage* s, const char* dir, char* err) {
  char full[PATH_MAX];
  if (!s->fsync) return CKPT_PLUGIN_OK;
  if (!full_path(s, dir, full)) return fail(err, CKPT_PLUGIN_ERR_INVALID, "path too long: %s", dir);
  const int fd = open(full, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_fail(err, "opening", full);
  const int r = fsync(fd);
  close(fd);
  if (r != 0) return sys_fail(err, "fsync of", full);
  return CKPT_PLUGIN_OK;
}

static const ckpt_storage_plugin kPlugin = {
    .abi_version = CKPT_PLUGIN_ABI_VERSION,
#ifdef LOCALFS_REQUIRED_ENTRIES_ONLY
    /* Built as a plugin from before the optional entries (a test of the
     * host's compatibility): its table ends after sync_dir. */
    .struct_size = CKPT_PLUGIN_REQUIRED_SIZE,
#else
    .struct_size = sizeof(ckpt_storage_plugin),
#endif
    .scheme = LOCALFS_SCHEME,
    .description = "plain files through pread/pwrite, written in C against the plugin ABI",
    .version = "1.0",
    .caps = CKPT_PLUGIN_CAP_ATOMIC_RENAME | CKPT_PLUGIN_CAP_RANGED_READS | CKPT_PLUGIN_CAP_DURABLE,
    .open = lf_open,
    .close = lf_close,
    .open_writable = lf_open_writable,
    .write_at = lf_write_at,
    .finish = lf_finish,
    .abort = lf_abort,
    .open_readable = lf_open_readable,
    .read_at = lf_read_at,
    .close_readable = lf_close_readable,
    .put_atomic = lf_put_atomic,
    .file_size = lf_file_size,
    .list = lf_list,
    .remove = lf_remove,
    .remove_all = lf_remove_all,
    .sync_dir = lf_sync_dir,
#ifndef LOCALFS_REQUIRED_ENTRIES_ONLY
    .put_if_absent = lf_put_if_absent,
#endif
};

__attribute__((visibility("default"))) const ckpt_storage_plugin* ckpt_storage_plugin_entry(uint32_t host_abi) {
  return host_abi == CKPT_PLUGIN_ABI_VERSION ? &kPlugin : NULL;
}
