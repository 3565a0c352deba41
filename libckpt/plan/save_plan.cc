#include "ckpt/plan.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace ckpt {

absl::StatusOr<SavePlan> PlanSave(const std::vector<TensorLayout>& layouts,
                                  const Mesh& mesh) {
  SavePlan plan;
  plan.mesh = mesh;
  const int64_t nranks = mesh.NumRanks();
  plan.by_rank.resize(nranks);
  plan.bytes_by_rank.assign(nranks, 0);

  // Holders of each distinct box, per tensor.
  std::vector<std::vector<int64_t>> holders;
  for (size_t t = 0; t < layouts.size(); ++t) {
    absl::flat_hash_map<std::vector<int64_t>, int64_t> index;
    for (int64_t r = 0; r < nranks; ++r) {
      auto box = RankBox(layouts[t], mesh, r);
      if (!box.ok()) return box.status();
      if (!box->has_value() || (*box)->Empty()) continue;
      std::vector<int64_t> key = (*box)->offsets;
      key.insert(key.end(), (*box)->sizes.begin(), (*box)->sizes.end());
      auto [it, inserted] = index.try_emplace(std::move(key), plan.chunks.size());
      if (inserted) {
        ChunkAssignment c;
        c.tensor = static_cast<int32_t>(t);
        c.box = **box;
        c.replicas = 0;
        plan.chunks.push_back(std::move(c));
        holders.emplace_back();
      }
      plan.chunks[it->second].replicas++;
      holders[it->second].push_back(r);
    }
  }

  // Largest chunks first, each to its least-loaded holder.
  std::vector<int64_t> order(plan.chunks.size());
  std::iota(order.begin(), order.end(), 0);
  auto bytes = [&](int64_t c) {
    const ChunkAssignment& a = plan.chunks[c];
    return a.box.Volume() *
           static_cast<int64_t>(DTypeSize(layouts[a.tensor].spec.dtype));
  };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return bytes(a) > bytes(b);
  });
  for (int64_t c : order) {
    int64_t best = holders[c].front();
    for (int64_t r : holders[c]) {
      if (plan.bytes_by_rank[r] < plan.bytes_by_rank[best]) best = r;
    }
    plan.chunks[c].writer = best;
    plan.bytes_by_rank[best] += bytes(c);
  }
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    plan.by_rank[plan.chunks[c].writer].push_back(static_cast<int64_t>(c));
  }
  return plan;
}

}  // namespace ckpt
