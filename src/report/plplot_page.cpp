// PLplot pngcairo pages: device check, stream life cycle, pixel-coordinate drawing, atomic PNG write.
#include "report/plplot_page.h"

#include <dlfcn.h>
#include <plplot.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/error.h"

// Exported by libplplot (it honours PLPLOT_DRV_DIR), but declared only in PLplot's private plplotP.h.
extern "C" const char* plGetDrvDir(void);

#ifndef HYDRA_PLPLOT_DATA_DIR
#error "HYDRA_PLPLOT_DATA_DIR (PLplot's built-in data directory) is set by CMakeLists.txt"
#endif

namespace hydra {

namespace fs = std::filesystem;

namespace {

std::mutex g_plplot_mutex;

// What the exit handler throws instead of PLplot's exit(); caught in write_png_page.
struct PlplotFatal {
    std::string message;
};

int throw_instead_of_exit(const char* message) {
    throw PlplotFatal{message ? message : ""};
}

constexpr int kScratchSlot = 15;  // cmap0 entry PlplotPage::color() rewrites
constexpr int kSlots = 64;        // cmap0 size: 16 fixed-purpose entries + 48 for legends

// PLplot reads '#' as the start of an escape sequence ("#u" superscript, ...); "##" is a literal '#'.
std::string plplot_text(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        out += c;
        if (c == '#') out += '#';
    }
    return out;
}

// PLplot's extended Hershey font file, which plinit() loads even when the driver draws its own text;
// searched where plLibOpenPdfstrm searches: $PLPLOT_LIB, the current directory, $PLPLOT_HOME/lib,
// the data directory PLplot was built with, /usr/local/plplot/lib.
bool font_file_found(std::string& searched) {
    constexpr const char* kFont = "plxtnd5.fnt";
    std::vector<std::string> dirs;
    if (const char* lib = std::getenv("PLPLOT_LIB")) dirs.push_back(lib);
    dirs.push_back(".");
    if (const char* home = std::getenv("PLPLOT_HOME")) dirs.push_back(std::string(home) + "/lib");
    dirs.push_back(HYDRA_PLPLOT_DATA_DIR);
    dirs.push_back("/usr/local/plplot/lib");
    for (const std::string& d : dirs) {
        std::error_code ec;
        if (fs::is_regular_file(fs::path(d) / kFont, ec)) return true;
        searched += (searched.empty() ? "" : ", ") + d;
    }
    return false;
}

// A PNG ends with the IEND chunk: length 0, "IEND", CRC ae 42 60 82. A short write (disk full) loses it.
bool png_complete(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) return false;
    const std::streamoff size = f.tellg();
    if (size < 8 + 25 + 12) return false;
    unsigned char head[8], tail[12];
    f.seekg(0);
    f.read(reinterpret_cast<char*>(head), 8);
    f.seekg(size - 12);
    f.read(reinterpret_cast<char*>(tail), 12);
    const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    return f && std::memcmp(head, sig, 8) == 0 && std::memcmp(tail, iend, 12) == 0;
}

}  // namespace

void check_png_device() {
    const char* drv = plGetDrvDir();
    const std::string dir = drv ? drv : "";
    const std::string info = dir + "/cairo.driver_info";
    std::ifstream f(info);
    const bool exists = bool(f);
    bool listed = false;
    for (std::string line; std::getline(f, line);)
        if (line.rfind("pngcairo:", 0) == 0) listed = true;
    HYDRA_CHECK(listed,
                "PLplot's PNG device pngcairo is not available: {} {}; install the Debian package "
                "plplot-driver-cairo, or set PLPLOT_DRV_DIR to the directory that holds cairo.driver_info "
                "and cairo.so",
                info, exists ? "does not list it" : "is missing");
    // PLplot would exit() if the module failed to load (missing libcairo, libpango, ...): load it
    // first. Never closed: PLplot keeps the module resident once it has loaded it.
    const std::string module = dir + "/cairo.so";
    if (!dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        const char* why = dlerror();
        fail(
            "PLplot's PNG driver {} cannot be loaded ({}); install the Debian package plplot-driver-cairo "
            "with its libraries (libcairo2, libpango-1.0-0, libpangocairo-1.0-0)",
            module, why ? why : "unknown error");
    }
    std::string searched;
    HYDRA_CHECK(font_file_found(searched),
                "PLplot's font file plxtnd5.fnt is not in {}; install the Debian package libplplot-data, or "
                "set PLPLOT_LIB to the directory that holds it",
                searched);
}

void PlplotPage::clip(double x0, double y0, double x1, double y1) {
    clip_x0_ = x0;
    clip_y0_ = y0;
    clip_x1_ = x1;
    clip_y1_ = y1;
    const double w = width_, h = height_;
    plvpor(x0 / w, x1 / w, 1.0 - y1 / h, 1.0 - y0 / h);
    plwind(x0, x1, world_y(y1), world_y(y0));
}

