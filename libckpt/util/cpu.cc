#include "util/cpu.h"

#include <cstdlib>
#include <cstring>

namespace ckpt {
namespace {

CpuFeatures Probe() {
  CpuFeatures f;
  const char* env = std::getenv("CKPT_CPU");
  if (env != nullptr && std::strcmp(env, "baseline") == 0) return f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.avx512f = __builtin_cpu_supports("avx512f");
#endif
  return f;
}

CpuFeatures& Features() {
  static CpuFeatures features = Probe();
  return features;
}

}  // namespace

const CpuFeatures& Cpu() { return Features(); }

namespace internal {
CpuFeatures SetCpuForTest(const CpuFeatures& features) {
  const CpuFeatures before = Features();
  Features() = features;
  return before;
}
}  // namespace internal

}  // namespace ckpt
