// The model of benchmarks/restore_fanout, shared by its loopback run
// (restore_fanout_bench.cc) and its run across network namespaces
// (restore_fanout_cluster.cc): f32 tensors split over tp by columns and
// replicated over every other mesh dimension, every element a function of
// its place.
#ifndef CKPT_BENCHMARKS_RESTORE_FANOUT_H_
#define CKPT_BENCHMARKS_RESTORE_FANOUT_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/mesh.h"
#include "ckpt/state.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::bench {

inline constexpr int64_t kCols = 4096;
/// Tensors of kCols columns, split over tp by columns and replicated over
// every other mesh dimension, adding up to `size` bytes of f32.
inline std::vector<TensorLayout> Model(int64_t size) {
  const int64_t rows_total = std::max<int64_t>(1, size / (kCols * 4));
  const int64_t per = std::min<int64_t>(rows_total, 4096);
  std::vector<TensorLayout> out;
  for (int64_t done = 0, i = 0; done < rows_total; done += per, ++i) {
    TensorLayout l;
    l.spec = TensorSpec{StrCat("layers.", i, ".w"), DType::kF32, {std::min(per, rows_total - done), kCols}};
    l.placements = {Placement::Replicate(), Placement::Shard(1)};
    out.push_back(std::move(l));
  }
  return out;
}

inline uint32_t Value(size_t tensor, int64_t row, int64_t col) {
  uint64_t x = (static_cast<uint64_t>(tensor) << 40) ^ (static_cast<uint64_t>(row) << 16) ^ static_cast<uint64_t>(col);
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(x >> 32);
}

// A rank's boxes of the model: filled from Value, or zeroed to load into.
struct RankState {
  std::vector<std::vector<uint32_t>> data;
  std::vector<Box> boxes;
  State state;
};

inline absl::Status Build(const std::vector<TensorLayout>& model, const Mesh& mesh, int rank, bool fill,
                          RankState* rs) {
  CKPT_RETURN_IF_ERROR(rs->state.SetMesh(mesh, rank));
  rs->data.resize(model.size());
  for (size_t t = 0; t < model.size(); ++t) {
    CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, RankBox(model[t], mesh, rank));
    rs->boxes.push_back(*box);
    std::vector<uint32_t>& d = rs->data[t];
    d.assign(static_cast<size_t>(box->Volume()), 0);
    if (fill) {
      for (int64_t r = 0; r < box->sizes[0]; ++r) {
        for (int64_t c = 0; c < box->sizes[1]; ++c) {
          d[static_cast<size_t>(r * box->sizes[1] + c)] = Value(t, box->offsets[0] + r, box->offsets[1] + c);
        }
      }
    }
    CKPT_RETURN_IF_ERROR(rs->state.AddLayout(model[t], d.data()));
  }
  return absl::OkStatus();
}

inline int64_t Mismatches(const RankState& rs) {
  int64_t bad = 0;
  for (size_t t = 0; t < rs.data.size(); ++t) {
    const Box& b = rs.boxes[t];
    for (int64_t r = 0; r < b.sizes[0]; ++r) {
      for (int64_t c = 0; c < b.sizes[1]; ++c) {
        bad += rs.data[t][static_cast<size_t>(r * b.sizes[1] + c)] != Value(t, b.offsets[0] + r, b.offsets[1] + c);
      }
    }
  }
  return bad;
}

/// Runs fn(rank) on one thread per rank; the first error.
inline absl::Status OnRanks(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = fn(r); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!results[static_cast<size_t>(r)].ok()) return Annotate(results[static_cast<size_t>(r)], StrCat("rank ", r));
  }
  return absl::OkStatus();
}

/// Step 1 of the model, saved to `root` by the 2 ranks of `one` (dp=1 x
/// tp=2), threads of this process.
inline absl::Status SaveOneReplica(const std::string& root, const std::vector<TensorLayout>& model, const Mesh& one) {
  auto comms = CreateLocalCommunicators(2);
  return OnRanks(2, [&](int r) -> absl::Status {
    CheckpointerOptions o;
    o.uri = root;
    o.rank = r;
    o.world_size = 2;
    o.mesh = one;
    o.communicator = comms[static_cast<size_t>(r)];
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
    RankState rs;
    CKPT_RETURN_IF_ERROR(Build(model, one, r, true, &rs));
    CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(1, rs.state));
    return h.Wait();
  });
}

/// The run across network namespaces (--cluster); `self` is this program.
struct ClusterRun {
  std::string dir, self;
  int64_t size = 0;
  std::string storage_rate = "1gbit", host_rate = "4gbit";
  bool json = false;
};
int ClusterMain(const ClusterRun& run);
/// One rank of it, as a process on its host (--as-rank ...).
int RankMain(int argc, char** argv);

}  // namespace ckpt::bench

#endif  // CKPT_BENCHMARKS_RESTORE_FANOUT_H_
