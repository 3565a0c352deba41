// What the shared libraries export. libckpt, libckpt_coordinator and
// libckpt_mpi are built with hidden visibility: only what the public headers
// mark with CKPT_EXPORT is part of their ABI; everything else is internal and
// reachable only by linking the project's static internal targets.
#ifndef CKPT_EXPORT_H_
#define CKPT_EXPORT_H_

#if defined(_WIN32)
#define CKPT_EXPORT
#else
#define CKPT_EXPORT __attribute__((visibility("default")))
#endif

#endif  // CKPT_EXPORT_H_
