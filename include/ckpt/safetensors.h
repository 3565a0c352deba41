// The safetensors format (Hugging Face), for tools that write it or read a
// model's bytes in place: the header and index encoders `ckpt export`
// writes with, and the capability of a safetensors:// root that says where
// each tensor's bytes lie (`ckpt import` maps them instead of reading them).
//
// A file is an 8-byte little-endian header length N, N bytes of JSON, then
// the byte buffer. The JSON maps each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets into the buffer, which the tensors
// cover exactly) and may hold "__metadata__", a map of strings. Sharded
// models add model.safetensors.index.json: {"metadata": {"total_size": N},
// "weight_map": {tensor: file}}.
#ifndef CKPT_SAFETENSORS_H_
#define CKPT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/export.h"
#include "ckpt/storage.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// One tensor of a safetensors header.
struct CKPT_EXPORT SafetensorsTensor {
  std::string name;
  std::string dtype_name;      ///< as spelled in the file ("BF16", "F8_E4M3")
  std::optional<DType> dtype;  ///< ckpt's type for it, when ckpt has one
  uint32_t elem_bits = 0;      ///< bits per element (4 for F4)
  Shape shape;
  uint64_t begin = 0;  ///< byte range in the buffer
  uint64_t end = 0;
};

/// The safetensors name of a ckpt dtype ("BF16").
CKPT_EXPORT std::string_view SafetensorsDTypeName(DType dtype);

/// The 8-byte prefix and the JSON header for `tensors` (their begin/end set,
/// in buffer order) and `metadata`, padded with spaces so that the buffer
/// starts at a multiple of 8.
CKPT_EXPORT std::string EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                                const std::map<std::string, std::string>& metadata);

/// model.safetensors.index.json.
struct CKPT_EXPORT SafetensorsIndex {
  uint64_t total_size = 0;
  std::map<std::string, std::string> weight_map;  ///< tensor -> shard file name
  std::map<std::string, std::string> metadata;    ///< other string members of "metadata"
};
CKPT_EXPORT std::string EncodeSafetensorsIndex(const SafetensorsIndex& index);

/// Capability of a safetensors model opened as a root (safetensors://, or a
/// plain path holding a model): where each tensor's bytes lie in the model's
/// local files, for tools that map them rather than read them.
class CKPT_EXPORT SafetensorsModel : public StorageCapability {
 public:
  static constexpr std::string_view kName = "safetensors-model";
  struct Tensor {
    TensorSpec spec;
    std::string file;     ///< the shard's local path
    uint64_t offset = 0;  ///< of the tensor's first byte in `file`
    uint64_t bytes = 0;   ///< NumElements * DTypeSize
  };
  /// Every tensor, ascending by name.
  virtual const std::vector<Tensor>& tensors() const = 0;
  /// The step the root presents (the first file's ckpt.step, else 0).
  virtual int64_t step() const = 0;
  /// The model's metadata as the root's step presents it ("ckpt.meta.KEY"
  /// entries of `ckpt export` as KEY).
  virtual const std::map<std::string, std::string>& metadata() const = 0;
};

}  // namespace ckpt

#endif  // CKPT_SAFETENSORS_H_
