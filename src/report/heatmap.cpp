// Heatmap layout and drawing: cells, tick labels, axis labels, colour bar, outlines.
#include "report/heatmap.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "report/line_plot.h"  // nice_ticks, format_tick

namespace hydra {

namespace {

constexpr Rgb kText = rgb_hex(0x222222);
constexpr Rgb kFrame = rgb_hex(0x444444);
constexpr Rgb kMissing = rgb_hex(0xd0d0d0);

// viridis sampled at t = 0, 1/9, ..., 1.
constexpr Rgb kViridis[10] = {rgb_hex(0x440154), rgb_hex(0x482878), rgb_hex(0x3e4989), rgb_hex(0x31688e),
                              rgb_hex(0x26828e), rgb_hex(0x1f9e89), rgb_hex(0x35b779), rgb_hex(0x6ece58),
                              rgb_hex(0xb5de2b), rgb_hex(0xfde725)};

constexpr int kMaxImage = 8192;

// Smallest k in 1, 2, 5, 10, 20, 50, ... with k * cell >= need.
int tick_every(int cell, int need) {
    for (int p = 1;; p *= 10)
        for (int m : {1, 2, 5})
            if (int64_t(m) * p * cell >= need || int64_t(m) * p >= 1000000) return m * p;
}

}  // namespace

Rgb viridis(double t) {
    if (!(t > 0.0)) return kViridis[0];
    if (t >= 1.0) return kViridis[9];
    double f = t * 9.0;
    int i = std::min(8, int(f));
    return mix(kViridis[i], kViridis[i + 1], f - i);
}

Rgb heatmap_missing_color() {
    return kMissing;
}

Canvas render_heatmap(const std::vector<std::vector<double>>& values, const HeatmapOptions& o,
                      HeatmapFrame* frame_out) {
    const size_t rows = values.size();
    HYDRA_CHECK(rows > 0, "heatmap has no rows: pass a (rows x cols) matrix with at least one value");
    const size_t cols = values[0].size();
    HYDRA_CHECK(cols > 0, "heatmap row 0 is empty: every row needs at least one column");
    for (size_t r = 0; r < rows; ++r)
        HYDRA_CHECK(values[r].size() == cols,
                    "heatmap row {} has {} values but row 0 has {}; rows must be equal", r, values[r].size(),
                    cols);
    HYDRA_CHECK(rows <= 4096 && cols <= 4096, "heatmap {}x{} is too large: at most 4096 rows and 4096 cols",
                rows, cols);
    HYDRA_CHECK(o.row_names.empty() || o.row_names.size() == rows,
                "heatmap row_names has {} entries but there are {} rows", o.row_names.size(), rows);
    HYDRA_CHECK(o.col_names.empty() || o.col_names.size() == cols,
                "heatmap col_names has {} entries but there are {} cols", o.col_names.size(), cols);
    HYDRA_CHECK(o.cell_width == 0 || (o.cell_width >= 2 && o.cell_width <= 200),
                "heatmap cell_width {} must be 0 (automatic) or in [2, 200]", o.cell_width);
    HYDRA_CHECK(o.cell_height == 0 || (o.cell_height >= 2 && o.cell_height <= 200),
                "heatmap cell_height {} must be 0 (automatic) or in [2, 200]", o.cell_height);
    HYDRA_CHECK(o.row_tick_every >= 0 && o.col_tick_every >= 0,
                "heatmap row_tick_every / col_tick_every must be >= 0 (0 = automatic), got {} / {}",
                o.row_tick_every, o.col_tick_every);
    for (auto [r, c] : o.outlined)
        HYDRA_CHECK(r >= 0 && size_t(r) < rows && c >= 0 && size_t(c) < cols,
                    "heatmap outlined cell ({}, {}) is outside the {}x{} matrix", r, c, rows, cols);

    // Colour scale.
    double lo = INFINITY, hi = -INFINITY;
    for (auto& row : values)
        for (double v : row)
            if (std::isfinite(v)) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
    HYDRA_CHECK((!std::isnan(o.vmin) && !std::isnan(o.vmax)) || std::isfinite(lo),
                "heatmap has no finite value: nothing to scale the colours by (or set vmin and vmax)");
    if (std::isfinite(lo) && hi == lo) {  // constant data: centre it on the scale
        double w = lo != 0.0 ? std::abs(lo) * 0.1 : 1.0;
        lo -= w;
        hi += w;
    }
    double vmin = std::isnan(o.vmin) ? lo : o.vmin, vmax = std::isnan(o.vmax) ? hi : o.vmax;
    HYDRA_CHECK(std::isfinite(vmin) && std::isfinite(vmax) && vmin < vmax && std::isfinite(vmax - vmin),
                "heatmap colour scale [{}, {}] is empty or not finite: set vmin < vmax (or leave them NaN)",
                vmin, vmax);

    // Layout. Text at scale 2: heatmaps are sized by their content, so there is always room.
    const int s = 2, th = Canvas::text_height(s), pad = 6 * s, gap = 3 * s, tick_len = 3 * s;
    const int cw = o.cell_width ? o.cell_width : std::clamp(560 / int(cols), 4, 64);
    const int ch = o.cell_height ? o.cell_height : std::clamp(560 / int(rows), 4, 48);
    HYDRA_CHECK(
        int64_t(cw) * int64_t(cols) <= kMaxImage - 400 && int64_t(ch) * int64_t(rows) <= kMaxImage - 200,
        "heatmap {}x{} with {}x{} px cells exceeds the {} px image limit: set a smaller cell_width / "
        "cell_height",
        rows, cols, cw, ch, kMaxImage);
    const int mw = cw * int(cols), mh = ch * int(rows);

    auto row_text = [&](size_t r) {
        return o.row_names.empty() ? std::to_string(int64_t(r) + o.index_base) : o.row_names[r];
    };
    auto col_text = [&](size_t c) {
        return o.col_names.empty() ? std::to_string(int64_t(c) + o.index_base) : o.col_names[c];
    };
    int row_lab_w = 0, col_lab_w = 0;
    for (size_t r = 0; r < rows; ++r) row_lab_w = std::max(row_lab_w, Canvas::text_width(row_text(r), s));
    for (size_t c = 0; c < cols; ++c) col_lab_w = std::max(col_lab_w, Canvas::text_width(col_text(c), s));
    const int rk = o.row_tick_every ? o.row_tick_every : tick_every(ch, kFontCapHeight * s + 4 * s);
    const int ck = o.col_tick_every ? o.col_tick_every : tick_every(cw, col_lab_w + 4 * s);

    // Colour bar labels: vmin and vmax, plus nice ticks that do not crowd them.
    const int bar_w = 10 * s;
    // One decimal more than the nice step needs, so vmin/vmax show their own value ("1.16") and
    // all labels share one format ("0.80", not "0.8").
    const int bar_target = std::clamp(mh / (3 * th), 2, 8);
    const double bar_step = nice_step(vmin, vmax, bar_target);
    std::vector<std::pair<double, std::string>> bar_labels = {{vmax, format_tick(vmax, bar_step / 10)},
                                                              {vmin, format_tick(vmin, bar_step / 10)}};
    if (mh >= 4 * th)
        for (double t : nice_ticks(vmin, vmax, bar_target)) {
            double frac = (t - vmin) / (vmax - vmin);
            if (frac * mh >= th * 1.5 && (1 - frac) * mh >= th * 1.5)
                bar_labels.push_back({t, format_tick(t, bar_step / 10)});
        }
    int bar_lab_w = 0;
    for (auto& [v, l] : bar_labels) bar_lab_w = std::max(bar_lab_w, Canvas::text_width(l, s));

    const int title_scale = 3;
    const int top = pad + (o.title.empty() ? th / 2 : Canvas::text_height(title_scale) + 2 * gap);
    const int left = pad + (o.row_label.empty() ? 0 : th + 2 * gap) + row_lab_w + gap + tick_len;
    const int bar_x = left + mw + 8 * s;
    int width = bar_x + bar_w + tick_len + gap + bar_lab_w + (o.value_label.empty() ? 0 : 3 * gap + th) + pad;
    int height = top + mh + tick_len + gap + th + (o.col_label.empty() ? 0 : gap + th) + pad;
    // The colour-bar name is drawn rotated: it needs the bar's height.
    std::string value_label = o.value_label;
    int vl_scale = s;
    while (vl_scale > 1 && Canvas::text_width(value_label, vl_scale) > mh) --vl_scale;
    std::string title = o.title;
    int ts = title_scale;
    while (ts > 1 && Canvas::text_width(title, ts) > kMaxImage - 2 * pad) --ts;
    if (Canvas::text_width(title, ts) > kMaxImage - 2 * pad)
        title.resize((kMaxImage - 2 * pad) / kFontAdvance - 1);
    width = std::max(width, Canvas::text_width(title, ts) + 2 * pad);
    width = std::max(width, left + Canvas::text_width(o.col_label, s) + pad);
    HYDRA_CHECK(width <= kMaxImage && height <= kMaxImage,
                "heatmap image would be {}x{} px, over the {} px limit: use smaller cells or shorter names",
                width, height, kMaxImage);

    Canvas c(width, height);

    // Cells.
    for (size_t r = 0; r < rows; ++r)
        for (size_t k = 0; k < cols; ++k) {
            double v = values[r][k];
            Rgb col = std::isfinite(v) ? viridis((v - vmin) / (vmax - vmin)) : kMissing;
            c.fill_rect(left + int(k) * cw, top + int(r) * ch, cw, ch, col);
        }
    // Outlines: black edge with a white inner ring, visible on dark and light cells alike.
    for (auto [r, k] : o.outlined) {
        int x = left + k * cw, y = top + r * ch;
        c.stroke_rect(x, y, cw, ch, rgb_hex(0x000000), 1);
        if (cw >= 5 && ch >= 5)
            c.stroke_rect(x + 1, y + 1, cw - 2, ch - 2, rgb_hex(0xffffff),
                          std::min(2, (std::min(cw, ch) - 3) / 2));
    }
    c.stroke_rect(left - 1, top - 1, mw + 2, mh + 2, kFrame);

    // Row ticks (left) and column ticks (below), centred on their cell.
    for (size_t r = 0; r < rows; r += size_t(rk)) {
        int y = top + int(r) * ch + ch / 2;
        c.hline(left - tick_len - 1, left - 2, y, kFrame);
        std::string l = row_text(r);
        c.text(left - tick_len - gap - Canvas::text_width(l, s) - 1, y - (kFontCapHeight * s) / 2, l, kText,
               s);
    }
    const int col_lab_y = top + mh + 1 + tick_len + gap;
    for (size_t k = 0; k < cols; k += size_t(ck)) {
        int x = left + int(k) * cw + cw / 2;
        c.vline(x, top + mh + 1, top + mh + tick_len, kFrame);
        std::string l = col_text(k);
        c.text(x - Canvas::text_width(l, s) / 2, col_lab_y, l, kText, s);
    }

    // Axis labels and title.
    if (!o.col_label.empty())
        c.text(left + (mw - Canvas::text_width(o.col_label, s)) / 2, col_lab_y + th + gap, o.col_label, kText,
               s);
    if (!o.row_label.empty()) {
        int h = Canvas::text_width(o.row_label, s);
        c.text_up(pad, std::max(top, top + (mh - h) / 2), o.row_label, kText, s);
    }
    if (!title.empty()) c.text((width - Canvas::text_width(title, ts)) / 2, pad, title, kText, ts);

    // Colour bar: vmax at the top row, vmin at the bottom row.
    for (int y = 0; y < mh; ++y) {
        double t = mh > 1 ? 1.0 - double(y) / double(mh - 1) : 0.5;
        c.fill_rect(bar_x, top + y, bar_w, 1, viridis(t));
    }
    c.stroke_rect(bar_x - 1, top - 1, bar_w + 2, mh + 2, kFrame);
    for (auto& [v, l] : bar_labels) {
        double frac = (v - vmin) / (vmax - vmin);
        int y = top + int(std::lround((1.0 - frac) * (mh - 1)));
        c.hline(bar_x + bar_w + 1, bar_x + bar_w + tick_len, y, kFrame);
        // Keep the label inside the bar's vertical extent so min/max do not stick out.
        int ty = std::clamp(y - (kFontCapHeight * s) / 2, top - 2 * s, top + mh - kFontCapHeight * s + 2 * s);
        c.text(bar_x + bar_w + tick_len + gap, ty, l, kText, s);
    }
    if (!value_label.empty()) {
        int h = Canvas::text_width(value_label, vl_scale);
        c.text_up(bar_x + bar_w + tick_len + gap + bar_lab_w + 3 * gap, std::max(top, top + (mh - h) / 2),
                  value_label, kText, vl_scale);
    }

    if (frame_out) {
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
        f.vmin = vmin;
        f.vmax = vmax;
        *frame_out = f;
    }
    return c;
}

void write_heatmap(const std::string& path, const std::vector<std::vector<double>>& values,
                   const HeatmapOptions& options) {
    Canvas c = [&] {
        try {
            return render_heatmap(values, options);
        } catch (const Error& e) {
            fail("{}: {}", path, e.what());
        }
    }();
    c.write_png(path);
}

}  // namespace hydra
