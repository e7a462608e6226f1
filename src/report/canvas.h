// Canvas: an RGB raster for report figures (loss curves, heatmaps) and its PNG writer.
//
// Coordinates are pixels, x to the right and y downwards, (0, 0) the top-left pixel; pixel (x, y)
// covers [x, x+1) x [y, y+1), so its centre is (x + 0.5, y + 0.5). Shapes given in double
// coordinates (lines, circles, markers) are anti-aliased by coverage of pixel centres; rectangles and
// text are pixel-exact. Every drawing call is clipped to the canvas and to the clip rectangle, so
// drawing partly or fully outside is safe.
//
// Text uses a built-in 5x7 bitmap font (ASCII 32..126; anything else draws as '?') in a cell 6 px
// wide and 9 px tall (7 rows above the baseline, 2 for descenders), scaled by an integer factor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hydra {

struct Rgb {
    uint8_t r = 0, g = 0, b = 0;
    friend bool operator==(const Rgb&, const Rgb&) = default;
};

// 0xRRGGBB -> Rgb.
constexpr Rgb rgb_hex(uint32_t hex) {
    return Rgb{uint8_t((hex >> 16) & 0xff), uint8_t((hex >> 8) & 0xff), uint8_t(hex & 0xff)};
}

// Linear mix: t = 0 gives a, t = 1 gives b (t is clamped to [0, 1]).
Rgb mix(Rgb a, Rgb b, double t);

enum class Marker { Circle, Square, Diamond };

// Font metrics at scale 1 (multiply by the scale).
constexpr int kFontGlyphWidth = 5;  // ink columns of a glyph
constexpr int kFontAdvance = 6;     // glyph + 1 column of spacing
constexpr int kFontCapHeight = 7;   // rows above the baseline
constexpr int kFontLineHeight = 9;  // cap height + 2 descender rows

// The font bitmap of one character: bit (4 - col) of rows[row] is the pixel at (col, row), rows 0..8.
struct Glyph {
    uint8_t rows[kFontLineHeight];
};
const Glyph& font_glyph(char c);

class Canvas {
  public:
    // width, height in [1, 16384].
    Canvas(int width, int height, Rgb background = Rgb{255, 255, 255});

    int width() const { return width_; }
    int height() const { return height_; }
    Rgb background() const { return background_; }
    Rgb at(int x, int y) const;                                  // (x, y) must be inside the canvas
    const std::vector<uint8_t>& rgb() const { return pixels_; }  // (height, width, 3) row-major

    // Drawing is restricted to [x0, x1) x [y0, y1) (intersected with the canvas) until reset_clip().
    void set_clip(int x0, int y0, int x1, int y1);
    void reset_clip();

    void put(int x, int y, Rgb c);                  // clipped
    void blend(int x, int y, Rgb c, double alpha);  // alpha in [0, 1], clipped
    void fill_rect(int x, int y, int w, int h, Rgb c);
    void stroke_rect(int x, int y, int w, int h, Rgb c, int thickness = 1);  // inside the box
    void hline(int x0, int x1, int y, Rgb c);                                // pixels x0..x1 inclusive
    void vline(int x, int y0, int y1, Rgb c);                                // pixels y0..y1 inclusive

    // Segment of the given thickness with round caps (a capsule), anti-aliased.
    void line(double x0, double y0, double x1, double y1, Rgb c, double thickness = 1.0);
    void fill_circle(double cx, double cy, double radius, Rgb c);
    // A marker of "radius" r centred at (cx, cy): circle, axis-aligned square of side 2r, or a
    // diamond with half-diagonal 1.25 r (so the three look about the same size).
    void marker(Marker shape, double cx, double cy, double r, Rgb c);

    // Text with its box's top-left corner at (x, y); the box is text_width x text_height.
    void text(int x, int y, std::string_view s, Rgb c, int scale = 1);
    // Text rotated 90 degrees counter-clockwise (reads bottom to top), for a y-axis label. The box
    // has its top-left at (x, y) and is text_height wide and text_width tall.
    void text_up(int x, int y, std::string_view s, Rgb c, int scale = 1);
    static int text_width(std::string_view s, int scale = 1);  // no trailing spacing column
    static int text_height(int scale = 1) { return kFontLineHeight * scale; }

    // Writes an 8-bit RGB PNG: to "<path>.tmp.<pid>" first, then renamed over path, so readers
    // never see a half-written file. Throws hydra::Error naming the path when it cannot be written.
    void write_png(const std::string& path) const;

  private:
    bool in_clip(int x, int y) const { return x >= cx0_ && x < cx1_ && y >= cy0_ && y < cy1_; }
    // Shared scan for anti-aliased shapes: coverage(px, py) of the pixel centre, in [0, 1].
    template <typename Coverage>
    void fill_shape(double x0, double y0, double x1, double y1, Rgb c, Coverage coverage);

    int width_, height_;
    Rgb background_;
    int cx0_, cy0_, cx1_, cy1_;
    std::vector<uint8_t> pixels_;
};

}  // namespace hydra
