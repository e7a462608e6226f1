// Line plot layout and drawing: ticks, grid, series, markers, legend, labels.
#include "report/line_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace hydra {

namespace {

constexpr Rgb kText = rgb_hex(0x222222);
constexpr Rgb kFrame = rgb_hex(0x444444);
constexpr Rgb kGrid = rgb_hex(0xe4e4e4);
constexpr Rgb kLegendBorder = rgb_hex(0xaaaaaa);
constexpr Rgb kWhite = rgb_hex(0xffffff);

// The ten "tab10" colours: distinct hues of similar weight, readable on white.
constexpr Rgb kPalette[] = {rgb_hex(0x1f77b4), rgb_hex(0xff7f0e), rgb_hex(0x2ca02c), rgb_hex(0xd62728),
                            rgb_hex(0x9467bd), rgb_hex(0x8c564b), rgb_hex(0xe377c2), rgb_hex(0x7f7f7f),
                            rgb_hex(0xbcbd22), rgb_hex(0x17becf)};

bool finite_point(const Series& s, size_t i) {
    return std::isfinite(s.x[i]) && std::isfinite(s.y[i]);
}

// Shortest "%g"-style label with at most 6 significant digits, exponent without '+' and zero padding.
std::string format_g(double v) {
    if (v == 0.0) return "0";
    std::string s = fmt::format("{:.6g}", v);
    size_t e = s.find('e');
    if (e == std::string::npos) return s;
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    bool neg = !exp.empty() && exp[0] == '-';
    size_t d = (!exp.empty() && (exp[0] == '-' || exp[0] == '+')) ? 1 : 0;
    while (d + 1 < exp.size() && exp[d] == '0') ++d;
    return mant + "e" + (neg ? "-" : "") + exp.substr(d);
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

// Fits text into max_width pixels: smaller scale first, then truncation with "..".
void fit_text(std::string& s, int& scale, int max_width) {
    while (scale > 1 && Canvas::text_width(s, scale) > max_width) --scale;
    if (Canvas::text_width(s, scale) <= max_width) return;
    size_t keep = size_t(std::max(0, (max_width / scale + 1) / kFontAdvance - 2));
    s = s.substr(0, std::min(keep, s.size())) + "..";
}

}  // namespace

double PlotFrame::px(double x) const {
    double t = log_x ? (std::log10(x) - std::log10(x_lo)) / (std::log10(x_hi) - std::log10(x_lo))
                     : (x - x_lo) / (x_hi - x_lo);
    return left + 0.5 + t * double(right - left - 1);
}

double PlotFrame::py(double y) const {
    double t = log_y ? (std::log10(y) - std::log10(y_lo)) / (std::log10(y_hi) - std::log10(y_lo))
                     : (y - y_lo) / (y_hi - y_lo);
    return bottom - 0.5 - t * double(bottom - top - 1);
}

Rgb series_color(size_t i) {
    return kPalette[i % std::size(kPalette)];
}

Marker series_marker(size_t i) {
    constexpr Marker kShapes[] = {Marker::Circle, Marker::Square, Marker::Diamond};
    return kShapes[i % 3];
}

double nice_step(double lo, double hi, int target) {
    HYDRA_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi && std::isfinite(hi - lo),
                "tick range [{}, {}] must be finite with lo < hi", lo, hi);
    target = std::clamp(target, 2, 50);
    double raw = (hi - lo) / double(target - 1);
    double p = std::pow(10.0, std::floor(std::log10(raw)));
    // The 1-2-5 multiple nearest to raw in log space (thresholds are the geometric midpoints), so the
    // tick count lands near target from either side.
    double r = raw / p;
    double step = p * (r < std::sqrt(2.0)    ? 1.0
                       : r < std::sqrt(10.0) ? 2.0
                       : r < std::sqrt(50.0) ? 5.0
                                             : 10.0);
    // Rounding up can leave fewer than two multiples inside [lo, hi]; step down 10 -> 5 -> 2 -> 1
    // until there are two (reached at the latest once step <= (hi - lo) / 2).
    auto count = [&](double st) { return std::floor(hi / st + 1e-9) - std::ceil(lo / st - 1e-9) + 1; };
    while (count(step) < 2) {
        double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        step *= m > 4.0 ? 0.4 : 0.5;  // 5 -> 2, 2 -> 1, 1 -> 0.5
    }
    return step;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    double step = nice_step(lo, hi, target);
    // Steps are >= (hi - lo) / 49, so there are at most ~50 ticks.
    double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
    std::vector<double> ticks;
    for (double k = k0; k <= k1; k += 1.0) {
        double v = k * step;
        ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    }
    return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
    HYDRA_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo > 0.0 && lo < hi,
                "log tick range [{}, {}] must be finite with 0 < lo < hi", lo, hi);
    double l0 = std::log10(lo), l1 = std::log10(hi);
    int k0 = int(std::ceil(l0 - 1e-9)), k1 = int(std::floor(l1 + 1e-9));
    std::vector<double> ticks;
    if (k1 - k0 + 1 >= 3) {
        int stride = (k1 - k0 + 8) / 8;                       // at most ~8 decade labels
        int first = k0 + ((-k0 % stride) + stride) % stride;  // align to multiples of stride
        for (int k = first; k <= k1; k += stride) ticks.push_back(std::pow(10.0, k));
        return ticks;
    }
    for (int k = int(std::floor(l0)); k <= k1; ++k)
        for (double m : {1.0, 2.0, 5.0}) {
            double v = m * std::pow(10.0, k);
            if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) ticks.push_back(v);
        }
    if (ticks.size() >= 2) return ticks;
    ticks.clear();
    for (double v : nice_ticks(lo, hi, 5))
        if (v > 0.0) ticks.push_back(v);
    return ticks;
}

