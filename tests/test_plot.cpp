// Tests for src/report: nice ticks and their labels; line plots and heatmaps drawn by PLplot, checked
// on the decoded PNG (size, series colours where the data are, heatmap cell colours and their
// ordering, colour bar, legend placement), bad input and unwritable paths (clear errors, no file
// left behind, an existing file untouched), the missing-driver error, and byte-identical output for
// identical input.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

#include "core/error.h"
#include "report/axis_ticks.h"
#include "report/colors.h"
#include "report/heatmap.h"
#include "report/line_plot.h"
#include "report/plplot_page.h"
#include "scoped_env.h"
#include "temp_dir.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace hydra;

namespace {

struct PngHeader {
    bool signature_ok = false, ihdr_ok = false;
    uint32_t width = 0, height = 0;
};

// Parses the PNG signature and the IHDR chunk by hand (PNG spec: 8-byte signature, then the IHDR
// chunk: 4-byte big-endian length 13, "IHDR", width, height, ...).
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
    return h;
}

// A decoded PNG (stb_image), as RGB.
struct Image {
    int width = 0, height = 0;
    std::vector<uint8_t> rgb;
    Rgb at(int x, int y) const {
        const uint8_t* p = rgb.data() + 3 * (size_t(y) * size_t(width) + size_t(x));
        return Rgb{p[0], p[1], p[2]};
    }
    bool inside(int x, int y) const { return x >= 0 && y >= 0 && x < width && y < height; }
};

Image load_png(const fs::path& p) {
    Image img;
    int n = 0;
    unsigned char* data = stbi_load(p.string().c_str(), &img.width, &img.height, &n, 3);
    if (!data) {
        ADD_FAILURE() << p << " does not decode: " << stbi_failure_reason();
        return img;
    }
    img.rgb.assign(data, data + size_t(img.width) * size_t(img.height) * 3);
    stbi_image_free(data);
    return img;
}

int colour_distance(Rgb a, Rgb b) {
    return std::max({std::abs(a.r - b.r), std::abs(a.g - b.g), std::abs(a.b - b.b)});
}

// Whether a pixel within `radius` of pixel coordinate (x, y) has colour c (each channel within tol):
// anti-aliased lines have their exact colour only near their middle.
bool colour_near(const Image& img, double x, double y, Rgb c, int radius = 2, int tol = 12) {
    const int cx = int(std::floor(x)), cy = int(std::floor(y));
    for (int dy = -radius; dy <= radius; ++dy)
        for (int dx = -radius; dx <= radius; ++dx)
            if (img.inside(cx + dx, cy + dy) && colour_distance(img.at(cx + dx, cy + dy), c) <= tol)
                return true;
    return false;
}

// Pixels in [x0, x1) x [y0, y1) that are not white.
int ink_count(const Image& img, int x0, int y0, int x1, int y1) {
    int n = 0;
    for (int y = std::max(0, y0); y < std::min(img.height, y1); ++y)
        for (int x = std::max(0, x0); x < std::min(img.width, x1); ++x)
            n += !(img.at(x, y) == rgb_hex(0xffffff));
    return n;
}

