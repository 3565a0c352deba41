#ifndef CKPT_UTIL_CLOCK_H_
#define CKPT_UTIL_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace ckpt {

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ckpt

#endif  // CKPT_UTIL_CLOCK_H_
