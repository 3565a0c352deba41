// PeerMemory: the store and the Boost.Asio server that lets peers place and
// read copies in it (a few io threads; a connection's frames are handled in
// order, on its strand; bulk bytes pass through a small buffer per
// direction, peer_wire.h kBounceBytes).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "ckpt/log.h"
#include "ckpt/peer.h"
#include "peer/peer_memory.h"
#include "peer/peer_store.h"
#include "peer/peer_wire.h"
#include "util/background.h"
#include "util/bytes.h"
#include "util/descriptors.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::peer {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

class PeerMemoryImpl;
class Connection;

// Replies queued on one connection before it stops reading its requests:
// a peer that sends and never reads is held to this, not to memory.
constexpr size_t kMaxQueuedReplies = 16;

// The connections that have not proved the token yet, oldest first, shared
// by the accepting strand and every connection's strand. An entry leaves the
// list only through its own connection (Untrack, on authenticating or
// closing, or its destructor), so no iterator held by a connection goes
// stale; the ones chosen to go are marked and closed on their own strands.
class Unauthenticated {
 public:
  using List = std::list<std::weak_ptr<Connection>>;
  // Adds `c` at `*at`; the oldest ones to drop so that at most `limit` stay.
  std::vector<std::shared_ptr<Connection>> Add(const std::shared_ptr<Connection>& c, List::iterator* at, size_t limit);
  void Remove(List::iterator at) {
    std::lock_guard<std::mutex> lock(mu_);
    list_.erase(at);
  }
  // The oldest one not already being dropped, marked so (null: none).
  std::shared_ptr<Connection> TakeOldest();

 private:
  std::mutex mu_;
  List list_;
};

// One peer's connection. Lives while a read or write of it is pending.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, PeerMemoryImpl& owner);
  void Start();
  tcp::socket::executor_type executor() { return socket_.get_executor(); }
  // Closes it on its own strand (from any thread).
  void Drop(const std::string& why) {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this(), why] { self->Close(why); });
  }
  // Its place among the unauthenticated (set once, on the accepting strand,
  // before Start).
  void Tracked(Unauthenticated::List::iterator at) {
    tracked_ = true;
    tracked_at_ = at;
  }
  // Chosen to make room (set under the list's lock, once).
  bool MarkDropping() { return !dropping_.exchange(true); }
  bool dropping() const { return dropping_.load(); }
  ~Connection() { Untrack(); }

 private:
  struct Out {
    std::string head;       // header, or a whole small frame
    PeerStore::Bytes file;  // data served from a stored file
    uint64_t offset = 0, length = 0;
    uint64_t sent = 0;  // of the file's bytes
    bool head_sent = false;
  };

  void ReadHeader();
  void ReadPayload(const Header& h);
  void ReadPutData(const Header& h);
  void ReadPutPiece(const Header& h, char* dst, uint64_t done);
  void OnFrame(const Header& h);
  absl::Status Handle(const Header& h);
  void Queue(Out out);
  void WriteNext();
  void ReplyOk(std::string payload = {});
  void ReplyError(const absl::Status& s);
  void Close(const std::string& why);
  void AbandonUpload();
  void Untrack();
  // Reads the next request, unless too many replies wait to go out.
  void ReadNextUnlessBacklogged();

  tcp::socket socket_;
  PeerMemoryImpl& owner_;
  asio::steady_timer auth_deadline_;
  std::string peer_, nonce_;
  bool authenticated_ = false, closed_ = false, close_after_write_ = false;
  uint8_t header_[kHeaderSize];
  std::string payload_;
  std::deque<Out> outbox_;
  bool writing_ = false;
  bool read_paused_ = false;  // a request is not read until replies drain
  bool tracked_ = false;      // on the unauthenticated list, at tracked_at_
  Unauthenticated::List::iterator tracked_at_;
  std::atomic<bool> dropping_{false};
  // kBounceBytes each: what is being received of a put, what is being sent
  // of a file.
  std::unique_ptr<char[]> in_bounce_, out_bounce_;
  Xxh3Stream piece_sum_;
  // The file being placed (put-begin .. put-end).
  std::string upload_path_;
  std::shared_ptr<std::string> upload_;
  std::shared_ptr<PeerStore::PieceSums> upload_sums_;  // of the pieces received whole
  uint64_t upload_reserved_ = 0;
  int64_t upload_generation_ = 0;
  absl::Status upload_error_;
};

