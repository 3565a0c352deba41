#include "storage/adapters/faulty/faulty_storage.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <map>
#include <thread>

#include "absl/strings/str_split.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

class FaultyStorage::Writer : public WritableFile {
 public:
  Writer(FaultyStorage* owner, std::unique_ptr<WritableFile> base, bool hold)
      : owner_(owner), base_(std::move(base)), hold_(hold), epoch_(owner->crash_epoch_.load()) {}

  void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
    owner_->Delay();
    if (const auto until = owner_->DeviceDone(data.size())) {
      // Completes when the simulated device is done with it, not before.
      {
        std::lock_guard<std::mutex> lock(delayed_mu_);
        ++delayed_;
      }
      done = [this, until = *until, done = std::move(done)](absl::Status st) mutable {
        owner_->At(until, [this, st = std::move(st), done = std::move(done)]() mutable {
          std::move(done)(std::move(st));
          // Notified under the lock: the writer may be destroyed as soon as
          // the count reaches zero and the lock is free.
          std::lock_guard<std::mutex> lock(delayed_mu_);
          --delayed_;
          delayed_cv_.notify_all();
        });
      };
    }
    if (absl::Status op = owner_->OpFault("write", base_->path(), true); !op.ok()) {
      std::move(done)(op);
      return;
    }
    if (hold_ && owner_->crash_epoch_.load() != epoch_) {
      std::move(done)(Crashed());
      return;
    }
    bool short_write = false;
    absl::Status fault = owner_->WriteFault(base_->path(), offset, data.size(), &short_write);
    if (!fault.ok() && !short_write) {
      std::move(done)(fault);
      return;
    }
    if (short_write) {
      // Store a prefix (keeping the base's alignment), then report the fault.
      const size_t a = std::max<size_t>(1, base_->alignment());
      const size_t half = data.size() / 2 / a * a;
      if (half == 0 || hold_) {
        if (hold_) Hold(offset, data.first(half));
        std::move(done)(fault);
        return;
      }
      base_->WriteAsync(offset, data.first(half),
                        [fault, done = std::move(done)](absl::Status) mutable { std::move(done)(fault); });
      return;
    }
    if (hold_) {
      Hold(offset, data);
      std::move(done)(absl::OkStatus());
      return;
    }
    base_->WriteAsync(offset, data, std::move(done));
  }

  absl::Status Drain() override {
    absl::Status s = base_->Drain();
    std::unique_lock<std::mutex> lock(delayed_mu_);
    delayed_cv_.wait(lock, [&] { return delayed_ == 0; });
    return s;
  }

  ~Writer() override {
    std::unique_lock<std::mutex> lock(delayed_mu_);
    delayed_cv_.wait(lock, [&] { return delayed_ == 0; });
  }

  void Reserve(uint64_t bytes) override { base_->Reserve(bytes); }

  absl::Status Finish(uint64_t final_size) override {
    CKPT_RETURN_IF_ERROR(owner_->OpFault("finish", base_->path(), true));
    if (hold_) {
      if (owner_->crash_epoch_.load() != epoch_) return Crashed();
      // The held writes reach the base now, then it makes them durable.
      std::map<uint64_t, std::string> held;
      {
        std::lock_guard<std::mutex> lock(mu_);
        held.swap(held_);
      }
      for (const auto& [off, bytes] : held) {
        base_->WriteAsync(off,
                          absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
                          [](absl::Status) {});
      }
      CKPT_RETURN_IF_ERROR(base_->Drain());
    }
    return base_->Finish(final_size);
  }

  size_t alignment() const override { return hold_ ? 1 : base_->alignment(); }
  const std::string& path() const override { return base_->path(); }

 private:
  void Hold(uint64_t offset, absl::Span<const std::byte> data) {
    std::lock_guard<std::mutex> lock(mu_);
    held_[offset].assign(reinterpret_cast<const char*>(data.data()), data.size());
  }
  absl::Status Crashed() const {
    return absl::UnavailableError(
        StrCat("writes to ", base_->path(), " were lost in a simulated crash before they were durable"));
  }
  FaultyStorage* owner_;
  std::unique_ptr<WritableFile> base_;
  bool hold_;
  uint64_t epoch_;
  std::mutex mu_;
  std::map<uint64_t, std::string> held_;
  // Throttled writes whose completion waits on the timer thread.
  std::mutex delayed_mu_;
  std::condition_variable delayed_cv_;
  int64_t delayed_ = 0;
};

