// Canvas drawing, the built-in bitmap font and the atomic PNG writer (the one place that
// compiles stb_image_write).
#include "report/canvas.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

// stb_image_write: static linkage so another translation unit that also compiles it cannot clash.
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace hydra {

namespace {

// The font, ASCII 32..126 in order. Each glyph is up to 9 rows of 5 columns separated by spaces
// ('#' ink, '.' paper); rows left out are blank. Rows 0..6 sit above the baseline (capitals and
// digits use all 7, lower case letters rows 2..6), rows 7..8 hold descenders.
constexpr const char* kFontArt[95] = {
    /*   */ "",
    /* ! */ "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#..",
    /* " */ ".#.#. .#.#. .#.#.",
    /* # */ ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#.",
    /* $ */ "..#.. .#### #.#.. .###. ..#.# ####. ..#..",
    /* % */ "##..# ##..# ...#. ..#.. .#... #..## #..##",
    /* & */ ".##.. #..#. #.#.. .#... #.#.# #..#. .##.#",
    /* ' */ "..#.. ..#.. .#...",
    /* ( */ "...#. ..#.. .#... .#... .#... ..#.. ...#.",
    /* ) */ ".#... ..#.. ...#. ...#. ...#. ..#.. .#...",
    /* * */ "..... ..#.. #.#.# .###. #.#.# ..#.. .....",
    /* + */ "..... ..#.. ..#.. ##### ..#.. ..#.. .....",
    /* , */ "..... ..... ..... ..... ..... .##.. .##.. ..#.. .#...",
    /* - */ "..... ..... ..... .###. ..... ..... .....",
    /* . */ "..... ..... ..... ..... ..... .##.. .##..",
    /* / */ "....# ....# ...#. ..#.. .#... #.... #....",
    /* 0 */ ".###. #...# #..## #.#.# ##..# #...# .###.",
    /* 1 */ "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
    /* 2 */ ".###. #...# ....# ...#. ..#.. .#... #####",
    /* 3 */ "##### ...#. ..#.. ...#. ....# #...# .###.",
    /* 4 */ "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
    /* 5 */ "##### #.... ####. ....# ....# #...# .###.",
    /* 6 */ "..##. .#... #.... ####. #...# #...# .###.",
    /* 7 */ "##### ....# ...#. ..#.. .#... .#... .#...",
    /* 8 */ ".###. #...# #...# .###. #...# #...# .###.",
    /* 9 */ ".###. #...# #...# .#### ....# ...#. .##..",
    /* : */ "..... .##.. .##.. ..... .##.. .##.. .....",
    /* ; */ "..... .##.. .##.. ..... .##.. .##.. ..#.. .#...",
    /* < */ "...#. ..#.. .#... #.... .#... ..#.. ...#.",
    /* = */ "..... ..... ##### ..... ##### ..... .....",
    /* > */ ".#... ..#.. ...#. ....# ...#. ..#.. .#...",
    /* ? */ ".###. #...# ....# ...#. ..#.. ..... ..#..",
    /* @ */ ".###. #...# ....# .##.# #.#.# #.#.# .###.",
    /* A */ ".###. #...# #...# ##### #...# #...# #...#",
    /* B */ "####. #...# #...# ####. #...# #...# ####.",
    /* C */ ".###. #...# #.... #.... #.... #...# .###.",
    /* D */ "###.. #..#. #...# #...# #...# #..#. ###..",
    /* E */ "##### #.... #.... ####. #.... #.... #####",
    /* F */ "##### #.... #.... ####. #.... #.... #....",
    /* G */ ".###. #...# #.... #.### #...# #...# .####",
    /* H */ "#...# #...# #...# ##### #...# #...# #...#",
    /* I */ ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    /* J */ "..### ...#. ...#. ...#. ...#. #..#. .##..",
    /* K */ "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    /* L */ "#.... #.... #.... #.... #.... #.... #####",
    /* M */ "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    /* N */ "#...# #...# ##..# #.#.# #..## #...# #...#",
    /* O */ ".###. #...# #...# #...# #...# #...# .###.",
    /* P */ "####. #...# #...# ####. #.... #.... #....",
    /* Q */ ".###. #...# #...# #...# #.#.# #..#. .##.#",
    /* R */ "####. #...# #...# ####. #.#.. #..#. #...#",
    /* S */ ".#### #.... #.... .###. ....# ....# ####.",
    /* T */ "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    /* U */ "#...# #...# #...# #...# #...# #...# .###.",
    /* V */ "#...# #...# #...# #...# #...# .#.#. ..#..",
    /* W */ "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
    /* X */ "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
    /* Y */ "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
    /* Z */ "##### ....# ...#. ..#.. .#... #.... #####",
    /* [ */ ".###. .#... .#... .#... .#... .#... .###.",
    /* \ */ "#.... #.... .#... ..#.. ...#. ....# ....#",
    /* ] */ ".###. ...#. ...#. ...#. ...#. ...#. .###.",
    /* ^ */ "..#.. .#.#. #...#",
    /* _ */ "..... ..... ..... ..... ..... ..... ..... #####",
    /* ` */ ".#... ..#.. ...#.",
    /* a */ "..... ..... .###. ....# .#### #...# .####",
    /* b */ "#.... #.... ####. #...# #...# #...# ####.",
    /* c */ "..... ..... .###. #.... #.... #...# .###.",
    /* d */ "....# ....# .#### #...# #...# #...# .####",
    /* e */ "..... ..... .###. #...# ##### #.... .###.",
    /* f */ "..##. .#..# .#... ###.. .#... .#... .#...",
    /* g */ "..... ..... .#### #...# #...# #...# .#### ....# .###.",
    /* h */ "#.... #.... #.##. ##..# #...# #...# #...#",
    /* i */ "..#.. ..... .##.. ..#.. ..#.. ..#.. .###.",
    /* j */ "...#. ..... ..##. ...#. ...#. ...#. ...#. #..#. .##..",
    /* k */ "#.... #.... #..#. #.#.. ##... #.#.. #..#.",
    /* l */ ".##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    /* m */ "..... ..... ##.#. #.#.# #.#.# #.#.# #.#.#",
    /* n */ "..... ..... #.##. ##..# #...# #...# #...#",
    /* o */ "..... ..... .###. #...# #...# #...# .###.",
    /* p */ "..... ..... ####. #...# #...# #...# ####. #.... #....",
    /* q */ "..... ..... .#### #...# #...# #...# .#### ....# ....#",
    /* r */ "..... ..... #.##. ##..# #.... #.... #....",
    /* s */ "..... ..... .###. #.... .###. ....# ####.",
    /* t */ ".#... .#... ###.. .#... .#... .#..# ..##.",
    /* u */ "..... ..... #...# #...# #...# #..## .##.#",
    /* v */ "..... ..... #...# #...# #...# .#.#. ..#..",
    /* w */ "..... ..... #...# #...# #.#.# #.#.# .#.#.",
    /* x */ "..... ..... #...# .#.#. ..#.. .#.#. #...#",
    /* y */ "..... ..... #...# #...# #...# #...# .#### ....# .###.",
    /* z */ "..... ..... ##### ...#. ..#.. .#... #####",
    /* { */ "...#. ..#.. ..#.. .#... ..#.. ..#.. ...#.",
    /* | */ "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    /* } */ ".#... ..#.. ..#.. ...#. ..#.. ..#.. .#...",
    /* ~ */ "..... ..... .#... #.#.# ...#.",
};

// Parses kFontArt once; a malformed row is a bug in the table above.
const std::vector<Glyph>& font_table() {
    static const std::vector<Glyph> table = [] {
        std::vector<Glyph> t(95);
        for (int i = 0; i < 95; ++i) {
            Glyph g{};
            const char* p = kFontArt[i];
            int row = 0, col = 0;
            for (; *p; ++p) {
                if (*p == ' ') {
                    HYDRA_ASSERT(col == kFontGlyphWidth, "font glyph {} row {} has {} columns", i + 32, row,
                                 col);
                    ++row;
                    col = 0;
                    continue;
                }
                HYDRA_ASSERT(row < kFontLineHeight && col < kFontGlyphWidth && (*p == '#' || *p == '.'),
                             "font glyph {} is malformed at row {} col {}", i + 32, row, col);
                if (*p == '#') g.rows[row] |= uint8_t(1u << (kFontGlyphWidth - 1 - col));
                ++col;
            }
            HYDRA_ASSERT(col == 0 || col == kFontGlyphWidth, "font glyph {} last row has {} columns", i + 32,
                         col);
            t[i] = g;
        }
        return t;
    }();
    return table;
}

// Rounds v into [lo, hi] as an int (v may be huge; converting it to int directly would be UB).
int clamp_int(double v, int lo, int hi) {
    return v <= lo ? lo : (v >= hi ? hi : int(v));
}

double clamp01(double v) {
    return v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v);
}

// Distance from (px, py) to the segment (x0, y0)-(x1, y1).
double segment_distance(double px, double py, double x0, double y0, double x1, double y1) {
    double dx = x1 - x0, dy = y1 - y0;
    double len2 = dx * dx + dy * dy;
    double t = len2 > 0.0 ? clamp01(((px - x0) * dx + (py - y0) * dy) / len2) : 0.0;
    double ex = px - (x0 + t * dx), ey = py - (y0 + t * dy);
    return std::sqrt(ex * ex + ey * ey);
}

}  // namespace

