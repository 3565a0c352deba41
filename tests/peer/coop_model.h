// The model of the cooperative-load tests: dp=4 x tp=2 ranks, one
// data-parallel replica per host, every tensor replicated over dp (split
// over tp, or whole on every rank), so each stored byte is needed by 4 or 8
// ranks.
#ifndef CKPT_TESTS_PEER_COOP_MODEL_H_
#define CKPT_TESTS_PEER_COOP_MODEL_H_

#include <optional>
#include <string>
#include <vector>

#include "ckpt/mesh.h"
#include "ckpt/state.h"
#include "testutil/test_util.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::testing {

inline constexpr uint64_t kCoopSeed = 58;

inline TensorLayout CoopLayout(std::string fqn, Shape shape, std::vector<Placement> placements) {
  TensorLayout l;
  l.spec = TensorSpec{std::move(fqn), DType::kF32, std::move(shape)};
  l.placements = std::move(placements);
  return l;
}

inline std::vector<TensorLayout> CoopModel() {
  const Placement R = Placement::Replicate();
  return {CoopLayout("attn.w", {512, 768}, {R, Placement::Shard(1)}),
          CoopLayout("mlp.w", {768, 512}, {R, Placement::Shard(0)}), CoopLayout("embed", {1000, 256}, {R, R}),
          CoopLayout("norm", {768}, {R, R})};
}

inline const Mesh& CoopMesh() {
  static const Mesh mesh = *Mesh::Parse("dp=4,tp=2");
  return mesh;
}

/// Rank r's host: one data-parallel replica per host.
inline std::string CoopHostOf(int r) { return StrCat("host-", r / 2); }

/// Rank `rank`'s laid-out state of the model, its shards filled from the
/// generator (`fill`) or zeroed, held in `shards`.
inline absl::Status CoopState(int rank, bool fill, std::vector<OwnedShard>& shards, State* st) {
  const std::vector<TensorLayout> model = CoopModel();
  CKPT_RETURN_IF_ERROR(st->SetMesh(CoopMesh(), rank));
  for (const TensorLayout& l : model) {
    CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, RankBox(l, CoopMesh(), rank));
    shards.push_back(fill ? MakeShard(l.spec, *box, kCoopSeed) : EmptyShard(l.spec, *box));
  }
  for (size_t i = 0; i < model.size(); ++i) CKPT_RETURN_IF_ERROR(st->AddLayout(model[i], shards[i].data.data()));
  return absl::OkStatus();
}

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_PEER_COOP_MODEL_H_
