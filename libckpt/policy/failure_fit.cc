#include "policy/failure_fit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <numeric>

#include "ckpt/interval.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Regularized lower incomplete gamma P(a, x).
double GammaP(double a, double x) {
  if (x <= 0) return 0;
  const double gln = std::lgamma(a);
  if (x < a + 1) {  // series
    double sum = 1.0 / a, term = sum, ap = a;
    for (int n = 0; n < 1000; ++n) {
      ap += 1;
      term *= x / ap;
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
    }
    return sum * std::exp(-x + a * std::log(x) - gln);
  }
  // Continued fraction for Q(a, x) (modified Lentz).
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return 1.0 - std::exp(-x + a * std::log(x) - gln) * h;
}

}  // namespace

double ChiSquareQuantile(double p, double dof) {
  if (p <= 0) return 0;
  if (p >= 1) return INFINITY;
  double lo = 0, hi = std::max(1.0, dof);
  while (GammaP(dof / 2, hi / 2) < p) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (GammaP(dof / 2, mid / 2) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

MtbfEstimate EstimateMtbf(const std::vector<double>& gaps, double censored_tail) {
  MtbfEstimate e;
  e.failures = static_cast<int64_t>(gaps.size());
  e.observed_s = std::accumulate(gaps.begin(), gaps.end(), 0.0) + std::max(0.0, censored_tail);
  if (e.failures == 0) {
    e.mtbf = INFINITY;
    e.upper95 = INFINITY;
    e.lower95 = e.observed_s > 0 ? 2 * e.observed_s / ChiSquareQuantile(0.95, 2) : 0;
    return e;
  }
  const double n = static_cast<double>(e.failures);
  e.mtbf = e.observed_s / n;
  // Failure-truncated: 2T/M ~ chi2(2n); time-truncated adds a degree pair
  // to the lower bound.
  const double lower_dof = censored_tail > 0 ? 2 * n + 2 : 2 * n;
  e.lower95 = 2 * e.observed_s / ChiSquareQuantile(0.975, lower_dof);
  e.upper95 = 2 * e.observed_s / ChiSquareQuantile(0.025, 2 * n);
  return e;
}

double WeibullFit::Mean() const { return scale * std::tgamma(1.0 + 1.0 / shape); }

absl::StatusOr<WeibullFit> FitWeibull(const std::vector<double>& gaps) {
  std::vector<double> x;
  for (double g : gaps) {
    if (g > 0 && std::isfinite(g)) x.push_back(g);
  }
  if (x.size() < 2 || *std::max_element(x.begin(), x.end()) == *std::min_element(x.begin(), x.end())) {
    return absl::InvalidArgumentError("a Weibull fit needs at least two distinct positive gaps");
  }
  const double xmax = *std::max_element(x.begin(), x.end());
  const double n = static_cast<double>(x.size());
  double mean_log = 0;
  for (double v : x) mean_log += std::log(v / xmax);
  mean_log /= n;
  // g(k) = sum y^k ln y / sum y^k - 1/k - mean(ln y), y = x / xmax: increasing.
  auto g = [&](double k) {
    double s = 0, sl = 0;
    for (double v : x) {
      const double y = v / xmax, yk = std::pow(y, k);
      s += yk;
      sl += yk * std::log(y);
    }
    return sl / s - 1.0 / k - mean_log;
  };
  double lo = 1e-3, hi = 1.0;
  while (g(hi) < 0 && hi < 1e4) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (g(mid) < 0 ? lo : hi) = mid;
  }
  WeibullFit fit;
  fit.shape = (lo + hi) / 2;
  double s = 0;
  for (double v : x) s += std::pow(v / xmax, fit.shape);
  fit.scale = xmax * std::pow(s / n, 1.0 / fit.shape);
  return fit;
}

namespace {

// ISO-8601 "YYYY-MM-DDTHH:MM[:SS[.fff]][Z|+hh:mm|-hh:mm]" or Unix seconds.
absl::StatusOr<double> ParseTimestamp(std::string_view s) {
  double unix_s;
  if (ParseDouble(s, &unix_s)) return unix_s;
  int y, mo, d, h = 0, mi = 0;
  double sec = 0;
  char sep = 0;
  int used = 0;
  std::string str(s);
  if (std::sscanf(str.c_str(), "%d-%d-%d%c%d:%d%n", &y, &mo, &d, &sep, &h, &mi, &used) < 6 ||
      (sep != 'T' && sep != ' ')) {
    return absl::InvalidArgumentError(StrCat("not a timestamp: '", s, "'"));
  }
  std::string_view rest = std::string_view(str).substr(used);
  if (!rest.empty() && rest.front() == ':') {
    size_t end = 1;
    while (end < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[end])) || rest[end] == '.')) ++end;
    if (!ParseDouble(rest.substr(1, end - 1), &sec)) {
      return absl::InvalidArgumentError(StrCat("bad seconds in '", s, "'"));
    }
    rest.remove_prefix(end);
  }
  int offset = 0;
  if (!rest.empty() && (rest.front() == '+' || rest.front() == '-')) {
    int oh = 0, om = 0;
    if (std::sscanf(std::string(rest.substr(1)).c_str(), "%d:%d", &oh, &om) < 1) {
      return absl::InvalidArgumentError(StrCat("bad zone in '", s, "'"));
    }
    offset = (rest.front() == '+' ? 1 : -1) * (oh * 3600 + om * 60);
  } else if (!rest.empty() && rest != "Z") {
    return absl::InvalidArgumentError(StrCat("trailing text in timestamp '", s, "'"));
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  return static_cast<double>(timegm(&tm)) + sec - offset;
}

}  // namespace