class FaultyStorage::Reader : public ReadableFile {
 public:
  Reader(FaultyStorage* owner, std::unique_ptr<ReadableFile> base) : owner_(owner), base_(std::move(base)) {}
  uint64_t size() const override { return base_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override {
    owner_->Delay();
    CKPT_RETURN_IF_ERROR(owner_->OpFault("read", base_->path(), false));
    const auto until = owner_->LinkDone(dst.size());
    absl::Status st = base_->ReadAt(offset, dst);
    if (st.ok()) MaybeFlip(dst);
    if (until) std::this_thread::sleep_until(*until);
    return st;
  }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    owner_->Delay();
    if (absl::Status op = owner_->OpFault("read", base_->path(), false); !op.ok()) {
      std::move(done)(op);
      return;
    }
    const auto until = owner_->LinkDone(dst.size());
    base_->ReadAsync(offset, dst, [this, dst, until, done = std::move(done)](absl::Status st) mutable {
      if (st.ok()) MaybeFlip(dst);
      if (until && std::chrono::steady_clock::now() < *until) {
        // Delivered when the link would have carried it.
        owner_->At(*until, [done = std::move(done), st = std::move(st)]() mutable { std::move(done)(st); });
        return;
      }
      std::move(done)(st);
    });
  }
  size_t direct_alignment() const override { return base_->direct_alignment(); }
  const std::string& path() const override { return base_->path(); }

 private:
  void MaybeFlip(absl::Span<std::byte> dst) {
    const FaultPlan plan = owner_->Plan();
    if (plan.flip_read_every <= 0 || dst.empty() || !owner_->Affects(base_->path())) return;
    if ((owner_->reads_.fetch_add(1) + 1) % plan.flip_read_every != 0) return;
    dst[dst.size() / 2] ^= std::byte{0x10};
    owner_->faults_.fetch_add(1);
  }
  FaultyStorage* owner_;
  std::unique_ptr<ReadableFile> base_;
};

FaultyStorage::FaultyStorage(std::shared_ptr<Storage> base, FaultPlan plan, std::string uri)
    : ForwardingStorage(std::move(base)), uri_(std::move(uri)), plan_(std::move(plan)) {}

StorageCaps FaultyStorage::caps() const {
  StorageCaps c = ForwardingStorage::caps();
  c.engine = StrCat("faulty(", c.engine, ")");
  return c;
}

FaultPlan FaultyStorage::Plan() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_;
}

void FaultyStorage::SetPlan(FaultPlan plan) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = std::move(plan);
  written_ = 0;
  writes_ = 0;
  reads_ = 0;
  ops_ = 0;
  failing_ops_ = 0;
}

absl::Status FaultyStorage::OutageFault(std::string_view path) {
  const FaultPlan plan = Plan();
  if (plan.outage_file.empty() || ::access(plan.outage_file.c_str(), F_OK) != 0) return absl::OkStatus();
  faults_.fetch_add(1);
  return absl::UnavailableError(
      StrCat(path, ": the storage is down (an injected outage, while ", plan.outage_file, " exists)"));
}

absl::Status FaultyStorage::OpFault(std::string_view kind, std::string_view path, bool mutating) {
  CKPT_RETURN_IF_ERROR(OutageFault(path));
  const FaultPlan plan = Plan();
  if (!plan.match.empty() && path.find(plan.match) == std::string_view::npos) return absl::OkStatus();
  if (mutating && ops_.fetch_add(1) + 1 == plan.kill_at_op) ::kill(::getpid(), SIGKILL);
  if (plan.fail_on.count(std::string(kind)) == 0) return absl::OkStatus();
  if (failing_ops_.fetch_add(1) + 1 < plan.fail_after) return absl::OkStatus();
  faults_.fetch_add(1);
  return ErrnoStatus(plan.fail_errno, StrCat(kind, " of ", path, " (injected)"));
}

void FaultyStorage::Crash() { crash_epoch_.fetch_add(1); }

bool FaultyStorage::Affects(std::string_view path) const {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_.match.empty() || path.find(plan_.match) != std::string_view::npos;
}

std::optional<std::chrono::steady_clock::time_point> FaultyStorage::TakeTurn(
    int64_t bandwidth, std::chrono::steady_clock::time_point* free_at, size_t bytes) {
  if (bandwidth <= 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (*free_at < now) *free_at = now;
  *free_at += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / static_cast<double>(bandwidth)));
  return *free_at;
}

std::optional<std::chrono::steady_clock::time_point> FaultyStorage::DeviceDone(size_t bytes) {
  return TakeTurn(Plan().write_bandwidth, &device_free_, bytes);
}

std::optional<std::chrono::steady_clock::time_point> FaultyStorage::LinkDone(size_t bytes) {
  return TakeTurn(Plan().read_bandwidth, &link_free_, bytes);
}

// The timer thread outlives nothing it needs: it holds this state, and runs
// what is left at once when the storage goes away.
struct FaultyStorage::Timer {
  std::mutex mu;
  std::condition_variable cv;
  std::multimap<std::chrono::steady_clock::time_point, absl::AnyInvocable<void() &&>> due;
  bool stop = false;

