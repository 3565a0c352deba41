#include "ckpt/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"

namespace ckpt {
namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
  bool floating;
};

constexpr DTypeInfo kInfo[] = {
    {DType::kF64, 8, "f64", true},   {DType::kF32, 4, "f32", true},       {DType::kF16, 2, "f16", true},
    {DType::kBF16, 2, "bf16", true}, {DType::kF8E4M3, 1, "f8e4m3", true}, {DType::kF8E5M2, 1, "f8e5m2", true},
    {DType::kI64, 8, "i64", false},  {DType::kI32, 4, "i32", false},      {DType::kI16, 2, "i16", false},
    {DType::kI8, 1, "i8", false},    {DType::kU8, 1, "u8", false},        {DType::kBool, 1, "bool", false},
};

const DTypeInfo* Find(DType dtype) {
  for (const auto& info : kInfo) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->size : 0;
}

std::string_view DTypeName(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->name : std::string_view("invalid");
}

bool IsValidDType(uint8_t raw) { return Find(static_cast<DType>(raw)) != nullptr; }

bool IsFloatingPoint(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info != nullptr && info->floating;
}

std::optional<DType> ParseDType(std::string_view name) {
  std::string n = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  for (const auto& info : kInfo) {
    if (n == info.name) return info.dtype;
  }
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float64", DType::kF64},   {"double", DType::kF64},
      {"float32", DType::kF32},   {"float", DType::kF32},
      {"float16", DType::kF16},   {"half", DType::kF16},
      {"bfloat16", DType::kBF16}, {"float8_e4m3fn", DType::kF8E4M3},
      {"e4m3", DType::kF8E4M3},   {"float8_e5m2", DType::kF8E5M2},
      {"e5m2", DType::kF8E5M2},   {"int64", DType::kI64},
      {"long", DType::kI64},      {"int32", DType::kI32},
      {"int", DType::kI32},       {"int16", DType::kI16},
      {"short", DType::kI16},     {"int8", DType::kI8},
      {"uint8", DType::kU8},      {"byte", DType::kU8},
  };
  for (const auto& alias : kAliases) {
    if (n == alias.name) return alias.dtype;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Floating-point conversions.

uint16_t FloatToBF16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float BF16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

namespace {

// Encodes |f| into a small IEEE-like format with `ebits` exponent and `mbits`
// mantissa bits, rounding to nearest even. `ieee_inf`: the all-ones exponent
// is reserved for inf/NaN (f16, e5m2); otherwise (e4m3fn) only the all-ones
// pattern is NaN and overflow saturates to the largest finite value.
uint32_t EncodeSmallFloat(float f, int ebits, int mbits, bool ieee_inf) {
  const uint32_t sign = std::signbit(f) ? 1u << (ebits + mbits) : 0u;
  const int bias = (1 << (ebits - 1)) - 1;
  const uint32_t exp_all = (1u << ebits) - 1;
  const uint32_t man_all = (1u << mbits) - 1;
  if (std::isnan(f)) {
    return sign | (exp_all << mbits) | (ieee_inf ? (1u << (mbits - 1)) : man_all);
  }
  const double a = std::fabs(static_cast<double>(f));
  const uint32_t max_finite = ieee_inf ? (((exp_all - 1) << mbits) | man_all) : ((exp_all << mbits) | (man_all - 1));
  if (std::isinf(f)) return sign | (ieee_inf ? exp_all << mbits : max_finite);
  if (a == 0) return sign;
  int e = std::ilogb(a);
  uint32_t field;
  if (e < 1 - bias) {
    // Subnormal: units of 2^(1 - bias - mbits).
    double q = std::nearbyint(std::ldexp(a, bias - 1 + mbits));
    field = static_cast<uint32_t>(q);  // may reach the smallest normal
  } else {
    double m = std::nearbyint(std::ldexp(a, mbits - e));  // in [2^m, 2^(m+1)]
    if (m >= std::ldexp(1.0, mbits + 1)) {
      m /= 2;
      ++e;
    }
    const int64_t ef = e + bias;
    const uint32_t mant = static_cast<uint32_t>(m) - (1u << mbits);
    if (ef > static_cast<int64_t>(ieee_inf ? exp_all - 1 : exp_all)) {
      return sign | (ieee_inf ? exp_all << mbits : max_finite);
    }
    field = (static_cast<uint32_t>(ef) << mbits) | mant;
    if (field > max_finite) {
      return sign | (ieee_inf ? exp_all << mbits : max_finite);
    }
  }
  return sign | field;
}

double DecodeSmallFloat(uint32_t v, int ebits, int mbits, bool ieee_inf) {
  const int bias = (1 << (ebits - 1)) - 1;
  const uint32_t exp_all = (1u << ebits) - 1;
  const uint32_t man_all = (1u << mbits) - 1;
  const bool neg = (v >> (ebits + mbits)) & 1;
  const uint32_t ef = (v >> mbits) & exp_all;
  const uint32_t mant = v & man_all;
  double out;
  if (ieee_inf && ef == exp_all) {
    out = mant ? std::nan("") : INFINITY;
  } else if (!ieee_inf && ef == exp_all && mant == man_all) {
    out = std::nan("");
  } else if (ef == 0) {
    out = std::ldexp(static_cast<double>(mant), 1 - bias - mbits);
  } else {
    out = std::ldexp(static_cast<double>(mant | (1u << mbits)), static_cast<int>(ef) - bias - mbits);
  }
  return neg ? -out : out;
}

}  // namespace

uint16_t FloatToF16(float f) { return static_cast<uint16_t>(EncodeSmallFloat(f, 5, 10, true)); }
uint8_t FloatToF8E4M3(float f) { return static_cast<uint8_t>(EncodeSmallFloat(f, 4, 3, false)); }
uint8_t FloatToF8E5M2(float f) { return static_cast<uint8_t>(EncodeSmallFloat(f, 5, 2, true)); }
float F16ToFloat(uint16_t h) { return static_cast<float>(DecodeSmallFloat(h, 5, 10, true)); }
float F8E4M3ToFloat(uint8_t v) { return static_cast<float>(DecodeSmallFloat(v, 4, 3, false)); }
float F8E5M2ToFloat(uint8_t v) { return static_cast<float>(DecodeSmallFloat(v, 5, 2, true)); }

double ElementToDouble(DType dtype, const void* p) {
  switch (dtype) {
    case DType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return F16ToFloat(v);
    }
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return BF16ToFloat(v);
    }
    case DType::kF8E4M3:
      return F8E4M3ToFloat(*static_cast<const uint8_t*>(p));
    case DType::kF8E5M2:
      return F8E5M2ToFloat(*static_cast<const uint8_t*>(p));
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::kI8:
      return *static_cast<const int8_t*>(p);
    case DType::kU8:
    case DType::kBool:
      return *static_cast<const uint8_t*>(p);
  }
  return 0;
}

}  // namespace ckpt
