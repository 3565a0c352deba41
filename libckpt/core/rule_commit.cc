#include "core/rule_commit.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "ckpt/plan.h"
#include "format/chunk_grid.h"
#include "format/data_file.h"
#include "plan/rule_manifest.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {

uint64_t RulesHash(const std::vector<TensorLayout>& layouts, const Mesh& mesh, uint64_t block_size, int max_tiles) {
  ByteWriter w;
  w.Var(mesh.sizes.size());
  for (size_t d = 0; d < mesh.sizes.size(); ++d) {
    w.Str(mesh.names[d]);
    w.Var(static_cast<uint64_t>(mesh.sizes[d]));
  }
  w.Var(block_size);
  w.SVar(max_tiles);
  w.Var(layouts.size());
  for (const TensorLayout& l : layouts) {
    w.Str(l.spec.fqn);
    w.U8(static_cast<uint8_t>(l.spec.dtype));
    w.Var(l.spec.shape.size());
    for (int64_t d : l.spec.shape) w.SVar(d);
    w.Var(l.placements.size());
    for (const Placement& p : l.placements) {
      w.U8(static_cast<uint8_t>(p.kind));
      w.SVar(p.dim);
      w.Var(p.boundaries.size());
      for (int64_t b : p.boundaries) w.SVar(b);
    }
    w.Var(l.split_order.size());
    for (int md : l.split_order) w.SVar(md);
    w.SVar(l.owner_dim);
    w.SVar(l.owner_index);
  }
  return Xxh3(w.str());
}

absl::Status RankRules::Update(const State& state, int rank, int world_size, const std::optional<Mesh>& expected_mesh,
                               uint64_t block_size, int max_tiles) {
  const Mesh& mesh = *state.mesh();
  if (expected_mesh.has_value() && !(*expected_mesh == mesh)) {
    return absl::InvalidArgumentError(StrCat("the state's layouts are over mesh ", mesh.ToString(),
                                             ", the checkpointer's options say ", expected_mesh->ToString()));
  }
  if (mesh.NumRanks() != world_size || state.mesh_rank() != rank) {
    return absl::InvalidArgumentError(StrCat("the state's layouts are for rank ", state.mesh_rank(), " of mesh ",
                                             mesh.ToString(), " (", mesh.NumRanks(), " ranks); this is rank ", rank,
                                             " of ", world_size));
  }
  const uint64_t hash = RulesHash(state.layouts(), mesh, block_size, max_tiles);
  if (rules_ == nullptr || rules_->hash != hash) {
    CKPT_ASSIGN_OR_RETURN(std::vector<RankWrite> mine, PlanRankWrites(state.layouts(), mesh, rank));
    writes_by_layout_.assign(state.layouts().size(), -1);
    for (const RankWrite& w : mine) writes_by_layout_[w.tensor] = w.writes ? 1 : 0;
    auto rules = std::make_shared<SaveRules>();
    rules->layouts = state.layouts();
    rules->mesh = mesh;
    rules->block_size = block_size;
    rules->max_tiles = max_tiles;
    rules->hash = hash;
    rules_ = std::move(rules);
    ++plans_;
  }
  writes_.assign(state.shards().size(), false);
  for (size_t i = 0; i < state.shards().size(); ++i) {
    const int32_t li = state.shard_layouts()[i];
    writes_[i] = !state.shards()[i].box.Empty() && writes_by_layout_[li] == 1;
  }
  return absl::OkStatus();
}

absl::Status RuleManifest::Prepare(const SaveRules& rules) {
  if (ready_ && hash_ == rules.hash) return absl::OkStatus();
  const double t0 = NowSeconds();
  ready_ = false;
  RuleManifestStats stats;
  CKPT_ASSIGN_OR_RETURN(manifest_,
                        SaveManifestByRules(rules.layouts, rules.mesh, rules.block_size, rules.max_tiles, &stats));
  shard_blocks_.clear();
  for (const ManifestFile& f : manifest_.files) shard_blocks_.push_back(f.block_count);
  shard_bytes_ = std::move(stats.bytes_by_rank);
  hash_ = rules.hash;
  ready_ = true;
  build_seconds_ = NowSeconds() - t0;
  return absl::OkStatus();
}