class PeerMemoryImpl final : public PeerMemory, public std::enable_shared_from_this<PeerMemoryImpl> {
 public:
  explicit PeerMemoryImpl(const PeerMemoryOptions& o)
      : options_(o), store_(std::make_shared<PeerStore>(o.budget_bytes)), acceptor_(io_) {}

  ~PeerMemoryImpl() override {
    io_.stop();
    for (auto& t : threads_) t.join();
  }

  absl::Status Listen() {
    const size_t colon = options_.listen.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("peer memory listen address wants HOST:PORT, got '", options_.listen, "'"));
    }
    std::string host = options_.listen.substr(0, colon);
    const std::string port = options_.listen.substr(colon + 1);
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(host, port, tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(StrCat("peer memory: cannot resolve ", options_.listen, ": ", ec.message()));
    }
    const tcp::endpoint ep = *results.begin();
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return absl::UnavailableError(StrCat("peer memory: cannot listen on ", options_.listen, ": ", ec.message()));
    const tcp::endpoint bound = acceptor_.local_endpoint();
    std::string addr = bound.address().to_string();
    if (bound.address().is_v6()) addr = StrCat("[", addr, "]");
    endpoint_ = StrCat(addr, ":", bound.port());
    if (options_.domain.empty()) {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      options_.domain = name;
    }
    Accept();
    // Several threads serve the connections (each connection's handlers on
    // its own strand): one thread checksumming and sending every peer's
    // reads was the bottleneck of a restore.
    const unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
    // Receiving other ranks' copies happens while this process trains: the
    // threads yield to the trainer's as ckpt's other background threads do.
    for (unsigned i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        LowerThisThread(BackgroundPriority{});
        io_.run();
      });
    }
    return absl::OkStatus();
  }

  std::string endpoint() const override { return endpoint_; }
  std::string domain() const override { return options_.domain; }
  std::vector<PeerHolding> Holdings() const override { return store_->Holdings(); }
  void DropStepsBefore(int64_t step) override { store_->DropStepsBefore(step); }
  void DropStepsExcept(int64_t step) override { store_->DropStepsExcept(step); }
  PeerMemoryStats Stats() const override { return store_->Stats(); }

  Unauthenticated& unauthenticated() { return unauthenticated_; }
  PeerStore& store() { return *store_; }
  std::shared_ptr<PeerStore> store_ptr() { return store_; }
  const PeerMemoryOptions& options() const { return options_; }
  asio::io_context& io() { return io_; }

  void Log(const std::string& line) const {
    if (options_.log) {
      options_.log(line);
    } else {
      LogMessage(LogLevel::kInfo, "peer", StrCat(endpoint_, ": ", line));
    }
  }

 private:
  // One accept at a time: its handler, the pause timer's and the reserve
  // are never run concurrently.
  void Accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ckpt::OutOfDescriptors(ec.value())) return OnOutOfDescriptors(ec);
      if (!ec) {
        auto c = std::make_shared<Connection>(std::move(socket), *this);
        Unauthenticated::List::iterator at;
        auto oldest = unauthenticated_.Add(c, &at, static_cast<size_t>(std::max(1, options_.max_unauthenticated)));
        c->Tracked(at);
        for (const auto& o : oldest) {
          o->Drop(StrCat(options_.max_unauthenticated,
                         " connections are waiting to authenticate; the oldest is "
                         "dropped"));
        }
        // Started on the connection's strand, like every handler of it.
        asio::dispatch(c->executor(), [c] { c->Start(); });
      }
      Accept();
    });
  }

  // Out of descriptors: the oldest connection that has not authenticated
  // makes room; with none, the reserve descriptor is given up to refuse the
  // newcomer, and accepting pauses a little. Never a busy loop.
  // The dropped connection closes on its own strand: accepting waits a
  // moment for its descriptor rather than dropping the next one at once.
  void OnOutOfDescriptors(const boost::system::error_code& ec) {
    auto pause = std::chrono::milliseconds(100);
    if (auto oldest = unauthenticated_.TakeOldest()) {
      oldest->Drop(StrCat("out of descriptors (", ec.message(),
                          "): the oldest connection that has not "
                          "authenticated makes room"));
      pause = std::chrono::milliseconds(5);
    } else {
      if (reserve_.RefuseOne(acceptor_.native_handle())) ++refused_;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_refusal_log_ > std::chrono::seconds(60)) {
        Log(StrCat("out of descriptors (", ec.message(), "): refusing connections; every open one has authenticated (",
                   refused_, " refused so far)"));
        last_refusal_log_ = now;
      }
    }
    accept_pause_.expires_after(pause);
    accept_pause_.async_wait([this](const boost::system::error_code& e) {
      if (!e) Accept();
    });
  }

  PeerMemoryOptions options_;
  std::shared_ptr<PeerStore> store_;
  // Before io_: the connections its handlers still hold when it goes take
  // themselves off this list.
  Unauthenticated unauthenticated_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_pause_{io_};
  DescriptorReserve reserve_;  // of the accepting strand
  uint64_t refused_ = 0;
  std::chrono::steady_clock::time_point last_refusal_log_;
  std::vector<std::thread> threads_;
  std::string endpoint_;
};

