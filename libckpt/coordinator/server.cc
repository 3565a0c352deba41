// The coordinator service (server_impl.h): starting, connections, dispatch.
#include "coordinator/server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/log.h"
#include "ckpt/peer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "coordinator/commit_book.h"
#include "coordinator/membership.h"
#include "coordinator/messages.h"
#include "coordinator/protocol.h"
#include "coordinator/records.h"
#include "coordinator/server_impl.h"
#include "coordinator/session.h"
#include "coordinator/state_log.h"
#include "coordinator/status.h"
#include "peer/erasure.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/descriptors.h"
#include "util/errors.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt {
namespace coord {

CoordinatorImpl::~CoordinatorImpl() {
  asio::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    accept_pause_.cancel();
    tick_.cancel();
    form_timer_.cancel();
    for (auto& w : sessions_) {
      if (auto s = w.lock()) s->Close("coordinator shutting down");
    }
    io_.stop();
  });
  if (thread_.joinable()) thread_.join();
  if (verifier_.joinable()) verifier_.join();
}

absl::Status CoordinatorImpl::Init(std::unique_ptr<StateLog> log) {
  if (options_.state_dir.empty() && options_.store.empty() && !log) {
    return absl::InvalidArgumentError("the coordinator needs a state dir or a store");
  }
  if (options_.token.empty()) return absl::InvalidArgumentError("the coordinator needs a token");
  CKPT_RETURN_IF_ERROR(CheckTokenStrength(options_.token));
  if (options_.handshake_timeout_s <= 0 || options_.idle_timeout_s < 0 || options_.max_unauthenticated < 1) {
    return absl::InvalidArgumentError(
        "the handshake timeout must be positive, the idle timeout not negative and at least one unauthenticated "
        "connection allowed");
  }
  if (options_.memory_erasure_k != 0 || options_.memory_erasure_m != 0) {
    CKPT_RETURN_IF_ERROR(peer::CheckErasureShape(options_.memory_erasure_k, options_.memory_erasure_m));
  }
  idle_timeout_s_ = options_.idle_timeout_s > 0
                        ? options_.idle_timeout_s
                        : std::max(30.0, 4 * options_.heartbeat_s * std::max(1, options_.dead_after));
  LogDescriptorLimit(RaiseDescriptorLimit());
  // It listens before it leads: a standby answers hellos (saying who
  // leads, so workers move on) and status requests.
  const size_t colon = options_.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("--listen wants HOST:PORT, got '", options_.listen, "'"));
  }
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(options_.listen.substr(0, colon), ec);
  if (ec) return absl::InvalidArgumentError(StrCat("--listen: bad address in '", options_.listen, "'"));
  int port = 0;
  try {
    port = std::stoi(options_.listen.substr(colon + 1));
  } catch (...) {
    return absl::InvalidArgumentError(StrCat("--listen: bad port in '", options_.listen, "'"));
  }
  tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(StrCat("listening on ", options_.listen, ": ", ec.message()));
  port_ = acceptor_.local_endpoint().port();
  address_ = StrCat(addr.to_string(), ":", port_);
  uint64_t torn = 0;
  if (log) {
    log_ = std::move(log);
  } else if (!options_.store.empty()) {
    CKPT_ASSIGN_OR_RETURN(log_, NewEtcdLog(
                                    options_.store, StrCat(ThisProcess(), " ", address_),
                                    [this](const std::string& line) { Log(line); }, options_.wait_for_store));
  } else {
    if (options_.state_dir.empty()) return absl::InvalidArgumentError("the coordinator needs a state dir or a store");
    log_ = NewJournalLog(options_.state_dir);
  }
  Accept();
  thread_ = std::thread([this] { io_.run(); });
  // Replay runs on this thread while the io thread serves only hellos and
  // status as a standby; the state is handed over by the post below.
  absl::Status s = log_->Open([this](std::string_view r) { return Replay(r); }, &torn);
  if (!s.ok()) return s;
  if (torn > 0) Log(StrCat(log_->Describe(), ": cut a torn tail of ", torn, " bytes"));
  book_.Trim(256, /*only_decided=*/false);
  if (membership_.running()) {
    // Members get the usual grace to reconnect after a restart (from
    // when it starts serving, below).
    Log(StrCat("resuming generation ", membership_.generation(), " (", membership_.member_count(), " members, world ",
               membership_.world(), ") from the journal"));
  }
  std::promise<void> serving;
  asio::post(io_, [&] {
    serving_ = true;
    if (membership_.running()) membership_.HeardFromAll(NowSeconds());
    Tick();
    serving.set_value();
  });
  serving.get_future().wait();
  Log(StrCat("serving on ", address_, ", state in ", log_->Describe()));
  return absl::OkStatus();
}

std::string CoordinatorImpl::StatusJson() {
  std::promise<std::string> p;
  auto f = p.get_future();
  asio::post(io_, [&] { p.set_value(BuildStatus()); });
  return f.get();
}

