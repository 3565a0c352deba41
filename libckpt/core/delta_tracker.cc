#include "core/delta_tracker.h"

#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// A first delta that stores more than this share of its base's bytes gains
// too little to be worth a base's memory.
constexpr double kNoGain = 0.9;

}  // namespace

absl::StatusOr<std::vector<std::optional<ManifestBase>>> DeltaTracker::Plan(
    int64_t step, SavePieces& pieces, std::vector<std::shared_ptr<const void>>* keep_alive) {
  std::vector<std::optional<ManifestBase>> bases(pieces.tiles.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.chain <= 0) return bases;
  std::vector<Planned>& planned = inflight_[step];
  planned.clear();
  for (size_t i = 0; i < pieces.tiles.size(); ++i) {
    const Shard& tile = pieces.tiles[i];
    SavePiece& p = pieces.pieces[i];
    Key key{tile.spec.fqn, tile.box};
    Chunk& c = chunks_[key];
    Planned plan{key, Kind::kWhole};
    const bool base_fits = c.base != nullptr && c.base->size() >= p.bytes && c.base_id.step < step;
    if (c.whole_left > 0) {
      --c.whole_left;
      // Saved whole because its delta did not pay: compressed, whatever
      // auto would choose, as its delta was, so it stores no more.
      p.compress_whole = true;
    } else if (base_fits && !c.rebase && c.links < options_.chain) {
      plan.kind = Kind::kDelta;
      p.delta_reference = c.base->data();
      keep_alive->push_back(c.base);
      bases[i] = c.base_id;
      ++c.links;
    } else if (p.bytes > 0) {
      CKPT_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(p.bytes, /*prefault=*/false));
      auto capture = std::make_shared<AlignedBuffer>(std::move(buf));
      plan.kind = Kind::kCapture;
      p.delta_capture = capture->data();
      // A base is read by every load of its chain's steps, and kept as long
      // as any of them: it is compressed whatever auto would choose.
      p.compress_whole = true;
      keep_alive->push_back(capture);
      c.pending = std::move(capture);
      c.pending_step = step;
      c.pending_save_id = 0;
      c.pending_stored = 0;
    }
    planned.push_back(std::move(plan));
  }
  return bases;
}

void DeltaTracker::Written(int64_t step, uint64_t save_id, const std::vector<uint64_t>& stored) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inflight_.find(step);
  if (it == inflight_.end()) return;
  for (size_t i = 0; i < it->second.size() && i < stored.size(); ++i) {
    const Planned& p = it->second[i];
    auto c = chunks_.find(p.key);
    if (c == chunks_.end()) continue;
    Chunk& ch = c->second;
    if (p.kind == Kind::kCapture && ch.pending_step == step) {
      ch.pending_save_id = save_id;
      ch.pending_stored = stored[i];
    } else if (p.kind == Kind::kDelta && ch.base_stored > 0) {
      const double delta = static_cast<double>(stored[i]);
      const double base = static_cast<double>(ch.base_stored);
      if (ch.links <= 1 && delta > kNoGain * base) {
        // Even the first delta does not pay: save it whole (compressed) for
        // a while and free its base.
        ch.whole_left = options_.chain;
        ch.base.reset();
        ch.links = 0;
        continue;
      }
      // Starting over pays once a delta costs more than the cycle so far
      // (the base and its deltas) did on average: the cycle's average
      // falls while deltas stay under it. rebase_ratio caps how far a
      // delta may grow anyway.
      const double average = static_cast<double>(ch.cycle_stored) / std::max(1, ch.cycle_saves);
      ch.cycle_stored += stored[i];
      ++ch.cycle_saves;
      if (delta > average || delta > options_.rebase_ratio * base) ch.rebase = true;
    }
  }
}

void DeltaTracker::Outcome(int64_t step, bool committed) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inflight_.find(step);
  if (it == inflight_.end()) return;
  for (const Planned& p : it->second) {
    auto c = chunks_.find(p.key);
    if (p.kind == Kind::kDelta && !committed && c != chunks_.end()) {
      // Its base may be what failed the save (gone, damaged): the chunk is
      // saved whole next.
      c->second.base.reset();
      c->second.links = 0;
      continue;
    }
    if (p.kind != Kind::kCapture) continue;
    if (c == chunks_.end() || c->second.pending_step != step) continue;
    Chunk& ch = c->second;
    if (committed && ch.pending_save_id != 0) {
      ch.base = std::move(ch.pending);
      ch.base_id = ManifestBase{step, ch.pending_save_id};
      ch.base_stored = ch.pending_stored;
      ch.cycle_stored = ch.pending_stored;
      ch.cycle_saves = 1;
      ch.links = 0;
      ch.rebase = false;
    }
    ch.pending.reset();
    ch.pending_step = -1;
  }
  inflight_.erase(it);
}

uint64_t DeltaTracker::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [key, c] : chunks_) {
    if (c.base) n += c.base->size();
    if (c.pending) n += c.pending->size();
  }
  return n;
}

}  // namespace ckpt
