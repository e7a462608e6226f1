// Line plots as PNG, drawn by PLplot: loss curves (train + held-out loss vs step), score-vs-length
// comparisons with error bars (confidence intervals).
//
// Axes get "nice" tick values (report/axis_ticks.h), grid lines, tick labels and axis labels; each
// series has its own colour (series_color) and marker shape; markers are drawn when a series has few
// points, and always on a point with no finite neighbour (no line can show it); a legend (PLplot's)
// sits in the corner of the plot area that covers the fewest data points. Non-finite points (NaN,
// inf) are skipped and break the line there.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace hydra {

struct Series {
    std::string label;
    std::vector<double> x, y;  // same length
    // Optional error bars (e.g. 95% bootstrap intervals): empty, or one lower and one upper end per
    // point; a point whose ends are not both finite gets no bar. Bars count for the axis range.
    std::vector<double> y_lo = {}, y_hi = {};
};

struct LinePlotOptions {
    std::string title, x_label, y_label;
    bool log_x = false, log_y = false;  // log axes need every finite value > 0
    int width = 900, height = 560;      // pixels, each in [240, 8192]
    // Fixed axis ranges; NaN means "from the data" (padded by 3% of the span on each side).
    double x_min = NAN, x_max = NAN, y_min = NAN, y_max = NAN;
    int marker_max_points = 40;  // series with at most this many finite points get markers
    double line_width = 2.0;     // pixels
};

// Where the data went in the image, for callers (and tests) that need to locate a point.
struct PlotFrame {
    double left = 0, top = 0, right = 0, bottom = 0;  // plot area, pixel coordinates (y down)
    double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;    // axis range in data units
    bool log_x = false, log_y = false;
    double legend_x = 0, legend_y = 0, legend_w = 0, legend_h = 0;  // legend box (w = 0: none)
    double px(double x) const;  // data x -> pixel x (pixel i covers [i, i+1))
    double py(double y) const;  // data y -> pixel y
};

// Renders the plot and writes it as PNG (atomically: a temporary file renamed into place). Throws
// hydra::Error naming path for: no series, a series whose x and y lengths differ (or whose error bar
// ends are neither empty nor as many as its points), a bar end on the wrong side of its point, no finite
// point at all, non-positive values on a log axis, a bad size or fixed range, PLplot's PNG device missing
// (the message names the Debian package), or a path that cannot be written. frame, when given, receives the
// layout.
void write_line_plot(const std::string& path, const std::vector<Series>& series,
                     const LinePlotOptions& options, PlotFrame* frame = nullptr);

}  // namespace hydra
