// The memory level's data plane: the storage conformance suite over peer
// memory, replicas placed and read back across processes' servers (here
// several servers of one process, real TCP on loopback), failover from a
// dead or lying copy (one a process SIGKILLed while it streams a read),
// refused tokens and garbage, the budget.
#include "ckpt/peer.h"

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "ckpt/checkpointer.h"
#include "common/elastic_model.h"
#include "conformance.h"
#include "coordinator/protocol.h"
#include "gtest/gtest.h"
#include "peer/peer_client.h"
#include "peer/peer_memory.h"
#include "peer/peer_store.h"
#include "peer/peer_wire.h"
#include "testutil/test_util.h"
#include "util/bytes.h"
#include "util/errors.h"
#include "util/hash.h"

namespace ckpt::testing {
namespace {

const std::string kToken = "peer-test-token-0123456789";

// A server's log lines, written on its io thread.
class LogLines {
 public:
  void Add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(line);
  }
  // Whether a line holding `text` arrives within 5 s.
  bool Holds(const std::string& text) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const std::string& l : lines_) {
          if (l.find(text) != std::string::npos) return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

std::shared_ptr<PeerMemory> StartMemory(const std::string& domain, int64_t budget = int64_t{1} << 30,
                                        LogLines* log = nullptr, std::string token = kToken) {
  PeerMemoryOptions o;
  o.token = std::move(token);
  o.domain = domain;
  o.budget_bytes = budget;
  o.io_timeout_s = 5;
  o.log = [log](const std::string& line) {
    if (log != nullptr) log->Add(line);
  };
  auto m = PeerMemory::Start(o);
  EXPECT_OK(m);
  return m.ok() ? *m : nullptr;
}

// Four processes in four failure domains; files written through `writer`
// (on a) are held by a and replicated to b and c, and d holds nothing.
// Tests bind the members to references by name: clang 14 does not let a
// lambda capture structured bindings.
struct FourNodes {
  std::shared_ptr<PeerMemory> a, b, c, d;
  absl::StatusOr<std::shared_ptr<Storage>> writer;
};

FourNodes StartFourNodes(LogLines* a_log = nullptr) {
  FourNodes n;
  n.a = StartMemory("node-a", int64_t{1} << 30, a_log);
  n.b = StartMemory("node-b");
  n.c = StartMemory("node-c");
  n.d = StartMemory("node-d");
  PeerRoute wr;
  wr.replicas = {n.b->endpoint(), n.c->endpoint()};
  n.writer = OpenPeerStorage(n.a, wr);
  return n;
}

absl::Span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
absl::Span<std::byte> Bytes(std::string& s) { return {reinterpret_cast<std::byte*>(s.data()), s.size()}; }

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) >> 3);
  return s;
}

void Write(Storage& s, const std::string& path, const std::string& data) {
  auto w = s.OpenWritable(path);
  ASSERT_OK(w);
  absl::Status st;
  (*w)->WriteAsync(0, Bytes(data), [&](absl::Status x) { st = x; });
  ASSERT_OK(st);
  ASSERT_OK((*w)->Finish(data.size()));
}

// Every conformance test on a peer storage whose writes also go to a
// second process's memory and whose reads may come from a third's.
struct PeerTrio {
  std::shared_ptr<PeerMemory> a, b, c;
};
std::map<std::string, PeerTrio>& Trios() {
  static auto* trios = new std::map<std::string, PeerTrio>();
  return *trios;
}

const bool kRegistered =
    RegisterStorageScheme("peertest", [](std::string_view uri) -> absl::StatusOr<std::shared_ptr<Storage>> {
      PeerTrio& t = Trios()[std::string(uri)];
      t.a = StartMemory("a");
      t.b = StartMemory("b");
      t.c = StartMemory("c");
      PeerRoute route;
      route.replicas = {t.b->endpoint()};
      const std::vector<std::string> all = {t.a->endpoint(), t.b->endpoint(), t.c->endpoint()};
      route.holders = [all](int64_t, int) { return all; };
      return OpenPeerStorage(t.a, route);
    });