std::vector<std::shared_ptr<Connection>> Unauthenticated::Add(const std::shared_ptr<Connection>& c, List::iterator* at,
                                                              size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  *at = list_.insert(list_.end(), c);
  size_t waiting = 0;
  for (const auto& w : list_) {
    auto each = w.lock();
    waiting += each && !each->dropping() ? 1 : 0;
  }
  std::vector<std::shared_ptr<Connection>> drop;
  for (const auto& w : list_) {
    if (waiting <= limit) break;
    auto each = w.lock();
    if (each && each->MarkDropping()) {
      drop.push_back(std::move(each));
      --waiting;
    }
  }
  return drop;
}

std::shared_ptr<Connection> Unauthenticated::TakeOldest() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : list_) {
    auto each = w.lock();
    if (each && each->MarkDropping()) return each;
  }
  return nullptr;
}

Connection::Connection(tcp::socket socket, PeerMemoryImpl& owner)
    : socket_(std::move(socket)), owner_(owner), auth_deadline_(socket_.get_executor()) {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("?") : StrCat(ep.address().to_string(), ":", ep.port());
  nonce_ = wire::Nonce();
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.set_option(asio::socket_base::receive_buffer_size(4 << 20), ec);
  socket_.set_option(asio::socket_base::send_buffer_size(4 << 20), ec);
}

void Connection::Start() {
  auto self = shared_from_this();
  auth_deadline_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(owner_.options().io_timeout_s * 1000)));
  auth_deadline_.async_wait([this, self](const boost::system::error_code& ec) {
    if (!ec && !authenticated_) Close("did not authenticate in time");
  });
  ByteWriter w;
  w.Str(nonce_);
  w.Str(owner_.endpoint());
  w.Str(owner_.domain());
  Queue(Out{Frame(Op::kHello, w.Take())});
  ReadHeader();
}

void Connection::Close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  if (!why.empty()) owner_.Log(StrCat("connection from ", peer_, " closed: ", why));
  Untrack();
  AbandonUpload();
  boost::system::error_code ec;
  auth_deadline_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void Connection::Untrack() {
  if (!tracked_) return;
  tracked_ = false;
  owner_.unauthenticated().Remove(tracked_at_);
}

void Connection::AbandonUpload() {
  if (upload_reserved_ > 0) owner_.store().Release(upload_reserved_);
  upload_reserved_ = 0;
  upload_.reset();
  upload_sums_.reset();
  upload_path_.clear();
  upload_error_ = absl::OkStatus();
}

void Connection::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_, kHeaderSize),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (ec || closed_) return Close("");
                     auto h = ParseHeader(header_, authenticated_ ? kMaxPeerControlPayload : kMaxPreAuthPayload);
                     if (!h.ok()) return Close(StrCat("garbage: ", h.status().message()));
                     if (!authenticated_ && h->op != Op::kAuth) {
                       return Close(StrCat("sent ", OpName(h->op), " before authenticating"));
                     }
                     if (h->op == Op::kPutData) return ReadPutData(*h);
                     ReadPayload(*h);
                   });
}

