// What the tests of s3:// against a real S3 server share (s3_test.cc,
// s3_failure_test.cc): the server the ctest fixture "s3" started, unique
// roots on it, the AWS CLI, and a small state to save.
#ifndef CKPT_STORAGE_ROOTS_S3_S3_TEST_H_
#define CKPT_STORAGE_ROOTS_S3_S3_TEST_H_

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "storage/capabilities.h"
#include "testutil/test_util.h"

#if !defined(CKPT_S3_ENV_FILE) || !defined(CKPT_BIN) || !defined(CRASH_SAVER_PATH) || !defined(S3_SERVER_SCRIPT)
#error "CKPT_S3_ENV_FILE, CKPT_BIN, CRASH_SAVER_PATH and S3_SERVER_SCRIPT must be defined"
#endif

namespace ckpt::testing {

// The root's unfinished multipart uploads, through its PendingUploads
// capability (the s3:// root's own, or forwarded by an adapter).
inline absl::StatusOr<std::vector<PendingUpload>> ListPendingUploads(Storage& storage) {
  PendingUploads* p = FindCapability<PendingUploads>(storage);
  if (p == nullptr) return absl::FailedPreconditionError(storage.uri() + " has no PendingUploads capability");
  return p->ListPending();
}

struct S3Server {
  std::string endpoint;
  bool up = false;
};

// The server the fixture started: its env file exports AWS_* (set here for
// this process and the commands it runs), S3_ENDPOINT and CEPH_CONF.
inline const S3Server& Server() {
  static const S3Server server = [] {
    S3Server s;
    std::ifstream in(CKPT_S3_ENV_FILE);
    std::string word;
    while (in >> word) {
      const size_t eq = word.find('=');
      if (word == "export" || eq == std::string::npos) continue;
      const std::string k = word.substr(0, eq), v = word.substr(eq + 1);
      setenv(k.c_str(), v.c_str(), 1);
      if (k == "S3_ENDPOINT") s.endpoint = v;
    }
    s.up = !s.endpoint.empty();
    return s;
  }();
  return server;
}

#define REQUIRE_SERVER()                                                                                   \
  ASSERT_TRUE(Server().up) << "no S3 server: " << CKPT_S3_ENV_FILE                                         \
                           << " is missing; run through ctest (fixture S3Server.Start) or start one with " \
                           << "scripts/s3-test-server.sh start DIR"

inline std::string UniquePrefix(const std::string& what) {
  static int counter = 0;
  return what + "-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
}

inline std::string Root(const std::string& prefix, const std::string& extra = "") {
  return "s3://ckpt-test/" + prefix + "?endpoint=" + Server().endpoint + extra;
}

inline std::string Aws(const std::string& args) {
  return "/usr/bin/aws --endpoint-url " + Server().endpoint + " " + args + " 2>&1";
}

inline std::string Quote(const std::string& s) { return "'" + s + "'"; }

inline std::shared_ptr<Storage> OpenOrDie(const std::string& uri) {
  auto s = OpenStorage(uri);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nullptr;
}

inline absl::Span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

inline std::string Pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

inline State SmallState(std::vector<OwnedShard>& shards) {
  shards.clear();
  for (const auto& [name, dt] :
       std::vector<std::pair<std::string, DType>>{{"emb", DType::kBF16}, {"w", DType::kF32}, {"step", DType::kI64}}) {
    TensorSpec spec{name, dt, {name == "step" ? int64_t{1} : int64_t{1500}, name == "step" ? int64_t{1} : 1024}};
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 11));
  }
  return StateOf(shards);
}

inline std::unique_ptr<Checkpointer> OpenCheckpointer(const std::string& uri, Codec codec) {
  CheckpointerOptions o;
  o.uri = uri;
  o.codec = codec;
  o.engine_options.block_size = 256 << 10;
  o.engine_options.staging_bytes = 4 << 20;
  auto cp = Checkpointer::Open(o);
  EXPECT_TRUE(cp.ok()) << cp.status();
  return cp.ok() ? std::move(cp).value() : nullptr;
}

inline double JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::atof(json.c_str() + at + key.size() + 3);
}

}  // namespace ckpt::testing

#endif  // CKPT_STORAGE_ROOTS_S3_S3_TEST_H_