INSTANTIATE_TEST_SUITE_P(Peer, StorageConformance,
                         ::testing::Values(BackendCase{"peer", "", "",
                                                       [](int n) { return "peertest://" + std::to_string(n); }}),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

// Bulk bytes are checksummed piece by piece as they pass the bounce buffer:
// the pieces' running xxh3 is the frame's.
// The coordinator and the memory level speak one framing (net/wire.h): a
// header round-trips under each protocol, every field of it is checked, and
// neither protocol takes the other's frames.
TEST(Wire, OneFramingUnderBothProtocolsChecksEveryField) {
  const std::string frame = coord::EncodeFrame(coord::MsgType::kStatus, 7, "abc");
  ASSERT_EQ(frame.size(), wire::kHeaderSize + 3);
  auto h = coord::ParseHeader(reinterpret_cast<const uint8_t*>(frame.data()), 1 << 20);
  ASSERT_OK(h);
  EXPECT_EQ(h->type, coord::MsgType::kStatus);
  EXPECT_EQ(h->request_id, 7u);
  EXPECT_EQ(h->length, 3u);
  EXPECT_OK(coord::CheckPayload(*h, "abc"));
  EXPECT_FALSE(coord::CheckPayload(*h, "abd").ok());
  const std::string data = peer::Frame(peer::Op::kData, "xyz", 4096);
  auto p = peer::ParseHeader(reinterpret_cast<const uint8_t*>(data.data()), 1 << 20);
  ASSERT_OK(p);
  EXPECT_EQ(p->op, peer::Op::kData);
  EXPECT_EQ(p->arg, 4096u);
  EXPECT_EQ(p->checksum, Xxh3(std::string_view("xyz")));
  // Each refuses the other's frames by their magic.
  auto cross = coord::ParseHeader(reinterpret_cast<const uint8_t*>(data.data()), 1 << 20);
  EXPECT_NE(cross.status().message().find("not a ckpt coordinator frame"), std::string_view::npos) << cross.status();
  auto cross2 = peer::ParseHeader(reinterpret_cast<const uint8_t*>(frame.data()), 1 << 20);
  EXPECT_NE(cross2.status().message().find("not a ckpt peer-memory frame"), std::string_view::npos) << cross2.status();
  // The frame version, the flags, the kind and the length are checked.
  auto with = [&](size_t at, uint8_t value) {
    std::string f = frame;
    f[at] = static_cast<char>(value);
    return coord::ParseHeader(reinterpret_cast<const uint8_t*>(f.data()), 1 << 20).status();
  };
  EXPECT_NE(with(4, 1).message().find("frame version 1 is not supported"), std::string_view::npos) << with(4, 1);
  EXPECT_NE(with(5, 1).message().find("flags"), std::string_view::npos) << with(5, 1);
  EXPECT_NE(with(6, 0).message().find("unknown coordinator message kind 0"), std::string_view::npos) << with(6, 0);
  EXPECT_NE(with(6, 20).message().find("unknown coordinator message kind 20"), std::string_view::npos) << with(6, 20);
  auto big = coord::ParseHeader(reinterpret_cast<const uint8_t*>(frame.data()), 2);
  EXPECT_NE(big.status().message().find("status frame of 3 bytes exceeds the limit of 2"), std::string_view::npos)
      << big.status();
  // One MAC, compared in constant time, and one nonce source.
  const auto mac = wire::Mac("token", "message");
  EXPECT_EQ(mac, coord::Hmac("token", "message"));
  auto other = mac;
  other[31] ^= 1;
  EXPECT_TRUE(wire::MacEqual(mac.data(), mac.data()));
  EXPECT_FALSE(wire::MacEqual(mac.data(), other.data()));
  EXPECT_EQ(wire::Nonce().size(), wire::kNonceSize);
  EXPECT_NE(wire::Nonce(), wire::Nonce());
}

TEST(PeerWire, Xxh3OfPiecesIsXxh3OfTheWhole) {
  const std::string data = Pattern(3 * peer::kBounceBytes + 77, 5);
  for (size_t piece : {size_t{1}, size_t{7}, size_t{4096}, peer::kBounceBytes, data.size()}) {
    Xxh3Stream s;
    for (size_t off = 0; off < data.size(); off += piece) {
      s.Update(data.data() + off, std::min(piece, data.size() - off));
    }
    EXPECT_EQ(s.Digest(), Xxh3(data)) << piece;
  }
  Xxh3Stream s;
  s.Update("x", 1);
  s.Reset();
  EXPECT_EQ(s.Digest(), Xxh3(std::string_view()));
}

// A dropped data file's memory goes to the next data file, not to a small
// file that happens to arrive first: that left every process of a job with
// a data file's worth of memory more than it needed.
TEST(PeerStore, DroppedMemoryGoesToAFileOfItsSizeNotToASmallOne) {
  peer::PeerStore store(int64_t{1} << 30);
  const size_t big = size_t{8} << 20;
  std::shared_ptr<std::string> first = store.Buffer(big);
  const char* mapped = first->data();
  const size_t capacity = first->capacity();
  ASSERT_OK(store.Put("step-0000000002/rank-000000.ckd", first, 1));
  ASSERT_OK(store.Put("step-0000000002/CLAIM", std::make_shared<const std::string>(130, 'c'), 1));
  first.reset();  // nobody reads it any more once dropped
  store.DropStepsBefore(4);
  EXPECT_EQ(store.Stats().spare_bytes, static_cast<int64_t>(capacity));
  std::shared_ptr<std::string> claim = store.Buffer(130);
  EXPECT_NE(claim->data(), mapped);
  EXPECT_LT(claim->capacity(), size_t{1} << 20);
  std::shared_ptr<std::string> over = store.Buffer(3 * big);  // too small for it
  EXPECT_NE(over->data(), mapped);
  std::shared_ptr<std::string> next = store.Buffer(big - 4096);
  EXPECT_EQ(next->data(), mapped) << "the next data file reuses the dropped one's memory";
  EXPECT_EQ(next->size(), big - 4096);
  EXPECT_EQ(store.Stats().spare_bytes, 0);
}

TEST(PeerMemory, ReplicasArePlacedAndReadFromPeersWithFailover) {
  LogLines log;
  // Rank 3's files go to a (its own) and to b and c.
  FourNodes n = StartFourNodes(&log);
  auto &a = n.a, &b = n.b, &c = n.c, &d = n.d;
  auto& writer = n.writer;
  ASSERT_OK(writer);
  // Several data frames, the last one ending in part of a bounce buffer.
  const std::string data = Pattern((10u << 20) + 12345, 3);
  Write(**writer, "step-0000000014/rank-000003.ckd", data);
  ASSERT_OK((*writer)->PutAtomic("step-0000000014/MANIFEST", Bytes(std::string("manifest"))));
  for (auto& m : {a, b, c}) {
    auto held = m->Holdings();
    ASSERT_EQ(held.size(), 1u) << m->endpoint();
    EXPECT_EQ(held[0].step, 14);
    EXPECT_EQ(held[0].owners, std::vector<int>({3}));
    EXPECT_GE(m->Stats().held_bytes, static_cast<int64_t>(data.size()));
  }
  EXPECT_EQ(b->Stats().bytes_received, static_cast<int64_t>(data.size() + 8));
  EXPECT_TRUE(d->Holdings().empty());

  // A process that holds nothing reads from the holders it is told of, in
  // order; when the first dies, from the next.
  PeerRoute rd;
  std::vector<std::string> holders = {a->endpoint(), b->endpoint(), c->endpoint()};
  rd.holders = [&](int64_t step, int owner) {
    EXPECT_EQ(step, 14);
    EXPECT_TRUE(owner == 3 || owner == 0) << owner;
    return holders;
  };
  auto reader = OpenPeerStorage(d, rd);
  ASSERT_OK(reader);
  auto f = (*reader)->OpenReadable("step-0000000014/rank-000003.ckd");
  ASSERT_OK(f);
  ASSERT_EQ((*f)->size(), data.size());
  std::string got(1u << 20, '\0');
  ASSERT_OK((*f)->ReadAt(123, Bytes(got)));
  EXPECT_EQ(got, data.substr(123, got.size()));
  EXPECT_EQ(PeerStorageCounters(**reader).from_peers, static_cast<int64_t>(got.size()));
  EXPECT_GE(a->Stats().bytes_served, static_cast<int64_t>(got.size()));

  writer->reset();
  a.reset();  // its server stops: the next read moves to b
  std::string all(data.size(), '\0');
  ASSERT_OK((*f)->ReadAt(0, Bytes(all)));
  EXPECT_TRUE(all == data);
  EXPECT_EQ(PeerStorageCounters(**reader).failovers, 1);
  // Whole-file reads through the same holders.
  auto manifest = (*reader)->GetAll("step-0000000014/MANIFEST");
  ASSERT_OK(manifest);
  EXPECT_EQ(*manifest, "manifest");
  // Every copy gone: the error names the file, the range and every holder.
  b.reset();
  c.reset();
  absl::Status gone = (*f)->ReadAt(0, Bytes(got));
  EXPECT_TRUE(absl::IsUnavailable(gone)) << gone;
  EXPECT_NE(gone.message().find("no live copy of step-0000000014/rank-000003.ckd bytes [0, 1048576)"),
            std::string::npos)
      << gone;
  EXPECT_NE(gone.message().find(holders[2]), std::string::npos) << gone;
}

TEST(PeerMemory, AWrongTokenIsRefusedAndNothingIsPlaced) {
  LogLines log;
  auto a = StartMemory("a");
  auto b = StartMemory("b", int64_t{1} << 30, &log);
  auto stranger = StartMemory("x", int64_t{1} << 30, nullptr, "another-jobs-token-0123456789");
  PeerRoute r;
  r.replicas = {b->endpoint()};
  auto s = OpenPeerStorage(stranger, r);
  ASSERT_OK(s);
  auto w = (*s)->OpenWritable("step-0000000001/rank-000000.ckd");
  ASSERT_OK(w);
  absl::Status st = (*w)->Finish(0);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_NE(st.message().find("token"), std::string::npos) << st;
  EXPECT_NE(st.message().find(b->endpoint()), std::string::npos) << st;
  EXPECT_EQ(b->Stats().files, 0);
  EXPECT_TRUE(log.Holds("wrong token"));
  // The client side too: connecting with the wrong token is refused.
  auto c = peer::PeerConnection::Open(a->endpoint(), "another-jobs-token-0123456789", 5);
  EXPECT_TRUE(absl::IsPermissionDenied(c.status())) << c.status();
}

int ConnectRaw(const std::string& endpoint) {
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  return fd;
}

TEST(PeerMemory, GarbageOnTheSocketClosesThatConnectionOnly) {
  LogLines log;
  auto a = StartMemory("a", int64_t{1} << 30, &log);
  auto b = StartMemory("b");
  for (const std::string& junk :
       {std::string("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"), std::string(64, '\xff'),
        peer::Frame(peer::Op::kGet, "x")}) {  // a request before auth
    int fd = ConnectRaw(a->endpoint());
    ASSERT_GT(write(fd, junk.data(), junk.size()), 0);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
    }
    EXPECT_EQ(n, 0);  // closed by the server
    close(fd);
  }
  // The server still takes good connections.
  ASSERT_OK(peer::PeerConnection::Open(a->endpoint(), kToken, 5));
  PeerRoute r;
  r.replicas = {a->endpoint()};
  auto s = OpenPeerStorage(b, r);
  ASSERT_OK(s);
  Write(**s, "step-0000000002/rank-000001.ckd", "still serving");
  EXPECT_EQ(a->Holdings().size(), 1u);
  EXPECT_TRUE(log.Holds("garbage"));
}

