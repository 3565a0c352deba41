// Saves and loads one tensor through the installed library.
#include <cstdio>
#include <vector>

#include "ckpt/checkpointer.h"
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
  std::printf("ckpt %s: saved and loaded through find_package(ckpt)\n", ckpt::LibraryVersion());
  return 0;
}