Rgb mix(Rgb a, Rgb b, double t) {
    t = clamp01(t);
    auto m = [t](uint8_t u, uint8_t v) {
        return uint8_t(std::lround(double(u) + (double(v) - double(u)) * t));
    };
    return Rgb{m(a.r, b.r), m(a.g, b.g), m(a.b, b.b)};
}

const Glyph& font_glyph(char c) {
    unsigned u = static_cast<unsigned char>(c);
    if (u < 32 || u > 126) u = '?';
    return font_table()[u - 32];
}

Canvas::Canvas(int width, int height, Rgb background)
    : width_(width), height_(height), background_(background) {
    HYDRA_CHECK(width >= 1 && width <= 16384 && height >= 1 && height <= 16384,
                "canvas size {}x{} is out of range: width and height must be in [1, 16384]", width, height);
    pixels_.resize(size_t(width) * size_t(height) * 3);
    for (size_t i = 0; i < pixels_.size(); i += 3) {
        pixels_[i] = background.r;
        pixels_[i + 1] = background.g;
        pixels_[i + 2] = background.b;
    }
    reset_clip();
}

Rgb Canvas::at(int x, int y) const {
    HYDRA_ASSERT(x >= 0 && x < width_ && y >= 0 && y < height_, "pixel ({}, {}) outside {}x{}", x, y, width_,
                 height_);
    const uint8_t* p = &pixels_[(size_t(y) * size_t(width_) + size_t(x)) * 3];
    return Rgb{p[0], p[1], p[2]};
}

