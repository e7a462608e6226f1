// Series palette, viridis samples and colour mixing for report figures.
#include "report/colors.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace hydra {

namespace {

constexpr Rgb kPalette[] = {rgb_hex(0x1f77b4), rgb_hex(0xff7f0e), rgb_hex(0x2ca02c), rgb_hex(0xd62728),
                            rgb_hex(0x9467bd), rgb_hex(0x8c564b), rgb_hex(0xe377c2), rgb_hex(0x7f7f7f),
                            rgb_hex(0xbcbd22), rgb_hex(0x17becf)};

// viridis sampled at t = 0, 1/9, ..., 1.
constexpr Rgb kViridis[10] = {rgb_hex(0x440154), rgb_hex(0x482878), rgb_hex(0x3e4989), rgb_hex(0x31688e),
                              rgb_hex(0x26828e), rgb_hex(0x1f9e89), rgb_hex(0x35b779), rgb_hex(0x6ece58),
                              rgb_hex(0xb5de2b), rgb_hex(0xfde725)};

}  // namespace

Rgb mix(Rgb a, Rgb b, double t) {
    t = std::isnan(t) ? 0.0 : std::clamp(t, 0.0, 1.0);
    auto m = [t](uint8_t u, uint8_t v) {
        return uint8_t(std::lround(double(u) + (double(v) - double(u)) * t));
    };
    return Rgb{m(a.r, b.r), m(a.g, b.g), m(a.b, b.b)};
}

Rgb series_color(size_t i) {
    return kPalette[i % std::size(kPalette)];
}

Rgb viridis(double t) {
    if (!(t > 0.0)) return kViridis[0];
    if (t >= 1.0) return kViridis[9];
    double f = t * 9.0;
    int i = std::min(8, int(f));
    return mix(kViridis[i], kViridis[i + 1], f - i);
}

Rgb heatmap_missing_color() {
    return rgb_hex(0xd0d0d0);
}

}  // namespace hydra
