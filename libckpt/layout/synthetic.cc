#include "ckpt/synthetic.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {

// ---------------------------------------------------------------------------
// Element generator.

namespace {

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Irwin-Hall sum of four 16-bit uniforms, scaled to unit variance.
inline float NormalLike(uint64_t h) {
  const int32_t s = static_cast<int32_t>(h & 0xffff) + static_cast<int32_t>((h >> 16) & 0xffff) +
                    static_cast<int32_t>((h >> 32) & 0xffff) + static_cast<int32_t>(h >> 48);
  constexpr float kInvSd = 1.0f / 37837.23f;  // 65536 * sqrt(1/3)
  return static_cast<float>(s - 131070) * kInvSd;
}

enum class ValueKind { kWeight, kNorm, kBias, kExpAvg, kExpAvgSq, kStep, kBits };

struct TensorGen {
  uint64_t key;
  ValueKind kind;
  float scale;
  float offset;
  uint64_t seed;
};

TensorGen MakeGen(const TensorSpec& spec, uint64_t seed) {
  TensorGen g;
  g.seed = seed;
  g.key = Mix64(Xxh3(spec.fqn) ^ Mix64(seed + 0x9e3779b97f4a7c15ULL));
  g.offset = 0;
  const std::string& n = spec.fqn;
  if (!IsFloatingPoint(spec.dtype)) {
    g.kind = absl::EndsWith(n, "step") ? ValueKind::kStep : ValueKind::kBits;
    g.scale = 1;
  } else if (absl::StrContains(n, "exp_avg_sq")) {
    g.kind = ValueKind::kExpAvgSq;
    g.scale = 1e-3f;
  } else if (absl::StrContains(n, "exp_avg")) {
    g.kind = ValueKind::kExpAvg;
    g.scale = 1e-3f;
  } else if (absl::StrContains(n, "norm") || absl::StrContains(n, "ln")) {
    g.kind = ValueKind::kNorm;
    g.scale = 0.05f;
    g.offset = 1.0f;
  } else if (absl::StrContains(n, "bias")) {
    g.kind = ValueKind::kBias;
    g.scale = 0.01f;
  } else {
    g.kind = ValueKind::kWeight;
    g.scale = 0.02f;
  }
  return g;
}

inline float FloatValue(const TensorGen& g, uint64_t h) {
  float z = NormalLike(h) * g.scale;
  if (g.kind == ValueKind::kExpAvgSq) return z * z;
  return z + g.offset;
}

inline uint64_t IntBits(const TensorGen& g, uint64_t h) { return g.kind == ValueKind::kStep ? g.seed : h; }

// Writes elements [index, index + count) of the tensor (global row-major
// indices) into `out`.
void GenerateRun(const TensorGen& g, DType dtype, uint64_t index, int64_t count, void* out) {
  switch (dtype) {
    case DType::kBF16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = FloatToBF16(FloatValue(g, Mix64(g.key + (index + i))));
      }
      break;
    }
    case DType::kF32: {
      float* o = static_cast<float*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = FloatValue(g, Mix64(g.key + (index + i)));
      }
      break;
    }
    case DType::kF64: {
      double* o = static_cast<double*>(out);
      for (int64_t i = 0; i < count; ++i) {
        uint64_t h = Mix64(g.key + (index + i));
        // Extra low-order bits so f64 mantissas are fully populated.
        o[i] = static_cast<double>(FloatValue(g, h)) +
               static_cast<double>(g.scale) * 1e-9 * static_cast<double>(Mix64(h) >> 11) / 9007199254740992.0;
      }
      break;
    }
    case DType::kF16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = FloatToF16(FloatValue(g, Mix64(g.key + (index + i))));
      }
      break;
    }
    case DType::kF8E4M3: {
      uint8_t* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        // fp8 weights are typically scaled to use the range.
        o[i] = FloatToF8E4M3(FloatValue(g, Mix64(g.key + (index + i))) * 50);
      }
      break;
    }
    case DType::kF8E5M2: {
      uint8_t* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = FloatToF8E5M2(FloatValue(g, Mix64(g.key + (index + i))) * 50);
      }
      break;
    }
    case DType::kI64: {
      int64_t* o = static_cast<int64_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = static_cast<int64_t>(IntBits(g, Mix64(g.key + (index + i))));
      }
      break;
    }
    case DType::kI32: {
      int32_t* o = static_cast<int32_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = static_cast<int32_t>(IntBits(g, Mix64(g.key + (index + i))));
      }
      break;
    }
    case DType::kI16: {
      int16_t* o = static_cast<int16_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = static_cast<int16_t>(IntBits(g, Mix64(g.key + (index + i))));
      }
      break;
    }
    case DType::kI8:
    case DType::kU8: {
      uint8_t* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = static_cast<uint8_t>(IntBits(g, Mix64(g.key + (index + i))));
      }
      break;
    }
    case DType::kBool: {
      uint8_t* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        o[i] = static_cast<uint8_t>(Mix64(g.key + (index + i)) & 1);
      }
      break;
    }
  }
}

