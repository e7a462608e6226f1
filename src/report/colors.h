// Colours of report figures: an RGB triple, the series palette of line plots and the viridis map of
// heatmaps. Kept here rather than taken from PLplot's colour maps so that a figure's colours are fixed
// by our code (PLplot's default cmap0 starts with red on black) and tests can look for them.
#pragma once

#include <cstddef>
#include <cstdint>

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

// Series i of a line plot gets series_color(i): the ten "tab10" colours (distinct hues of similar
// weight, readable on white), cycling.
Rgb series_color(size_t i);

// Viridis colormap, t in [0, 1] (clamped; NaN -> 0): interpolated from 10 equally spaced samples,
// dark purple (0x440154) through teal to yellow (0xfde725), lightness increasing monotonically.
Rgb viridis(double t);

// Colour of missing (non-finite) heatmap cells.
Rgb heatmap_missing_color();

}  // namespace hydra
