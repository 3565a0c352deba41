#include "common/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "util/strings.h"

namespace ckpt::tools {
namespace {

std::string Num(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f", v);
  return b;
}

std::string Escape(const std::string& s) { return XmlEscape(s); }

// A tick step of 1, 2 or 5 times a power of ten giving about `count` ticks.
double NiceStep(double span, int count) {
  const double raw = span / count;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string RenderSvg(const Plot& p) {
  const double W = 760, H = 460, L = 70, R = 200, T = 40, B = 60;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const PlotSeries& s : p.series) {
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, y] = s.points[i];
      if (!std::isfinite(x) || !std::isfinite(y) || (p.log_x && x <= 0) || y < p.y_floor) continue;
      const double e = i < s.error.size() ? s.error[i] : 0;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y - e);
      y1 = std::max(y1, y + e);
    }
  }
  for (const PlotMarker& m : p.markers) {
    if (m.x > 0 || !p.log_x) {
      x0 = std::min(x0, m.x);
      x1 = std::max(x1, m.x);
    }
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-9) y0 -= 0.5, y1 += 0.5;
  const double step = NiceStep(y1 - y0, 5);
  y0 = std::floor(y0 / step - 0.25) * step;
  y1 = std::ceil(y1 / step + 0.25) * step;
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  auto fx = [&](double x) {
    const double a = p.log_x ? std::log10(x0) : x0, b = p.log_x ? std::log10(x1) : x1;
    const double v = p.log_x ? std::log10(x) : x;
    return L + (b > a ? (v - a) / (b - a) : 0.5) * (W - L - R);
  };
  auto fy = [&](double y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - B); };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(W) + "\" height=\"" + Num(H) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + Num(L) + "\" y=\"24\" font-size=\"15\">" + Escape(p.title) + "</text>\n";
  // Axes and ticks.
  s += "<line x1=\"" + Num(L) + "\" y1=\"" + Num(H - B) + "\" x2=\"" + Num(W - R) + "\" y2=\"" + Num(H - B) +
       "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + Num(L) + "\" y1=\"" + Num(T) + "\" x2=\"" + Num(L) + "\" y2=\"" + Num(H - B) +
       "\" stroke=\"black\"/>\n";
  for (double y = y0; y <= y1 + step * 1e-6; y += step) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.*f", decimals, std::abs(y) < step * 1e-6 ? 0.0 : y);
    s += "<line x1=\"" + Num(L - 4) + "\" y1=\"" + Num(fy(y)) + "\" x2=\"" + Num(W - R) + "\" y2=\"" + Num(fy(y)) +
         "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + Num(L - 8) + "\" y=\"" + Num(fy(y) + 4) + "\" text-anchor=\"end\">" + b + "</text>\n";
  }
  for (int i = 0; i <= 6; ++i) {
    const double x =
        p.log_x ? std::pow(10.0, std::log10(x0) + (std::log10(x1) - std::log10(x0)) * i / 6) : x0 + (x1 - x0) * i / 6;
    char b[32];
    std::snprintf(b, sizeof(b), "%.3g", x);
    const std::string label = p.x_format ? p.x_format(x) : std::string(b);
    s += "<line x1=\"" + Num(fx(x)) + "\" y1=\"" + Num(H - B) + "\" x2=\"" + Num(fx(x)) + "\" y2=\"" + Num(H - B + 4) +
         "\" stroke=\"black\"/>\n";
    s += "<text x=\"" + Num(fx(x)) + "\" y=\"" + Num(H - B + 18) + "\" text-anchor=\"middle\">" + Escape(label) +
         "</text>\n";
  }
  s += "<text x=\"" + Num((L + W - R) / 2) + "\" y=\"" + Num(H - 16) + "\" text-anchor=\"middle\">" +
       Escape(p.x_label) + "</text>\n";
  s += "<text transform=\"translate(18," + Num((T + H - B) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       Escape(p.y_label) + "</text>\n";
  // Vertical markers.
  int legend = 0;
  for (const PlotMarker& m : p.markers) {
    if (p.log_x && m.x <= 0) continue;
    s += "<line x1=\"" + Num(fx(m.x)) + "\" y1=\"" + Num(T) + "\" x2=\"" + Num(fx(m.x)) + "\" y2=\"" + Num(H - B) +
         "\" stroke=\"" + m.color + "\" stroke-dasharray=\"2,3\"/>\n";
    s += "<text x=\"" + Num(W - R + 10) + "\" y=\"" + Num(T + 16 + 18 * legend++) + "\" fill=\"" + m.color + "\">| " +
         Escape(m.label) + "</text>\n";
  }
  // Series.
  for (const PlotSeries& ser : p.series) {
    if (ser.markers) {
      for (size_t i = 0; i < ser.points.size(); ++i) {
        const auto [x, y] = ser.points[i];
        if ((p.log_x && x <= 0) || y < p.y_floor) continue;
        if (i < ser.error.size() && ser.error[i] > 0) {
          s += "<line x1=\"" + Num(fx(x)) + "\" y1=\"" + Num(fy(y - ser.error[i])) + "\" x2=\"" + Num(fx(x)) +
               "\" y2=\"" + Num(fy(y + ser.error[i])) + "\" stroke=\"" + ser.color + "\"/>\n";
        }
        s += "<circle cx=\"" + Num(fx(x)) + "\" cy=\"" + Num(fy(y)) + "\" r=\"3.5\" fill=\"" + ser.color + "\"/>\n";
      }
    } else {
      std::string d;
      for (const auto& [x, y] : ser.points) {
        if (!std::isfinite(y) || (p.log_x && x <= 0) || y < p.y_floor) continue;
        d += (d.empty() ? "M" : "L") + Num(fx(x)) + "," + Num(fy(y)) + " ";
      }
      s += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + ser.color + "\" stroke-width=\"2\"" +
           (ser.dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
    }
    s += "<text x=\"" + Num(W - R + 10) + "\" y=\"" + Num(T + 16 + 18 * legend++) + "\" fill=\"" + ser.color + "\">" +
         (ser.markers ? "o " : "— ") + Escape(ser.label) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace ckpt::tools
