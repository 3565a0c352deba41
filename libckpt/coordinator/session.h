// One connection to the coordinator: reading frames and HTTP requests
// within the limits before and after the join, writing replies in order,
// and the handshake and idle deadlines. What a frame means is the owner's
// (SessionOwner, implemented by the coordinator in server.cc).
#ifndef CKPT_COORDINATOR_SESSION_H_
#define CKPT_COORDINATOR_SESSION_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio.hpp>

#include "absl/status/status.h"
#include "coordinator/protocol.h"

namespace ckpt::coord {

// Why a connection was dropped: a label of
// ckpt_coordinator_dropped_connections_total and a log line at most once a
// minute each.
enum class DropReason : uint8_t {
  kBadFrame,
  kHandshakeTimeout,
  kIdleTimeout,
  kUnauthenticatedLimit,
  kDescriptors,
  kHttpTooLarge,
  kRefusedJoin,
  kCount
};

const char* DropReasonName(DropReason r);

class Session;

// What a session needs of the coordinator that owns it. Every call is made
// on the coordinator's io thread.
class SessionOwner {
 public:
  virtual ~SessionOwner() = default;
  // A whole frame that passed its checksum; an error closes the connection
  // after telling the peer.
  virtual absl::Status Handle(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) = 0;
  virtual void Log(const std::string& line) = 0;
  // Counts a dropped connection and logs it, at most once a minute per reason.
  virtual void CountDrop(DropReason reason, const std::string& line) = 0;
  // The session closed: it no longer counts as unauthenticated.
  virtual void Untrack(Session& s) = 0;
  // The session's member waits for its generation to form (exempt from the idle timeout).
  virtual bool AwaitingAssignment(const Session& s) const = 0;
  virtual double handshake_timeout() const = 0;
  virtual double idle_timeout() const = 0;
  virtual uint32_t max_frame() const = 0;
  // The bodies of GET /metrics and GET /status.
  virtual std::string Metrics() = 0;
  virtual std::string StatusOnIoThread() = 0;
};

// One TCP connection. Until it proves the token in a join it holds at most a
// 32-byte header, a payload of kMaxPreAuthPayload or an HTTP request of
// kMaxHttpRequest, and one reply: the next frame is not read while a reply
// is unsent. It must join (or finish its status or HTTP request) within the
// handshake timeout; once joined it is dropped after the idle timeout
// without a frame. A payload's buffer grows only as its bytes arrive.
// REQUIRES: every method runs on the coordinator's io thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, SessionOwner& owner);
  void Start();
  void Send(std::string frame);
  void Reply(uint64_t request_id, MsgType type, std::string payload) { Send(EncodeFrame(type, request_id, payload)); }
  void ReplyError(uint64_t request_id, const absl::Status& s);
  /// Closes the connection; `why` (if any) is logged once.
  void Close(const std::string& why);
  /// Counts, logs (throttled) and closes.
  void Drop(DropReason reason, const std::string& why);
  /// Closes once everything queued is written.
  void CloseAfterWrite();
  const std::string& peer() const { return peer_; }
  const std::string& nonce() const { return nonce_; }
  bool closed() const { return closed_; }
  double opened() const { return opened_; }
  uint64_t member_id = 0;      // member on this connection (0: none)
  bool authenticated = false;  // proved the token in a join
  /// Position in the coordinator's list of unauthenticated sessions.
  std::optional<std::list<std::weak_ptr<Session>>::iterator> unauthenticated;

 private:
  void ReadNext();
  void ReadHeaderRest();
  void ReadPayload(FrameHeader h, size_t have);
  void OnFrame(const FrameHeader& h);
  void ServeHttp();
  void WriteNext();
  void ArmDeadline(double at);
  void OnDeadline();

  boost::asio::ip::tcp::socket socket_;
  SessionOwner& owner_;
  boost::asio::steady_timer deadline_;
  std::string peer_;
  std::string nonce_;
  double opened_ = 0;
  double last_frame_ = 0;
  uint8_t header_[kHeaderSize];
  std::string payload_;
  boost::asio::streambuf http_{kMaxHttpRequest};
  std::deque<std::string> outbox_;
  bool read_paused_ = false;  // waiting for the outbox to drain
  bool closed_ = false;
  bool closed_after_write_ = false;
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_SESSION_H_
