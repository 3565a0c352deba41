// What the CPU offers the vector paths (codec shuffles, streaming copies,
// value tallies): probed once, in one place.
#ifndef CKPT_UTIL_CPU_H_
#define CKPT_UTIL_CPU_H_

namespace ckpt {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;
};

/// This CPU's features (x86-64; none elsewhere), probed on the first call.
/// CKPT_CPU=baseline in the environment turns them all off: every vector
/// path then takes its portable one (for a comparison, or a machine whose
/// vector units are suspected).
const CpuFeatures& Cpu();

namespace internal {
/// Makes Cpu() return `features` from now on and returns what it returned
/// (tests of the portable paths; not for concurrent use).
CpuFeatures SetCpuForTest(const CpuFeatures& features);
}  // namespace internal

}  // namespace ckpt

#endif  // CKPT_UTIL_CPU_H_