std::string format_tick(double v, double step) {
    if (!std::isfinite(v)) return fmt::format("{}", v);
    if (!(step > 0.0) || !std::isfinite(step)) return format_g(v);
    if (std::abs(v) < step * 1e-6) v = 0.0;  // also turns -0 into 0
    double mag = std::abs(v);
    if (v == 0.0 && (step >= 1e6 || step < 1e-4)) return "0";
    if (mag >= 1e6 || step < 1e-4) {
        // Enough significant digits to tell neighbouring ticks apart.
        int digits = int(std::floor(std::log10(mag))) - int(std::floor(std::log10(step) + 1e-9)) + 1;
        digits = std::clamp(digits, 1, 15);
        std::string s = fmt::format("{:.{}e}", v, digits - 1);
        // Tidy "1.50e+06" -> "1.5e6".
        size_t e = s.find('e');
        std::string mant = s.substr(0, e), exp = s.substr(e + 1);
        if (mant.find('.') != std::string::npos) {
            while (mant.back() == '0') mant.pop_back();
            if (mant.back() == '.') mant.pop_back();
        }
        bool neg = exp[0] == '-';
        size_t d = 1;
        while (d + 1 < exp.size() && exp[d] == '0') ++d;
        return mant + "e" + (neg ? "-" : "") + exp.substr(d);
    }
    int decimals = std::max(0, -int(std::floor(std::log10(step) + 1e-9)));
    return fmt::format("{:.{}f}", v, decimals);
}