void PlplotPage::color(Rgb c) {
    plscol0(kScratchSlot, c.r, c.g, c.b);
    plcol0(kScratchSlot);
}

void PlplotPage::color_slot(int slot, Rgb c) {
    HYDRA_ASSERT(slot >= 16 && slot < kSlots, "colour slot {} outside [16, {})", slot, kSlots);
    plscol0(slot, c.r, c.g, c.b);
}

void PlplotPage::line_width(double px) {
    plwidth(px);
}

void PlplotPage::polyline(const std::vector<double>& x, const std::vector<double>& y) {
    HYDRA_ASSERT(x.size() == y.size() && x.size() >= 2, "polyline of {} x and {} y values", x.size(),
                 y.size());
    std::vector<double> wy(y.size());
    for (size_t i = 0; i < y.size(); ++i) wy[i] = world_y(y[i]);
    plline(PLINT(x.size()), x.data(), wy.data());
}

void PlplotPage::segment(double x0, double y0, double x1, double y1) {
    pljoin(x0, world_y(y0), x1, world_y(y1));
}

void PlplotPage::fill(const std::vector<double>& x, const std::vector<double>& y) {
    HYDRA_ASSERT(x.size() == y.size() && x.size() >= 3, "polygon of {} x and {} y values", x.size(),
                 y.size());
    std::vector<double> wy(y.size());
    for (size_t i = 0; i < y.size(); ++i) wy[i] = world_y(y[i]);
    plfill(PLINT(x.size()), x.data(), wy.data());
}

void PlplotPage::fill_rect(double x, double y, double w, double h) {
    fill({x, x + w, x + w, x}, {y, y, y + h, y + h});
}

void PlplotPage::text_size(double px) {
    text_px_ = px;
    plschr(px / kPngPixelsPerMm, 1.0);
}

void PlplotPage::text(double x, double y, double just, std::string_view s) {
    if (s.empty()) return;
    plptex(x, world_y(y), 1.0, 0.0, just, plplot_text(s).c_str());
}

void PlplotPage::text_up(double x, double y, double just, std::string_view s) {
    if (s.empty()) return;
    plptex(x, world_y(y), 0.0, 1.0, just, plplot_text(s).c_str());
}

double PlplotPage::text_width(std::string_view s, double size_px) {
    // Advances of DejaVu Sans in PLplot's cairo text, per character height: narrow (i, l, ., :, ...),
    // wide (m, w, M, W, @), and the rest (digits 0.86, capitals about 0.95, lower case about 0.75).
    double w = 0;
    for (unsigned char c : s) {
        if ((c & 0xc0) == 0x80) continue;  // UTF-8 continuation byte: counted with its lead byte
        auto in = [c](const char* set) { return c != 0 && std::strchr(set, c) != nullptr; };
        w += in("iIjl.,:;'|!") ? 0.45 : in("mwMW@%") ? 1.3 : 0.95;
    }
    return w * size_px;
}

namespace {

constexpr int kLegendTextSlot = 16, kLegendBorderSlot = 17, kLegendFirstEntrySlot = 18;
constexpr size_t kLegendMaxEntries = 40;
constexpr double kLegendSampleChars = 2.5;  // line sample length, in character heights
constexpr double kLegendSpacing = 1.9;      // entry pitch, in character heights

}  // namespace

LegendBox PlplotPage::legend_size(const std::vector<LegendEntry>& entries, double text_px) {
    // pllegend's box: a half-character margin, the line sample, one character of offset, the text,
    // and a character of margin on the right; entries kLegendSpacing character heights apart, plus
    // one spacing of padding in all.
    double label_w = 0;
    for (const LegendEntry& e : entries) label_w = std::max(label_w, text_width(e.label, text_px));
    LegendBox b;
    b.w = (kLegendSampleChars + 2.5) * text_px + label_w;
    b.h = double(entries.size() + 1) * kLegendSpacing * text_px;
    return b;
}

