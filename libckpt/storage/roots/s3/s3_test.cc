// The s3:// backend against a real S3 server: Ceph's RADOS Gateway, started
// for the run by the ctest fixture "s3" (scripts/s3-test-server.sh), with the
// AWS CLI as the client no one here wrote.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "net/http_client.h"
#include "net/uri.h"
#include "storage/capabilities.h"
#include "storage/conformance.h"
#include "storage/roots/s3/s3_sign.h"
#include "storage/roots/s3/s3_storage.h"
#include "testutil/test_util.h"

extern char** environ;

#if !defined(CKPT_S3_ENV_FILE) || !defined(CKPT_BIN) || !defined(CRASH_SAVER_PATH) || !defined(S3_SERVER_SCRIPT)
#error "CKPT_S3_ENV_FILE, CKPT_BIN, CRASH_SAVER_PATH and S3_SERVER_SCRIPT must be defined"
#endif

namespace ckpt::testing {
namespace {

// The root's unfinished multipart uploads, through its PendingUploads
// capability (the s3:// root's own, or forwarded by an adapter).
absl::StatusOr<std::vector<PendingUpload>> ListPendingUploads(Storage& storage) {
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
const S3Server& Server() {
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

std::string UniquePrefix(const std::string& what) {
  static int counter = 0;
  return what + "-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
}

std::string Root(const std::string& prefix, const std::string& extra = "") {
  return "s3://ckpt-test/" + prefix + "?endpoint=" + Server().endpoint + extra;
}

std::string Aws(const std::string& args) {
  return "/usr/bin/aws --endpoint-url " + Server().endpoint + " " + args + " 2>&1";
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::shared_ptr<Storage> OpenOrDie(const std::string& uri) {
  auto s = OpenStorage(uri);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nullptr;
}

absl::Span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string Pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    S3, StorageConformance,
    ::testing::Values(BackendCase{"s3", "", "", [](int n) { return Root(UniquePrefix("conf" + std::to_string(n))); }},
                      BackendCase{"s3_one_connection", "", "",
                                  [](int n) {
                                    return Root(UniquePrefix("conf1c" + std::to_string(n)),
                                                "&connections=1&addressing=path");
                                  }}),
    [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

// Data files go up in parts as soon as each part is whole, whatever order
// the writes come in; padding written past the final size (the ckpt
// writer's last aligned write) is cut, also when it filled a whole part.
TEST(S3Storage, LargeFilesGoUpInPartsWrittenInAnyOrder) {
  REQUIRE_SERVER();
  auto storage = OpenOrDie(Root(UniquePrefix("parts"), "&part_size=5M&read_chunk=1M&connections=4"));
  ASSERT_NE(storage, nullptr);
  constexpr uint64_t kMiB = 1 << 20;
  for (const uint64_t final_size : {23 * kMiB + 1234, 10 * kMiB - 100, 5 * kMiB, 3 * kMiB + 7}) {
    SCOPED_TRACE(final_size);
    const uint64_t padded = (final_size + 4095) / 4096 * 4096;
    const std::string data = Pattern(padded, final_size);
    const std::string name = "step-0000000001/rank-" + std::to_string(final_size) + ".ckd";
    auto w = storage->OpenWritable(name);
    ASSERT_OK(w);
    (*w)->Reserve(padded);
    // Blocks of 777 KiB in a shuffled order from three threads.
    std::vector<std::pair<uint64_t, uint64_t>> blocks;
    for (uint64_t off = 0; off < padded; off += 777 << 10)
      blocks.emplace_back(off, std::min<uint64_t>(777 << 10, padded - off));
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(static_cast<unsigned>(final_size)));
    std::atomic<size_t> next{0};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&] {
        for (size_t i; (i = next++) < blocks.size();) {
          (*w)->WriteAsync(blocks[i].first, Bytes(data).subspan(blocks[i].first, blocks[i].second),
                           [&](absl::Status s) {
                             if (!s.ok()) ++failures;
                           });
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_OK((*w)->Finish(final_size));
    EXPECT_EQ(failures.load(), 0);
    auto size = storage->FileSize(name);
    ASSERT_OK(size);
    EXPECT_EQ(*size, final_size);
    auto r = storage->OpenReadable(name);
    ASSERT_OK(r);
    // One ranged read across parts, split into 1 MiB GETs in parallel.
    const uint64_t off = final_size / 7, len = final_size - off - 3;
    std::string got(len, '\0');
    ASSERT_OK((*r)->ReadAt(off, absl::Span<std::byte>(reinterpret_cast<std::byte*>(got.data()), len)));
    EXPECT_TRUE(got == data.substr(off, len));
    auto all = storage->GetAll(name);
    ASSERT_OK(all);
    EXPECT_TRUE(*all == data.substr(0, final_size));
  }
  auto pending = ListPendingUploads(*storage);
  ASSERT_OK(pending);
  EXPECT_TRUE(pending->empty()) << pending->front().path;
}

// Writing with WriteOptions::truncate == false over an existing object
// keeps its bytes where nothing was written (fetched, since objects cannot
// change in place), in whole parts and in the last one.
TEST(S3Storage, WritesOverAnObjectKeepWhatIsNotWritten) {
  REQUIRE_SERVER();
  auto storage = OpenOrDie(Root(UniquePrefix("keep"), "&part_size=5M"));
  ASSERT_NE(storage, nullptr);
  std::string data = Pattern((12 << 20) + 321, 9);
  ASSERT_OK(storage->PutAtomic("k.bin", Bytes(data)));
  auto w = storage->OpenWritable("k.bin", WriteOptions{true, false});
  ASSERT_OK(w);
  const std::string patch1(1000, 'A'), patch2(10, 'B');
  (*w)->WriteAsync(6 << 20, Bytes(patch1), [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; });
  (*w)->WriteAsync((11 << 20) + 5, Bytes(patch2), [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; });
  ASSERT_OK((*w)->Finish(data.size()));
  data.replace(6 << 20, patch1.size(), patch1);
  data.replace((11 << 20) + 5, patch2.size(), patch2);
  auto got = storage->GetAll("k.bin");
  ASSERT_OK(got);
  EXPECT_TRUE(*got == data);
  EXPECT_TRUE(ListPendingUploads(*storage)->empty());
}

// A file given up before Finish, or finished with bytes never written,
// leaves no multipart upload behind and no object.
TEST(S3Storage, AbandonedOrHoledFilesLeaveNoUpload) {
  REQUIRE_SERVER();
  auto storage = OpenOrDie(Root(UniquePrefix("abandon"), "&part_size=5M"));
  ASSERT_NE(storage, nullptr);
  const std::string data = Pattern(12 << 20, 1);
  {
    auto w = storage->OpenWritable("a.bin");
    ASSERT_OK(w);
    (*w)->WriteAsync(0, Bytes(data), [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; });
    ASSERT_OK((*w)->Drain());
  }  // dropped without Finish: a failed save
  EXPECT_TRUE(absl::IsNotFound(storage->FileSize("a.bin").status()));
  {
    auto w = storage->OpenWritable("b.bin");
    ASSERT_OK(w);
    (*w)->WriteAsync(0, Bytes(data).subspan(0, 5 << 20), [](absl::Status) {});
    (*w)->WriteAsync(6 << 20, Bytes(data).subspan(6 << 20), [](absl::Status) {});
    absl::Status st = (*w)->Finish(data.size());
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find("bytes 5242880..6291456 were never written"), absl::string_view::npos) << st;
    EXPECT_NE(st.message().find("b.bin"), absl::string_view::npos) << st;
  }
  EXPECT_TRUE(absl::IsNotFound(storage->FileSize("b.bin").status()));
  auto pending = ListPendingUploads(*storage);
  ASSERT_OK(pending);
  EXPECT_TRUE(pending->empty()) << pending->size() << " uploads left";
}

// Listings past S3's 1,000 keys a page follow continuation tokens, and
// removing more than one batch-delete's 1,000 keys takes several.
TEST(S3Storage, ListingsAndRemovalsPastOneThousandKeys) {
  REQUIRE_SERVER();
  auto storage = OpenOrDie(Root(UniquePrefix("many")));
  ASSERT_NE(storage, nullptr);
  constexpr int kFiles = 1050;
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i; (i = next++) < kFiles;) {
        char name[32];
        std::snprintf(name, sizeof(name), "d/f%05d", i);
        EXPECT_OK(storage->PutAtomic(name, Bytes(std::to_string(i))));
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_OK(storage->PutAtomic("d/sub/x", Bytes("x")));
  auto entries = storage->List("d");
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), kFiles + 1u);
  EXPECT_EQ((*entries)[0].name, "f00000");
  EXPECT_EQ((*entries)[kFiles - 1].name, "f01049");
  EXPECT_EQ((*entries)[kFiles].name, "sub");
  EXPECT_TRUE((*entries)[kFiles].is_dir);
  ASSERT_OK(storage->RemoveAll("d"));
  EXPECT_TRUE(absl::IsNotFound(storage->List("d").status()));
}

State SmallState(std::vector<OwnedShard>& shards) {
  shards.clear();
  for (const auto& [name, dt] :
       std::vector<std::pair<std::string, DType>>{{"emb", DType::kBF16}, {"w", DType::kF32}, {"step", DType::kI64}}) {
    TensorSpec spec{name, dt, {name == "step" ? int64_t{1} : int64_t{1500}, name == "step" ? int64_t{1} : 1024}};
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 11));
  }
  return StateOf(shards);
}

std::unique_ptr<Checkpointer> OpenCheckpointer(const std::string& uri, Codec codec) {
  CheckpointerOptions o;
  o.uri = uri;
  o.codec = codec;
  o.engine_options.block_size = 256 << 10;
  o.engine_options.staging_bytes = 4 << 20;
  auto cp = Checkpointer::Open(o);
  EXPECT_TRUE(cp.ok()) << cp.status();
  return cp.ok() ? std::move(cp).value() : nullptr;
}

TEST(S3Checkpoint, EveryCodecRoundTripsAndVerifies) {
  REQUIRE_SERVER();
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kShuffleZstd, Codec::kAuto}) {
    SCOPED_TRACE(CodecName(codec));
    const std::string uri = Root(UniquePrefix("codec"), "&part_size=5M");
    auto cp = OpenCheckpointer(uri, codec);
    ASSERT_NE(cp, nullptr);
    std::vector<OwnedShard> shards;
    State state = SmallState(shards);
    auto h = cp->Save(7, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    std::vector<OwnedShard> out;
    for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
    State target = StateOf(out);
    auto stats = cp->Load(target);
    ASSERT_OK(stats);
    EXPECT_EQ(stats->step, 7);
    for (auto& s : out) EXPECT_EQ(Mismatches(s, 11), 0) << s.spec.fqn;
    auto storage = OpenOrDie(uri);
    ASSERT_NE(storage, nullptr);
    VerifyOptions vo;
    vo.deep = true;
    auto report = VerifyStep(*storage, 7, vo);
    ASSERT_OK(report);
    EXPECT_TRUE(report->ok());
  }
}

double JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::atof(json.c_str() + at + key.size() + 3);
}

TEST(S3Checkpoint, ReshardedRestoreFromS3ReadsWhatItNeeds) {
  REQUIRE_SERVER();
  const std::string uri = Root(UniquePrefix("reshard"));
  CommandResult synth = RunCommand(std::string(CKPT_BIN) + " synth --out " + Quote(uri) +
                                   " --params 40M --mesh tp=2 --layers 2 --block-size 256K");
  ASSERT_EQ(synth.code, 0) << synth.out;
  CommandResult check = RunCommand(std::string(CKPT_BIN) + " restore-check " + Quote(uri) + " --mesh tp=3 --json");
  ASSERT_EQ(check.code, 0) << check.out;
  EXPECT_NE(check.out.find("\"ok\":true"), std::string::npos) << check.out;
  EXPECT_EQ(JsonNumber(check.out, "mismatches"), 0) << check.out;
  const double amp = JsonNumber(check.out, "read_amplification");
  EXPECT_GT(amp, 0.99) << check.out;
  EXPECT_LT(amp, 1.05) << check.out;
}

TEST(S3Checkpoint, TieredDrainsToS3AndRestoresWithoutTheLocalTier) {
  REQUIRE_SERVER();
  TempDir dir;
  const std::string s3 = Root(UniquePrefix("tiered"));
  const std::string uri = "tiered://?local=" + dir.Join("nvme") + "&durable=" + EncodeUriValue(s3);
  std::vector<OwnedShard> shards;
  State state = SmallState(shards);
  {
    auto cp = OpenCheckpointer(uri, Codec::kZstd);
    ASSERT_NE(cp, nullptr);
    for (int64_t step : {1, 2}) {
      auto h = cp->Save(step, state);
      ASSERT_OK(h);
      ASSERT_OK(h->WaitReplicated());
    }
  }
  std::filesystem::remove_all(dir.Join("nvme"));
  for (const std::string& from : {s3, uri}) {
    SCOPED_TRACE(from);
    auto storage = OpenOrDie(from);
    ASSERT_NE(storage, nullptr);
    std::vector<OwnedShard> out;
    for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
    State target = StateOf(out);
    auto stats = LoadCheckpoint(*storage, target);
    ASSERT_OK(stats);
    EXPECT_EQ(stats->step, 2);
    for (auto& s : out) EXPECT_EQ(Mismatches(s, 11), 0) << s.spec.fqn;
  }
}

