// The coordinator's message codecs: every message round-trips, the bytes are
// the protocol's (docs/protocol.md), and short or oversized payloads are
// refused with the message's name.
#include "coordinator/messages.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/limits.h"
#include "coordinator/protocol.h"
#include "testutil/test_util.h"
#include "util/bytes.h"
#include "util/crypto.h"

namespace ckpt::coord {
namespace {

// The coordinator's threads may still check a frame's HMAC while the process
// exits. With OpenSSL's exit-time cleanup registered, such a hash crashed
// in its freed tables in about a third of these children.
TEST(Hmac, HashingWhileTheProcessExitsDoesNotCrash) {
  int died = 0;
  for (int i = 0; i < 40; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      (void)HmacSha256("key", "first");
      new std::thread([] {
        while (true) (void)HmacSha256("key", "a frame being checked");
      });
      usleep(2000);
      std::exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++died;
  }
  EXPECT_EQ(died, 0) << "children that died exiting while hashing, of 40";
}

std::string Hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

TEST(Messages, EveryMessageRoundTrips) {
  JoinRequest j{"job", "host-7:123", 8, 42, 3, true, std::string(32, '\x5a')};
  auto j2 = Decode<JoinRequest>(Encode(j));
  ASSERT_OK(j2);
  EXPECT_EQ(j2->job, "job");
  EXPECT_EQ(j2->host, "host-7:123");
  EXPECT_EQ(j2->local_ranks, 8u);
  EXPECT_EQ(j2->previous_member, 42u);
  EXPECT_EQ(j2->previous_generation, 3);
  EXPECT_TRUE(j2->resume);
  EXPECT_EQ(j2->mac, j.mac);

  AssignReply a;
  a.member_id = 9;
  a.generation = 4;
  a.first_rank = 16;
  a.local_ranks = 8;
  a.world_size = 64;
  a.members = 8;
  a.restore_step = -1;
  a.heartbeat_ms = 500;
  auto a2 = Decode<AssignReply>(Encode(a));
  ASSERT_OK(a2);
  EXPECT_EQ(a2->member_id, 9u);
  EXPECT_EQ(a2->first_rank, 16u);
  EXPECT_EQ(a2->world_size, 64u);
  EXPECT_EQ(a2->restore_step, -1);
  EXPECT_EQ(a2->heartbeat_ms, 500u);
  AssignReply refused;
  refused.status = AssignReply::kRefused;
  refused.message = "wrong token";
  auto r2 = Decode<AssignReply>(Encode(refused));
  ASSERT_OK(r2);
  EXPECT_EQ(r2->status, AssignReply::kRefused);
  EXPECT_EQ(r2->message, "wrong token");

  VoteRequest v;
  v.generation = 2;
  v.rank = 5;
  v.step = 100;
  v.vote.ok = false;
  v.vote.error = "ENOSPC";
  v.vote.stall_s = 0.25;
  v.vote.write_s = 3.5;
  v.vote.bytes = 1 << 30;
  v.vote.replicas = {{"w[0:4]", 0x1234, true}, {"b[0:2]", 0x9, false}};
  auto v2 = Decode<VoteRequest>(Encode(v));
  ASSERT_OK(v2);
  EXPECT_EQ(v2->step, 100);
  EXPECT_FALSE(v2->vote.ok);
  EXPECT_EQ(v2->vote.error, "ENOSPC");
  EXPECT_DOUBLE_EQ(v2->vote.stall_s, 0.25);
  EXPECT_DOUBLE_EQ(v2->vote.write_s, 3.5);
  EXPECT_EQ(v2->vote.bytes, 1 << 30);
  ASSERT_EQ(v2->vote.replicas.size(), 2u);
  EXPECT_EQ(v2->vote.replicas[0].key, "w[0:4]");
  EXPECT_EQ(v2->vote.replicas[0].hash, 0x1234u);
  EXPECT_TRUE(v2->vote.replicas[0].written);

  CollectiveRequest c{7, 3, 11, CollectiveOp::kScatter, 2500, "part"};
  auto c2 = Decode<CollectiveRequest>(Encode(c), 1 << 20);
  ASSERT_OK(c2);
  EXPECT_EQ(c2->op, CollectiveOp::kScatter);
  EXPECT_EQ(c2->seq, 11u);
  EXPECT_EQ(c2->part, "part");

  auto hb = Decode<HeartbeatAck>(Encode(HeartbeatAck{5, true, "generation 4 is over"}));
  ASSERT_OK(hb);
  EXPECT_TRUE(hb->stop);
  EXPECT_EQ(hb->reason, "generation 4 is over");
  auto st = Decode<StopPush>(Encode(StopPush{6, "member 3 died"}));
  ASSERT_OK(st);
  EXPECT_EQ(st->generation, 6);
  auto w = Decode<StepWaitRequest>(Encode(StepWaitRequest{1, 20, 30000}));
  ASSERT_OK(w);
  EXPECT_EQ(w->timeout_ms, 30000u);
  auto p = Decode<PublishedRequest>(Encode(PublishedRequest{1, 20, false, "EIO"}));
  ASSERT_OK(p);
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->message, "EIO");
  EXPECT_EQ(Decode<LeaveRequest>(Encode(LeaveRequest{77}))->member, 77u);
  EXPECT_TRUE(Decode<StatusRequest>(Encode(StatusRequest{true}))->text);
  EXPECT_FALSE(Decode<StatusRequest>("")->text) << "older clients send nothing and get JSON";
  auto hello = Decode<HelloReply>(Encode(HelloReply{"nonce", "ckpt-coordinator/1", 1 << 26}));
  ASSERT_OK(hello);
  EXPECT_EQ(hello->coordinator_id, "ckpt-coordinator/1");
  EXPECT_EQ(hello->max_frame, 1u << 26);

