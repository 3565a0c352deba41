// The s3:// backend against a real S3 server: Ceph's RADOS Gateway, started
// for the run by the ctest fixture "s3" (scripts/s3-test-server.sh), with the
// AWS CLI as the client no one here wrote. Its failures (a saver killed, the
// gateway restarted, uploads left behind) are in s3_failure_test.cc.
#include "storage/roots/s3/s3_test.h"

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

namespace ckpt::testing {
namespace {

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

// Four data-parallel replicas as processes under mpirun restore from the
// gateway cooperatively: the bucket serves the checkpoint about once, not
// once per replica.
TEST(S3Checkpoint, ReplicasRestoreCooperativelyReadingTheBucketOnce) {
  REQUIRE_SERVER();
  const std::string uri = Root(UniquePrefix("coop"));
  CommandResult synth = RunCommand(std::string(CKPT_BIN) + " synth --out " + Quote(uri) +
                                   " --params 2M --mesh dp=1,tp=2 --layers 2 --block-size 64K");
  ASSERT_EQ(synth.code, 0) << synth.out;
  // OpenMPI's own allocations outlive MPI_Finalize: under AddressSanitizer
  // the leak check would fail every rank (the sanitizer stage runs no other
  // MPI test).
  const std::string check = "ASAN_OPTIONS=detect_leaks=0 " + std::string(CKPT_BIN) + " restore-check " + Quote(uri) +
                            " --mesh dp=4,tp=2 --procs --json";
  CommandResult coop = RunCommand(check);
  ASSERT_EQ(coop.code, 0) << coop.out;
  EXPECT_EQ(JsonNumber(coop.out, "mismatches"), 0) << coop.out;
  EXPECT_NE(coop.out.find("\"cooperative\":true"), std::string::npos) << coop.out;
  EXPECT_EQ(JsonNumber(coop.out, "peer_failovers"), 0) << coop.out;
  CommandResult solo = RunCommand(check + " --solo-reads");
  ASSERT_EQ(solo.code, 0) << solo.out;
  const double together = JsonNumber(coop.out, "bytes_from_storage"),
               alone = JsonNumber(solo.out, "bytes_from_storage");
  ASSERT_GT(together, 0) << coop.out;
  EXPECT_GE(alone, 3.5 * together) << "cooperative " << together << ", alone " << alone;
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

}  // namespace
}  // namespace ckpt::testing
