#include "format/safetensors.h"

#include <algorithm>
#include <cstring>

#include "ckpt/limits.h"
#include "util/json.h"
#include "util/json_reader.h"
#include "util/strings.h"

namespace ckpt {
namespace {

struct DTypeRow {
  std::string_view name;
  uint32_t bits;
  std::optional<DType> dtype;
};

// The dtypes of the safetensors specification, and ckpt's type for each.
constexpr DTypeRow kDTypes[] = {
    {"BOOL", 8, DType::kBool},      {"U8", 8, DType::kU8},          {"I8", 8, DType::kI8},
    {"F8_E5M2", 8, DType::kF8E5M2}, {"F8_E4M3", 8, DType::kF8E4M3}, {"F8_E8M0", 8, std::nullopt},
    {"I16", 16, DType::kI16},       {"U16", 16, std::nullopt},      {"F16", 16, DType::kF16},
    {"BF16", 16, DType::kBF16},     {"I32", 32, DType::kI32},       {"U32", 32, std::nullopt},
    {"F32", 32, DType::kF32},       {"C64", 64, std::nullopt},      {"F64", 64, DType::kF64},
    {"I64", 64, DType::kI64},       {"U64", 64, std::nullopt},      {"F4", 4, std::nullopt},
    {"F6_E2M3", 6, std::nullopt},   {"F6_E3M2", 6, std::nullopt},
};

const DTypeRow* FindDType(std::string_view name) {
  for (const DTypeRow& r : kDTypes) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string Quoted(std::string_view s) { return StrCat("'", s.substr(0, 256), s.size() > 256 ? "...'" : "'"); }

}  // namespace

bool IsSafetensorsDataFile(std::string_view name) {
  constexpr std::string_view kExt = ".safetensors";
  return name.size() > kExt.size() && name.substr(name.size() - kExt.size()) == kExt;
}

uint32_t SafetensorsDTypeBits(std::string_view name) {
  const DTypeRow* r = FindDType(name);
  return r == nullptr ? 0 : r->bits;
}

std::string_view SafetensorsDTypeName(DType dtype) {
  for (const DTypeRow& r : kDTypes) {
    if (r.dtype == dtype) return r.name;
  }
  return {};
}

absl::StatusOr<uint64_t> DecodeSafetensorsPrefix(const std::byte* first8, uint64_t file_size, std::string_view file) {
  if (file_size < 8) {
    return absl::DataLossError(StrCat(file, ": ", file_size,
                                      " bytes, too short for a safetensors file (8-byte header "
                                      "length, then the header)"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(first8[i]);
  if (n > kMaxSafetensorsHeader) {
    return absl::DataLossError(StrCat(file, ": the header length at byte offset 0 is ", n, ", over the limit of ",
                                      kMaxSafetensorsHeader, " bytes"));
  }
  if (n > file_size - 8) {
    return absl::DataLossError(StrCat(file, ": the header length at byte offset 0 is ", n,
                                      " bytes, past the end of the file (", file_size, " bytes)"));
  }
  if (n < 2) return absl::DataLossError(StrCat(file, ": the header length at byte offset 0 is ", n, " bytes"));
  return n;
}

absl::StatusOr<SafetensorsFile> DecodeSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                        std::string_view file) {
  SafetensorsFile out;
  out.header_len = json.size();
  out.data_start = 8 + json.size();
  if (out.data_start > file_size) {
    return absl::DataLossError(StrCat(file, ": the header ends past the end of the file"));
  }
  const uint64_t buffer = file_size - out.data_start;
  auto parsed = ParseJson(json, StrCat(file, " header"), /*max_depth=*/4);
  if (!parsed.ok()) return absl::DataLossError(parsed.status().message());
  const JsonValue& root = *parsed;
  if (!root.is_object()) return absl::DataLossError(StrCat(file, ": the header is not a JSON object"));
  for (const auto& [name, v] : root.members) {
    if (name == "__metadata__") {
      if (!v.is_object()) return absl::DataLossError(StrCat(file, ": __metadata__ is not an object of strings"));
      for (const auto& [k, mv] : v.members) {
        if (!mv.is_string()) {
          return absl::DataLossError(StrCat(file, ": __metadata__ ", Quoted(k), " is not a string"));
        }
        out.metadata[k] = mv.text;
      }
      continue;
    }
    const std::string where = StrCat(file, ": tensor ", Quoted(name));
    if (name.empty() || name.size() > kMaxNameBytes) {
      return absl::DataLossError(StrCat(where, ": a name must have 1 to ", kMaxNameBytes, " bytes"));
    }
    if (!v.is_object()) return absl::DataLossError(StrCat(where, " is not an object"));
    SafetensorsTensor t;
    t.name = name;
    const JsonValue* dtype = v.Find("dtype");
    const JsonValue* shape = v.Find("shape");
    const JsonValue* offsets = v.Find("data_offsets");
    if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
      return absl::DataLossError(StrCat(where, ": needs dtype, shape and data_offsets"));
    }
    for (const auto& [k, unused] : v.members) {
      if (k != "dtype" && k != "shape" && k != "data_offsets") {
        return absl::DataLossError(StrCat(where, ": unknown field ", Quoted(k)));
      }
    }
    if (!dtype->is_string()) return absl::DataLossError(StrCat(where, ": dtype is not a string"));
    const DTypeRow* row = FindDType(dtype->text);
    if (row == nullptr) return absl::DataLossError(StrCat(where, ": unknown dtype ", Quoted(dtype->text)));
    t.dtype_name = dtype->text;
    t.dtype = row->dtype;
    t.elem_bits = row->bits;
    if (!shape->is_array() || shape->items.size() > static_cast<size_t>(kMaxTensorRank)) {
      return absl::DataLossError(StrCat(where, ": shape must be an array of at most ", kMaxTensorRank, " sizes"));
    }
    uint64_t elements = 1;
    bool too_many = false;
    for (const JsonValue& d : shape->items) {
      const std::optional<uint64_t> n = d.AsUint64();
      if (!n || *n > static_cast<uint64_t>(kMaxTensorElements)) {
        return absl::DataLossError(StrCat(where, ": shape holds ", Quoted(d.text), ", not a size"));
      }
      t.shape.push_back(static_cast<int64_t>(*n));
      if (*n != 0 && elements > static_cast<uint64_t>(kMaxTensorElements) / *n) too_many = true;
      elements *= *n;
    }
    if (too_many || elements > static_cast<uint64_t>(kMaxTensorElements)) {
      return absl::DataLossError(
          StrCat(where, ": shape ", ShapeToString(t.shape), " has more than ", kMaxTensorElements, " elements"));
    }
    if (!offsets->is_array() || offsets->items.size() != 2 || !offsets->items[0].AsUint64() ||
        !offsets->items[1].AsUint64()) {
      return absl::DataLossError(StrCat(where, ": data_offsets must be [begin, end]"));
    }
    t.begin = *offsets->items[0].AsUint64();
    t.end = *offsets->items[1].AsUint64();
    if (t.begin > t.end || t.end > buffer) {
      return absl::DataLossError(StrCat(where, ": data_offsets [", t.begin, ", ", t.end, "] lie outside the ", buffer,
                                        "-byte buffer (file byte offsets ", out.data_start + t.begin, " to ",
                                        out.data_start + t.end, ")"));
    }
    const uint64_t bits = elements * t.elem_bits;  // elements <= 2^50, bits <= 64
    if (bits % 8 != 0 || bits / 8 != t.end - t.begin) {
      return absl::DataLossError(StrCat(where, ": ", t.dtype_name, " ", ShapeToString(t.shape), " needs ",
                                        bits % 8 == 0 ? StrCat(bits / 8, " bytes") : StrCat(bits, " bits"),
                                        ", data_offsets give ", t.end - t.begin));
    }
    out.tensors.push_back(std::move(t));
  }
  // The tensors must cover the buffer exactly, without holes or overlaps.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : out.tensors) {
    if (t.begin < at) {
      return absl::DataLossError(StrCat(file, ": tensor ", Quoted(t.name), " (buffer bytes ", t.begin, " to ", t.end,
                                        ") overlaps tensor ", Quoted(prev->name), " (to ", at, ")"));
    }
    if (t.begin > at) {
      return absl::DataLossError(StrCat(file, ": buffer bytes ", at, " to ", t.begin, " (file byte offset ",
                                        out.data_start + at, ") belong to no tensor, before tensor ", Quoted(t.name)));
    }
    at = t.end;
    prev = &t;
  }
  if (at != buffer) {
    return absl::DataLossError(StrCat(file, ": the last ", buffer - at, " bytes of the buffer (from file byte offset ",
                                      out.data_start + at, ") belong to no tensor"));
  }
  return out;
}

std::string EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  JsonWriter w;
  w.BeginObject();
  if (!metadata.empty()) {
    w.Key("__metadata__").BeginObject();
    for (const auto& [k, v] : metadata) w.Key(k).String(v);
    w.EndObject();
  }
  for (const SafetensorsTensor& t : tensors) {
    w.Key(t.name).BeginObject();
    w.Key("dtype").String(t.dtype_name);
    w.Key("shape").BeginArray();
    for (int64_t d : t.shape) w.Int(d);
    w.EndArray();
    w.Key("data_offsets").BeginArray().Int(static_cast<int64_t>(t.begin)).Int(static_cast<int64_t>(t.end)).EndArray();
    w.EndObject();
  }
  w.EndObject();
  std::string json = w.str();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

absl::StatusOr<SafetensorsIndex> DecodeSafetensorsIndex(std::string_view json, std::string_view file) {
  if (json.size() > kMaxSafetensorsIndex) {
    return absl::DataLossError(StrCat(file, ": ", json.size(), " bytes, over the limit of ", kMaxSafetensorsIndex));
  }
  auto parsed = ParseJson(json, file, /*max_depth=*/8);
  if (!parsed.ok()) return absl::DataLossError(parsed.status().message());
  SafetensorsIndex out;
  const JsonValue* map = parsed->is_object() ? parsed->Find("weight_map") : nullptr;
  if (map == nullptr || !map->is_object()) return absl::DataLossError(StrCat(file, ": no weight_map object"));
  for (const auto& [name, v] : map->members) {
    if (!v.is_string() || v.text.empty() || v.text.size() > kMaxFileNameBytes ||
        v.text.find('/') != std::string::npos || v.text == "." || v.text == "..") {
      return absl::DataLossError(
          StrCat(file, ": weight_map names ", Quoted(v.text), " for tensor ", Quoted(name), ", not a file name"));
    }
    out.weight_map[name] = v.text;
  }
  if (const JsonValue* meta = parsed->Find("metadata"); meta != nullptr) {
    if (!meta->is_object()) return absl::DataLossError(StrCat(file, ": metadata is not an object"));
    for (const auto& [k, v] : meta->members) {
      if (k == "total_size") {
        const std::optional<uint64_t> n = v.AsUint64();
        if (!n) return absl::DataLossError(StrCat(file, ": metadata.total_size is not a size"));
        out.total_size = *n;
      } else if (v.is_string()) {
        out.metadata[k] = v.text;
      }
    }
  }
  return out;
}

std::string EncodeSafetensorsIndex(const SafetensorsIndex& index) {
  JsonWriter w;
  w.BeginObject();
  w.Key("metadata").BeginObject();
  w.Key("total_size").Int(static_cast<int64_t>(index.total_size));
  for (const auto& [k, v] : index.metadata) w.Key(k).String(v);
  w.EndObject();
  w.Key("weight_map").BeginObject();
  for (const auto& [k, v] : index.weight_map) w.Key(k).String(v);
  w.EndObject();
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace ckpt