// Calls fn(global_index, box_index, count) for every innermost run of `box`.
template <typename Fn>
void ForEachRun(const Shape& shape, const Box& box, Fn&& fn) {
  const int nd = box.ndim();
  if (box.Empty()) return;
  if (nd == 0) {
    fn(0, 0, 1);
    return;
  }
  const int64_t run = box.sizes[nd - 1];
  std::vector<int64_t> idx(nd, 0);  // position within the box (outer dims)
  std::vector<int64_t> gstride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) gstride[d] = gstride[d + 1] * shape[d + 1];
  int64_t box_index = 0;
  while (true) {
    uint64_t g = 0;
    for (int d = 0; d < nd; ++d) g += (box.offsets[d] + idx[d]) * gstride[d];
    fn(g, box_index, run);
    box_index += run;
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < box.sizes[d]) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

}  // namespace

void FillSynthetic(const TensorSpec& spec, const Box& box, uint64_t seed, void* data) {
  const TensorGen g = MakeGen(spec, seed);
  const size_t es = DTypeSize(spec.dtype);
  std::byte* out = static_cast<std::byte*>(data);
  ForEachRun(spec.shape, box,
             [&](uint64_t gidx, int64_t bidx, int64_t n) { GenerateRun(g, spec.dtype, gidx, n, out + bidx * es); });
}

int64_t CheckSynthetic(const TensorSpec& spec, const Box& box, uint64_t seed, const void* data, int64_t* first_bad) {
  const TensorGen g = MakeGen(spec, seed);
  const size_t es = DTypeSize(spec.dtype);
  const std::byte* in = static_cast<const std::byte*>(data);
  int64_t bad = 0;
  int64_t first = -1;
  std::vector<std::byte> expect;
  ForEachRun(spec.shape, box, [&](uint64_t gidx, int64_t bidx, int64_t n) {
    expect.resize(n * es);
    GenerateRun(g, spec.dtype, gidx, n, expect.data());
    if (std::memcmp(expect.data(), in + bidx * es, n * es) == 0) return;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(expect.data() + i * es, in + (bidx + i) * es, es) != 0) {
        if (first < 0) first = bidx + i;
        ++bad;
      }
    }
  });
  if (first_bad != nullptr) *first_bad = first;
  return bad;
}

// ---------------------------------------------------------------------------
// Model.

