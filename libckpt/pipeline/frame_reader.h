// Reads many frames with bounded memory and processes them on worker threads
// while later reads are in flight. Used by load and verify.
#ifndef CKPT_PIPELINE_FRAME_READER_H_
#define CKPT_PIPELINE_FRAME_READER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/storage.h"
#include "format/data_file.h"

namespace ckpt {

class BlockCodec;

struct FrameTask {
  ReadableFile* file = nullptr;
  const IndexEntry* entry = nullptr;
  uint64_t block_id = 0;
  const void* tag = nullptr;  ///< caller's context
};

struct FrameReaderOptions {
  int worker_threads = 0;                   ///< 0: min(4, hardware)
  size_t buffer_bytes = size_t{64} << 20;   ///< bytes in flight (at most)
  size_t max_read_bytes = size_t{8} << 20;  ///< adjacent frames per read
  bool stop_on_error = true;
};

/// Runs `process(task, frame, codec, scratch)` for every task, the frame
/// being the bytes read at task.entry->offset (frame_len long). A failed read
/// or process call is passed to `on_error` (from any thread, serialized);
/// with stop_on_error no new reads start after the first. Tasks are read in
/// the order given, adjacent frames of a file in one request. `on_done`
/// (optional) sees each frame once processed.
/// Returns the first error (or OK).
absl::Status ReadFrames(std::vector<FrameTask>& tasks, const FrameReaderOptions& options,
                        const std::function<absl::Status(const FrameTask&, absl::Span<const std::byte>, BlockCodec&,
                                                         std::vector<std::byte>&)>& process,
                        const std::function<void(const FrameTask&, const absl::Status&)>& on_error,
                        const std::function<void(const FrameTask&)>& on_done = nullptr);

}  // namespace ckpt

#endif  // CKPT_PIPELINE_FRAME_READER_H_
