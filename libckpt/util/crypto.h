// The two secrets helpers of the control and data planes: HMAC-SHA256
// (OpenSSL) and random bytes from the kernel's CSPRNG.
#ifndef CKPT_UTIL_CRYPTO_H_
#define CKPT_UTIL_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt {

std::array<uint8_t, 32> HmacSha256(std::string_view key, std::string_view message);

/// Initialises OpenSSL without its exit-time cleanup, once per process. The
/// library's threads (the coordinator's, S3 uploads, peer servers) may still
/// hash while the process exits; with the cleanup registered, a hash racing
/// exit() crashed in OpenSSL's freed tables. Where the application
/// initialised OpenSSL first, its choice stands. Every OpenSSL user in the
/// library calls this first.
void KeepOpenSslUntilExit();

/// `n` random bytes: one getrandom(2) call (a std::random_device per
/// connection cost a 16,384-member rendezvous a noticeable share of its
/// time); the library's random_device only where getrandom fails.
std::string RandomBytes(size_t n);

}  // namespace ckpt

#endif  // CKPT_UTIL_CRYPTO_H_