  auto parts = DecodeParts(EncodeParts({"a", "", "ccc"}), 16, "gather result");
  ASSERT_OK(parts);
  EXPECT_EQ(*parts, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*DecodeBytes(EncodeBytes("xyz"), 16, "broadcast result"), "xyz");

  absl::Status decision = absl::UnknownError("unset");
  ASSERT_OK(DecodeDecision(EncodeDecision(absl::OkStatus()), &decision));
  EXPECT_TRUE(decision.ok());
  ASSERT_OK(DecodeDecision(EncodeDecision(absl::DataLossError("silent data corruption in w[0:4]")), &decision));
  EXPECT_TRUE(absl::IsDataLoss(decision)) << decision;
  EXPECT_EQ(decision.message(), "silent data corruption in w[0:4]");
}

// The memory level's fields are appended: a durable request is byte for
// byte what it was, a memory one says so, and joins and assignments carry
// the peer directory.
TEST(Messages, TheMemoryLevelRoundTrips) {
  VoteRequest v;
  v.step = 14;
  v.level = kMemoryLevel;
  EXPECT_EQ(Decode<VoteRequest>(Encode(v))->level, kMemoryLevel);
  EXPECT_EQ(Decode<VoteRequest>(Encode(VoteRequest{}))->level, 0);
  EXPECT_EQ(Encode(StepWaitRequest{2, 300, 1000, kMemoryLevel}), Encode(StepWaitRequest{2, 300, 1000}) + "\x01");
  EXPECT_EQ(Decode<StepWaitRequest>(Encode(StepWaitRequest{2, 300, 1000, kMemoryLevel}))->level, kMemoryLevel);
  PublishedRequest p{1, 20, true, ""};
  p.level = kMemoryLevel;
  EXPECT_EQ(Decode<PublishedRequest>(Encode(p))->level, kMemoryLevel);

  JoinRequest j{"j", "h", 2, 0, -1, false, "m"};
  j.peer_endpoint = "10.0.0.7:4100";
  j.peer_domain = "rack-3";
  j.held = {HeldStep{14, 1, {0, 5}}, HeldStep{16, 1, {}}};
  auto dj = Decode<JoinRequest>(Encode(j));
  ASSERT_OK(dj);
  EXPECT_EQ(dj->peer_endpoint, "10.0.0.7:4100");
  EXPECT_EQ(dj->peer_domain, "rack-3");
  ASSERT_EQ(dj->held.size(), 2u);
  EXPECT_EQ(dj->held[0].step, 14);
  EXPECT_EQ(dj->held[0].owners, (std::vector<uint32_t>{0, 5}));
  EXPECT_TRUE(Decode<JoinRequest>(Encode(JoinRequest{"j", "h", 1, 0, -1, false, "m"}))->peer_endpoint.empty());

  AssignReply a;
  a.world_size = 2;
  a.restore_step = 14;
  a.restore_level = kMemoryLevel;
  a.endpoints = {"a:1", "b:2"};
  a.holders = {{0, 1}, {1, 0}};
  a.restore_holders = {{1}, {0, 1}, {1}};
  auto da = Decode<AssignReply>(Encode(a));
  ASSERT_OK(da);
  EXPECT_EQ(da->restore_level, kMemoryLevel);
  EXPECT_EQ(da->endpoints, a.endpoints);
  EXPECT_EQ(da->holders, a.holders);
  EXPECT_EQ(da->restore_holders, a.restore_holders);
  EXPECT_EQ(da->erasure_k, 0);  // whole copies: no erasure tail is sent
  EXPECT_EQ(Encode(a).size(), Encode(*da).size());
  a.erasure_k = 4;
  a.erasure_m = 2;
  auto de = Decode<AssignReply>(Encode(a));
  ASSERT_OK(de);
  EXPECT_EQ(de->erasure_k, 4);
  EXPECT_EQ(de->erasure_m, 2);
  EXPECT_EQ(Encode(a).size(), Encode(*da).size() + 2);
  a.erasure_k = a.erasure_m = 0;
  // A holder that is not one of the endpoints is refused by name.
  a.restore_holders = {{2}};
  auto bad = Decode<AssignReply>(Encode(a));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("holder 2 is not one of the 2 endpoints"), std::string::npos) << bad.status();
}

