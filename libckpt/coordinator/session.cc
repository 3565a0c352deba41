#include "coordinator/session.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "ckpt/limits.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::coord {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {}  // namespace

const char* DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kBadFrame:
      return "bad_frame";
    case DropReason::kHandshakeTimeout:
      return "handshake_timeout";
    case DropReason::kIdleTimeout:
      return "idle_timeout";
    case DropReason::kUnauthenticatedLimit:
      return "unauthenticated_limit";
    case DropReason::kDescriptors:
      return "descriptors";
    case DropReason::kHttpTooLarge:
      return "http_too_large";
    case DropReason::kRefusedJoin:
      return "refused_join";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

Session::Session(tcp::socket socket, SessionOwner& owner)
    : socket_(std::move(socket)), owner_(owner), deadline_(socket_.get_executor()) {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("?") : StrCat(ep.address().to_string(), ":", ep.port());
  nonce_ = RandomBytes(kNonceSize);
  opened_ = last_frame_ = NowSeconds();
}

void Session::ReplyError(uint64_t request_id, const absl::Status& s) {
  ByteWriter w;
  WriteStatus(w, s);
  Reply(request_id, MsgType::kError, w.Take());
}

void Session::Start() {
  ArmDeadline(opened_ + owner_.handshake_timeout());
  ReadNext();
}

void Session::ReadNext() {
  // The first four bytes tell a frame ("CKCO") from an HTTP request ("GET ").
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_, 4), [this, self](const boost::system::error_code& ec, size_t) {
    if (ec || closed_) return Close("");
    if (!authenticated && std::memcmp(header_, "GET ", 4) == 0) return ServeHttp();
    ReadHeaderRest();
  });
}

void Session::ReadHeaderRest() {
  auto self = shared_from_this();
  asio::async_read(
      socket_, asio::buffer(header_ + 4, kHeaderSize - 4), [this, self](const boost::system::error_code& ec, size_t) {
        if (ec || closed_) return Close("");
        // Before the join only small frames exist.
        const uint32_t limit = !authenticated ? std::min(kMaxPreAuthPayload, owner_.max_frame()) : owner_.max_frame();
        auto h = ParseHeader(header_, limit);
        if (!h.ok()) {
          std::string why(h.status().message());
          if (!authenticated && absl::StrContains(why, "exceeds the limit")) {
            StrAppend(&why, " (before a join)");
          }
          return Drop(DropReason::kBadFrame, why);
        }
        payload_.clear();
        ReadPayload(*h, 0);
      });
}

void Session::ReadPayload(FrameHeader h, size_t have) {
  if (have == h.length) return OnFrame(h);
  // Grow by what has arrived (at least 64 KiB): a header that declares a
  // large payload and sends nothing costs nothing.
  const size_t chunk = std::min<size_t>(h.length - have, std::max<size_t>(have, 64u << 10));
  payload_.resize(have + chunk);
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(payload_.data() + have, chunk),
                   [this, self, h, have](const boost::system::error_code& ec, size_t n) {
                     if (ec || closed_) return Close("");
                     ReadPayload(h, have + n);
                   });
}

void Session::OnFrame(const FrameHeader& h) {
  last_frame_ = NowSeconds();
  auto self = shared_from_this();
  absl::Status s = CheckPayload(h, payload_);
  if (s.ok()) s = owner_.Handle(self, h, payload_);
  if (payload_.capacity() > (1u << 20)) {
    std::string().swap(payload_);  // do not keep a large frame's buffer
  }
  if (!s.ok()) {
    ReplyError(h.request_id, s);
    return Drop(DropReason::kBadFrame, std::string(s.message()));
  }
  if (closed_ || closed_after_write_) return;
  // Before the join, a peer that does not read its replies stops being read.
  if (!authenticated && !outbox_.empty()) {
    read_paused_ = true;
    return;
  }
  ReadNext();
}

void Session::ServeHttp() {
  auto self = shared_from_this();
  asio::async_read_until(socket_, http_, "\r\n\r\n", [this, self](const boost::system::error_code& ec, size_t) {
    if (closed_) return;
    std::string status = "200 OK", type = "text/plain; version=0.0.4", body;
    if (ec == asio::error::not_found) {
      // The buffer is full (kMaxHttpRequest) and the headers have not ended.
      owner_.CountDrop(DropReason::kHttpTooLarge, StrCat("an HTTP request from ", peer_, " exceeds ", kMaxHttpRequest,
                                                         " bytes without ending its headers"));
      status = "431 Request Header Fields Too Large";
      body = StrCat("request headers are limited to ", kMaxHttpRequest, " bytes\n");
    } else if (ec) {
      return Close("");
    } else {
      std::string req(asio::buffers_begin(http_.data()), asio::buffers_end(http_.data()));
      const size_t space = req.find(' ');
      const std::string path = req.substr(0, space);
      if (space == std::string::npos || req.compare(space, 6, " HTTP/") != 0) {
        status = "400 Bad Request";
        body = "expected GET /metrics HTTP/1.x or GET /status HTTP/1.x\n";
      } else if (path == "/metrics") {
        body = owner_.Metrics();
      } else if (path == "/status") {
        body = owner_.StatusOnIoThread();
        type = "application/json";
      } else {
        status = "404 Not Found";
        body = "try /metrics or /status\n";
      }
    }
    http_.consume(http_.size());
    Send(StrCat("HTTP/1.0 ", status, "\r\nContent-Type: ", type, "\r\nContent-Length: ", body.size(),
                "\r\nConnection: close\r\n\r\n", body));
    CloseAfterWrite();
  });
}

void Session::Send(std::string frame) {
  if (closed_) return;
  outbox_.push_back(std::move(frame));
  if (outbox_.size() == 1) WriteNext();
}

void Session::CloseAfterWrite() {
  closed_after_write_ = true;
  if (outbox_.empty()) Close("");
}

void Session::WriteNext() {
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(outbox_.front()), [this, self](const boost::system::error_code& ec, size_t) {
    if (ec || closed_) return Close("");
    outbox_.pop_front();
    if (!outbox_.empty()) {
      WriteNext();
    } else if (closed_after_write_) {
      Close("");
    } else if (read_paused_) {
      read_paused_ = false;
      ReadNext();
    }
  });
}

void Session::ArmDeadline(double at) {
  auto self = shared_from_this();
  deadline_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(0.0, at - NowSeconds()))));
  deadline_.async_wait([this, self](const boost::system::error_code& ec) {
    if (!ec && !closed_) OnDeadline();
  });
}

void Session::OnDeadline() {
  const double now = NowSeconds();
  if (!authenticated) {
    const double due = opened_ + owner_.handshake_timeout();
    if (now < due) return ArmDeadline(due);
    return Drop(DropReason::kHandshakeTimeout,
                StrCat("no join within ", owner_.handshake_timeout(), " s of connecting"));
  }
  const double due = last_frame_ + owner_.idle_timeout();
  if (now < due) return ArmDeadline(due);
  if (owner_.AwaitingAssignment(*this)) return ArmDeadline(now + owner_.idle_timeout());
  Drop(DropReason::kIdleTimeout, StrCat("member ", member_id, " sent nothing for ", now - last_frame_, " s"));
}

void Session::Drop(DropReason reason, const std::string& why) {
  if (closed_) return;
  owner_.CountDrop(reason, StrCat("dropped the connection from ", peer_, ": ", why));
  Close("");
}

void Session::Close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  if (!why.empty()) owner_.Log(StrCat("closing the connection from ", peer_, ": ", why));
  boost::system::error_code ec;
  deadline_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  owner_.Untrack(*this);
}

}  // namespace ckpt::coord