void Canvas::set_clip(int x0, int y0, int x1, int y1) {
    cx0_ = std::clamp(x0, 0, width_);
    cy0_ = std::clamp(y0, 0, height_);
    cx1_ = std::clamp(x1, cx0_, width_);
    cy1_ = std::clamp(y1, cy0_, height_);
}

void Canvas::reset_clip() {
    set_clip(0, 0, width_, height_);
}

void Canvas::put(int x, int y, Rgb c) {
    if (!in_clip(x, y)) return;
    uint8_t* p = &pixels_[(size_t(y) * size_t(width_) + size_t(x)) * 3];
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
}

void Canvas::blend(int x, int y, Rgb c, double alpha) {
    if (!in_clip(x, y) || !(alpha > 0.0)) return;
    if (alpha >= 1.0) return put(x, y, c);
    uint8_t* p = &pixels_[(size_t(y) * size_t(width_) + size_t(x)) * 3];
    Rgb m = mix(Rgb{p[0], p[1], p[2]}, c, alpha);
    p[0] = m.r;
    p[1] = m.g;
    p[2] = m.b;
}

void Canvas::fill_rect(int x, int y, int w, int h, Rgb c) {
    int x0 = std::max(x, cx0_), y0 = std::max(y, cy0_);
    // Computed in 64 bits: x + w may overflow int for hostile sizes.
    int x1 = int(std::min<int64_t>(int64_t(x) + w, cx1_)), y1 = int(std::min<int64_t>(int64_t(y) + h, cy1_));
    for (int yy = y0; yy < y1; ++yy)
        for (int xx = x0; xx < x1; ++xx) put(xx, yy, c);
}