// The AWS CLI reads what ckpt wrote (a downloaded step verifies as files),
// and a step ckpt wrote to disk, uploaded with `aws s3 cp`, restores from S3.
TEST(S3Interop, TheAwsCliAndCkptReadEachOthersObjects) {
  REQUIRE_SERVER();
  TempDir dir;
  const std::string prefix = UniquePrefix("interop");
  const std::string uri = Root(prefix);
  CommandResult synth =
      RunCommand(std::string(CKPT_BIN) + " synth --out " + Quote(uri) + " --params 8M --mesh tp=2 --codec zstd");
  ASSERT_EQ(synth.code, 0) << synth.out;
  CommandResult down = RunCommand(Aws("s3 cp --recursive s3://ckpt-test/" + prefix + " " + dir.Join("down")));
  ASSERT_EQ(down.code, 0) << down.out;
  CommandResult verify = RunCommand(std::string(CKPT_BIN) + " verify " + dir.Join("down"));
  EXPECT_EQ(verify.code, 0) << verify.out;

  CommandResult local = RunCommand(std::string(CKPT_BIN) + " synth --out " + dir.Join("local") +
                                   " --params 8M --mesh tp=2 --codec shuffle-zstd");
  ASSERT_EQ(local.code, 0) << local.out;
  const std::string up_prefix = UniquePrefix("uploaded");
  CommandResult up = RunCommand(Aws("s3 cp --recursive " + dir.Join("local") + " s3://ckpt-test/" + up_prefix));
  ASSERT_EQ(up.code, 0) << up.out;
  CommandResult check =
      RunCommand(std::string(CKPT_BIN) + " restore-check " + Quote(Root(up_prefix)) + " --mesh tp=4 --json");
  EXPECT_EQ(check.code, 0) << check.out;
  EXPECT_NE(check.out.find("\"ok\":true"), std::string::npos) << check.out;
}

