// One PNG figure drawn in-process by PLplot's "pngcairo" device (Debian: libplplot17, libplplot-data,
// plplot-driver-cairo): the check that the device can be used, the PLplot stream's life cycle, drawing
// in pixel coordinates, and the atomic file write.
//
// PLplot calls exit() on fatal errors (a driver module that fails to load, no font file, an output
// file it cannot open, where it even prompts on stdin first). A plot is a side product of training and
// evaluation, so none of that may end the process: everything PLplot would fail on is checked before
// its first call (check_png_device, opening the output file ourselves), and a fatal error that still
// happens is turned into a hydra::Error by an exit handler that throws. PLplot keeps global state, so
// pages are drawn one at a time (a process-wide lock).
//
// Coordinates given to PlplotPage are pixels of the page: x to the right, y downwards, (0, 0) the
// top-left corner; pixel (i, j) covers [i, i+1) x [j, j+1).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "report/colors.h"

namespace hydra {

// Throws hydra::Error naming what to install (or which variable to set) when PLplot's PNG device
// cannot be used by this process: pngcairo not listed in PLplot's driver directory (PLPLOT_DRV_DIR, else
// the directory PLplot was built with), its module cairo.so failing to load, or PLplot's font file
// missing (PLPLOT_LIB, else PLplot's data directory).
void check_png_device();

struct PngPageOptions {
    int width = 0, height = 0;    // pixels, each in [16, 16384]
    bool smooth_graphics = true;  // anti-aliased lines and fills; false: crisp cell edges (heatmaps)
};

// One legend entry: a line sample, optionally with a marker symbol (a UTF-8 glyph, e.g. "●").
struct LegendEntry {
    std::string label;
    Rgb color;
    double line_width = 2.0;  // pixels
    std::string symbol;       // empty: no marker
};

// A legend box in page pixels.
struct LegendBox {
    double x = 0, y = 0, w = 0, h = 0;
};

// Drawing calls for one page; only valid inside the draw callback of write_png_page.
class PlplotPage {
  public:
    PlplotPage(int width, int height) : width_(width), height_(height) {}
    int width() const { return width_; }
    int height() const { return height_; }

    // Drawing is clipped to [x0, x1) x [y0, y1) (PLplot's viewport) until the next clip(); at the
    // start the whole page. Pixel coordinates stay the same (PLplot's window follows the viewport).
    void clip(double x0, double y0, double x1, double y1);
    void clip_page() { clip(0, 0, width_, height_); }

    void color(Rgb c);                        // colour of the next lines, fills and text
    static void color_slot(int slot, Rgb c);  // colour map entry `slot` in [16, 63] (legends take indices)
    void line_width(double px);

    void polyline(const std::vector<double>& x, const std::vector<double>& y);  // same length >= 2
    void segment(double x0, double y0, double x1, double y1);
    void fill(const std::vector<double>& x, const std::vector<double>& y);  // polygon, >= 3 points
    void fill_rect(double x, double y, double w, double h);

    // Text: size is the character height in pixels (about the height of a capital letter). text()
    // writes horizontally with its vertical middle at y; just is the horizontal justification
    // (0 left edge at x, 0.5 centred, 1 right edge at x). text_up() writes rotated 90 degrees
    // counter-clockwise (reading upwards), its middle at x and just along the text from y upwards.
    void text_size(double px);
    double text_size() const { return text_px_; }
    void text(double x, double y, double just, std::string_view s);
    void text_up(double x, double y, double just, std::string_view s);
    // Width of s in pixels at character height size_px: an estimate from DejaVu Sans's advances
    // (digits and capitals about 0.86 x the character height), a little generous so layouts built on
    // it do not clip. PLplot has no public call that measures text.
    static double text_width(std::string_view s, double size_px);

    // PLplot's legend (white box, grey border) in a corner of the current clip rectangle, margin
    // pixels from its edges, at the current text size; returns where it went. At most 40 entries.
    LegendBox legend(const std::vector<LegendEntry>& entries, bool top, bool right, double margin);
    // The size legend() will take, estimated from text_width (for choosing a corner before drawing).
    static LegendBox legend_size(const std::vector<LegendEntry>& entries, double text_px);

    // PLplot's world y for a page pixel y (its y axis points up).
    double world_y(double y) const { return double(height_) - y; }

  private:
    int width_, height_;
    double text_px_ = 12.0;
    double clip_x0_ = 0, clip_y0_ = 0, clip_x1_ = 0, clip_y1_ = 0;
};

// Pixels per millimetre of the page: pngcairo draws at 72 dpi and PLplot sizes text in mm.
inline constexpr double kPngPixelsPerMm = 72.0 / 25.4;

// Draws one page (white background) with draw and writes it to path as an RGBA PNG, atomically:
// "<path>.tmp.<pid>" first, checked to end in a complete PNG, then renamed over path; on any failure
// the temporary file is removed and path is left as it was. Throws hydra::Error naming path (bad size,
// no PNG device, the directory not writable, PLplot failing).
void write_png_page(const std::string& path, const PngPageOptions& options,
                    const std::function<void(PlplotPage&)>& draw);

}  // namespace hydra
