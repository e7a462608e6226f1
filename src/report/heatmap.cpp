// Heatmap layout (cells, tick labels, colour bar) and its drawing through PLplot.
#include "report/heatmap.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "report/axis_ticks.h"
#include "report/plplot_page.h"

namespace hydra {

namespace {

constexpr Rgb kText = rgb_hex(0x222222);
constexpr Rgb kFrame = rgb_hex(0x444444);

constexpr int kMaxImage = 8192;

// Smallest k in 1, 2, 5, 10, 20, 50, ... with k * cell >= need.
int tick_every(int cell, double need) {
    for (int p = 1;; p *= 10)
        for (int m : {1, 2, 5})
            if (double(m) * p * cell >= need || int64_t(m) * p >= 1000000) return m * p;
}

}  // namespace

void write_heatmap(const std::string& path, const std::vector<std::vector<double>>& values,
                   const HeatmapOptions& o, HeatmapFrame* frame_out) {
    auto check = [&](bool ok, const std::string& what) {
        if (!ok) fail("{}: {}", path, what);
    };
    const size_t rows = values.size();
    check(rows > 0, "heatmap has no rows: pass a (rows x cols) matrix with at least one value");
    const size_t cols = values[0].size();
    check(cols > 0, "heatmap row 0 is empty: every row needs at least one column");
    for (size_t r = 0; r < rows; ++r)
        check(values[r].size() == cols,
              fmt::format("heatmap row {} has {} values but row 0 has {}; rows must be equal", r,
                          values[r].size(), cols));
    check(rows <= 4096 && cols <= 4096,
          fmt::format("heatmap {}x{} is too large: at most 4096 rows and 4096 cols", rows, cols));
    check(o.row_names.empty() || o.row_names.size() == rows,
          fmt::format("heatmap row_names has {} entries but there are {} rows", o.row_names.size(), rows));
    check(o.col_names.empty() || o.col_names.size() == cols,
          fmt::format("heatmap col_names has {} entries but there are {} cols", o.col_names.size(), cols));
    check(o.cell_width == 0 || (o.cell_width >= 2 && o.cell_width <= 200),
          fmt::format("heatmap cell_width {} must be 0 (automatic) or in [2, 200]", o.cell_width));
    check(o.cell_height == 0 || (o.cell_height >= 2 && o.cell_height <= 200),
          fmt::format("heatmap cell_height {} must be 0 (automatic) or in [2, 200]", o.cell_height));
    check(o.row_tick_every >= 0 && o.col_tick_every >= 0,
          fmt::format("heatmap row_tick_every / col_tick_every must be >= 0 (0 = automatic), got {} / {}",
                      o.row_tick_every, o.col_tick_every));
    for (auto [r, c] : o.outlined)
        check(r >= 0 && size_t(r) < rows && c >= 0 && size_t(c) < cols,
              fmt::format("heatmap outlined cell ({}, {}) is outside the {}x{} matrix", r, c, rows, cols));

    // Colour scale.
    double lo = INFINITY, hi = -INFINITY;
    for (auto& row : values)
        for (double v : row)
            if (std::isfinite(v)) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
    check((!std::isnan(o.vmin) && !std::isnan(o.vmax)) || std::isfinite(lo),
          "heatmap has no finite value: nothing to scale the colours by (or set vmin and vmax)");
    if (std::isfinite(lo) && hi == lo) {  // constant data: centre it on the scale
        double w = lo != 0.0 ? std::abs(lo) * 0.1 : 1.0;
        lo -= w;
        hi += w;
    }
    const double vmin = std::isnan(o.vmin) ? lo : o.vmin, vmax = std::isnan(o.vmax) ? hi : o.vmax;
    check(std::isfinite(vmin) && std::isfinite(vmax) && vmin < vmax && std::isfinite(vmax - vmin),
          fmt::format(
              "heatmap colour scale [{}, {}] is empty or not finite: set vmin < vmax (or leave them NaN)",
              vmin, vmax));

    // Layout in whole pixels, so cell edges fall between pixels. Text: 13 px characters, estimated
    // widths (PlplotPage::text_width).
    const double th = 13.0, line_h = 1.5 * th;
    const int pad = 12, gap = 6, tick_len = 6;
    const int cw = o.cell_width ? o.cell_width : std::clamp(560 / int(cols), 4, 64);
    const int ch = o.cell_height ? o.cell_height : std::clamp(560 / int(rows), 4, 48);
    check(int64_t(cw) * int64_t(cols) <= kMaxImage - 400 && int64_t(ch) * int64_t(rows) <= kMaxImage - 200,
          fmt::format(
              "heatmap {}x{} with {}x{} px cells exceeds the {} px image limit: set a smaller cell_width / "
              "cell_height",
              rows, cols, cw, ch, kMaxImage));
    const int mw = cw * int(cols), mh = ch * int(rows);

    auto row_text = [&](size_t r) {
        return o.row_names.empty() ? std::to_string(int64_t(r) + o.index_base) : o.row_names[r];
    };
    auto col_text = [&](size_t c) {
        return o.col_names.empty() ? std::to_string(int64_t(c) + o.index_base) : o.col_names[c];
    };
    double row_lab_w = 0, col_lab_w = 0;
    for (size_t r = 0; r < rows; ++r)
        row_lab_w = std::max(row_lab_w, PlplotPage::text_width(row_text(r), th));
    for (size_t c = 0; c < cols; ++c)
        col_lab_w = std::max(col_lab_w, PlplotPage::text_width(col_text(c), th));
    const int rk = o.row_tick_every ? o.row_tick_every : tick_every(ch, th * 1.4);
    const int ck = o.col_tick_every ? o.col_tick_every : tick_every(cw, col_lab_w + th * 0.5);

    // Colour bar labels: vmin and vmax, plus nice ticks that do not crowd them; one decimal more than
    // the nice step needs, so vmin/vmax show their own value ("1.16") and all labels share one format.
    const int bar_w = 20;
    const int bar_target = std::clamp(int(mh / (3 * line_h)), 2, 8);
    const double bar_step = nice_step(vmin, vmax, bar_target);
    std::vector<std::pair<double, std::string>> bar_labels = {{vmax, format_tick(vmax, bar_step / 10)},
                                                              {vmin, format_tick(vmin, bar_step / 10)}};
    if (mh >= 4 * line_h)
        for (double t : nice_ticks(vmin, vmax, bar_target)) {
            double frac = (t - vmin) / (vmax - vmin);
            if (frac * mh >= line_h * 1.2 && (1 - frac) * mh >= line_h * 1.2)
                bar_labels.push_back({t, format_tick(t, bar_step / 10)});
        }
    double bar_lab_w = 0;
    for (auto& [v, l] : bar_labels) bar_lab_w = std::max(bar_lab_w, PlplotPage::text_width(l, th));

    const double title_px = std::round(th * 1.4);
    const int top = pad + int(o.title.empty() ? th * 0.6 : 1.5 * title_px + gap);
    const int left =
        pad + int(o.row_label.empty() ? 0 : line_h + gap) + int(std::ceil(row_lab_w)) + gap + tick_len;
    const int bar_x = left + mw + 16;
    int width = bar_x + bar_w + tick_len + gap + int(std::ceil(bar_lab_w)) +
                (o.value_label.empty() ? 0 : int(2 * gap + line_h)) + pad;
    const int height =
        top + mh + tick_len + gap + int(line_h) + (o.col_label.empty() ? 0 : gap + int(line_h)) + pad;
    // The colour-bar name is drawn rotated: it needs the bar's height. The title gets the image width.
    std::string value_label = o.value_label, title = o.title;
    double vl_px = th, t_px = title_px;
    while (vl_px > 8 && PlplotPage::text_width(value_label, vl_px) > mh) vl_px -= 1;
    while (t_px > 8 && PlplotPage::text_width(title, t_px) > kMaxImage - 2 * pad) t_px -= 1;
    while (!title.empty() && PlplotPage::text_width(title, t_px) > kMaxImage - 2 * pad) title.pop_back();
    width = std::max(width, int(std::ceil(PlplotPage::text_width(title, t_px))) + 2 * pad);
    width = std::max(width, left + int(std::ceil(PlplotPage::text_width(o.col_label, th))) + pad);
    check(width <= kMaxImage && height <= kMaxImage,
          fmt::format(
              "heatmap image would be {}x{} px, over the {} px limit: use smaller cells or shorter names",
              width, height, kMaxImage));

    HeatmapFrame f;
    f.x0 = left;
    f.y0 = top;
    f.cell_w = cw;
    f.cell_h = ch;
    f.rows = int(rows);
    f.cols = int(cols);
    f.bar_x = bar_x;
    f.bar_y = top;
    f.bar_w = bar_w;
    f.bar_h = mh;
    f.width = width;
    f.height = height;
    f.vmin = vmin;
    f.vmax = vmax;

    // Crisp (not anti-aliased) fills: every cell edge lies on a pixel boundary, and smoothing would only
    // blend neighbouring cells into seams.
    const PngPageOptions page{width, height, false};
    write_png_page(path, page, [&](PlplotPage& pg) {
        // Cells, each in its own colour.
        for (size_t r = 0; r < rows; ++r)
            for (size_t k = 0; k < cols; ++k) {
                const double v = values[r][k];
                pg.color(std::isfinite(v) ? viridis((v - vmin) / (vmax - vmin)) : heatmap_missing_color());
                pg.fill_rect(left + int(k) * cw, top + int(r) * ch, cw, ch);
            }
        // Outlines: a black edge with a white inner ring, visible on dark and light cells alike; the
        // cell's own colour stays in the middle.
        for (auto [r, k] : o.outlined) {
            const int x = left + k * cw, y = top + r * ch;
            const double v = values[size_t(r)][size_t(k)];
            const int ring =
                std::max(0, std::min(2, (std::min(cw, ch) - 3) / 2));  // none in cells under 5 px
            pg.color(rgb_hex(0x000000));
            pg.fill_rect(x, y, cw, ch);
            if (ring > 0) {
                pg.color(rgb_hex(0xffffff));
                pg.fill_rect(x + 1, y + 1, cw - 2, ch - 2);
            }
            if (cw > 2 + 2 * ring && ch > 2 + 2 * ring) {
                pg.color(std::isfinite(v) ? viridis((v - vmin) / (vmax - vmin)) : heatmap_missing_color());
                pg.fill_rect(x + 1 + ring, y + 1 + ring, cw - 2 - 2 * ring, ch - 2 - 2 * ring);
            }
        }
        // Colour bar: one-pixel strips, vmax in the top row, vmin in the bottom row.
        for (int y = 0; y < mh; ++y) {
            pg.color(viridis(mh > 1 ? 1.0 - double(y) / double(mh - 1) : 0.5));
            pg.fill_rect(bar_x, top + y, bar_w, 1);
        }

        // Frames around the matrix and the bar, just outside them.
        pg.color(kFrame);
        pg.line_width(1.0);
        auto frame_rect = [&](double x0, double y0, double x1, double y1) {
            pg.polyline({x0 - 0.5, x1 + 0.5, x1 + 0.5, x0 - 0.5, x0 - 0.5},
                        {y0 - 0.5, y0 - 0.5, y1 + 0.5, y1 + 0.5, y0 - 0.5});
        };
        frame_rect(left, top, left + mw, top + mh);
        frame_rect(bar_x, top, bar_x + bar_w, top + mh);

        // Row ticks (left) and column ticks (below), centred on their cell.
        pg.text_size(th);
        for (size_t r = 0; r < rows; r += size_t(rk)) {
            const double y = top + int(r) * ch + ch / 2.0;
            pg.color(kFrame);
            pg.segment(left - tick_len - 1, y, left - 1, y);
            pg.color(kText);
            pg.text(left - tick_len - gap, y, 1.0, row_text(r));
        }
        const double col_lab_y = top + mh + 1 + tick_len + gap + 0.6 * th;
        for (size_t k = 0; k < cols; k += size_t(ck)) {
            const double x = left + int(k) * cw + cw / 2.0;
            pg.color(kFrame);
            pg.segment(x, top + mh + 1, x, top + mh + 1 + tick_len);
            pg.color(kText);
            pg.text(x, col_lab_y, 0.5, col_text(k));
        }
        // Colour bar ticks and labels; labels kept inside the bar's vertical extent.
        for (auto& [v, l] : bar_labels) {
            const double y = top + (1.0 - (v - vmin) / (vmax - vmin)) * (mh - 1) + 0.5;
            pg.color(kFrame);
            pg.segment(bar_x + bar_w + 1, y, bar_x + bar_w + 1 + tick_len, y);
            pg.color(kText);
            pg.text(bar_x + bar_w + tick_len + gap, std::clamp(y, top + 0.4 * th, top + mh - 0.4 * th), 0.0,
                    l);
        }

        // Axis labels, colour-bar name and title.
        pg.color(kText);
        if (!o.col_label.empty()) pg.text(left + mw / 2.0, col_lab_y + line_h, 0.5, o.col_label);
        if (!o.row_label.empty()) pg.text_up(pad + 0.6 * th, top + mh / 2.0, 0.5, o.row_label);
        if (!value_label.empty()) {
            pg.text_size(vl_px);
            pg.text_up(bar_x + bar_w + tick_len + gap + bar_lab_w + gap + 0.6 * line_h, top + mh / 2.0, 0.5,
                       value_label);
        }
        if (!title.empty()) {
            pg.text_size(t_px);
            pg.text(width / 2.0, pad + 0.6 * t_px, 0.5, title);
        }
    });
    if (frame_out) *frame_out = f;
}

}  // namespace hydra