// A bit flipped in an object on the server (rewritten through the S3 API)
// is found by verify, which names the file.
TEST(S3Integrity, BitFlipsRewrittenThroughTheApiAreFoundByVerifyAndRepaired) {
  REQUIRE_SERVER();
  TempDir dir;
  const std::string prefix = UniquePrefix("flip");
  const std::string uri = Root(prefix);
  CommandResult synth = RunCommand(std::string(CKPT_BIN) + " synth --out " + Quote(uri) + " --params 4M --mesh tp=2");
  ASSERT_EQ(synth.code, 0) << synth.out;
  ASSERT_EQ(RunCommand(Aws("s3 cp --recursive s3://ckpt-test/" + prefix + " " + dir.Join("replica"))).code, 0);
  const std::string key = "s3://ckpt-test/" + prefix + "/step-0000000000/rank-000001.ckd";
  ASSERT_EQ(RunCommand(Aws("s3 cp " + key + " " + dir.Join("f"))).code, 0);
  FlipBit(dir.Join("f"), 4096 + 1000, 3);  // inside the first block's payload
  ASSERT_EQ(RunCommand(Aws("s3 cp " + dir.Join("f") + " " + key)).code, 0);
  CommandResult verify = RunCommand(std::string(CKPT_BIN) + " verify " + Quote(uri));
  EXPECT_EQ(verify.code, 1) << verify.out;
  EXPECT_NE(verify.out.find("rank-000001.ckd"), std::string::npos) << verify.out;
  EXPECT_NE(verify.out.find("offset"), std::string::npos) << verify.out;
  // Repaired from a replica: only the damaged range is rewritten into the
  // object (the rest is kept from it), and it verifies again.
  CommandResult repair = RunCommand(std::string(CKPT_BIN) + " repair " + Quote(uri) + " --from " + dir.Join("replica"));
  EXPECT_EQ(repair.code, 0) << repair.out;
  CommandResult again = RunCommand(std::string(CKPT_BIN) + " verify " + Quote(uri));
  EXPECT_EQ(again.code, 0) << again.out;
}

