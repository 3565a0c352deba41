// The memory level's figures (docs/performance.md "Memory level"): a
// restore from a peer's memory against a restore from the disk and against
// the loopback TCP ceiling iperf3 measures in the same run, and the cost of
// a memory save (its stall, and the time until its copy is in a peer's
// memory) against a durable one, and how much a training loop running while
// each save finishes in the background slows down; the memory level
// erasure coded RS(4+2) over six hosts' memories: its save, and a restore
// with two pieces of every file missing (the saver's host and one more
// lost) against the restore from a replica, side by side in each run; and
// the Reed-Solomon coder alone on the state's data file.
//
//   peer_bench --dir DIR [--size 1G] [--runs 3] [--json FILE]
//
// One process plays the hosts' peer memories (the saver's, its replica
// holder's, a replacement's that holds nothing, and six that hold the
// erasure-coded pieces), each with its own server: every byte of a restore
// "from peers" crosses loopback TCP, as iperf3's do; so the figures are
// loopback's, not a network's. The restore from disk reads O_DIRECT (no
// page cache).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "ckpt/peer.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "peer/erasure.h"
#include "peer/peer_client.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::bench {
namespace {

// Stands in for the trainer between saves: an optimizer-like pass over
// 64 MiB of f32 (w = 0.999 w + 0.001 g), bound by memory bandwidth as an
// optimizer step is, on the calling thread.
class TrainingLoop {
 public:
  TrainingLoop() : w_(kElems, 1.0f), g_(kElems, 0.5f) {}
  // Passes per second while `busy()` holds, for at least `min_s`.
  template <typename F>
  double RateWhile(F busy, double min_s) {
    const double t0 = NowSeconds();
    int64_t passes = 0;
    double t = t0;
    while (busy() || t - t0 < min_s) {
      for (size_t i = 0; i < kElems; ++i) w_[i] = 0.999f * w_[i] + 0.001f * g_[i];
      ++passes;
      t = NowSeconds();
    }
    sink_ = sink_ + w_[static_cast<size_t>(passes) % kElems];
    return static_cast<double>(passes) / (t - t0);
  }

 private:
  static constexpr size_t kElems = size_t{16} << 20;
  std::vector<float> w_, g_;
  volatile float sink_ = 0;
};

std::shared_ptr<PeerMemory> Memory(const std::string& domain, int64_t budget) {
  PeerMemoryOptions o;
  o.token = "peer-bench-token-0123456789abcdef";
  o.domain = domain;
  o.budget_bytes = budget;
  auto m = PeerMemory::Start(o);
  if (!m.ok()) {
    std::fprintf(stderr, "peer memory: %s\n", std::string(m.status().message()).c_str());
    std::exit(1);
  }
  return *m;
}

// The figures of every run, and what the runs share: the state, three
// processes' peer memories (this one's, a holder's, and a replacement
// host's that holds nothing).
class PeerBench {
 public:
  PeerBench(std::string dir, int64_t size, bool times) : dir_(std::move(dir)), times_(times) {
    state_ = MakeState(size, DType::kF32);
    const int64_t budget = 3 * state_.bytes + (int64_t{256} << 20);
    own_ = Memory("host-a", budget);
    holder_ = Memory("host-b", budget);
    fresh_ = Memory("host-c", budget);
    for (int h = 0; h < 6; ++h) coded_.push_back(Memory("rs-host-" + std::to_string(h), state_.bytes));
    for (size_t i = 0; i < state_.specs.size(); ++i) {
      (void)source_.AddTensor(state_.specs[i], state_.data[i].data());
      (void)target_.AddTensor(state_.specs[i], state_.out[i].data());
    }
  }
  int64_t bytes() const { return state_.bytes; }
  std::string root() const { return dir_ + "/peer-bench-root"; }

  absl::Status Run(int64_t run) {
    std::filesystem::remove_all(root());
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Saves(run));
    CKPT_RETURN_IF_ERROR(Restores(run, *cp));
    CKPT_RETURN_IF_ERROR(Coded(run));
    cp.reset();
    own_->DropStepsExcept(-1);
    holder_->DropStepsExcept(-1);
    for (auto& m : coded_) m->DropStepsExcept(-1);
    return absl::OkStatus();
  }

