// Saves and loads one tensor through the installed library.
#include <cstdio>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/conformance.h"
#include "ckpt/version.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  ckpt::CheckpointerOptions o;
  o.uri = argv[1];
  auto cp = ckpt::Checkpointer::Open(o);
  if (!cp.ok()) return 1;
  std::vector<float> w(1000), back(1000, 0.0f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f;
  ckpt::TensorSpec spec{"w", ckpt::DType::kF32, {10, 100}};
  ckpt::State s, t;
  if (!s.AddTensor(spec, w.data()).ok() || !t.AddTensor(spec, back.data()).ok()) return 1;
  auto h = (*cp)->Save(1, s);
  if (!h.ok() || !h->Wait().ok()) return 1;
  if (!(*cp)->Load(t).ok() || back != w) return 1;
  // A backend's own tests run the conformance suite through the installed header.
  int n = 0;
  for (const ckpt::ConformanceCase& c : ckpt::StorageConformanceCases()) {
    const std::string root = "mem://consumer-conformance-" + std::to_string(++n);
    if (!ckpt::RunStorageConformanceCase(c.name, [&] { return ckpt::OpenStorage(root); }).ok()) return 1;
  }
  std::printf("ckpt %s: saved and loaded through find_package(ckpt); %d conformance cases passed on mem://\n",
              ckpt::LibraryVersion(), n);
  return 0;
}