TEST(S3Errors, CredentialsBucketsAndCorruptedBodiesGiveClearErrors) {
  REQUIRE_SERVER();
  const std::string secret = getenv("AWS_SECRET_ACCESS_KEY");
  {
    setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
    auto s = OpenStorage(Root("x"));
    setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
    EXPECT_NE(s.status().message().find("SignatureDoesNotMatch"), absl::string_view::npos) << s.status();
    EXPECT_NE(s.status().message().find("check the credentials"), absl::string_view::npos) << s.status();
    EXPECT_EQ(s.status().message().find("not-the-secret"), absl::string_view::npos) << "the secret is never shown";
  }
  {
    const std::string id = getenv("AWS_ACCESS_KEY_ID");
    setenv("AWS_ACCESS_KEY_ID", "NOSUCHKEY", 1);
    auto s = OpenStorage(Root("x"));
    setenv("AWS_ACCESS_KEY_ID", id.c_str(), 1);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
    EXPECT_NE(s.status().message().find("InvalidAccessKeyId"), absl::string_view::npos) << s.status();
  }
  {
    auto s = OpenStorage("s3://no-such-bucket-here/x?endpoint=" + Server().endpoint);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(absl::IsNotFound(s.status())) << s.status();
    EXPECT_NE(s.status().message().find("'no-such-bucket-here' does not exist"), absl::string_view::npos) << s.status();
  }
  {
    // Nothing listens here: refused connections are retried until the
    // deadline, then reported with the attempts made.
    auto s = OpenStorage("s3://ckpt-test/x?endpoint=http://127.0.0.1:1&deadline=1");
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(absl::IsDeadlineExceeded(s.status())) << s.status();
    EXPECT_NE(s.status().message().find("attempts"), absl::string_view::npos) << s.status();
    EXPECT_NE(s.status().message().find("the deadline of 1 s ran out"), absl::string_view::npos) << s.status();
  }
  {
    // The server checks each body against its signed SHA-256: a part
    // corrupted on the way is refused, never stored.
    const std::string body = "the bytes that were hashed";
    std::string sent = body;
    sent[3] ^= 1;
    S3Credentials creds{getenv("AWS_ACCESS_KEY_ID"), secret, "", "test"};
    const std::string host = Server().endpoint.substr(std::string("http://").size());
    const std::string date = AmzDate(std::time(nullptr));
    SigV4Request sreq;
    sreq.method = "PUT";
    sreq.canonical_uri = "/ckpt-test/" + UniquePrefix("corrupt");
    sreq.payload_hash = Sha256Hex(body);
    sreq.headers = {{"host", host}, {"x-amz-date", date}, {"x-amz-content-sha256", sreq.payload_hash}};
    HttpRequest req;
    req.method = "PUT";
    req.url = Server().endpoint + sreq.canonical_uri;
    for (const auto& [k, v] : sreq.headers) req.headers.push_back(k + ": " + v);
    req.headers.push_back("Authorization: " + SigV4Authorization(sreq, creds, "us-east-1", date));
    req.body = Bytes(sent);
    HttpClient http;
    auto resp = http.Perform(req);
    ASSERT_OK(resp);
    EXPECT_EQ(resp->status, 400) << resp->body;
    EXPECT_NE(resp->body.find("XAmzContentSHA256Mismatch"), std::string::npos) << resp->body;
  }
}

