// Happens-before edges that ThreadSanitizer cannot see: a request handed to
// the kernel through io_uring's submission ring by one thread and taken back
// from the completion ring by another. No-ops in other builds.
#ifndef CKPT_UTIL_TSAN_H_
#define CKPT_UTIL_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define CKPT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CKPT_TSAN 1
#endif
#endif

#ifdef CKPT_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace ckpt {

/// Before handing `p` to another thread through a channel TSan cannot see.
inline void TsanRelease(void* p) {
#ifdef CKPT_TSAN
  __tsan_release(p);
#else
  (void)p;
#endif
}

/// After taking `p` from such a channel.
inline void TsanAcquire(void* p) {
#ifdef CKPT_TSAN
  __tsan_acquire(p);
#else
  (void)p;
#endif
}

}  // namespace ckpt

#endif  // CKPT_UTIL_TSAN_H_
