// Test helper: saves steps 1, 2, 3, ... to ROOT until killed. Each step's
// values are seeded by the step number so a restore can be checked.
//
//   crash_saver ROOT [MiB per step] [delta]
//
// With "delta" the saves are deltas (chain 3) and a step's values are those
// of seed 0 with one row from the step's seed (DeltaCrashValues): mostly
// the same bytes from step to step, as in training.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/synthetic.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: crash_saver ROOT [MiB]\n");
    return 2;
  }
  const int mib = argc > 2 ? std::atoi(argv[2]) : 8;
  const bool delta = argc > 3 && std::string(argv[3]) == "delta";
  ckpt::CheckpointerOptions o;
  o.uri = argv[1];
  o.codec = ckpt::Codec::kZstd;
  o.engine_options.block_size = 256 << 10;
  o.engine_options.staging_bytes = 4 << 20;  // smaller than a step: streams
  o.retention.keep_last = 2;
  if (delta) o.delta.chain = 3;
  auto cp = ckpt::Checkpointer::Open(o);
  if (!cp.ok()) {
    std::fprintf(stderr, "open: %s\n", std::string(cp.status().message()).c_str());
    return 1;
  }
  auto latest = (*cp)->LatestStep();
  int64_t step = latest.ok() ? *latest + 1 : 1;
  const ckpt::TensorSpec spec{"model.w", ckpt::DType::kF32, {mib * 256, 1024}};
  std::vector<std::byte> data(static_cast<size_t>(spec.NumElements()) * 4);
  for (;; ++step) {
    if (delta) {
      ckpt::FillSynthetic(spec, ckpt::Box::Whole(spec.shape), 0, data.data());
      const int64_t row = step % spec.shape[0];
      ckpt::FillSynthetic(spec, ckpt::Box({row, 0}, {1, spec.shape[1]}), static_cast<uint64_t>(step),
                          data.data() + row * spec.shape[1] * 4);
    } else {
      ckpt::FillSynthetic(spec, ckpt::Box::Whole(spec.shape), static_cast<uint64_t>(step), data.data());
    }
    ckpt::State state;
    if (!state.AddTensor(spec, data.data()).ok()) return 1;
    std::string pos = std::to_string(step);
    if (!state.AddBlob("position", pos.data(), pos.size(), ckpt::BlobScope::kGlobal).ok()) return 1;
    auto h = (*cp)->Save(step, state);
    absl::Status s = h.ok() ? h->Wait() : h.status();
    if (!s.ok()) {
      std::fprintf(stderr, "save %lld failed: %s\n", static_cast<long long>(step), std::string(s.message()).c_str());
      return 1;
    }
    std::printf("%lld\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
}
