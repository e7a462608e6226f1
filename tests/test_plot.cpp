// Tests for src/report: the canvas (lines, clipping, text, PNG bytes), nice ticks and their labels,
// line plots and heatmaps (pixels at known data positions, PNG header, bad input).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "core/error.h"
#include "report/canvas.h"
#include "report/heatmap.h"
#include "report/line_plot.h"

namespace fs = std::filesystem;
using namespace hydra;

namespace {

struct PlotTempDir {
    fs::path path;
    explicit PlotTempDir(const std::string& tag) {
        path = fs::temp_directory_path() / ("hydra_plot_" + tag + "_" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~PlotTempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

struct PngHeader {
    bool signature_ok = false, ihdr_ok = false;
    uint32_t width = 0, height = 0;
    int bit_depth = 0, color_type = 0;
};

// Parses the PNG signature and the IHDR chunk by hand (PNG spec: 8-byte signature, then the IHDR
// chunk: 4-byte big-endian length 13, "IHDR", width, height, bit depth, colour type, ...).
PngHeader read_png_header(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::vector<uint8_t> b(33);
    f.read(reinterpret_cast<char*>(b.data()), 33);
    PngHeader h;
    if (f.gcount() < 33) return h;
    const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    h.signature_ok = std::equal(sig, sig + 8, b.begin());
    auto be32 = [&](int o) {
        return (uint32_t(b[o]) << 24) | (uint32_t(b[o + 1]) << 16) | (uint32_t(b[o + 2]) << 8) |
               uint32_t(b[o + 3]);
    };
    h.ihdr_ok = be32(8) == 13 && b[12] == 'I' && b[13] == 'H' && b[14] == 'D' && b[15] == 'R';
    h.width = be32(16);
    h.height = be32(20);
    h.bit_depth = b[24];
    h.color_type = b[25];
    return h;
}

const Rgb kRed{220, 20, 30};
const Rgb kWhite{255, 255, 255};

int ink_count(const Canvas& c, int x0, int y0, int x1, int y1, bool inside) {
    int n = 0;
    for (int y = 0; y < c.height(); ++y)
        for (int x = 0; x < c.width(); ++x) {
            bool in = x >= x0 && x < x1 && y >= y0 && y < y1;
            if (in == inside && !(c.at(x, y) == c.background())) ++n;
        }
    return n;
}

std::vector<Series> loss_series() {
    Series train{"train loss", {}, {}}, held{"held-out loss", {}, {}}, other{"hybrid", {}, {}};
    for (int s = 0; s <= 500; s += 5) {
        train.x.push_back(s);
        train.y.push_back(2.0 + 3.0 * std::exp(-s / 100.0));
        other.x.push_back(s);
        other.y.push_back(2.3 + 3.0 * std::exp(-s / 100.0));
        if (s % 100 == 0) {
            held.x.push_back(s);
            held.y.push_back(2.1 + 3.0 * std::exp(-s / 100.0));
        }
    }
    return {train, held, other};
}

}  // namespace

// ---- ticks -------------------------------------------------------------------------------------

TEST(PlotTicks, ZeroToPoint87GivesFifths) {
    std::vector<double> t = nice_ticks(0.0, 0.87, 6);
    std::vector<double> want = {0.0, 0.2, 0.4, 0.6, 0.8};
    ASSERT_EQ(t.size(), want.size());
    for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-12);
    EXPECT_NEAR(nice_step(0.0, 0.87, 6), 0.2, 1e-15);
}

TEST(PlotTicks, KnownRanges) {
    auto expect_ticks = [](double lo, double hi, int target, std::vector<double> want) {
        std::vector<double> t = nice_ticks(lo, hi, target);
        ASSERT_EQ(t.size(), want.size()) << lo << ".." << hi;
        for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-9 * std::abs(want[i]) + 1e-12);
    };
    expect_ticks(-3, 17, 5, {0, 5, 10, 15});                         // raw step 5
    expect_ticks(-30, 1030, 8, {0, 200, 400, 600, 800, 1000});       // raw 151 -> 200
    expect_ticks(1.9, 6.1, 8, {2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6});  // raw 0.6 -> 0.5 (nearest)
    expect_ticks(-1, 1, 3, {-1, 0, 1});
    // Rounding the step up would leave a single tick (1.0); nice_ticks steps down to keep two.
    std::vector<double> t = nice_ticks(0.1, 0.95, 2);
    EXPECT_GE(t.size(), 2u);
}

TEST(PlotTicks, RandomRangesGiveOneTwoFiveSteps) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(-6, 6);
    for (int it = 0; it < 2000; ++it) {
        double scale = std::pow(10.0, u(rng));
        double lo = u(rng) * scale, hi = lo + std::abs(u(rng)) * scale + 1e-3 * scale;
        int target = 2 + it % 9;
        double step = nice_step(lo, hi, target);
        double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        EXPECT_TRUE(std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9) << step;
        std::vector<double> t = nice_ticks(lo, hi, target);
        ASSERT_GE(t.size(), 2u) << lo << ".." << hi << " target " << target;
        EXPECT_LE(t.size(), size_t(2.5 * target + 2)) << lo << ".." << hi << " target " << target;
        for (size_t i = 0; i < t.size(); ++i) {
            EXPECT_GE(t[i], lo - 1e-9 * step);
            EXPECT_LE(t[i], hi + 1e-9 * step);
            if (i) {
                EXPECT_NEAR(t[i] - t[i - 1], step, 1e-6 * step);
            }
            EXPECT_NEAR(t[i] / step, std::round(t[i] / step), 1e-6);  // multiples of the step
        }
    }
}

