#include "core/collective_plan.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "ckpt/limits.h"
#include "plan/cover.h"
#include "plan/replica_writers.h"
#include "util/bytes.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// A rank's shard list or load request, as exchanged.
std::string EncodeWants(const State& state) {
  ByteWriter w;
  w.Var(state.shards().size());
  for (const Shard& s : state.shards()) {
    w.Str(s.spec.fqn);
    w.U8(static_cast<uint8_t>(s.spec.dtype));
    w.Var(s.spec.shape.size());
    for (int64_t d : s.spec.shape) w.Var(static_cast<uint64_t>(d));
    for (int64_t o : s.box.offsets) w.Var(static_cast<uint64_t>(o));
    for (int64_t z : s.box.sizes) w.Var(static_cast<uint64_t>(z));
  }
  w.Var(state.blobs().size());
  for (const Blob& b : state.blobs()) {
    w.Str(b.name);
    w.U8(static_cast<uint8_t>(b.scope));
    w.SVar(b.source_rank);
    w.U8(b.out != nullptr ? 1 : 0);
  }
  return w.Take();
}

// Decodes into a State whose shards have null data (descriptions only).
absl::StatusOr<State> DecodeWants(std::string_view bytes, int rank) {
  ByteReader r(bytes, StrCat("plan message from rank ", rank));
  State st;
  const uint64_t n = r.Count(uint64_t{1} << 24, "shard count");
  static std::string sink;
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    TensorSpec spec;
    spec.fqn = r.Str(kMaxNameBytes);
    spec.dtype = static_cast<DType>(r.U8());
    const uint64_t nd = r.Count(32, "rank");
    for (uint64_t d = 0; d < nd; ++d) spec.shape.push_back(static_cast<int64_t>(r.Var()));
    Box box;
    for (uint64_t d = 0; d < nd; ++d) box.offsets.push_back(static_cast<int64_t>(r.Var()));
    for (uint64_t d = 0; d < nd; ++d) box.sizes.push_back(static_cast<int64_t>(r.Var()));
    if (!r.ok()) break;
    // Descriptions only: a dummy non-null pointer passes validation.
    CKPT_RETURN_IF_ERROR(st.AddShard(spec, box, box.Empty() ? nullptr : &sink));
  }
  const uint64_t nb = r.Count(uint64_t{1} << 24, "blob count");
  for (uint64_t i = 0; i < nb && r.ok(); ++i) {
    std::string name = r.Str(kMaxNameBytes);
    const auto scope = static_cast<BlobScope>(r.U8());
    const int src = static_cast<int>(r.SVar());
    const bool is_out = r.U8() != 0;
    if (!r.ok()) break;
    if (is_out) {
      CKPT_RETURN_IF_ERROR(st.AddBlobOut(name, &sink, scope, src));
    } else {
      CKPT_RETURN_IF_ERROR(st.AddBlob(name, "", 0, scope));
    }
  }
  if (!r.ok()) return r.status();
  return st;
}

std::string U64Bytes(uint64_t v) {
  std::string s(8, '\0');
  StoreLE64(s.data(), v);
  return s;
}

}  // namespace

