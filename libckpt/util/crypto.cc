#include "util/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <random>

namespace ckpt {

void KeepOpenSslUntilExit() {
  static const bool once = [] {
    (void)OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
    return true;
  }();
  (void)once;
}

std::array<uint8_t, 32> HmacSha256(std::string_view key, std::string_view message) {
  KeepOpenSslUntilExit();
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), out.data(), &len);
  return out;
}

std::string RandomBytes(size_t n) {
  std::string s(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(s.data() + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r < 0 && errno != EINTR) {
      std::random_device rd;
      for (size_t i = got; i < n; ++i) s[i] = static_cast<char>(rd());
      break;
    }
  }
  return s;
}

}  // namespace ckpt