void Connection::ReadPayload(const Header& h) {
  payload_.resize(h.length);
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(payload_.data(), payload_.size()),
                   [this, self, h](const boost::system::error_code& ec, size_t) {
                     if (ec || closed_) return Close("");
                     OnFrame(h);
                   });
}

void Connection::ReadPutData(const Header& h) {
  if (upload_ == nullptr && upload_error_.ok()) return Close("put-data outside a put");
  if (upload_ != nullptr && (h.arg > upload_->size() || h.length > upload_->size() - h.arg)) {
    return Close(StrCat("put-data at byte offset ", h.arg, " (", h.length, " bytes) past the end of ", upload_path_,
                        " (", upload_->size(), " bytes)"));
  }
  // A refused put still reads its data (and drops it) to stay in step.
  if (in_bounce_ == nullptr) in_bounce_ = std::make_unique<char[]>(kBounceBytes);
  piece_sum_.Reset();
  ReadPutPiece(h, upload_ != nullptr ? upload_->data() + h.arg : nullptr, 0);
}

void Connection::ReadPutPiece(const Header& h, char* dst, uint64_t done) {
  if (done == h.length) {
    if (upload_ != nullptr && upload_error_.ok()) {
      if (piece_sum_.Digest() != h.checksum) {
        upload_error_ = absl::DataLossError(StrCat("checksum mismatch in ", upload_path_, " bytes [", h.arg, ", ",
                                                   h.arg + h.length, ") as received from ", peer_));
      } else {
        upload_sums_->Record(h.arg, h.length, h.checksum);  // reads of a whole piece are answered with it
      }
    }
    owner_.store().CountReceived(h.length);
    return ReadHeader();
  }
  const size_t n = static_cast<size_t>(std::min<uint64_t>(kBounceBytes, h.length - done));
  // Into the file itself where the store keeps it on huge pages (see
  // WriteNext), checksummed while the piece is still in cache; else through
  // the small buffer.
  char* into = dst != nullptr && PeerStore::OnHugePages(upload_->size()) ? dst + done : nullptr;
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(into != nullptr ? into : in_bounce_.get(), n),
                   [this, self, h, dst, done, n, into](const boost::system::error_code& ec, size_t) {
                     if (ec || closed_) return Close("");
                     if (into != nullptr) {
                       piece_sum_.Update(into, n);
                     } else {
                       piece_sum_.Update(in_bounce_.get(), n);
                       if (dst != nullptr) std::memcpy(dst + done, in_bounce_.get(), n);
                     }
                     ReadPutPiece(h, dst, done + n);
                   });
}

void Connection::OnFrame(const Header& h) {
  if (Xxh3(payload_) != h.checksum) {
    return Close(StrCat("checksum mismatch in a ", OpName(h.op), " frame"));
  }
  if (!authenticated_) {
    ByteReader r(payload_, "auth");
    const std::string mac = r.Str(kMacSize);
    if (!r.ok() || !MacEqual(mac, AuthMac(owner_.options().token, nonce_))) {
      ReplyError(absl::PermissionDeniedError("refused: the token does not match this job's"));
      owner_.Log(StrCat("refused ", peer_, ": wrong token"));
      close_after_write_ = true;  // the error goes out, then the socket closes (WriteNext)
      return;
    }
    authenticated_ = true;
    auth_deadline_.cancel();
    Untrack();
    ReplyOk();
    return ReadHeader();
  }
  absl::Status s = Handle(h);
  if (absl::IsInvalidArgument(s)) return Close(std::string(s.message()));  // malformed: stop listening
  if (!s.ok()) ReplyError(s);
  if (payload_.capacity() > (1u << 20)) std::string().swap(payload_);
  ReadNextUnlessBacklogged();
}

void Connection::ReadNextUnlessBacklogged() {
  if (outbox_.size() >= kMaxQueuedReplies) {
    read_paused_ = true;  // WriteNext reads on once the replies drain
    return;
  }
  ReadHeader();
}