  // The ceilings after every run, not between them: with iperf3 and fio run
  // between runs, every later run's memory save and restore from a peer took
  // several times longer (docs/performance.md, "Figures behind the code").
  void Ceilings(int64_t runs) {
    const std::string data_file = root() + "/step-0000000003/rank-000000.ckd";
    const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(data_file)) / (4 << 20) * (4 << 20);
    for (int64_t run = 0; run < runs; ++run) {
      disk_ceiling_.Add(DiskCeiling(data_file, file_bytes, false));
      iperf_.Add(IperfLoopback(dir_));
    }
    Erasure(data_file, runs);
    std::filesystem::remove_all(root());
  }

  // The Reed-Solomon coder of erasure-coded copies (peer/erasure.h) on a
  // data file of the state, on one core: encode into pieces reused from the
  // last encode (as a memory holding the last step's pieces would), decode
  // with two data pieces lost, and a copy of the file into memory already
  // touched (the ceiling), each the median of `runs`; and the bytes the
  // pieces take against the file's.
  void Erasure(const std::string& data_file, int64_t runs) {
    std::string file(std::filesystem::file_size(data_file), '\0');
    {
      FILE* f = std::fopen(data_file.c_str(), "rb");
      if (f == nullptr || std::fread(file.data(), 1, file.size(), f) != file.size()) std::abort();
      std::fclose(f);
    }
    auto coder = peer::ErasureCoder::Create(4, 2);
    if (!coder.ok()) std::abort();
    const absl::Span<const std::byte> bytes(reinterpret_cast<const std::byte*>(file.data()), file.size());
    std::vector<std::string> pieces;
    (*coder)->Encode(bytes, &pieces);
    std::string copy(file.size(), '\1');
    for (int64_t run = 0; run < runs; ++run) {
      double t0 = NowSeconds();
      std::memcpy(copy.data(), file.data(), file.size());
      ec_copy_.Add(static_cast<double>(file.size()) / (NowSeconds() - t0));
      t0 = NowSeconds();
      (*coder)->Encode(bytes, &pieces);
      ec_encode_.Add(static_cast<double>(file.size()) / (NowSeconds() - t0));
      std::vector<const std::string*> given;
      for (const std::string& p : pieces) given.push_back(&p);
      given[0] = given[1] = nullptr;
      t0 = NowSeconds();
      auto back = (*coder)->Decode(given);
      ec_decode_.Add(static_cast<double>(file.size()) / (NowSeconds() - t0));
      if (!back.ok() || *back != file) {
        std::fprintf(stderr, "peer_bench: the erasure decode did not give the file back\n");
        std::abort();
      }
    }
    uint64_t held = 0;
    for (const std::string& p : pieces) held += p.size();
    ec_memory_x_ = static_cast<double>(held) / static_cast<double>(file.size());
    ec_file_bytes_ = static_cast<int64_t>(file.size());
  }

  void Print(int64_t runs) {
    const double gb = 1e9, bytes = static_cast<double>(state_.bytes);
    const double peer_bw = bytes / from_peer_.Median(), own_bw = bytes / from_own_.Median(),
                 disk_bw = bytes / from_disk_.Median(), ip = iperf_.Median(), dc = disk_ceiling_.Median();
    std::printf("\nrestore of %s (medians of %lld):\n", tools::HumanBytes(bytes).c_str(), static_cast<long long>(runs));
    std::printf("  from a peer's memory   %.3f s  %.2f GB/s  %s\n", from_peer_.Median(), peer_bw / gb,
                ip > 0 ? (std::to_string(peer_bw / ip).substr(0, 4) + "x iperf3 loopback (" +
                          std::to_string(ip / gb).substr(0, 4) + " GB/s)")
                             .c_str()
                       : "(iperf3 not installed: no ceiling)");
    std::printf(
        "  from its own memory    %.3f s  %.2f GB/s (the loader's own ceiling: checks and copies, no network)\n",
        from_own_.Median(), own_bw / gb);
    std::printf("  data plane alone (one file read whole, frames checked, nothing decoded) %.2f GB/s  %.2fx iperf3\n",
                raw_get_.Median() / gb, ip > 0 ? raw_get_.Median() / ip : -1.0);
    std::printf("  from the disk (O_DIRECT) %.3f s  %.2f GB/s  %.2fx the disk's read ceiling (%.2f GB/s)\n",
                from_disk_.Median(), disk_bw / gb, disk_bw / dc, dc / gb);
    std::printf(
        "save: memory level stall %.3f s, committed (copy in a peer's memory) %.3f s (the first, mapping its "
        "memory afresh: %.3f s); durable stall %.3f s, committed %.3f s\n",
        mem_stall_.Median(), runs > 1 ? mem_commit_.Median() : -1.0, mem_commit_cold_.Median(), dur_stall_.Median(),
        dur_commit_.Median());
    std::printf(
        "training (an optimizer-like pass over 64 MiB, %.1f passes/s alone) while the save finishes in the "
        "background: %.2fx its speed alone during a memory save, %.2fx during a durable save\n",
        train_alone_.Median(), train_memory_.Median(), train_durable_.Median());
    std::printf(
        "memory level erasure coded RS(4+2) over 6 hosts: save committed (all 6 pieces placed) %.3f s against "
        "%.3f s for one replica; memory held for the step %.3fx the state (one replica and the own copy: "
        "%.3fx); restore on a replacement host with pieces 0 and 1 of every file lost %.3f s = %.2fx the "
        "restore from a replica (%.3f s), %s rebuilt from parity\n",
        ec_commit_.Median(), runs > 1 ? mem_commit_.Median() : mem_commit_cold_.Median(), ec_held_x_, replica_held_x_,
        ec_restore_.Median(), ec_restore_.Median() / from_peer_.Median(), from_peer_.Median(),
        tools::HumanBytes(static_cast<double>(ec_rebuilt_)).c_str());
    std::printf(
        "erasure coding RS(4+2) of a %s data file, the coder alone on one core: encode %.2f GB/s, decode with 2 "
        "data pieces lost %.2f GB/s, against a copy of the file %.2f GB/s; pieces hold %.3fx the file's bytes "
        "(two whole replicas and the own copy: 3x)\n",
        tools::HumanBytes(static_cast<double>(ec_file_bytes_)).c_str(), ec_encode_.Median() / gb,
        ec_decode_.Median() / gb, ec_copy_.Median() / gb, ec_memory_x_);
  }

  std::string Json(int64_t runs) {
    const double bytes = static_cast<double>(state_.bytes), ip = iperf_.Median();
    JsonWriter j;
    j.BeginObject()
        .Field("bytes", state_.bytes)
        .Field("runs", runs)
        .Field("restore_peer_s", from_peer_.Median())
        .Field("restore_own_s", from_own_.Median())
        .Field("restore_disk_s", from_disk_.Median())
        .Field("iperf3_bytes_per_s", ip)
        .Field("disk_read_ceiling_bytes_per_s", disk_ceiling_.Median())
        .Field("peer_vs_iperf3", ip > 0 ? bytes / from_peer_.Median() / ip : -1.0)
        .Field("data_plane_bytes_per_s", raw_get_.Median())
        .Field("data_plane_vs_iperf3", ip > 0 ? raw_get_.Median() / ip : -1.0)
        .Field("memory_stall_s", mem_stall_.Median())
        .Field("memory_commit_s", runs > 1 ? mem_commit_.Median() : -1.0)
        .Field("memory_commit_first_s", mem_commit_cold_.Median())
        .Field("durable_stall_s", dur_stall_.Median())
        .Field("durable_commit_s", dur_commit_.Median())
        .Field("training_passes_per_s", train_alone_.Median())
        .Field("training_during_memory_save_x", train_memory_.Median())
        .Field("training_during_durable_save_x", train_durable_.Median())
        .Field("erasure_commit_s", ec_commit_.Median())
        .Field("erasure_held_x", ec_held_x_)
        .Field("replica_held_x", replica_held_x_)
        .Field("erasure_restore_2_lost_s", ec_restore_.Median())
        .Field("erasure_restore_vs_replica_x", ec_restore_.Median() / from_peer_.Median())
        .Field("erasure_rebuilt_bytes", ec_rebuilt_)
        .Field("erasure_file_bytes", ec_file_bytes_)
        .Field("erasure_encode_bytes_per_s", ec_encode_.Median())
        .Field("erasure_decode_2_lost_bytes_per_s", ec_decode_.Median())
        .Field("erasure_copy_bytes_per_s", ec_copy_.Median())
        .Field("erasure_memory_x", ec_memory_x_)
        .EndObject();
    return j.str();
  }

 private:
  // Every restored byte must be the saved one; the target is cleared after.
  void Check(const char* what) {
    for (size_t i = 0; i < state_.specs.size(); ++i) {
      if (state_.out[i] != state_.data[i]) {
        std::fprintf(stderr, "%s returned different bytes for %s\n", what, state_.specs[i].fqn.c_str());
        std::exit(1);
      }
      std::fill(state_.out[i].begin(), state_.out[i].end(), std::byte{0});
    }
  }

  // A memory save (step 2) and a durable one (step 3), each with training
  // passes run while it finishes in the background, as a fraction of the
  // passes alone.
  absl::StatusOr<std::unique_ptr<Checkpointer>> Saves(int64_t run) {
    PeerRoute route;
    route.replicas = {holder_->endpoint()};
    auto memory_storage = OpenPeerStorage(own_, route);
    CheckpointerOptions o;
    o.uri = root();
    o.memory_storage = *memory_storage;
    o.engine_options.staging_bytes = static_cast<size_t>(state_.bytes) + (64 << 20);
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
    // Warm-up: maps the arena.
    CKPT_ASSIGN_OR_RETURN(SaveHandle warm, cp->Save(1, source_));
    CKPT_RETURN_IF_ERROR(warm.Wait());
    SaveOptions mem;
    mem.level = SaveLevel::kMemory;
    double t0 = NowSeconds();
    CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(2, source_, mem));
    mem_stall_.Add(NowSeconds() - t0);
    const double during_memory = training_.RateWhile([&] { return !h.Done(); }, 0);
    CKPT_RETURN_IF_ERROR(Annotate(h.Wait(), "memory save"));
    // The first memory save maps its memory afresh (on this kind of host,
    // page faults cost seconds per GiB); later ones reuse what the dropped
    // steps held, as a training job's saves do.
    (run == 0 ? mem_commit_cold_ : mem_commit_).Add(NowSeconds() - t0);
    t0 = NowSeconds();
    CKPT_ASSIGN_OR_RETURN(SaveHandle d, cp->Save(3, source_));
    dur_stall_.Add(NowSeconds() - t0);
    const double during_durable = training_.RateWhile([&] { return !d.Done(); }, 0);
    CKPT_RETURN_IF_ERROR(Annotate(d.Wait(), "durable save"));
    dur_commit_.Add(NowSeconds() - t0);
    const double alone = training_.RateWhile([] { return false; }, 1.0);
    train_alone_.Add(alone);
    train_memory_.Add(during_memory / alone);
    train_durable_.Add(during_durable / alone);
    return cp;
  }

  // Restores: from the holder's memory over TCP (a replacement host that
  // holds nothing), the data plane alone, from this process's own memory,
  // from the disk.
  absl::Status Restores(int64_t run, Checkpointer& cp) {
    PeerRoute elsewhere;
    elsewhere.holders = [&](int64_t, int) { return std::vector<std::string>{holder_->endpoint()}; };
    auto remote = OpenPeerStorage(fresh_, elsewhere);
    LoadOptions lo;
    lo.level = SaveLevel::kMemory;
    CheckpointerOptions ro;
    ro.uri = root();
    ro.memory_storage = *remote;
    ro.gc_on_open = false;
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> reader, Checkpointer::Open(ro));
    double t0 = NowSeconds();
    auto lp = reader->Load(target_, 2, lo);
    if (!lp.ok()) return Annotate(lp.status(), "restore from a peer");
    from_peer_.Add(NowSeconds() - t0);
    if (times_) std::printf("restore from a peer: monotonic %.6f,%.6f\n", t0, NowSeconds());
    std::printf("run %lld: memory save committed in %.3f s, restore from a peer %.3f s, RSS %s, held %s + %s + %s\n",
                static_cast<long long>(run), (run == 0 ? mem_commit_cold_ : mem_commit_).v.back(), from_peer_.v.back(),
                tools::HumanBytes(static_cast<double>(tools::ResidentBytes())).c_str(), Held(*own_).c_str(),
                Held(*holder_).c_str(), Held(*fresh_).c_str());
    std::fflush(stdout);
    Check("the restore from a peer");
    if (lp->bytes_from_peers < state_.bytes) {
      return absl::DataLossError(
          StrCat("the restore read ", lp->bytes_from_peers, " bytes from peers, less than the state"));
    }
    CKPT_RETURN_IF_ERROR(DataPlane());
    t0 = NowSeconds();
    CKPT_RETURN_IF_ERROR(cp.Load(target_, 2, lo).status());
    from_own_.Add(NowSeconds() - t0);
    Check("the restore from its own memory");
    t0 = NowSeconds();
    CKPT_RETURN_IF_ERROR(cp.Load(target_, 3).status());
    from_disk_.Add(NowSeconds() - t0);
    Check("the restore from disk");
    return absl::OkStatus();
  }

  // The memory level erasure coded RS(4+2): a memory save (step 4) from
  // host 0 with piece j placed in host j's memory, then a restore on the
  // replacement host with hosts 0 and 1 lost (data pieces 0 and 1 of every
  // file rebuilt from parity), timed against the replica restore of this
  // run.
  absl::Status Coded(int64_t run) {
    std::vector<std::string> eps;
    for (auto& m : coded_) eps.push_back(m->endpoint());
    PeerRoute route;
    route.erasure_k = 4;
    route.erasure_m = 2;
    route.replicas.assign(eps.begin() + 1, eps.end());
    route.holders = [eps](int64_t, int) { return eps; };
    CKPT_ASSIGN_OR_RETURN(auto storage, OpenPeerStorage(coded_[0], route));
    CheckpointerOptions o;
    o.uri = root();
    o.memory_storage = storage;
    o.gc_on_open = false;
    o.engine_options.staging_bytes = static_cast<size_t>(state_.bytes) + (64 << 20);
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
    SaveOptions mem;
    mem.level = SaveLevel::kMemory;
    double t0 = NowSeconds();
    CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(4, source_, mem));
    CKPT_RETURN_IF_ERROR(Annotate(h.Wait(), "erasure-coded memory save"));
    ec_commit_.Add(NowSeconds() - t0);
    int64_t held = 0;
    for (auto& m : coded_) held += m->Stats().held_bytes;
    ec_held_x_ = static_cast<double>(held) / static_cast<double>(state_.bytes);
    replica_held_x_ =
        static_cast<double>(own_->Stats().held_bytes + holder_->Stats().held_bytes) / static_cast<double>(state_.bytes);
    cp.reset();
    PeerRoute lost;
    lost.holders = [eps](int64_t, int) { return std::vector<std::string>(eps.begin() + 2, eps.end()); };
    CKPT_ASSIGN_OR_RETURN(auto remote, OpenPeerStorage(fresh_, lost));
    CheckpointerOptions ro;
    ro.uri = root();
    ro.memory_storage = remote;
    ro.gc_on_open = false;
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> reader, Checkpointer::Open(ro));
    LoadOptions lo;
    lo.level = SaveLevel::kMemory;
    t0 = NowSeconds();
    auto lp = reader->Load(target_, 4, lo);
    if (!lp.ok()) return Annotate(lp.status(), "restore from erasure-coded pieces");
    ec_restore_.Add(NowSeconds() - t0);
    Check("the restore from erasure-coded pieces");
    if (lp->bytes_rebuilt_from_parity <= 0 || lp->bytes_from_storage != 0) {
      return absl::InternalError(StrCat("the restore with two pieces lost rebuilt ", lp->bytes_rebuilt_from_parity,
                                        " bytes and read ", lp->bytes_from_storage, " from storage"));
    }
    ec_rebuilt_ = lp->bytes_rebuilt_from_parity;
    std::printf("run %lld: erasure-coded memory save committed in %.3f s, restore with 2 pieces lost %.3f s\n",
                static_cast<long long>(run), ec_commit_.v.back(), ec_restore_.v.back());
    std::fflush(stdout);
    return absl::OkStatus();
  }

  // The data plane alone: the whole data file from the holder into a buffer
  // already touched, no decoding (what iperf3 does, plus the frame checksums).
  absl::Status DataPlane() {
    const std::string data_path = "step-0000000002/rank-000000.ckd";
    CKPT_ASSIGN_OR_RETURN(auto c,
                          peer::PeerConnection::Open(holder_->endpoint(), "peer-bench-token-0123456789abcdef", 30));
    CKPT_ASSIGN_OR_RETURN(const uint64_t size, c->Stat(data_path));
    std::vector<std::byte> buf(size, std::byte{1});
    const double t0 = NowSeconds();
    CKPT_RETURN_IF_ERROR(c->Get(data_path, 0, absl::Span<std::byte>(buf)));
    raw_get_.Add(static_cast<double>(size) / (NowSeconds() - t0));
    return absl::OkStatus();
  }

  static std::string Held(PeerMemory& m) {
    return tools::HumanBytes(static_cast<double>(m.Stats().held_bytes + m.Stats().spare_bytes));
  }

  const std::string dir_;
  const bool times_;
  StateBuffers state_;
  std::shared_ptr<PeerMemory> own_, holder_, fresh_;
  std::vector<std::shared_ptr<PeerMemory>> coded_;  // RS(4+2): piece j in coded_[j]
  State source_, target_;
  TrainingLoop training_;
  Samples mem_stall_, mem_commit_, mem_commit_cold_, dur_stall_, dur_commit_, from_peer_, from_own_, from_disk_, iperf_,
      disk_ceiling_, raw_get_, train_alone_, train_memory_, train_durable_, ec_encode_, ec_decode_, ec_copy_,
      ec_commit_, ec_restore_;
  double ec_memory_x_ = 0, ec_held_x_ = 0, replica_held_x_ = 0;
  int64_t ec_rebuilt_ = 0;
  int64_t ec_file_bytes_ = 0;
};

}  // namespace