TEST(PlotTicks, LogTicks) {
    std::vector<double> t = log_ticks(1.0, 1e6);
    ASSERT_EQ(t.size(), 7u);
    for (int k = 0; k <= 6; ++k) EXPECT_NEAR(t[k], std::pow(10.0, k), 1e-9 * std::pow(10.0, k));
    // Two decades: 1, 2, 5 multiples.
    t = log_ticks(900, 70000);
    std::vector<double> want = {1000, 2000, 5000, 10000, 20000, 50000};
    ASSERT_EQ(t.size(), want.size());
    for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-9 * want[i]);
    // Inside one decade without a 1/2/5 value: linear nice ticks.
    t = log_ticks(2.1, 3.6);
    want = {2.5, 3.0, 3.5};
    ASSERT_EQ(t.size(), want.size());
    for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-12);
    // Many decades are thinned to at most ~8 labels.
    EXPECT_LE(log_ticks(1e-20, 1e20).size(), 9u);
    EXPECT_THROW(log_ticks(0.0, 1.0), Error);
}

TEST(PlotTicks, FormatTick) {
    EXPECT_EQ(format_tick(0.6000000000000001, 0.2), "0.6");
    EXPECT_EQ(format_tick(0.0, 0.2), "0.0");
    EXPECT_EQ(format_tick(-1e-17, 0.2), "0.0");  // never "-0.0"
    EXPECT_EQ(format_tick(-0.4, 0.2), "-0.4");
    EXPECT_EQ(format_tick(0.05, 0.05), "0.05");
    EXPECT_EQ(format_tick(1500, 500), "1500");
    EXPECT_EQ(format_tick(20, 10), "20");
    EXPECT_EQ(format_tick(2e6, 1e6), "2e6");
    EXPECT_EQ(format_tick(2.5e6, 5e5), "2.5e6");
    EXPECT_EQ(format_tick(1.5e-5, 5e-6), "1.5e-5");
}

TEST(PlotTicks, BadRangeThrows) {
    EXPECT_THROW(nice_ticks(1.0, 1.0), Error);
    EXPECT_THROW(nice_ticks(2.0, 1.0), Error);
    EXPECT_THROW(nice_ticks(0.0, NAN), Error);
    EXPECT_THROW(nice_ticks(-1e308, 1e308), Error);  // span overflows
}

// ---- canvas ------------------------------------------------------------------------------------

