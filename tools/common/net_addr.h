// Addresses a process advertises to processes on other hosts.
#ifndef CKPT_TOOLS_COMMON_NET_ADDR_H_
#define CKPT_TOOLS_COMMON_NET_ADDR_H_

#include <string>

#include "absl/status/statusor.h"

namespace ckpt::tools {

/// This host's address on the route to HOST:PORT (the first of a list
/// "A,B,..."): what a process should listen on and advertise so that the
/// host it reaches can reach it back. 127.0.0.1 toward a loopback address;
/// an IPv6 address in brackets. Sends nothing. Errors name the target when
/// it does not resolve or no route leads there.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host_port);

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_COMMON_NET_ADDR_H_