int Main(int argc, char** argv) {
  std::string dir, json_path;
  int64_t size = int64_t{1} << 30, runs = 3;
  tools::Args args("peer_bench", "--dir DIR [--size 1G] [--runs 3] [--json FILE]",
                   "Restore from a peer's memory vs from the disk vs iperf3 on loopback; memory vs durable save.");
  args.String("dir", &dir, "directory on the disk to compare with (required)");
  args.Size("size", &size, "state size (default 1G)", true);
  args.Int("runs", &runs, "runs per figure; the median is reported (default 3)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  bool times = false;
  args.Switch("times", &times,
              "print when each restore from a peer starts and ends on the monotonic clock (for perf record -k "
              "CLOCK_MONOTONIC, then perf report --time START,END)");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  std::filesystem::create_directories(dir);
  PeerBench bench(dir, size, times);
  std::printf("state: %s of f32 weights; %lld runs\n", tools::HumanBytes(static_cast<double>(bench.bytes())).c_str(),
              static_cast<long long>(runs));
  std::fflush(stdout);
  for (int64_t run = 0; run < runs; ++run) {
    if (absl::Status s = bench.Run(run); !s.ok()) {
      std::fprintf(stderr, "peer_bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  bench.Ceilings(runs);
  bench.Print(runs);
  WriteTextFile(json_path, bench.Json(runs));
  return 0;
}

}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }
