// A Hugging Face safetensors model read in place as a read-only ckpt root:
// one committed step whose MANIFEST, CLAIM and block indexes are derived
// from the safetensors headers, so every load, audit and tool works on it
// unchanged and each rank reads only the byte ranges of its boxes.
//
//   safetensors:///models/llama           a directory: model.safetensors.index.json
//                                         and its shards, or its *.safetensors files
//   safetensors:///models/x.safetensors   one file
//   /models/llama                         a plain path holding a model and no
//                                         ckpt root (no LATEST) is detected
//
// The step is the first file's __metadata__ "ckpt.step" when it has one
// (a `ckpt export`), else 0. Each shard is a data file of bare, unchecked
// blocks of kSafetensorsBlockBytes over its tensors' bytes; its index is
// served past the file's end. safetensors has no checksums: nothing but
// structure can be verified (`verify` says so and checks SHA256SUMS when it
// is present). Writes are refused.
#ifndef CKPT_FORMAT_ROOTS_SAFETENSORS_SAFETENSORS_STORAGE_H_
#define CKPT_FORMAT_ROOTS_SAFETENSORS_SAFETENSORS_STORAGE_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

absl::StatusOr<std::shared_ptr<Storage>> OpenSafetensorsStorage(std::string_view uri);

/// Whether the local path `path` holds a safetensors model and no ckpt root:
/// a *.safetensors file, or a directory with model.safetensors.index.json or
/// model.safetensors and no LATEST.
bool IsSafetensorsModelPath(std::string_view path);

}  // namespace ckpt

#endif  // CKPT_FORMAT_ROOTS_SAFETENSORS_SAFETENSORS_STORAGE_H_