TEST(PlotCanvas, LinePixelsHaveTheLineColour) {
    Canvas c(100, 100);
    c.line(10.5, 50.5, 90.5, 50.5, kRed, 3.0);  // horizontal, 3 px: rows 49..51 fully covered
    for (int x = 12; x <= 88; ++x) {
        EXPECT_EQ(c.at(x, 50), kRed) << x;
        EXPECT_EQ(c.at(x, 49), kRed) << x;
        EXPECT_EQ(c.at(x, 51), kRed) << x;
        EXPECT_EQ(c.at(x, 47), kWhite) << x;
        EXPECT_EQ(c.at(x, 53), kWhite) << x;
    }
    EXPECT_EQ(c.at(5, 50), kWhite);  // beyond the round cap
    EXPECT_EQ(c.at(95, 50), kWhite);

    Canvas d(100, 100);
    d.line(10.5, 10.5, 90.5, 90.5, kRed, 2.0);  // diagonal through pixel centres
    for (int i = 11; i <= 89; ++i) EXPECT_EQ(d.at(i, i), kRed) << i;
    EXPECT_EQ(d.at(50, 70), kWhite);
    EXPECT_EQ(d.at(70, 50), kWhite);
    // Anti-aliasing: a pixel at distance ~1.4 from the centre line is partly covered.
    Rgb edge = d.at(51, 49);
    EXPECT_FALSE(edge == kRed);
    EXPECT_FALSE(edge == kWhite);
}

TEST(PlotCanvas, ClipAndRects) {
    Canvas c(60, 40);
    c.set_clip(10, 5, 30, 20);
    c.fill_rect(0, 0, 60, 40, kRed);
    EXPECT_EQ(c.at(10, 5), kRed);
    EXPECT_EQ(c.at(29, 19), kRed);
    EXPECT_EQ(c.at(9, 5), kWhite);
    EXPECT_EQ(c.at(30, 19), kWhite);
    EXPECT_EQ(c.at(10, 20), kWhite);
    c.reset_clip();
    c.stroke_rect(40, 10, 10, 10, kRed, 1);
    EXPECT_EQ(c.at(40, 10), kRed);
    EXPECT_EQ(c.at(49, 19), kRed);
    EXPECT_EQ(c.at(45, 15), kWhite);  // hollow
}

TEST(PlotCanvas, HostileCoordinatesAreSafeAndFast) {
    Canvas c(200, 100);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) {
        c.line(-1e300, -1e300, 1e300, 1e300, kRed, 3.0);
        c.line(-1e9, 50.5, 1e9, 50.5, kRed, 2.0);  // long, mostly off-canvas
        c.line(NAN, 0, 10, 10, kRed, 2.0);
        c.line(0, 0, INFINITY, 10, kRed, 2.0);
        c.fill_circle(NAN, 5, 3, kRed);
        c.fill_circle(1e300, 5, 1e300, kRed);
        c.marker(Marker::Diamond, -1e300, 0, 5, kRed);
        c.fill_rect(INT_MAX - 5, INT_MAX - 5, INT_MAX, INT_MAX, kRed);
        c.fill_rect(INT_MIN, INT_MIN, INT_MAX, INT_MAX, kRed);
        c.text(INT_MAX / 2, 0, "abc", kRed, 3);
    }
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(sec, 2.0);  // the band scan costs the visible length, not the bounding box
    EXPECT_EQ(c.at(100, 50), kRed);
    EXPECT_THROW(Canvas(0, 10), Error);
    EXPECT_THROW(Canvas(10, 100000), Error);
}

TEST(PlotCanvas, TextInkStaysInsideItsBox) {
    Canvas c(200, 60);
    const std::string s = "Hg_8|";
    const int scale = 2, x = 20, y = 15;
    c.text(x, y, s, kRed, scale);
    int w = Canvas::text_width(s, scale), h = Canvas::text_height(scale);
    EXPECT_EQ(w, (5 * 6 - 1) * 2);
    EXPECT_EQ(h, 18);
    EXPECT_GT(ink_count(c, x, y, x + w, y + h, true), 60);
    EXPECT_EQ(ink_count(c, x, y, x + w, y + h, false), 0);
    // Glyphs land in their cells, descenders included: 'H' top-left, '|' row 7, 'g' hook row 8.
    EXPECT_EQ(c.at(x, y), kRed);
    EXPECT_EQ(c.at(x + 4 * 6 * scale + 2 * scale, y + 7 * scale), kRed);
    EXPECT_EQ(c.at(x + 1 * 6 * scale + 2 * scale, y + 8 * scale), kRed);
}