  static void Run(std::shared_ptr<Timer> t) {
    std::unique_lock<std::mutex> lock(t->mu);
    while (true) {
      if (t->due.empty()) {
        if (t->stop) return;
        t->cv.wait(lock);
        continue;
      }
      auto first = t->due.begin();
      if (!t->stop && std::chrono::steady_clock::now() < first->first) {
        t->cv.wait_until(lock, first->first);
        continue;
      }
      absl::AnyInvocable<void()&&> fn = std::move(first->second);
      t->due.erase(first);
      lock.unlock();
      std::move(fn)();
      fn = nullptr;  // what it holds goes before the lock is taken again
      lock.lock();
    }
  }
};

void FaultyStorage::At(std::chrono::steady_clock::time_point when, absl::AnyInvocable<void() &&> fn) {
  std::shared_ptr<Timer> t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (timer_ == nullptr) {
      timer_ = std::make_shared<Timer>();
      std::thread(Timer::Run, timer_).detach();
    }
    t = timer_;
  }
  {
    std::lock_guard<std::mutex> lock(t->mu);
    t->due.emplace(when, std::move(fn));
  }
  t->cv.notify_all();
}

FaultyStorage::~FaultyStorage() {
  if (timer_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(timer_->mu);
    timer_->stop = true;
  }
  timer_->cv.notify_all();
}