absl::StatusOr<SyntheticModel> BuildSyntheticModel(const SyntheticOptions& options, const Mesh& mesh) {
  if (options.params < 1000) {
    return absl::InvalidArgumentError(StrCat("--params ", options.params, " is too small; use at least 1000"));
  }
  if (!IsFloatingPoint(options.dtype)) {
    return absl::InvalidArgumentError(
        StrCat("synthetic models need a floating-point dtype, not ", DTypeName(options.dtype)));
  }
  const int tp = mesh.DimIndex("tp");
  const int pp = mesh.DimIndex("pp");
  const int dp = mesh.DimIndex("dp");
  const int64_t stages = mesh.SizeOf("pp");
  const double n = static_cast<double>(options.params);
  if (options.experts < 0 || options.experts > 4096 || options.layers < 0 || options.layers > 4096) {
    return absl::InvalidArgumentError("experts and layers must be between 0 and 4096");
  }

  SyntheticModel model;
  int layers = options.layers;
  if (layers <= 0) {
    layers = static_cast<int>(std::lround(2 * std::log10(n / 1e4)));
    layers = std::clamp(layers, 2, 48);
  }
  const int ep = mesh.DimIndex("ep");
  // params ~= layers * (12 h^2 + 5 h) + 2 * vocab * h + h, vocab = 8h + 1.
  double h = std::sqrt(n / (12.0 * layers + 16.0));
  int64_t hidden = std::max<int64_t>(16, std::llround(h / 16) * 16);
  model.layers = layers;
  model.hidden = hidden;
  model.vocab = 8 * hidden + 1;

  auto placements = [&](int tp_dim) {
    std::vector<Placement> p(mesh.ndim(), Placement::Replicate());
    if (tp >= 0 && tp_dim >= 0) p[tp] = Placement::Shard(tp_dim);
    return p;
  };
  auto add = [&](std::string fqn, Shape shape, int tp_dim, int64_t stage, bool expert = false) {
    TensorLayout t;
    t.spec = TensorSpec{std::move(fqn), options.dtype, std::move(shape)};
    t.placements = placements(tp_dim);
    if (expert && ep >= 0) t.placements[ep] = Placement::Shard(0);
    if (pp >= 0) {
      t.owner_dim = pp;
      t.owner_index = stage;
    }
    model.params += t.spec.NumElements();
    model.tensors.push_back(std::move(t));
  };
  const int64_t H = hidden;
  const int64_t E = options.experts;
  add("model.embed_tokens.weight", {model.vocab, H}, 0, 0);
  for (int l = 0; l < layers; ++l) {
    // Contiguous layers per stage; with more stages than layers some stages
    // hold no layer.
    const int64_t stage = static_cast<int64_t>(l) * stages / layers;
    const std::string p = StrCat("model.layers.", l, ".");
    add(p + "input_layernorm.weight", {H}, -1, stage);
    add(p + "self_attn.qkv_proj.weight", {3 * H, H}, 0, stage);
    add(p + "self_attn.qkv_proj.bias", {3 * H}, 0, stage);
    add(p + "self_attn.o_proj.weight", {H, H}, 1, stage);
    add(p + "post_attention_layernorm.weight", {H}, -1, stage);
    if (E > 0) {
      add(p + "mlp.router.weight", {E, H}, -1, stage);
      add(p + "mlp.experts.up_proj.weight", {E, 2 * H, H}, 1, stage, true);
      add(p + "mlp.experts.down_proj.weight", {E, H, 2 * H}, 2, stage, true);
    } else {
      add(p + "mlp.up_proj.weight", {4 * H, H}, 0, stage);
      add(p + "mlp.down_proj.weight", {H, 4 * H}, 1, stage);
    }
  }
  add("model.norm.weight", {H}, -1, stages - 1);
  add("lm_head.weight", {model.vocab, H}, 0, stages - 1);

  if (options.adam) {
    const size_t nparams = model.tensors.size();
    for (size_t i = 0; i < nparams; ++i) {
      for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
        TensorLayout t = model.tensors[i];
        t.spec.fqn = StrCat("optimizer.state.", t.spec.fqn, ".", moment);
        t.spec.dtype = DType::kF32;
        if (options.zero && dp >= 0) {
          // ZeRO-1: the piece each rank holds after expert and tensor
          // parallelism is split again over dp, along the dimension tp
          // splits (dim 0 when tp does not split the tensor).
          t.placements[dp] = Placement::Shard(0);
          t.split_order.clear();
          if (ep >= 0) t.split_order.push_back(ep);
          if (tp >= 0) t.split_order.push_back(tp);
          t.split_order.push_back(dp);
          for (int d = 0; d < mesh.ndim(); ++d) {
            if (d != tp && d != dp && d != ep) t.split_order.push_back(d);
          }
        }
        model.tensors.push_back(std::move(t));
      }
    }
    TensorLayout step;
    step.spec = TensorSpec{"optimizer.step", DType::kI64, {}};
    step.placements.assign(mesh.ndim(), Placement::Replicate());
    model.tensors.push_back(std::move(step));
  }
  return model;
}

}  // namespace ckpt