LegendBox PlplotPage::legend(const std::vector<LegendEntry>& entries, bool top, bool right, double margin) {
    HYDRA_ASSERT(!entries.empty() && entries.size() <= kLegendMaxEntries, "legend with {} entries",
                 entries.size());
    const PLINT n = PLINT(entries.size());
    const double vw = clip_x1_ - clip_x0_, vh = clip_y1_ - clip_y0_;
    color_slot(kLegendTextSlot, rgb_hex(0x222222));
    color_slot(kLegendBorderSlot, rgb_hex(0xaaaaaa));
    std::vector<PLINT> opts(n), text_colors(n, kLegendTextSlot), colors(n), styles(n, 1), counts(n, 1);
    std::vector<PLFLT> widths(n), scales(n, 1.0);
    std::vector<std::string> texts(n), symbols(n);
    std::vector<const char*> text_ptrs(n), symbol_ptrs(n);
    for (PLINT i = 0; i < n; ++i) {
        const LegendEntry& e = entries[size_t(i)];
        colors[i] = kLegendFirstEntrySlot + i;
        color_slot(colors[i], e.color);
        opts[i] = PL_LEGEND_LINE | (e.symbol.empty() ? 0 : PL_LEGEND_SYMBOL);
        widths[i] = e.line_width;
        texts[i] = plplot_text(e.label);
        symbols[i] = e.symbol.empty() ? " " : e.symbol;
        text_ptrs[i] = texts[i].c_str();
        symbol_ptrs[i] = symbols[i].c_str();
    }
    const PLINT position = PL_POSITION_INSIDE | PL_POSITION_VIEWPORT |
                           (top ? PL_POSITION_TOP : PL_POSITION_BOTTOM) |
                           (right ? PL_POSITION_RIGHT : PL_POSITION_LEFT);
    PLFLT w = 0, h = 0;
    pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, position, margin / vw, margin / vh,
             kLegendSampleChars * text_px_ / vw, 0 /* background: white */, kLegendBorderSlot, 1, 0, 0, n,
             opts.data(), 1.0, 1.0, kLegendSpacing, 0.0, text_colors.data(), text_ptrs.data(), nullptr,
             nullptr, nullptr, nullptr, colors.data(), styles.data(), widths.data(), colors.data(),
             scales.data(), counts.data(), symbol_ptrs.data());
    LegendBox b;
    b.w = w * vw;
    b.h = h * vh;
    b.x = right ? clip_x1_ - margin - b.w : clip_x0_ + margin;
    b.y = top ? clip_y0_ + margin : clip_y1_ - margin - b.h;
    return b;
}

void write_png_page(const std::string& path, const PngPageOptions& o,
                    const std::function<void(PlplotPage&)>& draw) {
    HYDRA_CHECK(o.width >= 16 && o.width <= 16384 && o.height >= 16 && o.height <= 16384,
                "{}: PNG size {}x{} is out of range: width and height must be in [16, 16384]", path, o.width,
                o.height);
    std::lock_guard<std::mutex> lock(g_plplot_mutex);
    try {
        check_png_device();
    } catch (const Error& e) {
        fail("{}: cannot draw the plot: {}", path, e.what());
    }
    // Our own file: PLplot, left to open it, prompts on stdin and then exits when it cannot.
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    FILE* out = std::fopen(tmp.c_str(), "wb");
    if (!out) {
        const int err = errno;
        fail("{}: cannot write PNG: cannot create {} ({}); check that the directory exists and is writable",
             path, tmp, std::strerror(err));
    }
    plsexit(throw_instead_of_exit);
    PLINT stream = -1;
    plmkstrm(&stream);
    if (stream < 0) {
        std::fclose(out);
        std::remove(tmp.c_str());
        fail("{}: cannot draw the plot: PLplot has no free plot stream", path);
    }
    std::string error;
    try {
        plsdev("pngcairo");
        plsfile(out);  // closed by PLplot at plend1()
        plspage(0, 0, o.width, o.height, 0, 0);
        plscolbg(255, 255, 255);
        plscmap0n(kSlots);
        // Grey-level text anti-aliasing rather than the fontconfig default (which may be sub-pixel):
        // the same pixels on every machine with the same fonts.
        plsetopt("drvopt", o.smooth_graphics ? "graphics_anti_aliasing=0,text_anti_aliasing=2"
                                             : "graphics_anti_aliasing=1,text_anti_aliasing=2");
        plinit();
        pladv(0);
        PlplotPage page(o.width, o.height);
        page.clip_page();
        page.text_size(12.0);
        try {
            draw(page);
        } catch (const std::exception& e) {
            error = e.what();
        }
        plend1();  // writes the PNG and closes the file (also after a failed draw: the stream is freed)
    } catch (const PlplotFatal& e) {
        // The stream is half set up; ending it could run into the same error, so it is abandoned (one
        // of PLplot's 100 streams) after closing our file if PLplot still holds it.
        FILE* held = nullptr;
        plgfile(&held);
        if (held) std::fclose(held);
        plsstrm(0);
        error = "PLplot: " + e.message;
    }
    if (error.empty() && !png_complete(tmp))
        error = fmt::format("PLplot wrote an incomplete PNG to {} (is the disk full?)", tmp);
    if (!error.empty()) {
        std::remove(tmp.c_str());
        fail("{}: cannot draw the plot: {}", path, error);
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
        std::remove(tmp.c_str());
        fail("{}: cannot rename {} into place: {}", path, tmp, ec.message());
    }
}

}  // namespace hydra