Canvas render_line_plot(const std::vector<Series>& series, const LinePlotOptions& o, PlotFrame* frame_out) {
    HYDRA_CHECK(!series.empty(), "line plot has no series: pass at least one Series with points");
    HYDRA_CHECK(o.width >= 240 && o.width <= 8192 && o.height >= 240 && o.height <= 8192,
                "line plot size {}x{} is out of range: width and height must be in [240, 8192]", o.width,
                o.height);
    HYDRA_CHECK(o.line_width > 0.0 && o.line_width <= 20.0, "line plot line_width {} must be in (0, 20]",
                o.line_width);

    // Data extent over finite points; validate sizes and log-axis positivity.
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    size_t total_finite = 0;
    for (size_t si = 0; si < series.size(); ++si) {
        const Series& s = series[si];
        HYDRA_CHECK(s.x.size() == s.y.size(),
                    "series {} ('{}'): x has {} values but y has {}; they must pair up", si, s.label,
                    s.x.size(), s.y.size());
        for (size_t i = 0; i < s.x.size(); ++i) {
            if (!finite_point(s, i)) continue;
            HYDRA_CHECK(
                !o.log_x || s.x[i] > 0.0,
                "series {} ('{}'): x[{}] = {} but log_x needs x > 0; drop the point or use a linear axis", si,
                s.label, i, s.x[i]);
            HYDRA_CHECK(
                !o.log_y || s.y[i] > 0.0,
                "series {} ('{}'): y[{}] = {} but log_y needs y > 0; drop the point or use a linear axis", si,
                s.label, i, s.y[i]);
            xmin = std::min(xmin, s.x[i]);
            xmax = std::max(xmax, s.x[i]);
            ymin = std::min(ymin, s.y[i]);
            ymax = std::max(ymax, s.y[i]);
            ++total_finite;
        }
    }
    HYDRA_CHECK(total_finite > 0,
                "line plot: no finite (x, y) point in any of the {} series; nothing to plot", series.size());

    Axis ax, ay;
    ax.log = o.log_x;
    ay.log = o.log_y;
    axis_range(ax, xmin, xmax, o.x_min, o.x_max, "x");
    axis_range(ay, ymin, ymax, o.y_min, o.y_max, "y");

    // Text sizes: scale 2 on normal-size figures, 1 on small ones; the title one step bigger.
    const int s = (o.width >= 600 && o.height >= 360) ? 2 : 1;
    const int th = Canvas::text_height(s);
    const int pad = 6 * s, gap = 3 * s, tick_len = 3 * s;

    std::string title = o.title, x_label = o.x_label, y_label = o.y_label;
    int title_scale = s + 1;
    if (!title.empty()) fit_text(title, title_scale, o.width - 2 * pad);
    int xl_scale = s, yl_scale = s;

    int top = pad + (title.empty() ? th / 2 : Canvas::text_height(title_scale) + 2 * gap);
    int bottom = o.height - pad - tick_len - gap - th - (x_label.empty() ? 0 : gap + th);
    if (!y_label.empty()) fit_text(y_label, yl_scale, bottom - top);
    int y_target = std::clamp((bottom - top) / (th * 3), 3, 9);
    axis_ticks(ay, y_target);
    int ylab_w = 0;
    for (auto& l : ay.labels) ylab_w = std::max(ylab_w, Canvas::text_width(l, s));
    int left =
        pad + (y_label.empty() ? 0 : Canvas::text_height(yl_scale) + 2 * gap) + ylab_w + gap + tick_len;

    // x ticks: fewer until neighbouring labels have room (at least two label heights apart).
    int right = o.width - pad;
    int x_target = std::clamp((right - left) / (45 * s), 3, 12);
    for (;; --x_target) {
        axis_ticks(ax, x_target);
        int widest = 0;
        for (auto& l : ax.labels) widest = std::max(widest, Canvas::text_width(l, s));
        // The last label is centred on its tick: keep it inside the image.
        right = o.width -
                std::max(pad, (ax.labels.empty() ? 0 : Canvas::text_width(ax.labels.back(), s) / 2) + 2);
        double spacing =
            ax.ticks.size() < 2 ? 1e9 : double(right - left) * (ax.ticks[1] - ax.ticks[0]) / (ax.hi - ax.lo);
        if (ax.log || x_target <= 2 || spacing >= widest + 12 * s) break;
    }
    if (!x_label.empty()) fit_text(x_label, xl_scale, o.width - 2 * pad);
    HYDRA_CHECK(right - left >= 40 && bottom - top >= 40,
                "line plot {}x{} leaves no room for the plot area after labels: make it larger", o.width,
                o.height);

    PlotFrame fr;
    fr.left = left;
    fr.top = top;
    fr.right = right;
    fr.bottom = bottom;
    fr.x_lo = ax.lo;
    fr.x_hi = ax.hi;
    fr.y_lo = ay.lo;
    fr.y_hi = ay.hi;
    fr.log_x = ax.log;
    fr.log_y = ay.log;

    Canvas c(o.width, o.height);

    // Grid.
    std::vector<int> xt_px, yt_px;
    for (double t : ax.ticks) xt_px.push_back(int(std::floor(fr.px(t))));
    for (double t : ay.ticks) yt_px.push_back(int(std::floor(fr.py(t))));
    for (int x : xt_px) c.vline(x, top, bottom - 1, kGrid);
    for (int y : yt_px) c.hline(left, right - 1, y, kGrid);

    // Series: segments between consecutive finite points, then markers on top.
    c.set_clip(left, top, right, bottom);
    const double lw = o.line_width * (s == 2 ? 1.0 : 0.75);
    const double mr = s == 2 ? 3.5 : 2.5;
    // Where the data lies in pixels, sampled along segments, for placing the legend.
    std::vector<std::pair<double, double>> samples;
    std::vector<bool> has_markers(series.size());
    for (size_t si = 0; si < series.size(); ++si) {
        const Series& sr = series[si];
        Rgb col = series_color(si);
        size_t n = sr.x.size(), finite = 0;
        for (size_t i = 0; i < n; ++i) finite += finite_point(sr, i);
        bool markers = finite <= size_t(std::max(0, o.marker_max_points));
        has_markers[si] = markers;
        for (size_t i = 0; i < n; ++i) {
            if (!finite_point(sr, i)) continue;
            double x1 = fr.px(sr.x[i]), y1 = fr.py(sr.y[i]);
            samples.push_back({x1, y1});
            if (i + 1 < n && finite_point(sr, i + 1)) {
                double x2 = fr.px(sr.x[i + 1]), y2 = fr.py(sr.y[i + 1]);
                c.line(x1, y1, x2, y2, col, lw);
                double len = std::hypot(x2 - x1, y2 - y1);
                int k = int(std::min(len / 6.0, 400.0));
                for (int j = 1; j < k; ++j)
                    samples.push_back({x1 + (x2 - x1) * j / k, y1 + (y2 - y1) * j / k});
            }
        }
        for (size_t i = 0; i < n; ++i) {
            if (!finite_point(sr, i)) continue;
            // A point with no finite neighbour draws no line: give it a marker so it shows at all.
            bool isolated = (i == 0 || !finite_point(sr, i - 1)) && (i + 1 >= n || !finite_point(sr, i + 1));
            if (!markers && !isolated) continue;
            double x1 = fr.px(sr.x[i]), y1 = fr.py(sr.y[i]);
            c.marker(series_marker(si), x1, y1, mr + 1.25, kWhite);
            c.marker(series_marker(si), x1, y1, mr, col);
        }
    }
    c.reset_clip();

    // Frame, tick marks, tick labels.
    c.stroke_rect(left - 1, top - 1, right - left + 2, bottom - top + 2, kFrame);
    for (size_t i = 0; i < ax.ticks.size(); ++i) {
        int x = xt_px[i];
        c.vline(x, bottom, bottom + tick_len - 1, kFrame);
        int w = Canvas::text_width(ax.labels[i], s);
        c.text(x - w / 2, bottom + tick_len + gap, ax.labels[i], kText, s);
    }
    for (size_t i = 0; i < ay.ticks.size(); ++i) {
        int y = yt_px[i];
        c.hline(left - tick_len - 1, left - 2, y, kFrame);
        int w = Canvas::text_width(ay.labels[i], s);
        // Centre the digits (cap height) on the tick, ignoring the descender rows.
        c.text(left - tick_len - gap - w - 1, y - (kFontCapHeight * s) / 2, ay.labels[i], kText, s);
    }

    // Title and axis labels.
    if (!title.empty())
        c.text((o.width - Canvas::text_width(title, title_scale)) / 2, pad, title, kText, title_scale);
    if (!x_label.empty()) {
        int w = Canvas::text_width(x_label, xl_scale);
        int x = std::clamp((left + right - w) / 2, pad, std::max(pad, o.width - pad - w));
        c.text(x, bottom + tick_len + gap + th + gap, x_label, kText, xl_scale);
    }
    if (!y_label.empty()) {
        int h = Canvas::text_width(y_label, yl_scale);
        c.text_up(pad, std::max(top, (top + bottom - h) / 2), y_label, kText, yl_scale);
    }

    // Legend: entries for labelled series, in the plot-area corner covering the fewest samples.
    std::vector<size_t> entries;
    for (size_t si = 0; si < series.size(); ++si)
        if (!series[si].label.empty()) entries.push_back(si);
    if (!entries.empty()) {
        const int swatch = 14 * s, row_h = th + 2 * s, inner = 4 * s;
        int label_w = 0;
        for (size_t si : entries) label_w = std::max(label_w, Canvas::text_width(series[si].label, s));
        int lw_box = inner + swatch + gap * 2 + label_w + inner;
        int lh_box = inner + int(entries.size()) * row_h - 2 * s + inner;
        int margin = 4 * s;
        if (lw_box <= right - left - 2 * margin && lh_box <= bottom - top - 2 * margin) {
            int xs[2] = {right - margin - lw_box, left + margin};
            int ys[2] = {top + margin, bottom - margin - lh_box};
            int best_x = xs[0], best_y = ys[0];
            size_t best = std::numeric_limits<size_t>::max();
            for (int yi = 0; yi < 2; ++yi)
                for (int xi = 0; xi < 2; ++xi) {
                    size_t hits = 0;
                    for (auto& [px, py] : samples)
                        hits += px >= xs[xi] - 2 && px < xs[xi] + lw_box + 2 && py >= ys[yi] - 2 &&
                                py < ys[yi] + lh_box + 2;
                    if (hits < best) {
                        best = hits;
                        best_x = xs[xi];
                        best_y = ys[yi];
                    }
                }
            c.fill_rect(best_x, best_y, lw_box, lh_box, kWhite);
            c.stroke_rect(best_x, best_y, lw_box, lh_box, kLegendBorder);
            for (size_t e = 0; e < entries.size(); ++e) {
                size_t si = entries[e];
                int ry = best_y + inner + int(e) * row_h;
                double cy = ry + (kFontCapHeight * s) / 2.0;
                double x0 = best_x + inner, x1 = x0 + swatch;
                c.line(x0 + 1, cy, x1 - 1, cy, series_color(si), lw);
                if (has_markers[si]) c.marker(series_marker(si), (x0 + x1) / 2, cy, mr, series_color(si));
                c.text(int(x1) + gap * 2, ry, series[si].label, kText, s);
            }
            fr.legend_x = best_x;
            fr.legend_y = best_y;
            fr.legend_w = lw_box;
            fr.legend_h = lh_box;
        }
    }
    if (frame_out) *frame_out = fr;
    return c;
}

void write_line_plot(const std::string& path, const std::vector<Series>& series,
                     const LinePlotOptions& options) {
    Canvas c = [&] {
        try {
            return render_line_plot(series, options);
        } catch (const Error& e) {
            fail("{}: {}", path, e.what());
        }
    }();
    c.write_png(path);
}

}  // namespace hydra