#if defined(__SANITIZE_ADDRESS__)
#define CKPT_PEER_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKPT_PEER_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CKPT_PEER_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CKPT_PEER_TEST_TSAN 1
#endif
#endif
#ifdef CKPT_PEER_TEST_TSAN
// ThreadSanitizer keeps shadow memory for what a process touches: the
// holder's RSS grows by a few MiB for that alone.
constexpr int64_t kHolderGrowthBoundKib = 32 << 10;
#else
constexpr int64_t kHolderGrowthBoundKib = 8 << 10;
#endif
#ifdef CKPT_PEER_TEST_ASAN
// Under AddressSanitizer freed memory waits in a quarantine (256 MiB) before
// it is reused, so a process's RSS grows with what it frees; a holder whose
// memory is measured runs without it.
const std::vector<std::string> kMeasuredHolderEnv = {
    StrCat("ASAN_OPTIONS=", getenv("ASAN_OPTIONS") != nullptr ? getenv("ASAN_OPTIONS") : "", ":quarantine_size_mb=0")};
// The sanitizers' own checks need descriptors (UBSan's check of a vtable
// tests the memory through a pipe) and, in a process that has none left,
// report a valid object as having an invalid vptr. Running a sanitized
// holder out of descriptors tests the sanitizer, not the holder: that case
// runs in the release and ThreadSanitizer builds.
constexpr bool kDescriptorExhaustionIsTestable = false;
#else
const std::vector<std::string> kMeasuredHolderEnv = {};
constexpr bool kDescriptorExhaustionIsTestable = true;
#endif

// A holder in a process of its own, with `max_descriptors` as its limit
// (0: as inherited); its endpoint once it serves.
struct HolderProcess {
  HolderProcess(const TempDir& dir, rlim_t max_descriptors, const std::string& max_unauthenticated = "",
                const std::vector<std::string>& env = {}) {
    std::vector<std::string> args = {PEER_HOLDER_PATH, dir.path(), "1000000000000", kToken};
    if (!max_unauthenticated.empty()) args.push_back(max_unauthenticated);
    pid = Spawn(args, dir.Join("holder.log"), max_descriptors, env);
    for (int i = 0; i < 500 && endpoint.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::ifstream in(dir.Join("endpoint"));
      std::getline(in, endpoint);
    }
  }
  ~HolderProcess() {
    kill(pid, SIGKILL);
    WaitExit(pid);
  }
  pid_t pid = -1;
  std::string endpoint;
};