// https with the server's certificate checked: trusted through ca_file= (or
// AWS_CA_BUNDLE), refused at once with the reason when its CA is unknown.
TEST(S3Tls, HttpsVerifiesTheServerAgainstTheGivenCa) {
  REQUIRE_SERVER();
  const char* https = getenv("S3_HTTPS_ENDPOINT");
  const char* ca = getenv("S3_CA_FILE");
  ASSERT_TRUE(https != nullptr && ca != nullptr) << "the fixture serves https too";
  const std::string base = "s3://ckpt-test/" + UniquePrefix("tls") + "?endpoint=" + https;
  auto storage = OpenOrDie(base + "&ca_file=" + ca);
  ASSERT_NE(storage, nullptr);
  const std::string data = Pattern(7 << 20, 3);
  ASSERT_OK(storage->PutAtomic("x.bin", Bytes(data)));
  auto got = storage->GetAll("x.bin");
  ASSERT_OK(got);
  EXPECT_TRUE(*got == data);
  setenv("AWS_CA_BUNDLE", ca, 1);
  EXPECT_OK(OpenStorage(base).status());
  unsetenv("AWS_CA_BUNDLE");
  const auto t0 = std::chrono::steady_clock::now();
  auto untrusted = OpenStorage(base);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(untrusted.status())) << untrusted.status();
  EXPECT_NE(untrusted.status().message().find("certificate is not trusted"), absl::string_view::npos)
      << untrusted.status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "not retried until the deadline";
  auto plain = OpenStorage(Root("x", std::string("&ca_file=") + ca));
  EXPECT_TRUE(absl::IsInvalidArgument(plain.status())) << plain.status();
}

// A clock two days off the server's: the first request is refused with
// RequestTimeTooSkewed and the backend signs from then on with the server's
// clock (its Date header), as the AWS SDKs do.
TEST(S3Errors, ASkewedClockIsCorrectedFromTheServersDate) {
  REQUIRE_SERVER();
#if defined(__clang__)
  if (kSanitized) {
    // libfaketime's constructor calls dlsym, which allocates through clang's
    // statically linked ASan runtime before it is initialised: the process
    // hangs at start. The release and gcc ThreadSanitizer builds run this.
    GTEST_SKIP() << "libfaketime cannot preload into a clang-sanitized program";
  }
#endif
  const std::string uri = Root(UniquePrefix("skew"));
  CommandResult synth = RunCommand(std::string(CKPT_BIN) + " synth --out " + Quote(uri) + " --params 1M");
  ASSERT_EQ(synth.code, 0) << synth.out;
  CommandResult list = RunCommand(
      // faketime preloads its library; an ASan build must be told that
      // its runtime need not come first.
      "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 CKPT_S3_TRACE=1 /usr/bin/faketime -f +2d " +
      std::string(CKPT_BIN) + " list " + Quote(uri));
  ASSERT_EQ(list.code, 0) << list.out;
  EXPECT_NE(list.out.find("-> 403"), std::string::npos) << "the skew was seen: " << list.out;
  EXPECT_NE(list.out.find("committed *"), std::string::npos) << list.out;
}