double luminance(Rgb c) {
    return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
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

std::string read_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// Expects write() to throw a hydra::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& write, std::initializer_list<std::string> parts) {
    try {
        write();
        ADD_FAILURE() << "expected hydra::Error";
    } catch (const Error& e) {
        for (const std::string& p : parts)
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
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

// ---- line plots --------------------------------------------------------------------------------

TEST(PlotLine, WritesPngOfTheRequestedSize) {
    test::TempDir dir("line");
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
    Image img = load_png(p);
    EXPECT_EQ(img.width, 900);
    EXPECT_EQ(img.height, 560);
    o.width = 400;
    o.height = 300;
    o.log_y = true;
    write_line_plot(p.string(), loss_series(), o);
    h = read_png_header(p);
    EXPECT_EQ(h.width, 400u);
    EXPECT_EQ(h.height, 300u);
    img = load_png(p);
    EXPECT_EQ(img.width, 400);
    EXPECT_EQ(img.height, 300);
    // Only the PNG is left: the temporary file was renamed into place.
    EXPECT_EQ(dir.files(), std::set<std::string>{"loss.png"});
}

TEST(PlotLine, SeriesPixelsAndNanBreaks) {
    test::TempDir dir("lineseries");
    fs::path p = dir.path / "a.png";
    Series a{"a", {0, 1, 2, 3, 4}, {0, 1, NAN, 3, 4}};
    Series b{"b", {0, 4}, {4, 0}};
    LinePlotOptions o;
    o.marker_max_points = 0;  // lines only, so the pixels below are line pixels
    PlotFrame f;
    write_line_plot(p.string(), {a, b}, o, &f);
    Image img = load_png(p);
    ASSERT_GT(f.right - f.left, 100);
    ASSERT_FALSE(series_color(0) == series_color(1));
    auto near = [&](double x, double y, Rgb col) { return colour_near(img, f.px(x), f.py(y), col); };
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
    // The legend exists, is inside the plot area, and shows its grey border.
    EXPECT_GT(f.legend_w, 0);
    EXPECT_GE(f.legend_x, f.left);
    EXPECT_LE(f.legend_x + f.legend_w, f.right);
    EXPECT_GE(f.legend_y, f.top);
    EXPECT_LE(f.legend_y + f.legend_h, f.bottom);
    // Its border (0xaaaaaa, a 1 px line, anti-aliased across two pixel columns): grey at its left edge.
    bool border = false;
    for (int dx = -2; dx <= 2; ++dx) {
        const Rgb c = img.at(int(f.legend_x) + dx, int(f.legend_y + f.legend_h / 2));
        border |= c.r == c.g && c.g == c.b && c.r >= 0xa0 && c.r <= 0xe8;
    }
    EXPECT_TRUE(border);
    // The frame line is at the plot area's edge.
    EXPECT_TRUE(colour_near(img, f.left, (f.top + f.bottom) / 2, rgb_hex(0x444444), 1, 16));
}

TEST(PlotLine, ErrorBarsAreDrawnAndWidenTheRange) {
    test::TempDir dir("errbars");
    fs::path p = dir.path / "e.png";
    // Two points far apart in x, bars [20, 80] at x = 0 and none (NaN ends) at x = 10.
    Series a{"", {0, 10}, {50, 50}, {20, NAN}, {80, NAN}};  // no label: no legend over the data
    LinePlotOptions o;
    o.marker_max_points = 0;
    PlotFrame f;
    write_line_plot(p.string(), {a}, o, &f);
    EXPECT_LE(f.y_lo, 20.0);  // the bar ends are in the range
    EXPECT_GE(f.y_hi, 80.0);
    Image img = load_png(p);
    EXPECT_TRUE(colour_near(img, f.px(0), f.py(30), series_color(0)));  // on the bar at x = 0
    EXPECT_TRUE(colour_near(img, f.px(0), f.py(75), series_color(0)));
    EXPECT_FALSE(colour_near(img, f.px(10), f.py(30), series_color(0)));  // no bar at x = 10
    // Mismatched sizes and a bar that does not hold its point are errors; no file is left.
    Series bad{"b", {0, 1}, {1, 2}, {0}, {3}};
    EXPECT_THROW(write_line_plot((dir.path / "b.png").string(), {bad}, o), Error);
    Series wrong{"w", {0, 1}, {1, 2}, {2, 1}, {3, 3}};
    EXPECT_THROW(write_line_plot((dir.path / "w.png").string(), {wrong}, o), Error);
    EXPECT_FALSE(fs::exists(dir.path / "b.png"));
}

TEST(PlotLine, LegendGoesToTheEmptyCorner) {
    test::TempDir dir("legend");
    fs::path p = dir.path / "l.png";
    // One rising line: the top-left and bottom-right corners are empty; of those, top left wins.
    Series up{"rising", {0, 10}, {0, 10}};
    LinePlotOptions o;
    PlotFrame f;
    write_line_plot(p.string(), {up}, o, &f);
    ASSERT_GT(f.legend_w, 0);
    EXPECT_LT(f.legend_x - f.left, 20);
    EXPECT_LT(f.legend_y - f.top, 20);
    Image img = load_png(p);
    const int x0 = int(f.legend_x) + 2, y0 = int(f.legend_y) + 2, x1 = int(f.legend_x + f.legend_w) - 2,
              y1 = int(f.legend_y + f.legend_h) - 2;
    // Inside the box: the label's text and the line sample in the series colour.
    EXPECT_GT(ink_count(img, x0, y0, x1, y1), 40);
    bool sample = false;
    for (int y = y0; y < y1 && !sample; ++y)
        for (int x = x0; x < x1 && !sample; ++x)
            sample = colour_distance(img.at(x, y), series_color(0)) <= 12;
    EXPECT_TRUE(sample);
    // A falling line puts it top right instead.
    Series down{"falling", {0, 10}, {10, 0}};
    write_line_plot(p.string(), {down}, o, &f);
    EXPECT_LT(f.right - (f.legend_x + f.legend_w), 20);
    EXPECT_LT(f.legend_y - f.top, 20);
}

TEST(PlotLine, MarkersForFewPointsAndIsolatedPoints) {
    test::TempDir dir("markers");
    fs::path p = dir.path / "m.png";
    Series a{"", {0, 1, 2}, {1, 1, 2}};
    Series lone{"", {0, 1, 2}, {NAN, 1.5, NAN}};  // a single finite point: only a marker can show it
    LinePlotOptions o;
    o.marker_max_points = 0;
    PlotFrame f;
    write_line_plot(p.string(), {a, lone}, o, &f);
    Image img = load_png(p);
    EXPECT_TRUE(colour_near(img, f.px(1), f.py(1.5), series_color(1), 0, 8));
    EXPECT_EQ(f.legend_w, 0);  // no labels, no legend
    // 3 px above the last point is off the line (2 px wide) but inside a marker (radius 3.5).
    const double mx = f.px(2), my = f.py(2) - 3;
    EXPECT_FALSE(colour_near(img, mx, my, series_color(0), 0, 40));
    o.marker_max_points = 10;
    write_line_plot(p.string(), {a}, o, &f);
    img = load_png(p);
    EXPECT_TRUE(colour_near(img, f.px(2), f.py(2) - 3, series_color(0), 0, 8));
}

TEST(PlotLine, LogAxisAndFixedRange) {
    test::TempDir dir("log");
    fs::path p = dir.path / "log.png";
    Series a{"acc", {1000, 10000, 100000}, {0.9, 0.5, 0.1}};
    LinePlotOptions o;
    o.log_x = true;
    o.y_min = 0.0;
    o.y_max = 1.0;
    PlotFrame f;
    write_line_plot(p.string(), {a}, o, &f);
    EXPECT_NEAR(f.px(10000), (f.px(1000) + f.px(100000)) / 2, 1e-9);
    EXPECT_EQ(f.y_lo, 0.0);
    EXPECT_EQ(f.y_hi, 1.0);
    EXPECT_NEAR(f.py(0.0), f.bottom, 1e-9);
    EXPECT_NEAR(f.py(1.0), f.top, 1e-9);
    Image img = load_png(p);
    EXPECT_TRUE(colour_near(img, f.px(1000), f.py(0.9), series_color(0)));
    EXPECT_TRUE(colour_near(img, f.px(10000), f.py(0.5), series_color(0)));
    // Between the points the line follows log x: at x = 10^3.5 it is halfway between 0.9 and 0.5.
    EXPECT_TRUE(colour_near(img, f.px(std::pow(10.0, 3.5)), f.py(0.7), series_color(0)));
    // Tick labels under the axis (1000, 10000, 100000).
    EXPECT_GT(ink_count(img, int(f.left), int(f.bottom) + 3, int(f.right), int(f.bottom) + 25), 60);
}

TEST(PlotLine, BadInputsThrowAndLeaveNoFile) {
    test::TempDir dir("linebad");
    const std::string p = (dir.path / "bad.png").string();
    LinePlotOptions o;
    auto bad = [&](const std::vector<Series>& s, const LinePlotOptions& opt, const std::string& what) {
        expect_error([&] { write_line_plot(p, s, opt); }, {p, what});
    };
    bad({}, o, "no series");
    bad({Series{"a", {1, 2}, {1}}}, o, "x has 2 values but y has 1");
    bad({Series{"a", {}, {}}}, o, "no finite");
    bad({Series{"a", {1, NAN}, {NAN, 2}}}, o, "no finite");  // no finite point
    LinePlotOptions lg;
    lg.log_y = true;
    bad({Series{"a", {1, 2}, {1, 0}}}, lg, "log_y needs y > 0");
    LinePlotOptions tiny;
    tiny.width = 10;
    bad(loss_series(), tiny, "out of range");
    LinePlotOptions range;
    range.x_min = 5;
    range.x_max = 1;
    bad(loss_series(), range, "x axis range");
    EXPECT_TRUE(dir.files().empty());
    // Single point and constant series are fine (the range is widened around them).
    EXPECT_NO_THROW(write_line_plot((dir.path / "one.png").string(), {Series{"one", {3}, {7}}}, o));
    EXPECT_NO_THROW(
        write_line_plot((dir.path / "flat.png").string(), {Series{"flat", {0, 1, 2}, {0, 0, 0}}}, o));
}

TEST(PlotLine, UnwritablePathsAndAtomicReplace) {
    test::TempDir dir("atomic");
    LinePlotOptions o;
    // A directory that does not exist: a clear error naming the path, nothing created.
    const std::string missing = (dir.path / "missing_dir" / "x.png").string();
    expect_error([&] { write_line_plot(missing, loss_series(), o); }, {missing, "cannot create"});
    EXPECT_FALSE(fs::exists(dir.path / "missing_dir"));
    // The target is a directory: the PNG is drawn but cannot be renamed over it; the temporary goes.
    fs::create_directories(dir.path / "taken.png");
    const std::string taken = (dir.path / "taken.png").string();
    expect_error([&] { write_line_plot(taken, loss_series(), o); }, {taken, "rename"});
    EXPECT_TRUE(fs::is_directory(dir.path / "taken.png"));
    EXPECT_EQ(dir.files(), std::set<std::string>{"taken.png"});
    // A failed write leaves an existing plot as it was.
    const fs::path good = dir.path / "good.png";
    write_line_plot(good.string(), loss_series(), o);
    const std::string before = read_bytes(good);
    EXPECT_THROW(write_line_plot(good.string(), {Series{"a", {1, 2}, {1}}}, o), Error);
    EXPECT_EQ(read_bytes(good), before);
    EXPECT_EQ(dir.files(), (std::set<std::string>{"good.png", "taken.png"}));
}

TEST(PlotLine, IdenticalInputGivesIdenticalBytes) {
    test::TempDir dir("determ");
    LinePlotOptions o;
    o.title = "loss";
    o.log_y = true;
    write_line_plot((dir.path / "a.png").string(), loss_series(), o);
    write_line_plot((dir.path / "b.png").string(), loss_series(), o);
    EXPECT_EQ(read_bytes(dir.path / "a.png"), read_bytes(dir.path / "b.png"));
}

// ---- the PNG device ------------------------------------------------------------------------------

TEST(PlotDevice, MissingDriverIsAClearError) {
    EXPECT_NO_THROW(check_png_device());
    test::TempDir dir("driver");
    const std::string p = (dir.path / "x.png").string();
    fs::create_directories(dir.path / "drivers");
    {
        // No driver at all (as without plplot-driver-cairo): the error names the package.
        ScopedEnv env("PLPLOT_DRV_DIR", (dir.path / "drivers").string());
        expect_error([&] { write_line_plot(p, loss_series(), LinePlotOptions{}); },
                     {p, "pngcairo", "plplot-driver-cairo", "PLPLOT_DRV_DIR"});
        expect_error([&] { write_heatmap(p, {{1, 2}}, HeatmapOptions{}); }, {p, "plplot-driver-cairo"});
        // Listed, but the module does not load (as with its libraries missing).
        std::ofstream(dir.path / "drivers" / "cairo.driver_info")
            << "pngcairo:Cairo PNG Driver:0:cairo:105:pngcairo\n";
        std::ofstream(dir.path / "drivers" / "cairo.so") << "not a shared object";
        expect_error([&] { write_line_plot(p, loss_series(), LinePlotOptions{}); },
                     {p, "cairo.so cannot be loaded", "plplot-driver-cairo"});
    }
    EXPECT_FALSE(fs::exists(p));
    EXPECT_EQ(dir.files(), std::set<std::string>{"drivers"});
    // With the environment restored, plots work again in the same process.
    EXPECT_NO_THROW(write_line_plot(p, loss_series(), LinePlotOptions{}));
}

// The training loop draws its loss curve as a side product: without a PNG driver it warns and the run
// (checkpoint, log) still completes.
TEST(PlotDevice, TrainingRunCompletesWithoutTheDriver) {
    if (!fs::exists(std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/austen_persuasion.txt"))
        GTEST_SKIP() << "prose cache missing (run tools/setup.sh)";
    test::TempDir dir("trainplot");
    fs::create_directories(dir.path / "drivers");
    TrainConfig c = TrainConfig::preset("test-micro");
    c.shard_dir = (dir.path / "shards").string();
    c.threads = 1;
    c.steps = 2;
    ScopedEnv env("PLPLOT_DRV_DIR", (dir.path / "drivers").string());
    TrainRunResult r;
    ASSERT_NO_THROW(r = run_training(c, (dir.path / "run").string(), std::nullopt, std::nullopt, {}));
    EXPECT_EQ(r.final_step, 2);
    EXPECT_TRUE(fs::exists(dir.path / "run" / "model.safetensors"));
    EXPECT_TRUE(fs::exists(dir.path / "run" / "log.jsonl"));
    EXPECT_FALSE(fs::exists(dir.path / "run" / "loss_curve.png"));
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
    test::TempDir dir("heat");
    fs::path p = dir.path / "heat.png";
    write_heatmap(p.string(), v, o, &f);
    PngHeader h = read_png_header(p);
    EXPECT_TRUE(h.signature_ok && h.ihdr_ok);
    EXPECT_EQ(int(h.width), f.width);
    EXPECT_EQ(int(h.height), f.height);
    Image c = load_png(p);
    ASSERT_EQ(c.width, f.width);
    ASSERT_EQ(c.height, f.height);
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
    // Colours follow the value ordering: along row 7 the values rise, so does the lightness.
    for (int k = 1; k < cols; ++k) EXPECT_GT(luminance(centre(7, k)), luminance(centre(7, k - 1))) << k;
    // Colour bar: vmax at the top row, vmin at the bottom row.
    EXPECT_EQ(c.at(f.bar_x + f.bar_w / 2, f.bar_y), rgb_hex(0xfde725));
    EXPECT_EQ(c.at(f.bar_x + f.bar_w / 2, f.bar_y + f.bar_h - 1), rgb_hex(0x440154));
    // Tick label text exists left of the cells (row labels) and right of the bar (min/max labels).
    EXPECT_GT(ink_count(c, 0, f.y0, f.x0 - 2, f.y0 + f.cell_h * rows), 50);
    EXPECT_GT(ink_count(c, f.bar_x + f.bar_w + 2, f.y0, c.width, f.y0 + f.bar_h), 50);
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
    test::TempDir dir("heatnames");
    fs::path p = dir.path / "h.png";
    write_heatmap(p.string(), v, o, &f);
    Image c = load_png(p);
    EXPECT_EQ(f.cell_w, 30);
    EXPECT_EQ(f.cell_h, 20);
    auto centre = [&](int r, int k) { return c.at(f.x0 + k * 30 + 15, f.y0 + r * 20 + 10); };
    EXPECT_EQ(centre(0, 0), viridis(0.5));
    EXPECT_EQ(centre(0, 1), viridis(1.0));  // above vmax: clamped colour
    EXPECT_EQ(centre(1, 0), viridis(0.0));
    EXPECT_EQ(centre(1, 1), viridis(0.25));
}

TEST(PlotHeatmap, OutlinedSmallCellsKeepTheirColour) {
    HeatmapOptions o;
    o.vmin = 0.0;
    o.vmax = 1.0;
    o.cell_width = 4;  // too small for the white ring: the black edge and the cell's colour inside
    o.cell_height = 4;
    o.outlined = {{0, 1}};
    HeatmapFrame f;
    test::TempDir dir("heatsmall");
    fs::path p = dir.path / "h.png";
    write_heatmap(p.string(), {{0.25, 0.75, 0.5}}, o, &f);
    Image c = load_png(p);
    EXPECT_EQ(c.at(f.x0 + 4, f.y0), rgb_hex(0x000000));
    EXPECT_EQ(c.at(f.x0 + 4 + 2, f.y0 + 2), viridis(0.75));
    EXPECT_EQ(c.at(f.x0 + 2, f.y0 + 2), viridis(0.25));
}

TEST(PlotHeatmap, BadInputsThrow) {
    test::TempDir dir("heatbad");
    const std::string p = (dir.path / "h.png").string();
    HeatmapOptions o;
    auto bad = [&](const std::vector<std::vector<double>>& v, const HeatmapOptions& opt,
                   const std::string& what) {
        expect_error([&] { write_heatmap(p, v, opt); }, {p, what});
    };
    bad({}, o, "no rows");
    bad({{}}, o, "row 0 is empty");
    bad({{1, 2}, {3}}, o, "row 1");     // ragged
    bad({{NAN, NAN}}, o, "no finite");  // nothing to scale by
    HeatmapOptions names;
    names.row_names = {"only one"};
    bad({{1}, {2}}, names, "row_names");
    HeatmapOptions out;
    out.outlined = {{0, 5}};
    bad({{1, 2}}, out, "outlined");
    HeatmapOptions scale;
    scale.vmin = 1;
    scale.vmax = 1;
    bad({{1, 2}}, scale, "colour scale");
    HeatmapOptions cell;
    cell.cell_width = 100000;
    bad({{1, 2}}, cell, "cell_width");
    bad(std::vector<std::vector<double>>(5000, std::vector<double>(1, 0.0)), o, "too large");
    EXPECT_TRUE(dir.files().empty());
    // All missing but with an explicit scale: renders grey cells.
    HeatmapOptions fixed;
    fixed.vmin = 0;
    fixed.vmax = 1;
    HeatmapFrame f;
    write_heatmap(p, {{NAN}}, fixed, &f);
    Image c = load_png(p);
    EXPECT_EQ(c.at(f.x0 + f.cell_w / 2, f.y0 + f.cell_h / 2), heatmap_missing_color());
}