TEST(PlotCanvas, GlyphShapes) {
    // 'I' is ".###." / "..#.." x5 / ".###.": check it pixel by pixel at scale 3.
    Canvas c(40, 40);
    c.text(2, 3, "I", kRed, 3);
    auto ink = [&](int col, int row) { return c.at(2 + col * 3 + 1, 3 + row * 3 + 1) == kRed; };
    for (int col = 0; col < 5; ++col) {
        EXPECT_EQ(ink(col, 0), col >= 1 && col <= 3) << col;
        EXPECT_EQ(ink(col, 3), col == 2) << col;
        EXPECT_EQ(ink(col, 6), col >= 1 && col <= 3) << col;
        EXPECT_FALSE(ink(col, 7));
    }
    // Rotated text: 'L' (column 0 and row 6 inked) read bottom to top. Its box is 9 wide, 5 tall;
    // glyph column 0 becomes the bottom row, glyph row 6 the column x = 6.
    Canvas u(20, 20);
    u.text_up(0, 0, "L", kRed, 1);
    for (int x = 0; x <= 6; ++x) EXPECT_EQ(u.at(x, 4), kRed) << x;
    for (int y = 0; y <= 4; ++y) EXPECT_EQ(u.at(6, y), kRed) << y;
    EXPECT_EQ(u.at(3, 0), kWhite);
    EXPECT_EQ(u.at(7, 4), kWhite);
    EXPECT_EQ(ink_count(u, 0, 0, 9, 5, false), 0);
}

TEST(PlotCanvas, FontCoversPrintableAsciiWithDistinctGlyphs) {
    std::set<std::vector<uint8_t>> seen;
    for (int ch = 33; ch <= 126; ++ch) {
        const Glyph& g = font_glyph(char(ch));
        std::vector<uint8_t> rows(g.rows, g.rows + kFontLineHeight);
        int bits = 0;
        for (uint8_t r : rows) bits += __builtin_popcount(r);
        EXPECT_GT(bits, 0) << "glyph '" << char(ch) << "' is blank";
        EXPECT_TRUE(seen.insert(rows).second) << "glyph '" << char(ch) << "' duplicates another";
        for (uint8_t r : rows) EXPECT_LT(r, 32) << char(ch);  // 5 columns
    }
    // Outside 32..126 draws as '?'.
    const Glyph& q = font_glyph('?');
    const Glyph& e = font_glyph(char(0xe9));
    EXPECT_TRUE(std::equal(q.rows, q.rows + kFontLineHeight, e.rows));
    const Glyph& sp = font_glyph(' ');
    for (uint8_t r : sp.rows) EXPECT_EQ(r, 0);
}

TEST(PlotCanvas, PngHeaderAndAtomicWrite) {
    PlotTempDir dir("canvas");
    Canvas c(123, 45);
    c.fill_rect(0, 0, 10, 10, kRed);
    fs::path p = dir.path / "c.png";
    c.write_png(p.string());
    PngHeader h = read_png_header(p);
    EXPECT_TRUE(h.signature_ok);
    EXPECT_TRUE(h.ihdr_ok);
    EXPECT_EQ(h.width, 123u);
    EXPECT_EQ(h.height, 45u);
    EXPECT_EQ(h.bit_depth, 8);
    EXPECT_EQ(h.color_type, 2);  // truecolour RGB
    // Overwrite in place; no temporary is left behind.
    Canvas(7, 9).write_png(p.string());
    h = read_png_header(p);
    EXPECT_EQ(h.width, 7u);
    EXPECT_EQ(h.height, 9u);
    int files = 0;
    for (auto& e : fs::directory_iterator(dir.path)) {
        ++files;
        EXPECT_EQ(e.path().filename(), "c.png");
    }
    EXPECT_EQ(files, 1);
    try {
        c.write_png((dir.path / "missing_dir" / "x.png").string());
        FAIL() << "expected hydra::Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("missing_dir/x.png"), std::string::npos) << e.what();
    }
}

// ---- line plots --------------------------------------------------------------------------------