// Unfinished multipart uploads left by a saver that died are aborted by gc,
// except those of a step that may still be being written.
TEST(S3Gc, UnfinishedUploadsOfDeadSavesAreAborted) {
  REQUIRE_SERVER();
  const std::string prefix = UniquePrefix("gc");
  const std::string uri = Root(prefix);
  {
    auto cp = OpenCheckpointer(uri, Codec::kNone);
    ASSERT_NE(cp, nullptr);
    std::vector<OwnedShard> shards;
    State state = SmallState(shards);
    auto h = cp->Save(3, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
  }
  auto storage = OpenOrDie(uri);
  ASSERT_NE(storage, nullptr);
  ASSERT_OK(storage->PutIfAbsent("step-0000000009/CLAIM", Bytes("a save on another host")));
  for (const char* key : {"step-0000000003/rank-000001.ckd", "stray.bin", "step-0000000009/rank-000000.ckd"}) {
    CommandResult r = RunCommand(
        Aws("s3api create-multipart-upload --bucket ckpt-test --key " + prefix + "/" + key + " --output text"));
    ASSERT_EQ(r.code, 0) << r.out;
  }
  auto before = ListPendingUploads(*storage);
  ASSERT_OK(before);
  ASSERT_EQ(before->size(), 3u);
  // Behind an adapter the uploads are found all the same (the capability
  // is forwarded): the dry run goes through faulty://.
  auto wrapped = OpenOrDie("faulty://" + uri);
  ASSERT_NE(wrapped, nullptr);
  ASSERT_OK(ListPendingUploads(*wrapped));
  EXPECT_EQ(ListPendingUploads(*wrapped)->size(), 3u);
  CommandResult dry = RunCommand(std::string(CKPT_BIN) + " gc " + Quote("faulty://" + uri) + " --json");
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("would abort unfinished upload of stray.bin"), std::string::npos) << dry.out;
  ASSERT_EQ(ListPendingUploads(*storage)->size(), 3u) << "a dry run aborts nothing";
  CommandResult gc = RunCommand(std::string(CKPT_BIN) + " gc " + Quote(uri) + " --yes --json");
  ASSERT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("\"aborted_uploads\":[\"step-0000000003/rank-000001.ckd\",\"stray.bin\"]"), std::string::npos)
      << gc.out;
  auto after = ListPendingUploads(*storage);
  ASSERT_OK(after);
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ(after->front().path, "step-0000000009/rank-000000.ckd") << "the step being written keeps its upload";
  // The job's next start removes the unfinished step 9, and its upload.
  CommandResult partial = RunCommand(std::string(CKPT_BIN) + " gc " + Quote(uri) + " --yes --newer-partial");
  ASSERT_EQ(partial.code, 0) << partial.out;
  EXPECT_TRUE(ListPendingUploads(*storage)->empty());
  auto steps = ListCheckpointSteps(*storage);
  ASSERT_OK(steps);
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(steps->front().step, 3);
}