void FaultyStorage::Delay() const {
  const double s = Plan().latency_s;
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

absl::Status FaultyStorage::WriteFault(std::string_view path, uint64_t offset, size_t len, bool* short_write) {
  *short_write = false;
  if (!Affects(path)) return absl::OkStatus();
  const FaultPlan plan = Plan();
  const int64_t before = written_.fetch_add(static_cast<int64_t>(len));
  const int64_t nth = writes_.fetch_add(1) + 1;
  auto where = StrCat("write of ", len, " bytes at offset ", offset, " in ", path, " (injected)");
  if (plan.enospc_after >= 0 && before + static_cast<int64_t>(len) > plan.enospc_after) {
    faults_.fetch_add(1);
    return ErrnoStatus(ENOSPC, where);
  }
  if (plan.eio_after >= 0 && before + static_cast<int64_t>(len) > plan.eio_after) {
    faults_.fetch_add(1);
    return ErrnoStatus(EIO, where);
  }
  if (plan.short_write_every > 0 && nth % plan.short_write_every == 0) {
    faults_.fetch_add(1);
    *short_write = true;
    return absl::DataLossError(StrCat("short ", where, ": only ", len / 2, " bytes were stored"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultyStorage::OpenWritable(std::string_view path,
                                                                          const WriteOptions& options) {
  CKPT_RETURN_IF_ERROR(OutageFault(path));
  const bool hold = Plan().crash_mode;
  WriteOptions o = options;
  if (hold) o.direct = false;  // held copies are not aligned
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> base, ForwardingStorage::OpenWritable(path, o));
  return std::unique_ptr<WritableFile>(new Writer(this, std::move(base), hold));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> FaultyStorage::OpenReadable(std::string_view path) {
  CKPT_RETURN_IF_ERROR(OutageFault(path));
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> base, ForwardingStorage::OpenReadable(path));
  return std::unique_ptr<ReadableFile>(new Reader(this, std::move(base)));
}

absl::StatusOr<std::string> FaultyStorage::GetAll(std::string_view path) {
  Delay();
  CKPT_RETURN_IF_ERROR(OpFault("read", path, false));
  return ForwardingStorage::GetAll(path);
}

absl::Status FaultyStorage::PutFault(std::string_view path, size_t bytes) {
  Delay();
  CKPT_RETURN_IF_ERROR(OpFault("put", path, true));
  bool short_write = false;
  return WriteFault(path, 0, bytes, &short_write);  // atomic: on a fault nothing of it lands
}

absl::Status FaultyStorage::PutAtomic(std::string_view path, absl::Span<const std::byte> data) {
  CKPT_RETURN_IF_ERROR(PutFault(path, data.size()));
  return ForwardingStorage::PutAtomic(path, data);
}

absl::Status FaultyStorage::PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) {
  CKPT_RETURN_IF_ERROR(PutFault(path, data.size()));
  return ForwardingStorage::PutIfAbsent(path, data);
}

absl::StatusOr<std::vector<DirEntry>> FaultyStorage::List(std::string_view dir) {
  CKPT_RETURN_IF_ERROR(OpFault("list", dir, false));
  return ForwardingStorage::List(dir);
}

absl::StatusOr<uint64_t> FaultyStorage::FileSize(std::string_view path) {
  CKPT_RETURN_IF_ERROR(OutageFault(path));
  return ForwardingStorage::FileSize(path);
}

absl::Status FaultyStorage::Remove(std::string_view path) {
  CKPT_RETURN_IF_ERROR(OpFault("remove", path, true));
  return ForwardingStorage::Remove(path);
}

absl::Status FaultyStorage::RemoveAll(std::string_view dir) {
  CKPT_RETURN_IF_ERROR(OpFault("remove", dir, true));
  return ForwardingStorage::RemoveAll(dir);
}

absl::Status FaultyStorage::SyncDir(std::string_view dir) {
  CKPT_RETURN_IF_ERROR(OpFault("sync_dir", dir, true));
  return ForwardingStorage::SyncDir(dir);
}

absl::StatusOr<std::shared_ptr<Storage>> OpenFaultyStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  if (parsed.location.empty()) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri,
                                             "': faulty:// needs the storage to wrap, "
                                             "e.g. faulty:///data/ckpt?fault.enospc_after=64M"));
  }
  FaultPlan plan;
  std::string inner_query;
  for (const auto& [k, v] : parsed.params) {
    if (!k.starts_with("fault.")) {
      inner_query += StrCat(inner_query.empty() ? "?" : "&", EncodeUriValue(k), "=", EncodeUriValue(v));
    }
  }
  CKPT_ASSIGN_OR_RETURN(plan.enospc_after, parsed.Bytes("fault.enospc_after", -1));
  CKPT_ASSIGN_OR_RETURN(plan.eio_after, parsed.Bytes("fault.eio_after", -1));
  CKPT_ASSIGN_OR_RETURN(plan.short_write_every, parsed.Int("fault.short_write_every", 0));
  CKPT_ASSIGN_OR_RETURN(plan.latency_s, parsed.Seconds("fault.latency", 0));
  CKPT_ASSIGN_OR_RETURN(plan.write_bandwidth, parsed.Bytes("fault.write_bandwidth", 0));
  CKPT_ASSIGN_OR_RETURN(plan.read_bandwidth, parsed.Bytes("fault.read_bandwidth", 0));
  CKPT_ASSIGN_OR_RETURN(plan.flip_read_every, parsed.Int("fault.flip_read_every", 0));
  CKPT_ASSIGN_OR_RETURN(plan.crash_mode, parsed.Bool("fault.crash", false));
  plan.match = parsed.Str("fault.match", "");
  plan.outage_file = parsed.Str("fault.outage_file", "");
  CKPT_ASSIGN_OR_RETURN(plan.fail_after, parsed.Int("fault.fail_after", 1));
  CKPT_ASSIGN_OR_RETURN(plan.kill_at_op, parsed.Int("fault.kill_at_op", 0));
  const std::vector<std::string> kinds = absl::StrSplit(parsed.Str("fault.fail_on", ""), ',', absl::SkipEmpty());
  for (const std::string& kind : kinds) {
    static const char* kKinds[] = {"write", "finish", "put", "read", "list", "remove", "sync_dir"};
    if (std::find(std::begin(kKinds), std::end(kKinds), kind) == std::end(kKinds)) {
      return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': fault.fail_on: unknown operation '", kind,
                                               "' (write, finish, put, read, list, remove, sync_dir)"));
    }
    plan.fail_on.insert(kind);
  }
  const std::string err = parsed.Str("fault.errno", "EIO");
  if (err == "EIO") {
    plan.fail_errno = EIO;
  } else if (err == "ENOSPC") {
    plan.fail_errno = ENOSPC;
  } else {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': fault.errno must be EIO or ENOSPC"));
  }
  for (const auto& [k, v] : parsed.params) {
    static const char* kKnown[] = {"fault.enospc_after",   "fault.eio_after",       "fault.short_write_every",
                                   "fault.latency",        "fault.flip_read_every", "fault.crash",
                                   "fault.match",          "fault.fail_on",         "fault.errno",
                                   "fault.fail_after",     "fault.kill_at_op",      "fault.write_bandwidth",
                                   "fault.read_bandwidth", "fault.outage_file"};
    if (k.starts_with("fault.") && std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) {
      return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': unknown fault option '", k, "'"));
    }
  }
  if (plan.short_write_every < 0 || plan.flip_read_every < 0) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': fault counts must be >= 0"));
  }
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> base, OpenStorage(parsed.location + inner_query));
  return std::shared_ptr<Storage>(new FaultyStorage(std::move(base), std::move(plan), std::string(uri)));
}

CKPT_STORAGE_BACKEND(faulty) {
  r.Add({"faulty", "", "wraps another backend and injects errors, latency, bit flips and crashes",
         BackendCaps("faulty", false, true, true)},
        OpenFaultyStorage);
}

}  // namespace ckpt
