// The synthetic model of `ckpt worker` and `ckpt demo`: a weight matrix
// sharded by rows over the ranks and a bias every rank holds (a replica, so
// the coordinator can compare copies). Every update is a pure function of
// (step, global index), so the state after N steps does not depend on how
// many ranks trained which steps: a restore onto another world size can be
// checked exactly.
#ifndef CKPT_TOOLS_ELASTIC_MODEL_H_
#define CKPT_TOOLS_ELASTIC_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ckpt/state.h"

namespace ckpt::tools {

inline const TensorSpec kElasticWeight{"model.weight", DType::kF32, {1200, 64}};
inline const TensorSpec kElasticBias{"model.bias", DType::kF32, {64}};

class ElasticShard {
 public:
  /// Rows [first, first + count) of the weight for `rank` of `world`.
  ElasticShard(int rank, int world) {
    const int64_t rows = kElasticWeight.shape[0], per = rows / world, extra = rows % world;
    first_ = rank * per + std::min<int64_t>(rank, extra);
    count_ = per + (rank < extra ? 1 : 0);
    w_.assign(static_cast<size_t>(count_ * kElasticWeight.shape[1]), 0.0f);
    b_.assign(static_cast<size_t>(kElasticBias.shape[0]), 0.0f);
  }

  void Init() {
    const int64_t cols = kElasticWeight.shape[1];
    for (int64_t r = 0; r < count_; ++r) {
      for (int64_t j = 0; j < cols; ++j) w_[r * cols + j] = InitValue(first_ + r, j);
    }
    std::fill(b_.begin(), b_.end(), 0.0f);
  }

  void Train(int64_t step) {
    const int64_t cols = kElasticWeight.shape[1];
    for (int64_t r = 0; r < count_; ++r) {
      for (int64_t j = 0; j < cols; ++j) w_[r * cols + j] = Update(w_[r * cols + j], step, first_ + r, j);
    }
    for (size_t j = 0; j < b_.size(); ++j) b_[j] += BiasDelta(step, static_cast<int64_t>(j));
  }

  State state() {
    State s;
    Box box = Box::Whole(kElasticWeight.shape);
    box.offsets[0] = first_;
    box.sizes[0] = count_;
    (void)s.AddShard(kElasticWeight, box, w_.data());
    (void)s.AddTensor(kElasticBias, b_.data());
    return s;
  }

  /// Flips one bit of this rank's copy of the bias (a marginal chip), and
  /// back: for silent-data-corruption drills.
  void FlipBiasBit() {
    uint32_t u;
    std::memcpy(&u, b_.data(), 4);
    u ^= 1u << 3;
    std::memcpy(b_.data(), &u, 4);
  }

  const std::vector<float>& weight() const { return w_; }
  const std::vector<float>& bias() const { return b_; }

  static float InitValue(int64_t i, int64_t j) { return 0.01f * static_cast<float>((i * 31 + j * 7) % 97); }
  static float Update(float w, int64_t step, int64_t i, int64_t j) {
    return w * 0.999f + 0.001f * std::sin(0.1f * static_cast<float>(step) + 0.01f * static_cast<float>(i) +
                                          0.1f * static_cast<float>(j));
  }
  static float BiasDelta(int64_t step, int64_t j) { return 0.01f * std::cos(static_cast<float>(step + j)); }

  /// The whole model after `steps` steps from Init, on one rank.
  static ElasticShard Expected(int64_t steps) {
    ElasticShard all(0, 1);
    all.Init();
    for (int64_t s = 1; s <= steps; ++s) all.Train(s);
    return all;
  }

 private:
  int64_t first_ = 0, count_ = 0;
  std::vector<float> w_, b_;
};

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_ELASTIC_MODEL_H_