pid_t SpawnSaver(const std::string& root, const std::string& err_path, int* out_fd) {
  int out[2];
  if (pipe(out) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string path = CRASH_SAVER_PATH;
  std::string mib = "24";  // several 5 MiB parts per step
  char* argv[] = {path.data(), const_cast<char*>(root.c_str()), mib.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  *out_fd = out[0];
  return pid;
}

// A saver SIGKILLed at random points of its saves to s3://: no step is ever
// committed without all of its data, the latest committed step loads, and
// what the dead saves left (objects and unfinished uploads) is cleaned by
// the next start and gc.
TEST(S3Crash, SigkillDuringSavesLeavesOnlyWholeSteps) {
  REQUIRE_SERVER();
  TempDir dir;
  const std::string root = Root(UniquePrefix("crash"), "&part_size=5M");
  std::mt19937 rng(2026);
  int64_t last_seen = 0;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    int fd = -1;
    const pid_t pid = SpawnSaver(root, dir.Join("saver.stderr"), &fd);
    ASSERT_GT(pid, 0);
    char buf[64];
    if (read(fd, buf, sizeof(buf)) <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      FAIL() << "saver produced no step; its stderr: " << ReadFile(dir.Join("saver.stderr"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    ASSERT_TRUE(WIFSIGNALED(status));
    auto storage = OpenOrDie(root);
    ASSERT_NE(storage, nullptr);
    // A kill between a commit and its manifest's copy (or mid-removal, after
    // the copy went) leaves a MANIFEST without its copy: the next open heals
    // it, as the restarted job does first.
    ASSERT_OK(HealManifestCopies(*storage));
    auto steps = ListCheckpointSteps(*storage);
    ASSERT_OK(steps);
    for (const StepInfo& s : *steps) {
      if (!s.committed) continue;
      // Committed means every file the manifest names is whole.
      auto report = VerifyStep(*storage, s.step);
      ASSERT_OK(report);
      std::string problems;
      for (const VerifyProblem& p : report->problems) problems += p.message + "\n";
      EXPECT_TRUE(report->ok()) << "step " << s.step << ":\n" << problems;
    }
    auto latest = LatestCommittedStep(*storage);
    ASSERT_OK(latest);
    EXPECT_GE(*latest, last_seen);
    last_seen = *latest;
    std::vector<OwnedShard> out = {
        EmptyShard(TensorSpec{"model.w", DType::kF32, {24 * 256, 1024}}, Box({0, 0}, {24 * 256, 1024}))};
    State t = StateOf(out);
    auto loaded = LoadCheckpoint(*storage, t);
    ASSERT_OK(loaded);
    EXPECT_EQ(Mismatches(out[0], static_cast<uint64_t>(*latest)), 0);
  }
  // The restarted job's open cleans what the last kill left.
  {
    CheckpointerOptions o;
    o.uri = root;
    o.retention.keep_last = 2;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
  }
  auto storage = OpenOrDie(root);
  ASSERT_NE(storage, nullptr);
  auto pending = ListPendingUploads(*storage);
  ASSERT_OK(pending);
  EXPECT_TRUE(pending->empty()) << pending->size() << " unfinished uploads left, first " << pending->front().path;
  auto steps = ListCheckpointSteps(*storage);
  ASSERT_OK(steps);
  for (const StepInfo& s : *steps) EXPECT_TRUE(s.committed) << "step " << s.step << " left uncommitted";
}

void Gateway(const std::string& what) {
  CommandResult r = RunCommand(std::string(S3_SERVER_SCRIPT) + " " + what);
  ASSERT_EQ(r.code, 0) << r.out;
}

// The gateway killed mid-save and started again: the save retries through
// it within its deadline. Killed for longer than the deadline: the save
// fails cleanly and the step before it still loads.
TEST(S3Restart, AGatewayKilledMidSaveIsRetriedThroughOrFailsCleanly) {
  REQUIRE_SERVER();
  setenv("CEPH_S3_DIR", std::filesystem::path(CKPT_S3_ENV_FILE).parent_path().c_str(), 1);
  const std::string prefix = UniquePrefix("restart");
  std::vector<OwnedShard> shards;
  for (int i = 0; i < 8; ++i) {
    TensorSpec spec{"layer" + std::to_string(i), DType::kF32, {4096, 1024}};  // 16 MiB each
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 5));
  }
  State state = StateOf(shards);
  {
    auto cp = OpenCheckpointer(Root(prefix, "&part_size=5M&deadline=60"), Codec::kNone);
    ASSERT_NE(cp, nullptr);
    auto h1 = cp->Save(1, state);
    ASSERT_OK(h1);
    ASSERT_OK(h1->Wait());
    auto h2 = cp->Save(2, state);
    ASSERT_OK(h2);
    // Killed while the save uploads, or the test would prove nothing.
    ASSERT_TRUE(absl::IsDeadlineExceeded(h2->WaitFor(0))) << "the save ended before the gateway was killed";
    Gateway("kill-rgw");
    std::this_thread::sleep_for(std::chrono::seconds(2));
    Gateway("start-rgw");
    ASSERT_OK(h2->Wait());
  }
  {
    auto cp = OpenCheckpointer(Root(prefix, "&part_size=5M&deadline=2"), Codec::kNone);
    ASSERT_NE(cp, nullptr);
    Gateway("kill-rgw");
    auto h3 = cp->Save(3, state);
    absl::Status st = h3.ok() ? h3->Wait() : h3.status();
    Gateway("start-rgw");
    EXPECT_FALSE(st.ok());
    EXPECT_TRUE(absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) << st;
  }
  auto storage = OpenOrDie(Root(prefix));
  ASSERT_NE(storage, nullptr);
  auto latest = LatestCommittedStep(*storage);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 2);
  std::vector<OwnedShard> out;
  for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
  State target = StateOf(out);
  ASSERT_OK(LoadCheckpoint(*storage, target));
  for (auto& s : out) EXPECT_EQ(Mismatches(s, 5), 0) << s.spec.fqn;
}

}  // namespace
}  // namespace ckpt::testing