void CoordinatorImpl::Log(const std::string& line) {
  std::lock_guard<std::mutex> lock(log_mu_);
  if (options_.log) {
    options_.log(line);
  } else {
    LogMessage(LogLevel::kInfo, "coordinator", line);
  }
}

void CoordinatorImpl::Track(const std::shared_ptr<Session>& s) {
  // Closed sessions are swept when the list has doubled since the last
  // sweep: amortised O(1) per connection.
  if (sessions_.size() >= sweep_at_) {
    sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(), [](auto& w) { return w.expired(); }),
                    sessions_.end());
    sweep_at_ = std::max<size_t>(64, 2 * sessions_.size());
  }
  sessions_.push_back(s);
  s->unauthenticated = unauthenticated_.insert(unauthenticated_.end(), s);
  while (unauthenticated_.size() > static_cast<size_t>(std::max(1, options_.max_unauthenticated))) {
    auto oldest = unauthenticated_.front().lock();
    if (!oldest) {
      unauthenticated_.pop_front();
      continue;
    }
    oldest->Drop(DropReason::kUnauthenticatedLimit,
                 StrCat(options_.max_unauthenticated, " connections are waiting to join; the oldest is dropped"));
  }
}

size_t CoordinatorImpl::JoinedConnections() const {
  size_t n = 0;
  for (const auto& w : sessions_) {
    auto s = w.lock();
    if (s && !s->closed() && s->member_id != 0) ++n;
  }
  return n;
}

void CoordinatorImpl::LogThrottled(size_t kind, const std::string& line) {
  Throttle& t = throttles_[kind];
  const double now = NowSeconds();
  if (t.last > 0 && now - t.last < 60) {
    ++t.suppressed;
    return;
  }
  Log(t.suppressed > 0 ? StrCat(line, " (and ", t.suppressed, " more like it in the last minute)") : line);
  t.last = now;
  t.suppressed = 0;
}

// From protocol.h's list.
struct CoordinatorImpl::Route {
  Admits admits = Admits::kMember;
  absl::Status (CoordinatorImpl::*handle)(const std::shared_ptr<Session>&, const FrameHeader&,
                                          std::string_view) = nullptr;
};

CoordinatorImpl::Route CoordinatorImpl::RouteOf(MsgType type) {
  switch (type) {
#define CKPT_ROUTE(name, number, text, admits) \
  case MsgType::k##name:                       \
    return {Admits::admits, &CoordinatorImpl::On##name};
    CKPT_COORDINATOR_REQUESTS(CKPT_ROUTE)
#undef CKPT_ROUTE
    default:
      return {};
  }
}

absl::Status CoordinatorImpl::Handle(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                     std::string_view payload) {
  const Route route = RouteOf(h.type);
  if (route.handle == nullptr) {
    return absl::InvalidArgumentError(StrCat("a coordinator does not take ", MsgTypeName(h.type), " frames"));
  }
  if (route.admits != Admits::kAnyone && !serving_) {
    // A standby acts on nothing: the client goes to the next address.
    s->ReplyError(h.request_id, absl::UnavailableError(StrCat("the coordinator replica at ", address_,
                                                              " stands by (leader: ", StandbyOf(), ")")));
    s->CloseAfterWrite();
    return absl::OkStatus();
  }
  if (route.admits == Admits::kMember && s->member_id == 0) {
    return absl::PermissionDeniedError(StrCat(MsgTypeName(h.type), " before a successful join"));
  }
  return (this->*route.handle)(s, h, payload);
}

void CoordinatorImpl::OnAcceptOutOfDescriptors(const boost::system::error_code& ec) {
  if (auto oldest = unauthenticated_.empty() ? nullptr : unauthenticated_.front().lock()) {
    oldest->Drop(DropReason::kDescriptors, StrCat("out of descriptors (", ec.message(),
                                                  "): the oldest connection that has not joined makes room"));
    Accept();
    return;
  }
  if (reserve_.RefuseOne(acceptor_.native_handle())) {
    CountDrop(DropReason::kDescriptors,
              StrCat("out of descriptors (", ec.message(), "): refused a connection; every open one has joined"));
  }
  accept_pause_.expires_after(std::chrono::milliseconds(100));
  accept_pause_.async_wait([this](const boost::system::error_code& e) {
    if (!e) Accept();
  });
}

void CoordinatorImpl::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (OutOfDescriptors(ec.value())) return OnAcceptOutOfDescriptors(ec);
    if (ec) {
      Accept();  // the peer went away before it was accepted
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto s = std::make_shared<Session>(std::move(socket), *this);
    Track(s);
    s->Start();
    Accept();
  });
}

absl::StatusOr<std::unique_ptr<Coordinator>> StartCoordinator(const CoordinatorOptions& options,
                                                              std::unique_ptr<StateLog> log) {
  auto c = std::make_unique<CoordinatorImpl>(options);
  if (absl::Status s = c->Init(std::move(log)); !s.ok()) return s;
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace coord

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  return coord::StartCoordinator(options, nullptr);
}

}  // namespace ckpt