void Canvas::stroke_rect(int x, int y, int w, int h, Rgb c, int thickness) {
    if (w <= 0 || h <= 0 || thickness <= 0) return;
    thickness = std::min({thickness, (w + 1) / 2, (h + 1) / 2});
    fill_rect(x, y, w, thickness, c);
    fill_rect(x, y + h - thickness, w, thickness, c);
    fill_rect(x, y, thickness, h, c);
    fill_rect(x + w - thickness, y, thickness, h, c);
}

void Canvas::hline(int x0, int x1, int y, Rgb c) {
    if (x1 < x0) std::swap(x0, x1);
    fill_rect(x0, y, x1 - x0 + 1, 1, c);
}

void Canvas::vline(int x, int y0, int y1, Rgb c) {
    if (y1 < y0) std::swap(y0, y1);
    fill_rect(x, y0, 1, y1 - y0 + 1, c);
}

template <typename Coverage>
void Canvas::fill_shape(double x0, double y0, double x1, double y1, Rgb c, Coverage coverage) {
    // Bounding box in pixels, clipped before the loop so a huge or non-finite shape costs nothing.
    if (!(std::isfinite(x0) && std::isfinite(y0) && std::isfinite(x1) && std::isfinite(y1))) return;
    int ix0 = clamp_int(std::floor(x0), cx0_, cx1_);
    int iy0 = clamp_int(std::floor(y0), cy0_, cy1_);
    int ix1 = clamp_int(std::ceil(x1), cx0_ - 1, cx1_ - 1);
    int iy1 = clamp_int(std::ceil(y1), cy0_ - 1, cy1_ - 1);
    for (int y = iy0; y <= iy1; ++y)
        for (int x = ix0; x <= ix1; ++x) blend(x, y, c, coverage(x + 0.5, y + 0.5));
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb c, double thickness) {
    if (!(std::isfinite(x0) && std::isfinite(y0) && std::isfinite(x1) && std::isfinite(y1))) return;
    const double hw = std::max(thickness, 0.5) * 0.5;
    // Coverage ramps over one pixel around the capsule edge: 1 inside hw - 0.5, 0 beyond hw + 0.5.
    auto coverage = [&](double px, double py) {
        return clamp01(hw + 0.5 - segment_distance(px, py, x0, y0, x1, y1));
    };
    // Walk the major axis over the clipped extent and visit only a band across the line, so a long
    // diagonal costs its length times the band, not its bounding box.
    const bool steep = std::abs(y1 - y0) > std::abs(x1 - x0);
    double a0 = steep ? y0 : x0, a1 = steep ? y1 : x1;  // major axis
    double b0 = steep ? x0 : y0, b1 = steep ? x1 : y1;  // minor axis
    if (a1 < a0) {
        std::swap(a0, a1);
        std::swap(b0, b1);
    }
    const double slope = a1 > a0 ? (b1 - b0) / (a1 - a0) : 0.0;  // |slope| <= 1
    const double band = hw * std::sqrt(1.0 + slope * slope) + 1.5;
    const int amin = steep ? cy0_ : cx0_, amax = steep ? cy1_ - 1 : cx1_ - 1;
    const int bmin = steep ? cx0_ : cy0_, bmax = steep ? cx1_ - 1 : cy1_ - 1;
    int ia0 = clamp_int(std::floor(a0 - hw - 1), amin, amax + 1);
    int ia1 = clamp_int(std::ceil(a1 + hw + 1), amin - 1, amax);
    for (int ia = ia0; ia <= ia1; ++ia) {
        double ac = std::clamp(ia + 0.5, a0, a1);
        double bc = b0 + (ac - a0) * slope;
        int ib0 = clamp_int(std::floor(bc - band), bmin, bmax + 1);
        int ib1 = clamp_int(std::ceil(bc + band), bmin - 1, bmax);
        for (int ib = ib0; ib <= ib1; ++ib) {
            int x = steep ? ib : ia, y = steep ? ia : ib;
            blend(x, y, c, coverage(x + 0.5, y + 0.5));
        }
    }
}