TEST(PlotLine, WritesPngOfTheRequestedSize) {
    PlotTempDir dir("line");
    LinePlotOptions o;
    o.title = "loss";
    o.x_label = "step";
    o.y_label = "nats/token";
    fs::path p = dir.path / "loss.png";
    write_line_plot(p.string(), loss_series(), o);
    PngHeader h = read_png_header(p);
    EXPECT_TRUE(h.signature_ok && h.ihdr_ok);
    EXPECT_EQ(h.width, 900u);
    EXPECT_EQ(h.height, 560u);
    o.width = 400;
    o.height = 300;
    o.log_y = true;
    write_line_plot(p.string(), loss_series(), o);
    h = read_png_header(p);
    EXPECT_EQ(h.width, 400u);
    EXPECT_EQ(h.height, 300u);
}

TEST(PlotLine, SeriesPixelsAndNanBreaks) {
    Series a{"a", {0, 1, 2, 3, 4}, {0, 1, NAN, 3, 4}};
    Series b{"b", {0, 4}, {4, 0}};
    LinePlotOptions o;
    o.marker_max_points = 0;  // lines only, so the pixels below are line pixels
    PlotFrame f;
    Canvas c = render_line_plot({a, b}, o, &f);
    ASSERT_GT(f.right - f.left, 100);
    ASSERT_FALSE(series_color(0) == series_color(1));
    // Anti-aliased lines are fully covered where a pixel centre is within line_width/2 - 0.5 of the
    // line, so look for an exact series-colour pixel among the 3x3 around the data position.
    auto near = [&](double x, double y, Rgb col) {
        int px = int(std::floor(f.px(x))), py = int(std::floor(f.py(y)));
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx)
                if (c.at(px + dx, py + dy) == col) return true;
        return false;
    };
    EXPECT_TRUE(near(0.5, 0.5, series_color(0)));   // on segment (0,0)-(1,1)
    EXPECT_TRUE(near(3.5, 3.5, series_color(0)));   // on segment (3,3)-(4,4)
    EXPECT_FALSE(near(1.6, 1.6, series_color(0)));  // the NaN at x=2 breaks (1,1)-(3,3)
    EXPECT_FALSE(near(2.5, 2.5, series_color(0)));
    EXPECT_TRUE(near(1.0, 3.0, series_color(1)));  // on (0,4)-(4,0)
    EXPECT_TRUE(near(3.0, 1.0, series_color(1)));
    EXPECT_FALSE(near(1.0, 3.0, series_color(0)));
    // Axis range is the data range padded by 3% per side.
    EXPECT_NEAR(f.x_lo, -0.12, 1e-12);
    EXPECT_NEAR(f.x_hi, 4.12, 1e-12);
    // The legend exists, is inside the plot area and avoids the data.
    EXPECT_GT(f.legend_w, 0);
    EXPECT_GE(f.legend_x, f.left);
    EXPECT_LE(f.legend_x + f.legend_w, f.right);
    EXPECT_EQ(c.at(f.legend_x, f.legend_y + f.legend_h / 2), rgb_hex(0xaaaaaa));  // legend border
    // Pixels outside the plot area but inside the frame line are the frame colour.
    EXPECT_EQ(c.at(f.left - 1, (f.top + f.bottom) / 2), rgb_hex(0x444444));
}

TEST(PlotLine, MarkersForFewPointsAndIsolatedPoints) {
    Series a{"", {0, 1, 2}, {1, 1, 2}};
    Series lone{"", {0, 1, 2}, {NAN, 1.5, NAN}};  // a single finite point: only a marker can show it
    LinePlotOptions o;
    o.marker_max_points = 0;
    PlotFrame f;
    Canvas c = render_line_plot({a, lone}, o, &f);
    EXPECT_EQ(c.at(int(f.px(1)), int(f.py(1.5))), series_color(1));
    EXPECT_EQ(f.legend_w, 0);  // no labels, no legend
    o.marker_max_points = 10;
    c = render_line_plot({a}, o, &f);
    // A marker (radius 3.5) covers pixels well off the line at a data point.
    EXPECT_EQ(c.at(int(f.px(2)), int(std::floor(f.py(2))) - 2), series_color(0));
}