absl::StatusOr<std::vector<bool>> AgreeOnWriters(Communicator& comm, const State& state, double timeout_s,
                                                 WriterCache* cache) {
  const std::string mine = EncodeWants(state);
  const uint64_t hash = Xxh3(mine);
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> hashes, comm.Gather(U64Bytes(hash), timeout_s));
  std::string verdict;
  if (comm.rank() == 0) {
    bool same = cache->valid && cache->all_hashes.size() == hashes.size();
    for (size_t r = 0; same && r < hashes.size(); ++r) {
      same = LoadLE64(hashes[r].data()) == cache->all_hashes[r];
    }
    verdict = same ? "same" : "full";
    cache->all_hashes.clear();
    for (const std::string& h : hashes) cache->all_hashes.push_back(LoadLE64(h.data()));
  }
  CKPT_ASSIGN_OR_RETURN(verdict, comm.Broadcast(verdict, timeout_s));
  if (verdict == "same" && cache->valid && cache->layout_hash == hash) return cache->mask;

  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all, comm.Gather(mine, timeout_s));
  std::vector<std::string> masks;
  absl::Status leader_error;
  if (comm.rank() == 0) {
    // Group identical boxes of a tensor; pick each group's writer.
    struct Holder {
      int rank;
      size_t index;
    };
    struct Group {
      int64_t bytes = 0;
      std::vector<Holder> holders;
    };
    absl::flat_hash_map<std::string, size_t> group_of;
    std::vector<Group> groups;
    std::map<std::string, TensorSpec> specs;
    std::vector<State> states;
    for (size_t r = 0; r < all.size() && leader_error.ok(); ++r) {
      auto st = DecodeWants(all[r], static_cast<int>(r));
      if (!st.ok()) {
        leader_error = st.status();
        break;
      }
      states.push_back(std::move(st).value());
      const auto& shards = states.back().shards();
      for (size_t i = 0; i < shards.size(); ++i) {
        const Shard& s = shards[i];
        auto [it, fresh] = specs.try_emplace(s.spec.fqn, s.spec);
        if (!fresh && !(it->second == s.spec)) {
          leader_error = absl::InvalidArgumentError(StrCat(
              "tensor '", s.spec.fqn, "': rank ", r, " has ", DTypeName(s.spec.dtype), " ", ShapeToString(s.spec.shape),
              ", another rank ", DTypeName(it->second.dtype), " ", ShapeToString(it->second.shape)));
          break;
        }
        if (s.box.Empty()) continue;
        std::string key = s.spec.fqn;
        key.push_back('\0');
        key += s.box.ToString();
        auto [g, added] = group_of.try_emplace(key, groups.size());
        if (added) groups.push_back(Group{s.PackedBytes(), {}});
        groups[g->second].holders.push_back(Holder{static_cast<int>(r), i});
      }
    }
    if (leader_error.ok()) {
      // plan/'s rule, with each box's holders as its replica group.
      std::map<std::string, int32_t> name_order;
      for (const auto& [fqn, spec] : specs) name_order.emplace(fqn, static_cast<int32_t>(name_order.size()));
      std::map<std::vector<int64_t>, uint32_t> group_id;  // offsets from the base holder -> id
      std::vector<std::vector<int64_t>> offsets;
      std::vector<ReplicatedBox> replicated;
      std::vector<size_t> group_of_box;
      masks.resize(all.size());
      for (size_t r = 0; r < all.size(); ++r) masks[r].assign(states[r].shards().size(), '0');
      // Ids in order of first use, so the pointers below stay put once made.
      for (const Group& g : groups) {
        if (g.holders.size() < 2) continue;
        std::vector<int64_t> offs;
        for (const Holder& h : g.holders) offs.push_back(h.rank - g.holders.front().rank);
        group_id.try_emplace(std::move(offs), static_cast<uint32_t>(group_id.size()));
      }
      offsets.resize(group_id.size());
      for (const auto& [offs, id] : group_id) offsets[id] = offs;
      for (size_t gi = 0; gi < groups.size(); ++gi) {
        const Group& g = groups[gi];
        const Holder& first = g.holders.front();
        if (g.holders.size() < 2) {
          masks[first.rank][first.index] = '1';
          continue;
        }
        std::vector<int64_t> offs;
        for (const Holder& h : g.holders) offs.push_back(h.rank - first.rank);
        const uint32_t id = group_id.at(offs);
        const std::string& fqn = states[first.rank].shards()[first.index].spec.fqn;
        replicated.push_back(ReplicatedBox{g.bytes, name_order.at(fqn), id, first.rank, &offsets[id], -1});
        group_of_box.push_back(gi);
      }
      ChooseReplicaWriters(replicated);
      for (size_t i = 0; i < replicated.size(); ++i) {
        for (const Holder& h : groups[group_of_box[i]].holders) {
          if (h.rank == replicated[i].writer) masks[h.rank][h.index] = '1';
        }
      }
    } else {
      masks.assign(all.size(), std::string());
    }
    for (std::string& m : masks) {
      m = leader_error.ok() ? EncodeOutcome(std::move(m)) : EncodeOutcome(leader_error);
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::string sent, comm.Scatter(masks, timeout_s));
  CKPT_ASSIGN_OR_RETURN(std::string mask, DecodeOutcome(sent, "the writer mask from the leader"));
  if (mask.size() != state.shards().size()) {
    return absl::InternalError("writer mask does not match the shard list");
  }
  std::vector<bool> out(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) out[i] = mask[i] == '1';
  cache->layout_hash = hash;
  cache->mask = out;
  cache->valid = true;
  return out;
}