// Answers one request. InvalidArgument: the frame was malformed (the caller
// closes the connection); other errors are replied.
absl::Status Connection::Handle(const Header& h) {
  PeerStore& store = owner_.store();
  ByteReader r(payload_, StrCat(OpName(h.op), " from ", peer_));
  auto malformed = [&]() {
    return absl::InvalidArgumentError(StrCat("malformed ", OpName(h.op), ": ", r.status().message()));
  };
  switch (h.op) {
    case Op::kPutBegin: {
      std::string path = r.Str(kMaxPeerPathBytes);
      const uint64_t size = r.Var();
      const int64_t generation = r.SVar();
      if (!r.ok()) return malformed();
      if (path.empty() || path.front() == '/' || path.find("..") != std::string::npos) {
        return absl::InvalidArgumentError(StrCat("bad path '", path, "'"));
      }
      AbandonUpload();
      upload_path_ = std::move(path);
      absl::Status room = store.Reserve(size, upload_path_);
      if (!room.ok()) {
        owner_.Log(StrCat("refused ", upload_path_, " from ", peer_, ": ", room.message()));
        upload_error_ = room;
        return room;
      }
      upload_reserved_ = size;
      upload_generation_ = generation;
      upload_ = store.Buffer(size);
      upload_sums_ = std::make_shared<PeerStore::PieceSums>(size);
      ReplyOk();
      return absl::OkStatus();
    }
    case Op::kPutEnd: {
      const uint64_t sum = r.U64();
      if (!r.ok()) return malformed();
      if (upload_ == nullptr) {
        absl::Status why =
            upload_error_.ok() ? absl::FailedPreconditionError("put-end without put-begin") : upload_error_;
        AbandonUpload();
        return why;
      }
      if (upload_error_.ok() && Xxh3(*upload_) != sum) {
        upload_error_ = absl::DataLossError(
            StrCat("checksum mismatch: ", upload_path_, " as received from ", peer_, " is not what was sent"));
      }
      if (!upload_error_.ok()) {
        absl::Status why = upload_error_;
        owner_.Log(StrCat("refused ", upload_path_, ": ", why.message()));
        AbandonUpload();
        return why;
      }
      store.Insert(upload_path_, std::move(upload_), upload_generation_, std::move(upload_sums_));
      upload_reserved_ = 0;
      AbandonUpload();
      ReplyOk();
      return absl::OkStatus();
    }
    case Op::kGet: {
      const std::string path = r.Str(kMaxPeerPathBytes);
      const uint64_t offset = r.Var(), length = r.Var();
      if (!r.ok()) return malformed();
      if (length > kMaxPeerDataPayload) return absl::InvalidArgumentError(StrCat("get of ", length, " bytes"));
      auto [file, sums] = store.GetWithSums(path);
      if (file == nullptr) return absl::NotFoundError(StrCat(path, ": not in this peer's memory"));
      if (offset > file->size() || length > file->size() - offset) {
        return absl::OutOfRangeError(
            StrCat("truncated: ", path, " has ", file->size(), " bytes, reading ", length, " at byte offset ", offset));
      }
      // A whole piece goes out with the checksum it arrived with: no pass
      // over it here, and memory of this holder that went bad since shows
      // as a mismatch at the reader, which moves to another copy.
      std::optional<uint64_t> sum = sums != nullptr ? sums->Of(offset, length) : std::nullopt;
      Out out;
      out.head.resize(kHeaderSize);
      EncodeHeader(Op::kData, length, offset, sum ? *sum : Xxh3(file->data() + offset, length),
                   reinterpret_cast<uint8_t*>(out.head.data()));
      out.file = std::move(file);
      out.offset = offset;
      out.length = length;
      store.CountServed(length);
      Queue(std::move(out));
      return absl::OkStatus();
    }
    case Op::kStat: {
      const std::string path = r.Str(kMaxPeerPathBytes);
      if (!r.ok()) return malformed();
      PeerStore::Bytes file = store.Get(path);
      if (file == nullptr) return absl::NotFoundError(StrCat(path, ": not in this peer's memory"));
      ByteWriter w;
      w.Var(file->size());
      ReplyOk(w.Take());
      return absl::OkStatus();
    }
    case Op::kList: {
      const std::string dir = r.Str(kMaxPeerPathBytes);
      if (!r.ok()) return malformed();
      CKPT_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, store.List(dir));
      ByteWriter w;
      w.Var(entries.size());
      for (const DirEntry& e : entries) {
        w.Str(e.name);
        w.U8(e.is_dir ? 1 : 0);
      }
      ReplyOk(w.Take());
      return absl::OkStatus();
    }
    case Op::kRemove: {
      const std::string path = r.Str(kMaxPeerPathBytes);
      if (!r.ok()) return malformed();
      if (!store.Remove(path)) return absl::NotFoundError(StrCat(path, ": not in this peer's memory"));
      ReplyOk();
      return absl::OkStatus();
    }
    case Op::kRemoveAll: {
      const std::string dir = r.Str(kMaxPeerPathBytes);
      if (!r.ok()) return malformed();
      if (!dir.empty()) store.RemoveAll(dir);
      ReplyOk();
      return absl::OkStatus();
    }
    case Op::kDropBefore: {
      const int64_t step = r.SVar();
      if (!r.ok()) return malformed();
      store.DropStepsBefore(step);
      ReplyOk();
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(StrCat("a peer does not take ", OpName(h.op), " frames"));
  }
}