absl::StatusOr<Manifest*> RuleManifest::Fill(const Manifest& head, uint64_t save_id,
                                             const std::vector<RankSummary>& summaries) {
  if (!ready_) return absl::FailedPreconditionError("the rules' manifest is not built");
  Manifest& m = manifest_;
  if (summaries.size() != m.files.size()) {
    return absl::InvalidArgumentError(
        StrCat(summaries.size(), " rank summaries for a mesh of ", m.files.size(), " ranks"));
  }
  m.kind = Manifest::Kind::kManifest;
  m.step = head.step;
  m.created_unix_ns = head.created_unix_ns;
  m.library_version = head.library_version;
  m.codec = head.codec;
  m.metadata = head.metadata;
  m.claim.clear();
  m.blobs.clear();
  m.stall_s = m.write_s = 0;
  m.bytes_logical = m.bytes_stored = 0;
  const uint64_t binding = RuleBinding(head.step, save_id, hash_);
  std::set<std::pair<std::string, int32_t>> blob_keys;
  for (size_t r = 0; r < summaries.size(); ++r) {
    const RankSummary& s = summaries[r];
    if (s.rank != static_cast<int32_t>(r)) {
      return absl::DataLossError(StrCat("the report of rank ", r, " is rank ", s.rank, "'s"));
    }
    if (s.binding != binding) {
      return absl::AbortedError(StrCat("rank ", r, " saved step ", head.step, " by other layouts (or another mesh, ",
                                       "block size or tiling) than the leader's, or for another save; every rank ",
                                       "must declare the same layouts in the same order"));
    }
    ManifestFile& f = m.files[r];
    uint64_t blocks = shard_blocks_[r];
    int64_t logical = shard_bytes_[r];
    for (const SummaryBlob& b : s.blobs) {
      ManifestBlob mb;
      mb.name = b.name;
      mb.rank = b.global ? -1 : static_cast<int32_t>(r);
      mb.size = b.size;
      mb.file = static_cast<uint32_t>(r);
      mb.first_block = blocks;
      mb.block_count = BlocksOf(b.size, f.block_size);
      blocks += mb.block_count;
      logical += static_cast<int64_t>(b.size);
      if (!blob_keys.insert({mb.name, mb.rank}).second) {
        return absl::InvalidArgumentError(StrCat("blob '", mb.name, "' (",
                                                 mb.rank < 0 ? std::string("global") : StrCat("rank ", mb.rank),
                                                 ") was saved twice; global blobs must come from one rank"));
      }
      m.blobs.push_back(std::move(mb));
    }
    if (s.block_count != blocks) {
      return absl::DataLossError(StrCat("rank ", r, "'s data file holds ", s.block_count, " blocks; its layouts give ",
                                        blocks, " (", shard_blocks_[r], " of shards, ", blocks - shard_blocks_[r],
                                        " of blobs)"));
    }
    f.size = s.size;
    f.index_offset = s.index_offset;
    f.index_len = kIndexHeaderSize + s.block_count * kIndexEntrySize;
    f.index_hash = s.index_hash;
    f.block_count = s.block_count;
    f.save_id = save_id;
    f.container_hash = s.container_hash;
    if (f.index_offset + f.index_len + kFooterSize != f.size) {
      return absl::DataLossError(StrCat("rank ", r, "'s data file: its index at ", f.index_offset, " (", f.index_len,
                                        " bytes) and footer do not end at its size ", f.size));
    }
    m.bytes_logical += logical;
    m.bytes_stored += static_cast<int64_t>(s.bytes_stored);
    m.stall_s = std::max(m.stall_s, static_cast<double>(s.stall_s));
    m.write_s = std::max(m.write_s, static_cast<double>(s.write_s));
  }
  return &m;
}

std::vector<SummaryBlob> SummaryBlobsOf(const State& state) {
  std::vector<SummaryBlob> out;
  for (const Blob& b : state.blobs()) {
    if (b.out != nullptr && b.data == nullptr) continue;
    out.push_back(SummaryBlob{b.name, b.scope == BlobScope::kGlobal, b.size});
  }
  return out;
}

void SummarizeFile(const ManifestFile& file, RankSummary* s) {
  s->size = file.size;
  s->index_offset = file.index_offset;
  s->index_hash = file.index_hash;
  s->block_count = file.block_count;
  s->container_hash = file.container_hash;
}

}  // namespace ckpt
