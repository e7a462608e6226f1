// Line plot layout (axis ranges, ticks, margins, legend corner) and its drawing through PLplot.
#include "report/line_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "report/axis_ticks.h"
#include "report/colors.h"
#include "report/plplot_page.h"

namespace hydra {

namespace {

constexpr Rgb kText = rgb_hex(0x222222);
constexpr Rgb kFrame = rgb_hex(0x444444);
constexpr Rgb kGrid = rgb_hex(0xe4e4e4);
constexpr Rgb kWhite = rgb_hex(0xffffff);

enum class Marker { Circle, Square, Diamond };

Marker series_marker(size_t i) {
    constexpr Marker kShapes[] = {Marker::Circle, Marker::Square, Marker::Diamond};
    return kShapes[i % 3];
}

// The same shapes as legend glyphs (DejaVu Sans has all three).
const char* marker_glyph(Marker m) {
    return m == Marker::Circle ? "\u25cf" : m == Marker::Square ? "\u25a0" : "\u25c6";
}

bool finite_point(const Series& s, size_t i) {
    return std::isfinite(s.x[i]) && std::isfinite(s.y[i]);
}

bool has_bar(const Series& s, size_t i) {
    return !s.y_lo.empty() && std::isfinite(s.y_lo[i]) && std::isfinite(s.y_hi[i]);
}

struct Axis {
    double lo = 0, hi = 1;  // range in data units
    bool log = false;
    std::vector<double> ticks;
    std::vector<std::string> labels;
};

// Range of one axis: fixed ends where given, else the finite data range padded by 3% (in log10
// space for a log axis). A zero-width data range is widened so the data sits in the middle.
void axis_range(Axis& a, double data_lo, double data_hi, double fixed_lo, double fixed_hi, const char* name) {
    auto f = [&](double v) { return a.log ? std::log10(v) : v; };
    auto inv = [&](double v) { return a.log ? std::pow(10.0, v) : v; };
    double lo = f(data_lo), hi = f(data_hi);
    if (hi - lo <= 0.0 || !std::isfinite(hi - lo)) {
        double w = a.log ? 0.5 : (lo != 0.0 ? std::abs(lo) * 0.1 : 1.0);
        lo -= w;
        hi += w;
    } else {
        double pad = 0.03 * (hi - lo);
        lo -= pad;
        hi += pad;
    }
    a.lo = inv(lo);
    a.hi = inv(hi);
    if (!std::isnan(fixed_lo)) a.lo = fixed_lo;
    if (!std::isnan(fixed_hi)) a.hi = fixed_hi;
    HYDRA_CHECK(std::isfinite(a.lo) && std::isfinite(a.hi) && a.lo < a.hi,
                "{} axis range [{}, {}] is empty or not finite: set {}_min < {}_max (or leave them NaN)",
                name, a.lo, a.hi, name, name);
    HYDRA_CHECK(!a.log || a.lo > 0.0, "{} axis is logarithmic but its range starts at {}: set {}_min > 0",
                name, a.lo, name);
    HYDRA_CHECK(std::isfinite(f(a.hi) - f(a.lo)), "{} axis range [{}, {}] is too wide to plot", name, a.lo,
                a.hi);
}

void axis_ticks(Axis& a, int target) {
    a.labels.clear();
    if (a.log) {
        a.ticks = log_ticks(a.lo, a.hi);
        for (double t : a.ticks) a.labels.push_back(format_g(t));
    } else {
        a.ticks = nice_ticks(a.lo, a.hi, target);
        double step = nice_step(a.lo, a.hi, target);
        for (double t : a.ticks) a.labels.push_back(format_tick(t, step));
    }
}

// Fits text into max_width pixels: a smaller size first (down to min_size), then truncation with "..".
void fit_text(std::string& s, double& size, double min_size, double max_width) {
    while (size > min_size && PlplotPage::text_width(s, size) > max_width)
        size = std::max(min_size, size - 1.0);
    if (PlplotPage::text_width(s, size) <= max_width) return;
    while (s.size() > 1 && PlplotPage::text_width(s + "..", size) > max_width) {
        size_t n = s.size() - 1;  // drop the last character, all of its UTF-8 bytes
        while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
        s.resize(n);
    }
    s += "..";
}

// Polygon of a marker of "radius" r centred at (cx, cy): circle, axis-aligned square of side 2r, or a
// diamond with half-diagonal 1.25 r (so the three look about the same size).
void marker_polygon(Marker m, double cx, double cy, double r, std::vector<double>& xs,
                    std::vector<double>& ys) {
    xs.clear();
    ys.clear();
    if (m == Marker::Circle) {
        for (int k = 0; k < 16; ++k) {
            const double a = 2.0 * M_PI * k / 16.0;
            xs.push_back(cx + r * std::cos(a));
            ys.push_back(cy + r * std::sin(a));
        }
    } else if (m == Marker::Square) {
        xs = {cx - r, cx + r, cx + r, cx - r};
        ys = {cy - r, cy - r, cy + r, cy + r};
    } else {
        const double d = 1.25 * r;
        xs = {cx, cx + d, cx, cx - d};
        ys = {cy - d, cy, cy + d, cy};
    }
}

}  // namespace

double PlotFrame::px(double x) const {
    double t = log_x ? (std::log10(x) - std::log10(x_lo)) / (std::log10(x_hi) - std::log10(x_lo))
                     : (x - x_lo) / (x_hi - x_lo);
    return left + t * (right - left);
}

double PlotFrame::py(double y) const {
    double t = log_y ? (std::log10(y) - std::log10(y_lo)) / (std::log10(y_hi) - std::log10(y_lo))
                     : (y - y_lo) / (y_hi - y_lo);
    return bottom - t * (bottom - top);
}

void write_line_plot(const std::string& path, const std::vector<Series>& series, const LinePlotOptions& o,
                     PlotFrame* frame_out) {
    auto check = [&](bool ok, const std::string& what) {
        if (!ok) fail("{}: {}", path, what);
    };
    check(!series.empty(), "line plot has no series: pass at least one Series with points");
    check(o.width >= 240 && o.width <= 8192 && o.height >= 240 && o.height <= 8192,
          fmt::format("line plot size {}x{} is out of range: width and height must be in [240, 8192]",
                      o.width, o.height));
    check(o.line_width > 0.0 && o.line_width <= 20.0,
          fmt::format("line plot line_width {} must be in (0, 20]", o.line_width));

    // Data extent over finite points; validate sizes and log-axis positivity.
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    size_t total_finite = 0;
    for (size_t si = 0; si < series.size(); ++si) {
        const Series& s = series[si];
        check(s.x.size() == s.y.size(),
              fmt::format("series {} ('{}'): x has {} values but y has {}; they must pair up", si, s.label,
                          s.x.size(), s.y.size()));
        check((s.y_lo.empty() && s.y_hi.empty()) ||
                  (s.y_lo.size() == s.x.size() && s.y_hi.size() == s.x.size()),
              fmt::format(
                  "series {} ('{}'): {} lower and {} upper error bar ends for {} points; give none or one "
                  "per point",
                  si, s.label, s.y_lo.size(), s.y_hi.size(), s.x.size()));
        for (size_t i = 0; i < s.x.size(); ++i) {
            if (!finite_point(s, i)) continue;
            check(
                !o.log_x || s.x[i] > 0.0,
                fmt::format(
                    "series {} ('{}'): x[{}] = {} but log_x needs x > 0; drop the point or use a linear axis",
                    si, s.label, i, s.x[i]));
            check(
                !o.log_y || s.y[i] > 0.0,
                fmt::format(
                    "series {} ('{}'): y[{}] = {} but log_y needs y > 0; drop the point or use a linear axis",
                    si, s.label, i, s.y[i]));
            xmin = std::min(xmin, s.x[i]);
            xmax = std::max(xmax, s.x[i]);
            ymin = std::min(ymin, s.y[i]);
            ymax = std::max(ymax, s.y[i]);
            ++total_finite;
            if (has_bar(s, i)) {
                check(s.y_lo[i] <= s.y[i] && s.y[i] <= s.y_hi[i] && (!o.log_y || s.y_lo[i] > 0.0),
                      fmt::format("series {} ('{}'): error bar [{}, {}] at point {} does not hold y = {}{}",
                                  si, s.label, s.y_lo[i], s.y_hi[i], i, s.y[i],
                                  o.log_y ? " (or is not > 0 on log_y)" : ""));
                ymin = std::min(ymin, s.y_lo[i]);
                ymax = std::max(ymax, s.y_hi[i]);
            }
        }
    }
    check(total_finite > 0,
          fmt::format("line plot: no finite (x, y) point in any of the {} series; nothing to plot",
                      series.size()));

    Axis ax, ay;
    ax.log = o.log_x;
    ay.log = o.log_y;
    try {
        axis_range(ax, xmin, xmax, o.x_min, o.x_max, "x");
        axis_range(ay, ymin, ymax, o.y_min, o.y_max, "y");
    } catch (const Error& e) {
        fail("{}: {}", path, e.what());
    }

    // Layout in pixels. Text: 13 px characters on normal-size figures, 9 px on small ones; the title
    // a third bigger. PLplot cannot measure text, so widths are PlplotPage::text_width's estimates.
    const bool big = o.width >= 600 && o.height >= 360;
    const double th = big ? 13.0 : 9.0, pad = big ? 12.0 : 6.0, gap = big ? 6.0 : 3.0,
                 tick_len = big ? 6.0 : 4.0;
    const double line_h = 1.5 * th;  // a text line with its descenders

    std::string title = o.title, x_label = o.x_label, y_label = o.y_label;
    double title_px = std::round(th * 1.3), xl_px = th, yl_px = th;
    if (!title.empty()) fit_text(title, title_px, th * 0.75, o.width - 2 * pad);
    if (!x_label.empty()) fit_text(x_label, xl_px, th * 0.75, o.width - 2 * pad);

    const double top = pad + (title.empty() ? th * 0.6 : 1.5 * title_px + gap);
    const double bottom = o.height - pad - line_h - gap - (x_label.empty() ? 0.0 : line_h);
    if (!y_label.empty()) fit_text(y_label, yl_px, th * 0.75, bottom - top);
    const int y_target = std::clamp(int((bottom - top) / (th * 3.5)), 3, 9);
    axis_ticks(ay, y_target);
    double ylab_w = 0;
    for (auto& l : ay.labels) ylab_w = std::max(ylab_w, PlplotPage::text_width(l, th));
    const double left = pad + (y_label.empty() ? 0.0 : 1.5 * yl_px + gap) + ylab_w + gap;

    // x ticks: fewer until neighbouring labels have room.
    double right = o.width - pad;
    for (int x_target = std::clamp(int((right - left) / (3.8 * th)), 3, 12);; --x_target) {
        axis_ticks(ax, x_target);
        double widest = 0;
        for (auto& l : ax.labels) widest = std::max(widest, PlplotPage::text_width(l, th));
        // The last label is centred on its tick: keep it inside the image.
        right =
            o.width -
            std::max(pad, (ax.labels.empty() ? 0.0 : PlplotPage::text_width(ax.labels.back(), th) / 2) + 2);
        double spacing =
            ax.ticks.size() < 2 ? 1e9 : (right - left) * (ax.ticks[1] - ax.ticks[0]) / (ax.hi - ax.lo);
        if (ax.log || x_target <= 2 || spacing >= widest + th) break;
    }
    check(right - left >= 40 && bottom - top >= 40,
          fmt::format("line plot {}x{} leaves no room for the plot area after labels: make it larger",
                      o.width, o.height));

    PlotFrame fr;
    fr.left = std::round(left);
    fr.top = std::round(top);
    fr.right = std::round(right);
    fr.bottom = std::round(bottom);
    fr.x_lo = ax.lo;
    fr.x_hi = ax.hi;
    fr.y_lo = ay.lo;
    fr.y_hi = ay.hi;
    fr.log_x = ax.log;
    fr.log_y = ay.log;

    // Series geometry: pixel runs between non-finite points, which series get markers, and samples of
    // where the data lies (for the legend's corner).
    const double lw = o.line_width * (big ? 1.0 : 0.75);
    const double mr = big ? 3.5 : 2.5;
    struct Run {
        std::vector<double> x, y;
    };
    std::vector<std::vector<Run>> runs(series.size());
    std::vector<bool> has_markers(series.size());
    std::vector<std::pair<double, double>> samples;
    for (size_t si = 0; si < series.size(); ++si) {
        const Series& sr = series[si];
        size_t finite = 0;
        for (size_t i = 0; i < sr.x.size(); ++i) finite += finite_point(sr, i);
        has_markers[si] = finite <= size_t(std::max(0, o.marker_max_points));
        Run cur;
        for (size_t i = 0; i <= sr.x.size(); ++i) {
            if (i < sr.x.size() && finite_point(sr, i)) {
                const double x = fr.px(sr.x[i]), y = fr.py(sr.y[i]);
                if (!cur.x.empty()) {  // samples along the segment, every ~6 px
                    const double x0 = cur.x.back(), y0 = cur.y.back();
                    const int k = int(std::min(std::hypot(x - x0, y - y0) / 6.0, 400.0));
                    for (int j = 1; j < k; ++j)
                        samples.push_back({x0 + (x - x0) * j / k, y0 + (y - y0) * j / k});
                }
                cur.x.push_back(x);
                cur.y.push_back(y);
                samples.push_back({x, y});
            } else if (!cur.x.empty()) {
                runs[si].push_back(std::move(cur));
                cur = Run{};
            }
        }
    }

    // Legend: labelled series, in the plot-area corner covering the fewest samples (ties: top right,
    // top left, bottom right, bottom left).
    std::vector<LegendEntry> entries;
    for (size_t si = 0; si < series.size() && entries.size() < 40; ++si)
        if (!series[si].label.empty())
            entries.push_back({series[si].label, series_color(si), lw,
                               has_markers[si] ? marker_glyph(series_marker(si)) : ""});
    const double legend_margin = 4.0 * (big ? 2 : 1);
    bool legend_top = true, legend_right = true, legend_fits = false;
    if (!entries.empty()) {
        const LegendBox est = PlplotPage::legend_size(entries, th);
        legend_fits = est.w <= fr.right - fr.left - 2 * legend_margin &&
                      est.h <= fr.bottom - fr.top - 2 * legend_margin;
        size_t best = std::numeric_limits<size_t>::max();
        for (bool t : {true, false})
            for (bool r : {true, false}) {
                const double bx = r ? fr.right - legend_margin - est.w : fr.left + legend_margin;
                const double by = t ? fr.top + legend_margin : fr.bottom - legend_margin - est.h;
                size_t hits = 0;
                for (auto& [px, py] : samples)
                    hits += px >= bx - 2 && px < bx + est.w + 2 && py >= by - 2 && py < by + est.h + 2;
                if (hits < best) {
                    best = hits;
                    legend_top = t;
                    legend_right = r;
                }
            }
    }

    const PngPageOptions page_opts{o.width, o.height, true};
    write_png_page(path, page_opts, [&](PlplotPage& pg) {
        // Grid, clipped to the plot area.
        pg.clip(fr.left, fr.top, fr.right, fr.bottom);
        pg.color(kGrid);
        pg.line_width(1.0);
        for (double t : ax.ticks) pg.segment(fr.px(t), fr.top, fr.px(t), fr.bottom);
        for (double t : ay.ticks) pg.segment(fr.left, fr.py(t), fr.right, fr.py(t));

        // Series: error bars (a vertical line with caps), lines, then markers (white halo, then the
        // colour) on top.
        std::vector<double> mx, my;
        for (size_t si = 0; si < series.size(); ++si) {
            pg.color(series_color(si));
            pg.line_width(lw);  // as wide as the lines: thinner ones vanish into anti-aliasing
            const Series& sr = series[si];
            for (size_t i = 0; i < sr.x.size(); ++i) {
                if (!finite_point(sr, i) || !has_bar(sr, i)) continue;
                const double x = fr.px(sr.x[i]), y0 = fr.py(sr.y_lo[i]), y1 = fr.py(sr.y_hi[i]);
                const double cap = mr + 1.5;
                pg.segment(x, y0, x, y1);
                pg.segment(x - cap, y0, x + cap, y0);
                pg.segment(x - cap, y1, x + cap, y1);
            }
            pg.line_width(lw);
            for (const Run& r : runs[si])
                if (r.x.size() >= 2) pg.polyline(r.x, r.y);
            for (const Run& r : runs[si]) {
                // A point with no finite neighbour draws no line: give it a marker so it shows at all.
                if (!has_markers[si] && r.x.size() != 1) continue;
                for (size_t i = 0; i < r.x.size(); ++i) {
                    pg.color(kWhite);
                    marker_polygon(series_marker(si), r.x[i], r.y[i], mr + 1.25, mx, my);
                    pg.fill(mx, my);
                    pg.color(series_color(si));
                    marker_polygon(series_marker(si), r.x[i], r.y[i], mr, mx, my);
                    pg.fill(mx, my);
                }
            }
        }

        // Frame and inward tick marks.
        pg.clip_page();
        pg.color(kFrame);
        pg.line_width(1.0);
        pg.polyline({fr.left, fr.right, fr.right, fr.left, fr.left},
                    {fr.top, fr.top, fr.bottom, fr.bottom, fr.top});
        for (double t : ax.ticks) pg.segment(fr.px(t), fr.bottom, fr.px(t), fr.bottom - tick_len);
        for (double t : ay.ticks) pg.segment(fr.left, fr.py(t), fr.left + tick_len, fr.py(t));

        // Tick labels, axis labels, title.
        pg.color(kText);
        pg.text_size(th);
        for (size_t i = 0; i < ax.ticks.size(); ++i)
            pg.text(fr.px(ax.ticks[i]), fr.bottom + gap + 0.6 * th, 0.5, ax.labels[i]);
        for (size_t i = 0; i < ay.ticks.size(); ++i)
            pg.text(fr.left - gap, fr.py(ay.ticks[i]), 1.0, ay.labels[i]);
        if (!x_label.empty()) {
            pg.text_size(xl_px);
            const double half = PlplotPage::text_width(x_label, xl_px) / 2;
            const double cx =
                std::clamp((fr.left + fr.right) / 2, pad + half, std::max(pad + half, o.width - pad - half));
            pg.text(cx, fr.bottom + gap + line_h + 0.6 * xl_px, 0.5, x_label);
        }
        if (!y_label.empty()) {
            pg.text_size(yl_px);
            pg.text_up(pad + 0.6 * yl_px, (fr.top + fr.bottom) / 2, 0.5, y_label);
        }
        if (!title.empty()) {
            pg.text_size(title_px);
            pg.text(o.width / 2.0, pad + 0.6 * title_px, 0.5, title);
        }

        // Legend, inside the plot area.
        if (legend_fits) {
            pg.clip(fr.left, fr.top, fr.right, fr.bottom);
            pg.text_size(th);
            const LegendBox b = pg.legend(entries, legend_top, legend_right, legend_margin);
            fr.legend_x = b.x;
            fr.legend_y = b.y;
            fr.legend_w = b.w;
            fr.legend_h = b.h;
        }
    });
    if (frame_out) *frame_out = fr;
}

}  // namespace hydra