void Canvas::fill_circle(double cx, double cy, double radius, Rgb c) {
    fill_shape(cx - radius - 1, cy - radius - 1, cx + radius + 1, cy + radius + 1, c,
               [&](double px, double py) { return clamp01(radius + 0.5 - std::hypot(px - cx, py - cy)); });
}

void Canvas::marker(Marker shape, double cx, double cy, double r, Rgb c) {
    switch (shape) {
        case Marker::Circle:
            fill_circle(cx, cy, r, c);
            break;
        case Marker::Square:
            fill_shape(cx - r - 1, cy - r - 1, cx + r + 1, cy + r + 1, c, [&](double px, double py) {
                return clamp01(r + 0.5 - std::max(std::abs(px - cx), std::abs(py - cy)));
            });
            break;
        case Marker::Diamond: {
            double d = 1.25 * r;
            // |dx| + |dy| = d is the edge; dividing by sqrt(2) turns it into a Euclidean distance.
            fill_shape(cx - d - 1, cy - d - 1, cx + d + 1, cy + d + 1, c, [&](double px, double py) {
                return clamp01((d - std::abs(px - cx) - std::abs(py - cy)) / std::sqrt(2.0) + 0.5);
            });
            break;
        }
    }
}

int Canvas::text_width(std::string_view s, int scale) {
    if (s.empty()) return 0;
    return (int(s.size()) * kFontAdvance - 1) * scale;
}

void Canvas::text(int x, int y, std::string_view s, Rgb c, int scale) {
    if (scale < 1) scale = 1;
    for (size_t i = 0; i < s.size(); ++i) {
        const Glyph& g = font_glyph(s[i]);
        int gx = x + int(i) * kFontAdvance * scale;
        for (int row = 0; row < kFontLineHeight; ++row)
            for (int col = 0; col < kFontGlyphWidth; ++col)
                if (g.rows[row] & (1u << (kFontGlyphWidth - 1 - col)))
                    fill_rect(gx + col * scale, y + row * scale, scale, scale, c);
    }
}

void Canvas::text_up(int x, int y, std::string_view s, Rgb c, int scale) {
    if (scale < 1) scale = 1;
    // Rotating CCW maps glyph (col, row) to (row, -col): the text's left end is at the box bottom.
    int bottom = y + text_width(s, scale);
    for (size_t i = 0; i < s.size(); ++i) {
        const Glyph& g = font_glyph(s[i]);
        int gy = bottom - int(i) * kFontAdvance * scale;  // one past the glyph's first column
        for (int row = 0; row < kFontLineHeight; ++row)
            for (int col = 0; col < kFontGlyphWidth; ++col)
                if (g.rows[row] & (1u << (kFontGlyphWidth - 1 - col)))
                    fill_rect(x + row * scale, gy - (col + 1) * scale, scale, scale, c);
    }
}

void Canvas::write_png(const std::string& path) const {
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int ok = stbi_write_png(tmp.c_str(), width_, height_, 3, pixels_.data(), width_ * 3);
    if (!ok) {
        int err = errno;
        std::remove(tmp.c_str());
        fail("{}: cannot write PNG ({}); check that the directory exists and is writable", path,
             err ? std::strerror(err) : "stb_image_write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::remove(tmp.c_str());
        fail("{}: cannot rename {} into place: {}", path, tmp, ec.message());
    }
}

}  // namespace hydra
