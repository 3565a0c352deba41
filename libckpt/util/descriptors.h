// What the project's servers (the coordinator, the peer memory) do about
// file descriptors: raise the soft limit, and when accept(2) runs out of
// them, refuse the next connection at once instead of leaving it in the
// backlog, where the listening socket stays readable and the accept loop
// spins.
#ifndef CKPT_UTIL_DESCRIPTORS_H_
#define CKPT_UTIL_DESCRIPTORS_H_

#include <sys/resource.h>

namespace ckpt {

/// True when accept(2) failed with `err` for want of descriptors (or
/// kernel memory).
bool OutOfDescriptors(int err);

/// Raises the soft RLIMIT_NOFILE to the hard one; the limits in force.
rlimit RaiseDescriptorLimit();

/// One descriptor held in reserve. REQUIRES: external synchronization (the
/// one thread or strand that accepts).
class DescriptorReserve {
 public:
  DescriptorReserve();
  ~DescriptorReserve();
  DescriptorReserve(const DescriptorReserve&) = delete;
  DescriptorReserve& operator=(const DescriptorReserve&) = delete;
  /// Gives the reserve up to accept one connection waiting on `listen_fd`
  /// and close it at once, then takes the reserve back. True when one was
  /// refused that way.
  bool RefuseOne(int listen_fd);

 private:
  int fd_ = -1;
};

}  // namespace ckpt

#endif  // CKPT_UTIL_DESCRIPTORS_H_
