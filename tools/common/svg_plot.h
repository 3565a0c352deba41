// A small line-chart writer for SVG output (goodput curves and the like).
#ifndef CKPT_TOOLS_SVG_PLOT_H_
#define CKPT_TOOLS_SVG_PLOT_H_

#include <string>
#include <vector>

namespace ckpt::tools {

struct PlotSeries {
  std::string label;
  std::string color;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
  bool markers = false;       ///< circles instead of a line
  std::vector<double> error;  ///< optional +- per point (markers)
};

struct PlotMarker {
  double x = 0;
  std::string label;
  std::string color;
};

struct Plot {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  /// Points below this are left out, so one steep curve does not flatten the
  /// others; the y axis starts at or below the lowest point kept.
  double y_floor = -1e300;
  std::vector<PlotSeries> series;
  std::vector<PlotMarker> markers;  ///< vertical lines
  /// Formats an x value for tick labels (e.g. seconds as "10 min").
  std::string (*x_format)(double) = nullptr;
};

/// Renders the plot as a standalone SVG document.
std::string RenderSvg(const Plot& plot);

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_SVG_PLOT_H_
