// Line plots as PNG: loss curves (train + held-out loss vs step), score-vs-length comparisons.
//
// Axes get "nice" tick values (steps of 1, 2 or 5 times a power of ten), grid lines, tick labels
// and axis labels; each series has its own colour (fixed palette) and marker shape; markers are
// drawn when a series has few points; a legend box sits in the corner of the plot area that covers
// the fewest data points. Non-finite points (NaN, inf) are skipped and break the line there.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "report/canvas.h"

namespace hydra {

struct Series {
    std::string label;
    std::vector<double> x, y;  // same length
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

// Where the data went on the canvas, for callers (and tests) that need to locate a point.
struct PlotFrame {
    int left = 0, top = 0, right = 0, bottom = 0;   // plot area [left, right) x [top, bottom)
    double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;  // axis range in data units
    bool log_x = false, log_y = false;
    int legend_x = 0, legend_y = 0, legend_w = 0, legend_h = 0;  // legend box (w = 0: none)
    double px(double x) const;  // data x -> pixel x (centre of pixel column = integer + 0.5)
    double py(double y) const;  // data y -> pixel y
};

// Series i gets series_color(i) and series_marker(i) (both cycle).
Rgb series_color(size_t i);
Marker series_marker(size_t i);

// Tick values: multiples of step = {1, 2, 5} x 10^k inside [lo, hi], with step chosen so that there
// are about target ticks (at least 2 whenever the range allows). E.g. (0, 0.87) -> 0, 0.2, ..., 0.8.
// Requires finite lo < hi.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// The step nice_ticks(lo, hi, target) uses.
double nice_step(double lo, double hi, int target = 6);
// Ticks for a log axis on [lo, hi] (0 < lo < hi): powers of ten (thinned if there are many decades),
// plus 2x and 5x when fewer than 3 decades show; linear nice ticks when even that gives fewer than 2.
std::vector<double> log_ticks(double lo, double hi);
// Label for a tick value on an axis whose tick step is step: as few decimals as the step needs,
// scientific notation for very large or very small values, never "-0".
std::string format_tick(double v, double step);

// Renders the plot. Throws hydra::Error for: no series, a series whose x and y lengths differ, no
// finite point at all, non-positive values on a log axis, a bad size or a bad fixed range.
Canvas render_line_plot(const std::vector<Series>& series, const LinePlotOptions& options,
                        PlotFrame* frame = nullptr);
// render_line_plot + Canvas::write_png (atomic).
void write_line_plot(const std::string& path, const std::vector<Series>& series,
                     const LinePlotOptions& options);

}  // namespace hydra