// The test's own descriptor limit, raised for a flood of connections.
void AllowDescriptors(rlim_t n) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < n) {
    rl.rlim_cur = std::min(n, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Finding: 400 idle connections against a descriptor limit of 256 spun the
// peer server's accept loop at 100% of a core (EMFILE retried at once) and
// kept a legitimate peer out. Connections that have not authenticated are
// capped (the oldest dropped), and out of descriptors the server refuses
// the newcomer with its reserve descriptor and pauses: with the cap (64) and
// with a cap above the descriptor limit (so that EMFILE is met), the server
// stays under a fifth of a core and a legitimate peer gets in.
TEST(PeerMemory, AFloodOfIdleConnectionsNeitherSpinsTheServerNorKeepsAPeerOut) {
  AllowDescriptors(1024);
  std::vector<std::string> caps = {""};
  if (kDescriptorExhaustionIsTestable) caps.push_back("1000");
  for (const std::string& cap : caps) {
    SCOPED_TRACE(cap.empty() ? "the default cap" : "a cap above the descriptor limit");
    TempDir dir;
    HolderProcess holder(dir, 256, cap);
    ASSERT_FALSE(holder.endpoint.empty()) << ReadFile(dir.Join("holder.log"));
    std::vector<int> idle;
    for (int i = 0; i < 400; ++i) idle.push_back(ConnectRaw(holder.endpoint));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double cpu0 = ProcCpuSeconds(holder.pid);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    const double cpu = ProcCpuSeconds(holder.pid) - cpu0;
    EXPECT_LT(cpu, 1.0) << "seconds of CPU in 5 s\n" << ReadFile(dir.Join("holder.log"));
    auto peer = peer::PeerConnection::Open(holder.endpoint, kToken, 5);
    EXPECT_TRUE(peer.ok()) << peer.status() << "\n" << ReadFile(dir.Join("holder.log"));
    for (int fd : idle) close(fd);
  }
}

// Finding: an authenticated peer that sent requests and never read the
// replies grew the holder from 24 MB to 4.4 GB in 20 s (the reply queue was
// unbounded), and the memory stayed. A connection now stops reading its
// requests while 16 replies wait: the holder takes in less than 64 MiB of
// requests (socket buffers), its RSS grows by less than 8 MiB (32 MiB under
// ThreadSanitizer, whose shadow memory grows with what is touched), and
// stays within that once the peer goes.
TEST(PeerMemory, APeerThatNeverReadsItsRepliesIsHeldToABoundedQueue) {
  TempDir dir;
  HolderProcess holder(dir, 0, "", kMeasuredHolderEnv);
  ASSERT_FALSE(holder.endpoint.empty()) << ReadFile(dir.Join("holder.log"));
  const int fd = ConnectRaw(holder.endpoint);
  uint8_t h[peer::kHeaderSize];
  ASSERT_EQ(recv(fd, h, sizeof(h), MSG_WAITALL), static_cast<ssize_t>(sizeof(h)));
  auto hello = peer::ParseHeader(h, 1 << 20);
  ASSERT_OK(hello);
  std::string payload(hello->length, '\0');
  ASSERT_EQ(recv(fd, payload.data(), payload.size(), MSG_WAITALL), static_cast<ssize_t>(payload.size()));
  ByteReader r(payload, "hello");
  const std::string nonce = r.Str(peer::kNonceSize);
  ASSERT_TRUE(r.ok());
  const auto mac = peer::AuthMac(kToken, nonce);
  ByteWriter auth;
  auth.Str(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
  const std::string auth_frame = peer::Frame(peer::Op::kAuth, auth.Take());
  ASSERT_EQ(send(fd, auth_frame.data(), auth_frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(auth_frame.size()));
  ASSERT_EQ(recv(fd, h, sizeof(h), MSG_WAITALL), static_cast<ssize_t>(sizeof(h)));
  auto ok = peer::ParseHeader(h, 1 << 20);
  ASSERT_OK(ok);
  ASSERT_EQ(ok->op, peer::Op::kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t base = ProcStatusKib(holder.pid, "VmRSS");
  // Requests as fast as the socket takes them, for 5 s, replies never read.
  ByteWriter list;
  list.Str("");
  std::string burst;
  const std::string one = peer::Frame(peer::Op::kList, list.Take());
  for (int i = 0; i < 256; ++i) burst += one;
  int64_t sent = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    const ssize_t n = send(fd, burst.data(), burst.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += n;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  const int64_t grown = ProcStatusKib(holder.pid, "VmRSS") - base;
  std::printf("requests sent: %lld bytes; holder RSS grew %lld KiB\n", static_cast<long long>(sent),
              static_cast<long long>(grown));
  EXPECT_LT(grown, kHolderGrowthBoundKib) << "KiB more after " << sent << " bytes of requests";
  EXPECT_LT(sent, int64_t{64} << 20) << "the holder kept reading requests it could not answer";
  close(fd);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(ProcStatusKib(holder.pid, "VmRSS") - base, kHolderGrowthBoundKib);
  // It serves on.
  auto peer = peer::PeerConnection::Open(holder.endpoint, kToken, 5);
  EXPECT_TRUE(peer.ok()) << peer.status();
}

// A peer that speaks the protocol and lies: the data it sends does not
// match the checksum it sends with it.
class LyingPeer {
 public:
  explicit LyingPeer(std::string file) : file_(std::move(file)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    listen(fd_, 8);
    thread_ = std::thread([this] { Serve(); });
  }
  ~LyingPeer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  int served = 0;

 private:
  static bool ReadAll(int fd, void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      ssize_t r = read(fd, static_cast<char*>(p) + got, n - got);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  void Serve() {
    for (;;) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ByteWriter hello;
      hello.Str(std::string(peer::kNonceSize, 'n'));
      hello.Str(endpoint());
      hello.Str("liar");
      std::string out = peer::Frame(peer::Op::kHello, hello.Take());
      (void)!write(c, out.data(), out.size());
      for (;;) {
        uint8_t h[peer::kHeaderSize];
        if (!ReadAll(c, h, sizeof(h))) break;
        auto hdr = peer::ParseHeader(h, 1 << 20);
        if (!hdr.ok()) break;
        std::string payload(hdr->length, '\0');
        if (!ReadAll(c, payload.data(), payload.size())) break;
        std::string reply;
        if (hdr->op == peer::Op::kAuth) {
          reply = peer::Frame(peer::Op::kOk, "");
        } else if (hdr->op == peer::Op::kStat) {
          ByteWriter w;
          w.Var(file_.size());
          reply = peer::Frame(peer::Op::kOk, w.Take());
        } else if (hdr->op == peer::Op::kGet) {
          ByteReader r(payload, "get");
          r.Str();
          const uint64_t off = r.Var(), len = r.Var();
          std::string part = file_.substr(off, len);
          reply.resize(peer::kHeaderSize);
          peer::EncodeHeader(peer::Op::kData, part.size(), off, Xxh3(part), reinterpret_cast<uint8_t*>(reply.data()));
          if (!part.empty()) part[part.size() / 2] ^= 0x10;  // one bit flipped after the checksum
          reply += part;
          ++served;
        } else {
          break;
        }
        (void)!write(c, reply.data(), reply.size());
      }
      close(c);
    }
  }
  std::string file_;
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

TEST(PeerMemory, ACopyWithABadChecksumIsRefusedAndTheNextCopyRead) {
  const std::string data = Pattern(300000, 9);
  LyingPeer liar(data);
  auto good = StartMemory("good");
  auto me = StartMemory("me");
  {
    PeerRoute wr;
    auto w = OpenPeerStorage(good, wr);
    ASSERT_OK(w);
    Write(**w, "step-0000000003/rank-000001.ckd", data);
  }
  PeerRoute rd;
  rd.holders = [&](int64_t, int) { return std::vector<std::string>{liar.endpoint(), good->endpoint()}; };
  auto s = OpenPeerStorage(me, rd);
  ASSERT_OK(s);
  auto f = (*s)->OpenReadable("step-0000000003/rank-000001.ckd");
  ASSERT_OK(f);
  std::string got(data.size(), '\0');
  ASSERT_OK((*f)->ReadAt(0, Bytes(got)));
  EXPECT_TRUE(got == data);
  EXPECT_EQ(liar.served, 1);
  EXPECT_EQ(PeerStorageCounters(**s).failovers, 1);
  // With only the liar, the error says what was wrong.
  rd.holders = [&](int64_t, int) { return std::vector<std::string>{liar.endpoint()}; };
  auto only = OpenPeerStorage(me, rd);
  ASSERT_OK(only);
  auto g = (*only)->OpenReadable("step-0000000003/rank-000001.ckd");
  ASSERT_OK(g);
  absl::Status bad = (*g)->ReadAt(0, Bytes(got));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("checksum mismatch in step-0000000003/rank-000001.ckd bytes [0, 300000)"),
            std::string::npos)
      << bad;
}

TEST(PeerMemory, AHolderWhoseMemoryChangedSincePutIsCaughtOnTheWire) {
  FourNodes n = StartFourNodes();
  auto &b = n.b, &c = n.c, &d = n.d;
  auto& writer = n.writer;
  ASSERT_OK(writer);
  // Three whole pieces and a short last one.
  const std::string path = "step-0000000021/rank-000002.ckd";
  const std::string data = Pattern(3 * peer::kPieceBytes + 12345, 21);
  Write(**writer, path, data);
  // b's copy goes bad after it was received and checked: a bit flips in its
  // second piece.
  peer::PeerStore::Bytes held = peer::LocalStore(*b)->Get(path);
  ASSERT_NE(held, nullptr);
  ASSERT_EQ(*held, data);
  const_cast<std::string&>(*held)[peer::kPieceBytes + 777] ^= 0x10;

  PeerRoute rd;
  rd.holders = [&](int64_t, int) { return std::vector<std::string>{b->endpoint(), c->endpoint()}; };
  auto reader = OpenPeerStorage(d, rd);
  ASSERT_OK(reader);
  auto f = (*reader)->OpenReadable(path);
  ASSERT_OK(f);
  // b answers with the checksum the piece arrived with; the reader sees the
  // mismatch and reads the file from c instead.
  std::string got(data.size(), '\0');
  ASSERT_OK((*f)->ReadAt(0, Bytes(got)));
  EXPECT_TRUE(got == data);
  EXPECT_EQ(PeerStorageCounters(**reader).failovers, 1);
  // With b alone, the error names the damaged piece.
  rd.holders = [&](int64_t, int) { return std::vector<std::string>{b->endpoint()}; };
  auto only = OpenPeerStorage(d, rd);
  ASSERT_OK(only);
  auto g = (*only)->OpenReadable(path);
  ASSERT_OK(g);
  absl::Status bad = (*g)->ReadAt(0, Bytes(got));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find(
                StrCat("checksum mismatch in ", path, " bytes [", peer::kPieceBytes, ", ", 2 * peer::kPieceBytes, ")")),
            std::string::npos)
      << bad;
  // Its intact pieces, the short last one included, still read from b.
  std::string tail(data.size() - 2 * peer::kPieceBytes, '\0');
  ASSERT_OK((*g)->ReadAt(2 * peer::kPieceBytes, Bytes(tail)));
  EXPECT_TRUE(tail == data.substr(2 * peer::kPieceBytes));
}

// A holder SIGKILLed while it streams a read: the reader, waiting on a
// half-sent read, sees the connection close, reads the whole range again
// from the next copy, and returns the right bytes; its log says why.
// A process still holds its own file of a memory step that was aborted
// (its generation ended mid-save); a later generation saved that step again
// without it. Restoring that step, the route names the holders of the save
// being restored: the stale own copy, left out, is passed over. (It used to
// be read first, and the restore failed on a file of the wrong size.)
TEST(PeerMemory, AStaleOwnCopyOfAnAbortedSaveIsPassedOverForTheRestoresHolders) {
  auto a = StartMemory("node-a");
  auto b = StartMemory("node-b");
  const std::string path = "step-0000000022/rank-000001.ckd";
  const std::string stale = Pattern(57464, 1);
  const std::string saved = Pattern(69752, 2);
  {
    auto w = OpenPeerStorage(a, PeerRoute{});  // the aborted save's file, in a's own memory
    ASSERT_OK(w);
    Write(**w, path, stale);
  }
  {
    auto w = OpenPeerStorage(b, PeerRoute{});  // the later save's, in b's
    ASSERT_OK(w);
    Write(**w, path, saved);
  }
  for (const bool a_holds : {false, true}) {
    PeerRoute rd;
    rd.holders = [&](int64_t step, int owner) {
      std::vector<std::string> out;
      if (step == 22 && owner == 1) {
        if (a_holds) out.push_back(a->endpoint());
        out.push_back(b->endpoint());
      }
      return out;
    };
    auto reader = OpenPeerStorage(a, rd);
    ASSERT_OK(reader);
    // Named a holder, a's own copy is read first, as always.
    const std::string& want = a_holds ? stale : saved;
    auto size = (*reader)->FileSize(path);
    ASSERT_OK(size);
    EXPECT_EQ(*size, want.size()) << "a holds: " << a_holds;
    auto f = (*reader)->OpenReadable(path);
    ASSERT_OK(f);
    ASSERT_EQ((*f)->size(), want.size());
    std::string got(want.size(), '\0');
    ASSERT_OK((*f)->ReadAt(0, Bytes(got)));
    EXPECT_TRUE(got == want) << "a holds: " << a_holds;
  }
}

// A whole-file read on a thread of its own.
struct BackgroundRead {
  BackgroundRead(ReadableFile& f, size_t n)
      : got(n, '\0'), t([this, &f] {
          status = f.ReadAt(0, Bytes(got));
          returned = true;
        }) {}
  std::string got;
  absl::Status status;
  std::atomic<bool> returned{false};
  std::thread t;  // last: starts once the members above are
};

TEST(PeerMemory, AHolderKilledMidReadIsFailedOverToTheNextCopy) {
  TempDir dir;
  // A holder in a process of its own, which stops itself (SIGSTOP) once it
  // has taken on serving 4 MiB.
  const pid_t holder = Spawn({PEER_HOLDER_PATH, dir.path(), "4194304", kToken}, dir.Join("holder.out"));
  ASSERT_GT(holder, 0);
  struct Reap {  // on any early return too
    pid_t pid;
    ~Reap() {
      if (pid > 0) kill(pid, SIGKILL), WaitExit(pid);
    }
  } reap{holder};
  std::string k;
  for (int i = 0; i < 3000 && k.empty(); ++i) {  // 30 s: a sanitizer's start-up
    std::ifstream f(dir.Join("endpoint"));
    std::getline(f, k);
    if (k.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(k.empty()) << ReadFile(dir.Join("holder.out"));
  LogLines log;
  auto a = StartMemory("node-a");
  auto c = StartMemory("node-c");
  auto d = StartMemory("node-d", int64_t{1} << 30, &log);
  const std::string path = "step-0000000030/rank-000001.ckd";
  const std::string data = Pattern(96u << 20, 30);
  {
    PeerRoute wr;
    wr.replicas = {k, c->endpoint()};
    auto w = OpenPeerStorage(a, wr);
    ASSERT_OK(w);
    Write(**w, path, data);
  }
  PeerRoute rd;
  rd.holders = [&](int64_t, int) { return std::vector<std::string>{k, c->endpoint()}; };
  auto reader = OpenPeerStorage(d, rd);
  ASSERT_OK(reader);
  auto f = (*reader)->OpenReadable(path);
  ASSERT_OK(f);
  BackgroundRead bg(**f, data.size());
  bool stopped = false;
  for (int i = 0; i < 3000 && !stopped; ++i) {
    stopped = std::ifstream(dir.Join("serving")).good();
    if (!stopped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Stopped with the read under way: its requests taken, replies queued,
  // the reader waiting on the socket.
  EXPECT_TRUE(stopped) << ReadFile(dir.Join("holder.out"));
  EXPECT_FALSE(bg.returned) << "the read ended before the holder was killed";
  kill(holder, SIGKILL);
  bg.t.join();
  EXPECT_EQ(WaitExit(holder), 128 + SIGKILL);
  reap.pid = -1;
  ASSERT_OK(bg.status);
  EXPECT_TRUE(bg.got == data);
  EXPECT_EQ(PeerStorageCounters(**reader).failovers, 1);
  EXPECT_EQ(PeerStorageCounters(**reader).from_peers, static_cast<int64_t>(data.size()));
  EXPECT_GE(c->Stats().bytes_served, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(log.Holds(StrCat("read of ", path, " at byte offset 0 moved to ", c->endpoint(), " (peer ", k)));
}

// An erasure-coded file, RS(4+2), read while two of its data pieces'
// holders, each a process of its own, die mid-stream (stopped once they
// have taken on serving 16 MiB of their 24: the reader fetches two check
// blocks of 4 MiB at a time, so the first two were read whole; then
// SIGKILLed): the read goes on from the parity pieces, rebuilding the two
// data pieces' later rows, and returns the file exactly.
TEST(PeerMemory, TwoPieceHoldersKilledMidReadAreReadAroundFromParity) {
  TempDir dir;
  std::vector<pid_t> holders;
  std::vector<std::string> killed_eps;
  struct Reap {  // on any early return too
    std::vector<pid_t>* pids;
    ~Reap() {
      for (pid_t& p : *pids) {
        if (p > 0) kill(p, SIGKILL), WaitExit(p), p = -1;
      }
    }
  } reap{&holders};
  for (int h = 0; h < 2; ++h) {
    const std::string hd = dir.Join(StrCat("holder", h));
    ASSERT_EQ(::mkdir(hd.c_str(), 0755), 0);
    holders.push_back(Spawn({PEER_HOLDER_PATH, hd, "16777216", kToken}, hd + ".out"));
    ASSERT_GT(holders.back(), 0);
    std::string ep;
    for (int i = 0; i < 3000 && ep.empty(); ++i) {  // 30 s: a sanitizer's start-up
      std::ifstream f(hd + "/endpoint");
      std::getline(f, ep);
      if (ep.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(ep.empty()) << ReadFile(hd + ".out");
    killed_eps.push_back(ep);
  }
  auto a = StartMemory("node-a");
  auto c = StartMemory("node-c");
  auto d = StartMemory("node-d");
  auto e = StartMemory("node-e");
  LogLines log;
  auto reader_memory = StartMemory("node-f", int64_t{1} << 30, &log);
  const std::string path = "step-0000000030/rank-000001.ckd";
  const std::string data = Pattern(96u << 20, 31);
  // Piece 0 here (a), 1 and 2 in the two processes, 3 in c, parity in d, e.
  const std::vector<std::string> eps = {a->endpoint(), killed_eps[0], killed_eps[1],
                                        c->endpoint(), d->endpoint(), e->endpoint()};
  {
    PeerRoute wr;
    wr.erasure_k = 4;
    wr.erasure_m = 2;
    wr.replicas.assign(eps.begin() + 1, eps.end());
    auto w = OpenPeerStorage(a, wr);
    ASSERT_OK(w);
    Write(**w, path, data);
  }
  PeerRoute rd;
  rd.holders = [&](int64_t, int) { return eps; };
  auto reader = OpenPeerStorage(reader_memory, rd);
  ASSERT_OK(reader);
  auto f = (*reader)->OpenReadable(path);
  ASSERT_OK(f);
  ASSERT_EQ((*f)->size(), data.size());
  BackgroundRead bg(**f, data.size());
  int stopped = 0;
  for (int i = 0; i < 3000 && stopped < 2; ++i) {
    stopped = std::ifstream(dir.Join("holder0/serving")).good() + std::ifstream(dir.Join("holder1/serving")).good();
    if (stopped < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(stopped, 2);
  EXPECT_FALSE(bg.returned) << "the read ended before the holders were killed";
  for (pid_t& p : holders) {
    kill(p, SIGKILL);
    EXPECT_EQ(WaitExit(p), 128 + SIGKILL);
    p = -1;
  }
  bg.t.join();
  ASSERT_OK(bg.status);
  EXPECT_TRUE(bg.got == data);
  const PeerReadCounters n = PeerStorageCounters(**reader);
  EXPECT_EQ(n.pieces_lost, 2);
  EXPECT_GT(n.bytes_rebuilt, 0);
  // Not the first two blocks' rows, read before the deaths: at most 2 x 16 MiB.
  EXPECT_LE(n.bytes_rebuilt, int64_t{32} << 20);
  EXPECT_GT(d->Stats().bytes_served, 0);  // parity was read
}

TEST(PeerMemory, TheBudgetRefusesAFileCleanly) {
  auto small = StartMemory("small", 100000);
  auto other = StartMemory("other", 100000);
  // Own memory full.
  {
    PeerRoute r;
    auto s = OpenPeerStorage(small, r);
    ASSERT_OK(s);
    auto w = (*s)->OpenWritable("step-0000000001/rank-000000.ckd");
    ASSERT_OK(w);
    const std::string big = Pattern(150000, 1);
    (*w)->WriteAsync(0, Bytes(big), [](absl::Status) {});
    absl::Status st = (*w)->Finish(big.size());
    EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
    EXPECT_NE(st.message().find("budget of 100000 bytes"), std::string::npos) << st;
    EXPECT_NE(st.message().find("step-0000000001/rank-000000.ckd"), std::string::npos) << st;
    EXPECT_EQ(small->Stats().held_bytes, 0);
    EXPECT_EQ(small->Stats().refused, 1);
  }
  // A replica holder's memory full: the writer's Finish fails naming it,
  // and the holder keeps nothing of it.
  {
    auto roomy = StartMemory("roomy");
    PeerRoute r;
    r.replicas = {other->endpoint()};
    auto s = OpenPeerStorage(roomy, r);
    ASSERT_OK(s);
    Write(**s, "step-0000000001/rank-000001.ckd", Pattern(60000, 2));
    auto w = (*s)->OpenWritable("step-0000000001/rank-000002.ckd");
    ASSERT_OK(w);
    const std::string more = Pattern(60000, 3);
    (*w)->WriteAsync(0, Bytes(more), [](absl::Status) {});
    absl::Status st = (*w)->Finish(more.size());
    EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
    EXPECT_NE(st.message().find(other->endpoint()), std::string::npos) << st;
    EXPECT_EQ(other->Stats().held_bytes, 60000);
    EXPECT_EQ(other->Stats().peak_bytes, 60000);
    // After older steps are dropped there is room again.
    other->DropStepsBefore(2);
    roomy->DropStepsBefore(2);
    Write(**s, "step-0000000002/rank-000001.ckd", Pattern(60000, 4));
    EXPECT_EQ(other->Holdings().size(), 1u);
  }
}

// Reads one whole frame from a raw socket.
std::pair<peer::Header, std::string> ReadRawFrame(int fd) {
  uint8_t h[peer::kHeaderSize];
  size_t got = 0;
  while (got < sizeof(h)) {
    const ssize_t n = read(fd, h + got, sizeof(h) - got);
    if (n <= 0) return {};
    got += static_cast<size_t>(n);
  }
  auto header = peer::ParseHeader(h, kMaxPeerControlPayload);
  if (!header.ok()) return {};
  std::string payload(header->length, '\0');
  got = 0;
  while (got < payload.size()) {
    const ssize_t n = read(fd, payload.data() + got, payload.size() - got);
    if (n <= 0) return {};
    got += static_cast<size_t>(n);
  }
  return {*header, payload};
}

// Reads the hello on a raw connection and returns the auth frame that
// answers it with the test token; empty when no hello came.
std::string RawAuthFrame(int fd) {
  auto [hh, hello] = ReadRawFrame(fd);
  if (hh.op != peer::Op::kHello) return "";
  ByteReader r(hello, "hello");
  const auto mac = peer::AuthMac(kToken, r.Str(256));
  ByteWriter a;
  a.Str(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
  return peer::Frame(peer::Op::kAuth, a.Take());
}

// Authenticates a raw connection and begins a put of `size` bytes at
// `path`; true once both the auth and the put-begin are answered ok.
bool RawPutBegin(int fd, const std::string& path, uint64_t size) {
  const std::string auth = RawAuthFrame(fd);
  if (auth.empty()) return false;
  ByteWriter w;
  w.Str(path);
  w.Var(size);
  w.SVar(1);
  const std::string out = auth + peer::Frame(peer::Op::kPutBegin, w.Take());
  if (write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) return false;
  return ReadRawFrame(fd).first.op == peer::Op::kOk && ReadRawFrame(fd).first.op == peer::Op::kOk;
}

// Regression (fuzz_peer): a put announcing 2^63 bytes or more passed the
// budget check as a negative number and brought the server down.
TEST(PeerMemory, AnAbsurdPutSizeIsRefusedAndTheServerServesOn) {
  auto m = StartMemory("a", 1 << 20);
  for (uint64_t size : {uint64_t{1} << 63, ~uint64_t{0}, uint64_t{1} << 40}) {
    const int fd = ConnectRaw(m->endpoint());
    const std::string auth = RawAuthFrame(fd);
    ASSERT_FALSE(auth.empty());
    ByteWriter w;
    w.Str("step-0000000001/rank-000000.ckd");
    w.Var(size);
    w.SVar(1);
    const std::string out = auth + peer::Frame(peer::Op::kPutBegin, w.Take());
    ASSERT_EQ(write(fd, out.data(), out.size()), static_cast<ssize_t>(out.size()));
    EXPECT_EQ(ReadRawFrame(fd).first.op, peer::Op::kOk);
    auto [eh, error] = ReadRawFrame(fd);
    EXPECT_EQ(eh.op, peer::Op::kError) << size;
    EXPECT_NE(error.find("budget"), std::string::npos) << size;
    close(fd);
  }
  peer::PeerStore store(1 << 20);
  for (uint64_t size : {uint64_t{1} << 63, ~uint64_t{0}}) {
    absl::Status st = store.Reserve(size, "x");
    EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  }
  EXPECT_EQ(m->Stats().refused, 3);
  ASSERT_OK(peer::PeerConnection::Open(m->endpoint(), kToken, 5));
}

// A put whose data does not match its piece checksum is refused and nothing
// is held, whether the holder receives through its small buffer (a small
// file) or straight into the file's memory (one of several MiB, kept on
// huge pages); the bytes were flipped after the checksum, as a bad link
// would.
TEST(PeerMemory, ADamagedPutIsRefusedOnEveryReceivePath) {
  auto m = StartMemory("a", int64_t{64} << 20);
  for (size_t size : {size_t{300000}, (size_t{6} << 20) + 4321}) {
    const std::string path = "step-0000000002/rank-000000.ckd";
    std::string data = Pattern(size, 4);
    const int fd = ConnectRaw(m->endpoint());
    ASSERT_TRUE(RawPutBegin(fd, path, data.size()));
    std::string out;
    const uint64_t whole = Xxh3(data);
    uint64_t last = 0;  // the last piece's offset: its byte is flipped
    for (uint64_t off = 0; off < data.size(); off += kMaxPeerDataPayload) {
      std::string piece = data.substr(off, kMaxPeerDataPayload);
      std::string head(peer::kHeaderSize, '\0');
      peer::EncodeHeader(peer::Op::kPutData, piece.size(), off, Xxh3(piece), reinterpret_cast<uint8_t*>(head.data()));
      if (off + piece.size() == data.size()) {
        piece[piece.size() - 100] ^= 0x01;
        last = off;
      }
      out += head + piece;
    }
    ByteWriter e;
    e.U64(whole);
    out += peer::Frame(peer::Op::kPutEnd, e.Take());
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fd, out.data() + done, out.size() - done);
      ASSERT_GT(n, 0);
      done += static_cast<size_t>(n);
    }
    auto [eh, error] = ReadRawFrame(fd);
    EXPECT_EQ(eh.op, peer::Op::kError) << size;
    EXPECT_NE(error.find(StrCat("checksum mismatch in ", path, " bytes [", last, ", ", size, ") as received from")),
              std::string::npos)
        << size << ": " << error;
    close(fd);
    EXPECT_TRUE(m->Holdings().empty()) << size;
    EXPECT_EQ(m->Stats().held_bytes, 0) << size;
  }
  // The same file sent intact is held.
  auto c = peer::PeerConnection::Open(m->endpoint(), kToken, 5);
  ASSERT_OK(c);
  const std::string data = Pattern((size_t{6} << 20) + 4321, 4);
  ASSERT_OK((*c)->Put("step-0000000002/rank-000000.ckd", Bytes(data), 1));
  std::string got(data.size(), '\0');
  ASSERT_OK((*c)->Get("step-0000000002/rank-000000.ckd", 0, Bytes(got)));
  EXPECT_TRUE(got == data);
}

// Empty put-data frames (at the end of a file, or the only one of an empty
// file) are taken as nothing: the file is held, and reads of it check.
TEST(PeerMemory, EmptyPutPiecesAreTakenAsNothing) {
  auto m = StartMemory("a", int64_t{64} << 20);
  for (size_t size : {size_t{0}, size_t{2} << 20}) {
    const std::string path = StrCat("step-0000000002/empty-", size, ".ckd");
    const std::string data = Pattern(size, 6);
    const int fd = ConnectRaw(m->endpoint());
    ASSERT_TRUE(RawPutBegin(fd, path, data.size()));
    std::string out;
    for (uint64_t off = 0; off < data.size(); off += peer::kPieceBytes) {
      const std::string piece = data.substr(off, peer::kPieceBytes);
      std::string head(peer::kHeaderSize, '\0');
      peer::EncodeHeader(peer::Op::kPutData, piece.size(), off, Xxh3(piece), reinterpret_cast<uint8_t*>(head.data()));
      out += head + piece;
    }
    std::string empty(peer::kHeaderSize, '\0');
    peer::EncodeHeader(peer::Op::kPutData, 0, data.size(), Xxh3(std::string()),
                       reinterpret_cast<uint8_t*>(empty.data()));
    out += empty;
    ByteWriter e;
    e.U64(Xxh3(data));
    out += peer::Frame(peer::Op::kPutEnd, e.Take());
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fd, out.data() + done, out.size() - done);
      ASSERT_GT(n, 0);
      done += static_cast<size_t>(n);
    }
    EXPECT_EQ(ReadRawFrame(fd).first.op, peer::Op::kOk) << size;
    close(fd);
    auto c = peer::PeerConnection::Open(m->endpoint(), kToken, 5);
    ASSERT_OK(c);
    std::string got(data.size(), '\0');
    ASSERT_OK((*c)->Get(path, 0, Bytes(got)));
    EXPECT_TRUE(got == data) << size;
  }
}

TEST(PeerMemory, HoldingsNeedTheLeadersManifestAndDropsForgetSteps) {
  auto m = StartMemory("a");
  PeerRoute r;
  auto s = OpenPeerStorage(m, r);
  ASSERT_OK(s);
  Write(**s, "step-0000000004/rank-000000.ckd", "zero");
  Write(**s, "step-0000000004/rank-000002.ckd", "two");
  Write(**s, "step-0000000004/rank-000002.report", "report");
  Write(**s, "step-0000000006/rank-000000.ckd", "zero");
  ASSERT_OK((*s)->PutAtomic("step-0000000006/MANIFEST", Bytes(std::string("m"))));
  ASSERT_OK((*s)->PutAtomic("LATEST", Bytes(std::string("l"))));
  auto held = m->Holdings();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].step, 4);
  EXPECT_EQ(held[0].owners, std::vector<int>({2}));  // rank 0 without its manifest does not count
  EXPECT_EQ(held[1].step, 6);
  EXPECT_EQ(held[1].owners, std::vector<int>({0}));
  m->DropStepsExcept(4);
  held = m->Holdings();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].step, 4);
  // LATEST spoke of the steps dropped: gone too (a generation that restored
  // step 4 must be able to save step 6 again).
  EXPECT_TRUE(absl::IsNotFound((*s)->FileSize("LATEST").status()));
  m->DropStepsBefore(5);
  EXPECT_TRUE(m->Holdings().empty());
  EXPECT_EQ(peer::OwnerOfPath("step-0000000004/rank-000017.ckd"), 17);
  EXPECT_EQ(peer::OwnerOfPath("step-0000000004/CLAIM"), 0);
  EXPECT_EQ(peer::StepOfPath("step-0000000004/CLAIM"), 4);
  EXPECT_EQ(peer::StepOfPath("LATEST"), -1);
}

TEST(PeerMemory, ReplicasGoToOtherDomainsSpreadEvenly) {
  const std::vector<std::string> domains = {"n0", "n0", "n1", "n1", "n2", "n2"};
  auto p = PlaceReplicas(domains, 1);
  ASSERT_OK(p);
  std::vector<int> holds(domains.size(), 0);
  for (size_t i = 0; i < domains.size(); ++i) {
    ASSERT_EQ((*p)[i].size(), 1u);
    const int h = (*p)[i][0];
    EXPECT_NE(domains[static_cast<size_t>(h)], domains[i]) << i;
    ++holds[static_cast<size_t>(h)];
  }
  for (int n : holds) EXPECT_EQ(n, 1);
  auto two = PlaceReplicas(domains, 2);
  ASSERT_OK(two);
  for (size_t i = 0; i < domains.size(); ++i) {
    ASSERT_EQ((*two)[i].size(), 2u);
    EXPECT_NE(domains[static_cast<size_t>((*two)[i][0])], domains[static_cast<size_t>((*two)[i][1])]);
  }
  auto too_many = PlaceReplicas(domains, 3);
  EXPECT_TRUE(absl::IsFailedPrecondition(too_many.status())) << too_many.status();
  EXPECT_NE(too_many.status().message().find("need 4 failure domains; the ranks are in 3 (n0, n1, n2)"),
            std::string::npos)
      << too_many.status();
  auto none = PlaceReplicas({"a", "a"}, 0);
  ASSERT_OK(none);
  EXPECT_TRUE((*none)[0].empty());
}

// The memory level through the Checkpointer: ranks save at both levels,
// one process's memory is lost, and a smaller world restores the newest
// memory step from what is left, resharded, reading nothing from storage.
TEST(MemoryLevel, ASmallerWorldRestoresTheNewestMemoryStepFromPeers) {
  TempDir dir;
  const int world = 3;
  std::vector<std::shared_ptr<PeerMemory>> mem;
  std::vector<std::string> domains, eps;
  for (int r = 0; r < world; ++r) {
    mem.push_back(StartMemory("node-" + std::to_string(r)));
    domains.push_back(mem.back()->domain());
    eps.push_back(mem.back()->endpoint());
  }
  auto placement = PlaceReplicas(domains, 1);
  ASSERT_OK(placement);
  // Who holds rank o's files of a save by the first world.
  auto holders_of = [&](int owner) {
    std::vector<std::string> h = {eps[static_cast<size_t>(owner)]};
    for (int k : (*placement)[static_cast<size_t>(owner)]) h.push_back(eps[static_cast<size_t>(k)]);
    return h;
  };
  auto comms = CreateLocalCommunicators(world);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        PeerRoute route;
        for (int k : (*placement)[static_cast<size_t>(r)]) route.replicas.push_back(eps[static_cast<size_t>(k)]);
        route.holders = [&](int64_t, int owner) { return holders_of(owner); };
        route.peers = eps;
        CKPT_ASSIGN_OR_RETURN(auto memory_storage, OpenPeerStorage(mem[static_cast<size_t>(r)], route));
        CheckpointerOptions o;
        o.uri = dir.Join("root");
        o.rank = r;
        o.world_size = world;
        o.communicator = comms[static_cast<size_t>(r)];
        o.engine_options.staging_bytes = 4 << 20;
        o.engine_options.block_size = 64 << 10;
        o.memory_storage = memory_storage;
        CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
        tools::ElasticShard shard(r, world);
        shard.Init();
        for (int64_t step = 1; step <= 6; ++step) {
          shard.Train(step);
          if (step % 2 != 0) continue;
          SaveOptions so;
          so.level = step == 4 ? SaveLevel::kDurable : SaveLevel::kMemory;
          CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(step, shard.state(), so));
          CKPT_RETURN_IF_ERROR(h.Wait());
        }
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : results) ASSERT_OK(s);
  // Step 2 is gone from every memory once step 6 committed there.
  for (auto& m : mem) {
    auto held = m->Holdings();
    ASSERT_EQ(held.size(), 1u) << m->endpoint();
    EXPECT_EQ(held[0].step, 6);
    EXPECT_EQ(held[0].owners.size(), 2u) << m->endpoint();  // its own rank's and one it holds for another
  }
  // The durable root has step 4 only.
  auto latest = LatestCommittedStep(**OpenStorage(dir.Join("root")));
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 4);

  mem[2].reset();  // node-2 is lost with its memory
  const int next = 2;
  auto comms2 = CreateLocalCommunicators(next);
  threads.clear();
  std::vector<LoadStats> stats(next);
  std::vector<absl::Status> loaded(next);
  for (int r = 0; r < next; ++r) {
    threads.emplace_back([&, r] {
      loaded[r] = [&]() -> absl::Status {
        PeerRoute route;
        route.holders = [&](int64_t, int owner) {
          std::vector<std::string> h = holders_of(owner);
          std::erase(h, eps[2]);
          return h;
        };
        CKPT_ASSIGN_OR_RETURN(auto memory_storage, OpenPeerStorage(mem[static_cast<size_t>(r)], route));
        CheckpointerOptions o;
        o.uri = dir.Join("root");
        o.rank = r;
        o.world_size = next;
        o.communicator = comms2[static_cast<size_t>(r)];
        o.memory_storage = memory_storage;
        o.gc_on_open = false;
        CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
        // The newest step of each level, as a restarting rank asks.
        CKPT_ASSIGN_OR_RETURN(int64_t newest_memory, cp->LatestStep(SaveLevel::kMemory));
        CKPT_ASSIGN_OR_RETURN(int64_t newest_durable, cp->LatestStep(SaveLevel::kDurable));
        if (newest_memory != 6 || newest_durable != 4) {
          return absl::InternalError(StrCat("latest steps: memory ", newest_memory, ", durable ", newest_durable));
        }
        tools::ElasticShard shard(r, next), expect(r, next);
        expect.Init();
        for (int64_t step = 1; step <= 6; ++step) expect.Train(step);
        LoadOptions lo;
        lo.level = SaveLevel::kMemory;
        CKPT_ASSIGN_OR_RETURN(stats[r], cp->Load(shard.state(), 6, lo));
        if (shard.weight() != expect.weight() || shard.bias() != expect.bias()) {
          return absl::DataLossError("restored state differs");
        }
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  int64_t from_peers = 0;
  for (int r = 0; r < next; ++r) {
    ASSERT_OK(loaded[r]);
    EXPECT_EQ(stats[r].level, SaveLevel::kMemory);
    EXPECT_EQ(stats[r].bytes_from_storage, 0) << r;
    EXPECT_GE(stats[r].bytes_from_memory + stats[r].bytes_from_peers, stats[r].bytes_read) << r;
    from_peers += stats[r].bytes_from_peers;
  }
  EXPECT_GT(from_peers, 0);  // rank 2's rows came from its replica holder
}

// Delta saves at the memory level, through peer memories: each rank's
// delta files go to its replica holder like any file, the memory keeps the
// base the newest step needs, and when one process's memory is lost the
// other rank still restores the newest step (a delta) bit-exactly, its
// partner's files and their base read from the replica.
TEST(MemoryLevel, DeltasGoToPeersAndRestoreAfterAMemoryIsLost) {
  TempDir dir;
  const int world = 2;
  std::vector<std::shared_ptr<PeerMemory>> mem;
  std::vector<std::string> eps;
  for (int r = 0; r < world; ++r) {
    mem.push_back(StartMemory("node-" + std::to_string(r)));
    eps.push_back(mem.back()->endpoint());
  }
  const TensorSpec frozen{"frozen", DType::kF32, {256, 512}};
  const TensorSpec moving{"moving", DType::kF32, {64, 512}};
  // Rank r holds rows [r * half, (r + 1) * half) of both tensors; `moving`
  // changes at every step, `frozen` never.
  auto shards_at = [&](int r, int64_t step) {
    std::vector<OwnedShard> out;
    out.push_back(MakeShard(frozen, Box({r * 128, 0}, {128, 512}), 1));
    out.push_back(MakeShard(moving, Box({r * 32, 0}, {32, 512}), static_cast<uint64_t>(step)));
    return out;
  };
  auto route_of = [&](int r, bool lost_peer) {
    PeerRoute route;
    route.replicas = {eps[static_cast<size_t>(1 - r)]};
    route.holders = [&, lost_peer](int64_t, int owner) {
      std::vector<std::string> h = {eps[static_cast<size_t>(owner)], eps[static_cast<size_t>(1 - owner)]};
      if (lost_peer) std::erase(h, eps[1]);
      return h;
    };
    route.peers = eps;
    return route;
  };
  auto comms = CreateLocalCommunicators(world);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        CKPT_ASSIGN_OR_RETURN(auto memory_storage, OpenPeerStorage(mem[static_cast<size_t>(r)], route_of(r, false)));
        CheckpointerOptions o;
        o.uri = dir.Join("root");
        o.rank = r;
        o.world_size = world;
        o.communicator = comms[static_cast<size_t>(r)];
        o.codec = Codec::kAuto;
        o.engine_options.staging_bytes = 4 << 20;
        o.engine_options.block_size = 64 << 10;
        o.memory_storage = memory_storage;
        o.delta.chain = 3;
        CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
        SaveOptions so;
        so.level = SaveLevel::kMemory;
        for (int64_t step = 1; step <= 3; ++step) {
          std::vector<OwnedShard> shards = shards_at(r, step);
          CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(step, StateOf(shards), so));
          CKPT_RETURN_IF_ERROR(h.Wait());
        }
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : results) ASSERT_OK(s);
  // Each memory holds step 3 and its base, step 1 (step 2 went).
  for (auto& m : mem) {
    std::set<int64_t> held;
    for (const auto& h : m->Holdings()) held.insert(h.step);
    EXPECT_EQ(held, (std::set<int64_t>{1, 3})) << m->endpoint();
  }
  mem[1].reset();  // node-1 is lost with its memory
  auto memory_storage = OpenPeerStorage(mem[0], route_of(0, true));
  ASSERT_OK(memory_storage);
  CheckpointerOptions o;
  o.uri = dir.Join("root");
  o.memory_storage = *memory_storage;
  o.gc_on_open = false;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  // One rank now loads the whole of step 3 from the memory that is left.
  std::vector<OwnedShard> want = {MakeShard(frozen, Box::Whole(frozen.shape), 1),
                                  MakeShard(moving, Box::Whole(moving.shape), 3)};
  std::vector<OwnedShard> out;
  for (const OwnedShard& w : want) out.push_back(EmptyShard(w.spec, w.box));
  LoadOptions lo;
  lo.level = SaveLevel::kMemory;
  auto stats = (*cp)->Load(StateOf(out), 3, lo);
  ASSERT_OK(stats);
  EXPECT_GT(stats->delta_blocks, 0);
  EXPECT_EQ(stats->bytes_from_storage, 0);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(out[i].data == want[i].data) << out[i].spec.fqn;
}

TEST(MemoryLevel, ASaveAtTheMemoryLevelWithoutOneIsRefused) {
  TempDir dir;
  CheckpointerOptions o;
  o.uri = dir.Join("root");
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  tools::ElasticShard shard(0, 1);
  shard.Init();
  SaveOptions so;
  so.level = SaveLevel::kMemory;
  auto h = (*cp)->Save(1, shard.state(), so);
  EXPECT_TRUE(absl::IsFailedPrecondition(h.status())) << h.status();
  EXPECT_EQ((*cp)->memory_storage(), nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition((*cp)->LatestStep(SaveLevel::kMemory).status()));
  EXPECT_TRUE(absl::IsNotFound((*cp)->LatestStep(SaveLevel::kDurable).status()));
}

// The memory level paces its copies (PeerRoute::send_bytes_per_s): 16 MiB
// at 8 MiB/s takes about two seconds (less the 10 ms of slack), where the
// same copy unpaced takes a fraction of one; a rate under 1 MiB/s is refused.
TEST(PeerMemory, CopiesGoOutAtTheirPacedRate) {
  auto a = StartMemory("node-a");
  auto b = StartMemory("node-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::string data = Pattern(16 << 20, 3);
  auto timed = [&](double rate, const std::string& path) {
    PeerRoute route;
    route.replicas = {b->endpoint()};
    route.send_bytes_per_s = rate;
    auto w = OpenPeerStorage(a, route);
    EXPECT_OK(w);
    const auto t0 = std::chrono::steady_clock::now();
    if (w.ok()) Write(**w, path, data);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double unpaced = timed(0, "step-0000000001/unpaced");
  const double paced = timed(8 << 20, "step-0000000001/paced");
  EXPECT_GE(paced, 1.9) << "unpaced " << unpaced;
  EXPECT_LT(paced, 8.0);
  EXPECT_LT(unpaced, paced / 2);
  PeerRoute slow;
  slow.replicas = {b->endpoint()};
  slow.send_bytes_per_s = 100e3;
  EXPECT_TRUE(absl::IsInvalidArgument(OpenPeerStorage(a, slow).status()));
}

}  // namespace
}  // namespace ckpt::testing
