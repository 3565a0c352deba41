// Element types of checkpointed tensors.
#ifndef CKPT_DTYPE_H_
#define CKPT_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "ckpt/export.h"

namespace ckpt {

/// Element type of a tensor. The numeric values are part of the on-disk
/// format (docs/format.md) and never change.
enum class DType : uint8_t {
  kF64 = 1,
  kF32 = 2,
  kF16 = 3,
  kBF16 = 4,
  kF8E4M3 = 5,
  kF8E5M2 = 6,
  kI64 = 7,
  kI32 = 8,
  kI16 = 9,
  kI8 = 10,
  kU8 = 11,
  kBool = 12,
};

/// Size of one element in bytes; 0 for a value that is not a known DType.
CKPT_EXPORT size_t DTypeSize(DType dtype);

/// Canonical lower-case name ("f32", "bf16", "f8e4m3", ...).
CKPT_EXPORT std::string_view DTypeName(DType dtype);

/// Parses a canonical name or a common alias ("float32", "bfloat16", "int64").
CKPT_EXPORT std::optional<DType> ParseDType(std::string_view name);

/// True for a value that names a DType.
CKPT_EXPORT bool IsValidDType(uint8_t raw);

/// True for IEEE-like floating-point types (f64, f32, f16, bf16, fp8).
CKPT_EXPORT bool IsFloatingPoint(DType dtype);

/// IEEE-754 conversions (round to nearest even) of the narrow float types.
CKPT_EXPORT uint16_t FloatToBF16(float f);
CKPT_EXPORT uint16_t FloatToF16(float f);
CKPT_EXPORT uint8_t FloatToF8E4M3(float f);  ///< saturating, e4m3fn (no infinities)
CKPT_EXPORT uint8_t FloatToF8E5M2(float f);
CKPT_EXPORT float BF16ToFloat(uint16_t h);
CKPT_EXPORT float F16ToFloat(uint16_t h);
CKPT_EXPORT float F8E4M3ToFloat(uint8_t v);
CKPT_EXPORT float F8E5M2ToFloat(uint8_t v);

/// Converts one element of `dtype` at `p` to double (bool and ints exact).
CKPT_EXPORT double ElementToDouble(DType dtype, const void* p);

}  // namespace ckpt

#endif  // CKPT_DTYPE_H_
