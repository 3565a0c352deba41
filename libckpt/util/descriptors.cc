#include "util/descriptors.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace ckpt {

bool OutOfDescriptors(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

rlimit RaiseDescriptorLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return rl;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl;
}

DescriptorReserve::DescriptorReserve() : fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

DescriptorReserve::~DescriptorReserve() {
  if (fd_ >= 0) ::close(fd_);
}

bool DescriptorReserve::RefuseOne(int listen_fd) {
  if (fd_ < 0) {
    fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    return false;
  }
  ::close(fd_);
  fd_ = -1;
  bool refused = false;
  pollfd p{listen_fd, POLLIN, 0};
  if (::poll(&p, 1, 0) == 1) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      refused = true;
    }
  }
  fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return refused;
}

}  // namespace ckpt