void Connection::ReplyOk(std::string payload) { Queue(Out{Frame(Op::kOk, payload)}); }

void Connection::ReplyError(const absl::Status& s) {
  ByteWriter w;
  WriteStatus(w, s);
  Queue(Out{Frame(Op::kError, w.Take())});
}

void Connection::Queue(Out out) {
  outbox_.push_back(std::move(out));
  if (!writing_) WriteNext();
}

void Connection::WriteNext() {
  if (outbox_.empty()) {
    writing_ = false;
    if (close_after_write_) Close("");
    return;
  }
  writing_ = true;
  Out& o = outbox_.front();
  std::vector<asio::const_buffer> bufs;
  if (!o.head_sent) bufs.push_back(asio::buffer(o.head));
  size_t piece = 0;
  if (o.file != nullptr && o.sent < o.length) {
    if (PeerStore::OnHugePages(o.file->size())) {
      // The store keeps such files on huge pages: the kernel copies from
      // them at the rate it copies from a small buffer, so the whole chunk
      // goes in one write (the data plane's ratio to iperf3 rose; docs/performance.md, "Figures behind the code").
      piece = static_cast<size_t>(o.length - o.sent);
      bufs.push_back(asio::buffer(o.file->data() + o.offset + o.sent, piece));
    } else {
      if (out_bounce_ == nullptr) out_bounce_ = std::make_unique<char[]>(kBounceBytes);
      piece = static_cast<size_t>(std::min<uint64_t>(kBounceBytes, o.length - o.sent));
      std::memcpy(out_bounce_.get(), o.file->data() + o.offset + o.sent, piece);
      bufs.push_back(asio::buffer(out_bounce_.get(), piece));
    }
  }
  auto self = shared_from_this();
  asio::async_write(socket_, bufs, [this, self, piece](const boost::system::error_code& ec, size_t) {
    if (ec) {
      outbox_.clear();
      writing_ = false;
      return Close("");
    }
    Out& done = outbox_.front();
    done.head_sent = true;
    done.sent += piece;
    if (done.file == nullptr || done.sent >= done.length) outbox_.pop_front();
    if (read_paused_ && !closed_ && outbox_.size() <= kMaxQueuedReplies / 2) {
      read_paused_ = false;
      ReadHeader();
    }
    WriteNext();
  });
}

}  // namespace

std::shared_ptr<PeerStore> LocalStore(PeerMemory& memory) { return static_cast<PeerMemoryImpl&>(memory).store_ptr(); }

const PeerMemoryOptions& OptionsOf(PeerMemory& memory) { return static_cast<PeerMemoryImpl&>(memory).options(); }

void LogTo(PeerMemory& memory, const std::string& line) { static_cast<PeerMemoryImpl&>(memory).Log(line); }

}  // namespace ckpt::peer

namespace ckpt {

absl::StatusOr<std::shared_ptr<PeerMemory>> PeerMemory::Start(const PeerMemoryOptions& options) {
  if (options.token.size() < 16) {
    return absl::InvalidArgumentError("peer memory: the job's token must be at least 16 bytes");
  }
  if (options.budget_bytes <= 0) return absl::InvalidArgumentError("peer memory: the budget must be positive");
  auto m = std::make_shared<peer::PeerMemoryImpl>(options);
  CKPT_RETURN_IF_ERROR(m->Listen());
  return std::shared_ptr<PeerMemory>(std::move(m));
}

}  // namespace ckpt
