// Statistics behind the failure-log fits of ckpt/interval.h.
#ifndef CKPT_POLICY_FAILURE_FIT_H_
#define CKPT_POLICY_FAILURE_FIT_H_

namespace ckpt {

/// Quantile of the chi-square distribution with `dof` degrees of freedom.
double ChiSquareQuantile(double p, double dof);

}  // namespace ckpt

#endif  // CKPT_POLICY_FAILURE_FIT_H_
