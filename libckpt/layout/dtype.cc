#include "ckpt/dtype.h"

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

}  // namespace ckpt