// The bytes on the wire are the protocol's: varints, zigzag for signed
// values, length-prefixed strings (docs/protocol.md).
TEST(Messages, BytesAreTheProtocols) {
  EXPECT_EQ(Hex(Encode(HeartbeatRequest{5, -1})), "0501");
  EXPECT_EQ(Hex(Encode(StepWaitRequest{2, 300, 1000})), "04d804e807");
  EXPECT_EQ(Hex(Encode(LeaveRequest{300})), "ac02");
  EXPECT_EQ(Hex(Encode(JoinRequest{"j", "h", 1, 0, -1, false, "m"})),
            "016a0168010001000"
            "16d");
  EXPECT_EQ(Hex(Encode(StopPush{1, "x"})), "020178");
  EXPECT_EQ(Hex(EncodeParts({"ab"})), "01026162");
}

// Every message, with every field set (and its optional tails present and
// absent), encodes to the bytes it always has: the codecs are written once
// from each message's fields, and these pin what that produces.
std::vector<std::pair<std::string, std::string>> EveryMessageEncoded() {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("hello", Encode(HelloReply{"nonce", "ckpt-coordinator/2", 1 << 20, ""}));
  out.emplace_back("hello standby", Encode(HelloReply{"n", "id", 7, "10.0.0.1:5"}));
  JoinRequest j{"job", "host", 8, 42, -3, true, "mac"};
  out.emplace_back("join", Encode(j));
  j.peer_endpoint = "10.0.0.2:9";
  j.peer_domain = "rack-1";
  j.held = {HeldStep{12, 3, {0, 5, 300}}, HeldStep{-1, 0, {}}};
  out.emplace_back("join memory", Encode(j));
  AssignReply refused;
  refused.status = AssignReply::kRefused;
  refused.message = "no";
  out.emplace_back("assign refused", Encode(refused));
  AssignReply a;
  a.message = "ok";
  a.member_id = 9;
  a.generation = 4;
  a.first_rank = 2;
  a.local_ranks = 2;
  a.world_size = 8;
  a.members = 4;
  a.restore_step = 120;
  a.heartbeat_ms = 500;
  out.emplace_back("assign", Encode(a));
  a.restore_level = 1;
  a.memory_note = "note";
  a.endpoints = {"e0", "e1"};
  a.holders = {{1}, {0, 1}};
  a.restore_holders = {{}, {0}};
  out.emplace_back("assign memory", Encode(a));
  out.emplace_back("heartbeat", Encode(HeartbeatRequest{300, -2}));
  out.emplace_back("heartbeat ack", Encode(HeartbeatAck{5, true, "gone"}));
  out.emplace_back("stop", Encode(StopPush{6, "why"}));
  out.emplace_back("collective", Encode(CollectiveRequest{3, 1, 77, CollectiveOp::kScatter, 9000, "part"}));
  VoteRequest v;
  v.generation = 2;
  v.rank = 3;
  v.step = 400;
  v.vote.ok = false;
  v.vote.error = "disk";
  v.vote.stall_s = 0.25;
  v.vote.write_s = 1.5;
  v.vote.bytes = 1 << 30;
  v.vote.replicas = {ReplicaHash{"k", 0x0102030405060708ull, true}};
  out.emplace_back("vote", Encode(v));
  v.level = 1;
  out.emplace_back("vote memory", Encode(v));
  out.emplace_back("step wait", Encode(StepWaitRequest{1, 2, 3, 0}));
  out.emplace_back("step wait memory", Encode(StepWaitRequest{1, 2, 3, 1}));
  out.emplace_back("published", Encode(PublishedRequest{1, 2, false, "m", 0}));
  out.emplace_back("published memory", Encode(PublishedRequest{1, 2, true, "", 1}));
  out.emplace_back("leave", Encode(LeaveRequest{12}));
  out.emplace_back("status", Encode(StatusRequest{true}));
  return out;
}