TEST(PlotLine, LogAxisAndFixedRange) {
    Series a{"acc", {1000, 10000, 100000}, {0.9, 0.5, 0.1}};
    LinePlotOptions o;
    o.log_x = true;
    o.y_min = 0.0;
    o.y_max = 1.0;
    PlotFrame f;
    Canvas c = render_line_plot({a}, o, &f);
    EXPECT_NEAR(f.px(10000), (f.px(1000) + f.px(100000)) / 2, 1e-9);
    EXPECT_EQ(f.y_lo, 0.0);
    EXPECT_EQ(f.y_hi, 1.0);
    EXPECT_NEAR(f.py(0.0), f.bottom - 0.5, 1e-9);
    EXPECT_NEAR(f.py(1.0), f.top + 0.5, 1e-9);
    EXPECT_EQ(c.at(int(f.px(1000)), int(f.py(0.9))), series_color(0));
}

TEST(PlotLine, BadInputsThrow) {
    LinePlotOptions o;
    EXPECT_THROW(render_line_plot({}, o), Error);
    EXPECT_THROW(render_line_plot({Series{"a", {1, 2}, {1}}}, o), Error);
    EXPECT_THROW(render_line_plot({Series{"a", {}, {}}}, o), Error);
    EXPECT_THROW(render_line_plot({Series{"a", {1, NAN}, {NAN, 2}}}, o), Error);  // no finite point
    LinePlotOptions lg;
    lg.log_y = true;
    EXPECT_THROW(render_line_plot({Series{"a", {1, 2}, {1, 0}}}, lg), Error);
    LinePlotOptions tiny;
    tiny.width = 10;
    EXPECT_THROW(render_line_plot(loss_series(), tiny), Error);
    LinePlotOptions range;
    range.x_min = 5;
    range.x_max = 1;
    EXPECT_THROW(render_line_plot(loss_series(), range), Error);
    PlotTempDir dir("linebad");
    fs::path p = dir.path / "empty.png";
    try {
        write_line_plot(p.string(), {}, o);
        FAIL() << "expected hydra::Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(p));
    // Single point and constant series are fine (the range is widened around them).
    EXPECT_NO_THROW(render_line_plot({Series{"one", {3}, {7}}}, o));
    EXPECT_NO_THROW(render_line_plot({Series{"flat", {0, 1, 2}, {0, 0, 0}}}, o));
}

// ---- heatmaps ----------------------------------------------------------------------------------

TEST(PlotHeatmap, Viridis) {
    EXPECT_EQ(viridis(0.0), rgb_hex(0x440154));
    EXPECT_EQ(viridis(1.0), rgb_hex(0xfde725));
    EXPECT_EQ(viridis(-3.0), rgb_hex(0x440154));
    EXPECT_EQ(viridis(NAN), rgb_hex(0x440154));
    EXPECT_EQ(viridis(7.0), rgb_hex(0xfde725));
    // Perceptual: lightness increases monotonically along the map.
    double prev = -1;
    for (int i = 0; i <= 100; ++i) {
        Rgb c = viridis(i / 100.0);
        double lum = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
        EXPECT_GT(lum, prev) << i;
        prev = lum;
    }
}

TEST(PlotHeatmap, CellsColourBarAndPng) {
    const int rows = 30, cols = 9;
    std::vector<std::vector<double>> v(rows, std::vector<double>(cols));
    for (int r = 0; r < rows; ++r)
        for (int k = 0; k < cols; ++k) v[r][k] = 0.01 * (r * cols + k);  // 0 .. 2.69
    v[5][5] = NAN;
    HeatmapOptions o;
    o.title = "retrieval score";
    o.row_label = "layer";
    o.col_label = "head";
    o.value_label = "score";
    o.outlined = {{2, 3}};
    HeatmapFrame f;
    Canvas c = render_heatmap(v, o, &f);
    EXPECT_EQ(f.rows, rows);
    EXPECT_EQ(f.cols, cols);
    EXPECT_DOUBLE_EQ(f.vmin, 0.0);
    EXPECT_DOUBLE_EQ(f.vmax, 2.69);
    auto centre = [&](int r, int k) {
        return c.at(f.x0 + k * f.cell_w + f.cell_w / 2, f.y0 + r * f.cell_h + f.cell_h / 2);
    };
    EXPECT_EQ(centre(0, 0), rgb_hex(0x440154));
    EXPECT_EQ(centre(rows - 1, cols - 1), rgb_hex(0xfde725));
    EXPECT_EQ(centre(10, 4), viridis((0.01 * (10 * cols + 4)) / 2.69));
    EXPECT_EQ(centre(5, 5), heatmap_missing_color());
    EXPECT_EQ(c.at(f.x0 + 3 * f.cell_w, f.y0 + 2 * f.cell_h), rgb_hex(0x000000));  // outline corner
    EXPECT_EQ(centre(2, 3), viridis(0.01 * (2 * cols + 3) / 2.69));                // cell still visible
    // Colour bar: vmax at the top row, vmin at the bottom row.
    EXPECT_EQ(c.at(f.bar_x + f.bar_w / 2, f.bar_y), rgb_hex(0xfde725));
    EXPECT_EQ(c.at(f.bar_x + f.bar_w / 2, f.bar_y + f.bar_h - 1), rgb_hex(0x440154));
    // Tick label text exists left of the cells (row labels) and right of the bar (min/max labels).
    EXPECT_GT(ink_count(c, 0, f.y0, f.x0 - 2, f.y0 + f.cell_h * rows, true), 50);
    EXPECT_GT(ink_count(c, f.bar_x + f.bar_w + 2, f.y0, c.width(), f.y0 + f.bar_h, true), 50);

    PlotTempDir dir("heat");
    fs::path p = dir.path / "heat.png";
    write_heatmap(p.string(), v, o);
    PngHeader h = read_png_header(p);
    EXPECT_TRUE(h.signature_ok && h.ihdr_ok);
    EXPECT_EQ(int(h.width), c.width());
    EXPECT_EQ(int(h.height), c.height());
}

TEST(PlotHeatmap, FixedScaleAndNames) {
    std::vector<std::vector<double>> v = {{0.5, 2.0}, {-1.0, 0.25}};
    HeatmapOptions o;
    o.vmin = 0.0;
    o.vmax = 1.0;
    o.row_names = {"a", "b"};
    o.col_names = {"x", "y"};
    o.cell_width = 30;
    o.cell_height = 20;
    HeatmapFrame f;
    Canvas c = render_heatmap(v, o, &f);
    EXPECT_EQ(f.cell_w, 30);
    EXPECT_EQ(f.cell_h, 20);
    auto centre = [&](int r, int k) { return c.at(f.x0 + k * 30 + 15, f.y0 + r * 20 + 10); };
    EXPECT_EQ(centre(0, 0), viridis(0.5));
    EXPECT_EQ(centre(0, 1), viridis(1.0));  // above vmax: clamped colour
    EXPECT_EQ(centre(1, 0), viridis(0.0));
    EXPECT_EQ(centre(1, 1), viridis(0.25));
}

TEST(PlotHeatmap, BadInputsThrow) {
    HeatmapOptions o;
    EXPECT_THROW(render_heatmap({}, o), Error);
    EXPECT_THROW(render_heatmap({{}}, o), Error);
    EXPECT_THROW(render_heatmap({{1, 2}, {3}}, o), Error);  // ragged
    EXPECT_THROW(render_heatmap({{NAN, NAN}}, o), Error);   // nothing to scale by
    HeatmapOptions names;
    names.row_names = {"only one"};
    EXPECT_THROW(render_heatmap({{1}, {2}}, names), Error);
    HeatmapOptions out;
    out.outlined = {{0, 5}};
    EXPECT_THROW(render_heatmap({{1, 2}}, out), Error);
    HeatmapOptions scale;
    scale.vmin = 1;
    scale.vmax = 1;
    EXPECT_THROW(render_heatmap({{1, 2}}, scale), Error);
    HeatmapOptions cell;
    cell.cell_width = 100000;
    EXPECT_THROW(render_heatmap({{1, 2}}, cell), Error);
    EXPECT_THROW(render_heatmap(std::vector<std::vector<double>>(5000, std::vector<double>(1, 0.0)), o),
                 Error);
    // All missing but with an explicit scale: renders grey cells.
    HeatmapOptions fixed;
    fixed.vmin = 0;
    fixed.vmax = 1;
    HeatmapFrame f;
    Canvas c = render_heatmap({{NAN}}, fixed, &f);
    EXPECT_EQ(c.at(f.x0 + f.cell_w / 2, f.y0 + f.cell_h / 2), heatmap_missing_color());
    PlotTempDir dir("heatbad");
    try {
        write_heatmap((dir.path / "h.png").string(), {{1, 2}, {3}}, o);
        FAIL() << "expected hydra::Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("h.png"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
    }
}