absl::StatusOr<std::vector<double>> ParseFailureLog(const std::string& text, bool intervals) {
  std::vector<std::string> fields;
  std::vector<std::string> where;  // "line N" or "entry N", for errors
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  if (!t.empty() && t.front() == '[') {
    // A JSON array of numbers or strings.
    std::string cur;
    bool in_str = false;
    for (char c : t.substr(1)) {
      if (in_str) {
        if (c == '"') {
          in_str = false;
        } else {
          cur += c;
        }
      } else if (c == '"') {
        in_str = true;
      } else if (c == ',' || c == ']') {
        if (!cur.empty()) {
          fields.push_back(cur);
          where.push_back(StrCat("entry ", fields.size()));
        }
        cur.clear();
        if (c == ']') break;
      } else if (!std::isspace(static_cast<unsigned char>(c))) {
        cur += c;
      }
    }
  } else {
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      std::string line = text.substr(pos, nl - pos);
      pos = nl + 1;
      ++line_no;
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (line.empty() || line[0] == '#') continue;
      std::string first = line.substr(0, line.find(','));
      while (!first.empty() && std::isspace(static_cast<unsigned char>(first.front()))) first.erase(0, 1);
      if (first.size() >= 2 && first.front() == '"' && first.back() == '"') first = first.substr(1, first.size() - 2);
      const bool numeric_start =
          !first.empty() && (std::isdigit(static_cast<unsigned char>(first[0])) || first[0] == '.');
      if (line_no == 1 && !numeric_start) continue;  // a header
      fields.push_back(first);
      where.push_back(StrCat("line ", line_no));
    }
  }
  std::vector<double> out;
  if (intervals) {
    for (size_t i = 0; i < fields.size(); ++i) {
      auto d = ParseDuration(fields[i]);
      if (!d) {
        return absl::InvalidArgumentError(
            StrCat(where[i], ": bad duration '", fields[i], "' (a number with s, m, h or d, e.g. 24h)"));
      }
      out.push_back(*d);
    }
  } else {
    std::vector<double> times;
    for (size_t i = 0; i < fields.size(); ++i) {
      auto ts = ParseTimestamp(fields[i]);
      if (!ts.ok()) return absl::InvalidArgumentError(StrCat(where[i], ": ", ts.status().message()));
      times.push_back(*ts);
    }
    std::sort(times.begin(), times.end());
    for (size_t i = 1; i < times.size(); ++i) out.push_back(times[i] - times[i - 1]);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(intervals ? "the failure log has no intervals"
                                                : "the failure log needs at least two failures");
  }
  return out;
}

}  // namespace ckpt