TEST(Messages, EveryMessagesBytesArePinned) {
  const std::map<std::string, std::string> pinned = {
      {"hello", "056e6f6e636512636b70742d636f6f7264696e61746f722f32808040"},
      {"hello standby", "016e026964070a31302e302e302e313a35"},
      {"join", "036a6f6204686f7374082a0501036d6163"},
      {"join memory", "036a6f6204686f7374082a0501036d61630a31302e302e302e323a39067261636b2d31021806030005ac02010000"},
      {"assign refused", "01026e6f"},
      {"assign", "00026f6b090802020804f001f4030000000000"},
      {"assign memory", "00026f6b090802020804f001f40301046e6f74650202653002653102010102000102000100"},
      {"heartbeat", "ac0203"},
      {"heartbeat ack", "0a0104676f6e65"},
      {"stop", "0c03776879"},
      {"collective", "06014d01a8460470617274"},
      {"vote", "0403a00600046469736b000000000000d03f000000000000f83f808080800801016b080706050403020101"},
      {"vote memory", "0403a00600046469736b000000000000d03f000000000000f83f808080800801016b08070605040302010101"},
      {"step wait", "020403"},
      {"step wait memory", "02040301"},
      {"published", "020400016d"},
      {"published memory", "0204010001"},
      {"leave", "0c"},
      {"status", "01"},
  };
  for (const auto& [name, bytes] : EveryMessageEncoded()) {
    auto it = pinned.find(name);
    ASSERT_NE(it, pinned.end()) << name << " " << Hex(bytes);
    EXPECT_EQ(Hex(bytes), it->second) << name;
  }
}

// The kinds are generated from one list (protocol.h): their numbers and
// names are the protocol's, and a kind past the list is refused by the frame
// parser.
TEST(Messages, EveryKindsNumberAndNameArePinned) {
  const std::vector<std::string> names = {
      "hello", "join",   "assign",   "heartbeat", "heartbeat-ack", "stop",    "collective", "collective-result",
      "vote",  "decide", "decision", "published", "await-outcome", "outcome", "status",     "status-reply",
      "ack",   "error",  "leave"};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(MsgTypeName(static_cast<MsgType>(i + 1)), names[i]) << "kind " << i + 1;
  }
  EXPECT_STREQ(MsgTypeName(static_cast<MsgType>(names.size() + 1)), "unknown");
  EXPECT_EQ(kCoordinatorProtocol.last_kind, names.size());
  std::string frame = EncodeFrame(MsgType::kLeave, 1, "");
  ASSERT_OK(ParseHeader(reinterpret_cast<const uint8_t*>(frame.data()), 1024).status());
  StoreLE16(frame.data() + 6, static_cast<uint16_t>(names.size() + 1));
  auto past = ParseHeader(reinterpret_cast<const uint8_t*>(frame.data()), 1024);
  EXPECT_FALSE(past.ok()) << "a kind past the list";
}

TEST(Messages, ShortOrOversizedPayloadsAreRefusedByName) {
  const std::string vote = Encode(VoteRequest{});
  for (size_t cut = 0; cut < vote.size(); ++cut) {
    auto v = Decode<VoteRequest>(std::string_view(vote).substr(0, cut));
    ASSERT_FALSE(v.ok()) << cut;
    EXPECT_TRUE(absl::IsDataLoss(v.status()));
    EXPECT_NE(v.status().message().find("vote: truncated"), std::string::npos) << v.status();
  }
  JoinRequest j;
  j.host = std::string(kMaxJoinFieldBytes + 1, 'h');
  auto big = Decode<JoinRequest>(Encode(j));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("exceeds the limit 4096"), std::string::npos) << big.status();
  CollectiveRequest c;
  c.part = std::string(100, 'p');
  EXPECT_FALSE(Decode<CollectiveRequest>(Encode(c), 99).ok());
  ByteWriter w;
  w.SVar(0);
  w.Var(0);
  w.Var(0);
  w.U8(9);
  w.Var(0);
  w.Str("");
  auto unknown = Decode<CollectiveRequest>(w.Take(), 16);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown collective 9"), std::string::npos) << unknown.status();
  absl::Status decision;
  EXPECT_TRUE(absl::IsDataLoss(DecodeDecision("", &decision)));
}

}  // namespace
}  // namespace ckpt::coord