Manifest RestrictManifest(const Manifest& m, const State& wants, int rank) {
  Manifest out;
  out.kind = m.kind;
  out.step = m.step;
  out.world_size = m.world_size;
  out.created_unix_ns = m.created_unix_ns;
  out.library_version = m.library_version;
  out.codec = m.codec;
  out.mesh = m.mesh;
  out.metadata = m.metadata;
  out.bases = m.bases;
  std::map<uint32_t, uint32_t> file_map;
  auto file_index = [&](uint32_t f) {
    auto [it, added] = file_map.try_emplace(f, static_cast<uint32_t>(out.files.size()));
    if (added) out.files.push_back(m.files[f]);
    return it->second;
  };
  // Per tensor: chunks overlapping any wanted box, found through the index.
  std::map<std::string, std::vector<const Box*>> boxes_by_tensor;
  for (const Shard& s : wants.shards()) {
    if (!s.box.Empty()) boxes_by_tensor[s.spec.fqn].push_back(&s.box);
  }
  for (const auto& [fqn, want_boxes] : boxes_by_tensor) {
    const ManifestTensor* t = m.FindTensor(fqn);
    if (t == nullptr) continue;  // the loader reports it
    if (t->GridOnly()) {
      // The cells the wanted boxes meet, found on the cuts, in cell order
      // (the order an expanded grid lists them in).
      std::vector<uint64_t> cells;
      for (const Box* b : want_boxes) t->grid->ForEachCellMeeting(*b, [&](uint64_t c) { cells.push_back(c); });
      std::sort(cells.begin(), cells.end());
      cells.erase(std::unique(cells.begin(), cells.end()), cells.end());
      ManifestTensor rt;
      rt.spec = t->spec;
      for (uint64_t c : cells) {
        const uint32_t f = static_cast<uint32_t>(t->grid->files.At(c));
        ManifestChunk ch = GridChunk(*t, c, m.files[f].block_size);
        ch.file = file_index(f);
        rt.chunks.push_back(std::move(ch));
      }
      out.tensors.push_back(std::move(rt));
      continue;
    }
    std::vector<Box> chunk_boxes;
    chunk_boxes.reserve(t->chunks.size());
    for (const ManifestChunk& c : t->chunks) chunk_boxes.push_back(c.box);
    ChunkIndex index(chunk_boxes);
    std::vector<int64_t> hits;
    for (const Box* b : want_boxes) {
      for (int64_t c : index.Query(*b)) hits.push_back(c);
    }
    std::sort(hits.begin(), hits.end());
    hits.erase(std::unique(hits.begin(), hits.end()), hits.end());
    ManifestTensor rt;
    rt.spec = t->spec;
    for (int64_t c : hits) {
      ManifestChunk ch = t->chunks[c];
      ch.file = file_index(ch.file);
      rt.chunks.push_back(std::move(ch));
    }
    out.tensors.push_back(std::move(rt));
  }
  // Tensors the rank names but the step lacks stay absent; zero-size tensors
  // with no chunks are kept so their spec can be checked.
  for (const Shard& s : wants.shards()) {
    if (!s.box.Empty()) continue;
    const ManifestTensor* t = m.FindTensor(s.spec.fqn);
    if (t != nullptr && !boxes_by_tensor.count(s.spec.fqn)) {
      boxes_by_tensor[s.spec.fqn];
      out.tensors.push_back(ManifestTensor{t->spec, {}});
    }
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const ManifestTensor& a, const ManifestTensor& b) { return a.spec.fqn < b.spec.fqn; });
  for (const Blob& b : wants.blobs()) {
    const int32_t want = b.scope == BlobScope::kGlobal ? -1 : (b.source_rank >= 0 ? b.source_rank : rank);
    for (const ManifestBlob& mb : m.blobs) {
      if (mb.name == b.name && mb.rank == want) {
        ManifestBlob copy = mb;
        copy.file = file_index(mb.file);
        out.blobs.push_back(std::move(copy));
      }
    }
  }
  return out;
}

absl::StatusOr<std::string> DistributeLoadPlan(Communicator& comm, const State& target, const Manifest* manifest,
                                               double timeout_s) {
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all, comm.Gather(EncodeWants(target), timeout_s));
  std::vector<std::string> plans;
  if (comm.rank() == 0) {
    plans.resize(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      auto st = DecodeWants(all[r], static_cast<int>(r));
      if (!st.ok()) {
        plans[r] = EncodeOutcome(st.status());
        continue;
      }
      plans[r] = EncodeOutcome(EncodeManifest(RestrictManifest(*manifest, *st, static_cast<int>(r))));
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::string plan, comm.Scatter(plans, timeout_s));
  return DecodeOutcome(plan, "the load plan from the leader");
}

}  // namespace ckpt
