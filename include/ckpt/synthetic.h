// A deterministic synthetic training state: every element is a pure function
// of (seed, tensor name, global index), so a restore onto any mesh can be
// checked exactly without the original.
#ifndef CKPT_SYNTHETIC_H_
#define CKPT_SYNTHETIC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/export.h"
#include "ckpt/mesh.h"
#include "ckpt/tensor.h"

namespace ckpt {

struct CKPT_EXPORT SyntheticOptions {
  int64_t params = 1 << 20;    ///< approximate parameter count
  DType dtype = DType::kBF16;  ///< parameter dtype
  bool adam = false;           ///< add fp32 exp_avg / exp_avg_sq and a step
  bool zero = false;           ///< shard optimizer state over dp (ZeRO-1)
  int layers = 0;              ///< transformer layers; 0 picks from params
  int experts = 0;             ///< >0: a mixture-of-experts MLP per layer
};

/// A transformer-like model laid out over a mesh. Mesh dimensions named
/// "tp" shard matrices (column/row parallel), "pp" assigns layers to stages,
/// "ep" splits the experts of a mixture-of-experts layer, "dp" replicates
/// (or shards optimizer state with `zero`); other dimensions replicate. The
/// set of tensors and their shapes depend only on the options, never on the
/// mesh, so a state saved on one mesh can be restored onto any other.
struct CKPT_EXPORT SyntheticModel {
  std::vector<TensorLayout> tensors;
  int layers = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t params = 0;  ///< exact parameter count
};

CKPT_EXPORT absl::StatusOr<SyntheticModel> BuildSyntheticModel(const SyntheticOptions& options, const Mesh& mesh);

/// Writes the values of `box` of `spec` into `data` (row-major, packed).
/// Floats are normal-like with a per-tensor scale chosen from the name
/// (norm weights near 1, Adam moments small, exp_avg_sq non-negative);
/// integer tensors named "...step" hold `seed`, other integers hash bits.
CKPT_EXPORT void FillSynthetic(const TensorSpec& spec, const Box& box, uint64_t seed, void* data);

/// Counts elements of `data` (row-major, packed `box`) that differ bitwise
/// from FillSynthetic's. When `first_bad` is non-null it receives the
/// row-major index within the box of the first mismatch (or -1).
CKPT_EXPORT int64_t CheckSynthetic(const TensorSpec& spec, const Box& box, uint64_t seed, const void* data,
                                   int64_t* first_bad = nullptr);

}  // namespace ckpt

#endif  // CKPT_SYNTHETIC_H_
