// Nice tick values and tick labels for linear and log axes.
#include "report/axis_ticks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hydra {

std::string format_g(double v) {
    if (v == 0.0) return "0";
    std::string s = fmt::format("{:.6g}", v);
    size_t e = s.find('e');
    if (e == std::string::npos) return s;
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    bool neg = !exp.empty() && exp[0] == '-';
    size_t d = (!exp.empty() && (exp[0] == '-' || exp[0] == '+')) ? 1 : 0;
    while (d + 1 < exp.size() && exp[d] == '0') ++d;
    return mant + "e" + (neg ? "-" : "") + exp.substr(d);
}

double nice_step(double lo, double hi, int target) {
    HYDRA_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi && std::isfinite(hi - lo),
                "tick range [{}, {}] must be finite with lo < hi", lo, hi);
    target = std::clamp(target, 2, 50);
    double raw = (hi - lo) / double(target - 1);
    double p = std::pow(10.0, std::floor(std::log10(raw)));
    // The 1-2-5 multiple nearest to raw in log space (thresholds are the geometric midpoints), so the
    // tick count lands near target from either side.
    double r = raw / p;
    double step = p * (r < std::sqrt(2.0)    ? 1.0
                       : r < std::sqrt(10.0) ? 2.0
                       : r < std::sqrt(50.0) ? 5.0
                                             : 10.0);
    // Rounding up can leave fewer than two multiples inside [lo, hi]; step down 10 -> 5 -> 2 -> 1
    // until there are two (reached at the latest once step <= (hi - lo) / 2).
    auto count = [&](double st) { return std::floor(hi / st + 1e-9) - std::ceil(lo / st - 1e-9) + 1; };
    while (count(step) < 2) {
        double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        step *= m > 4.0 ? 0.4 : 0.5;  // 5 -> 2, 2 -> 1, 1 -> 0.5
    }
    return step;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    double step = nice_step(lo, hi, target);
    // Steps are >= (hi - lo) / 49, so there are at most ~50 ticks.
    double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
    std::vector<double> ticks;
    for (double k = k0; k <= k1; k += 1.0) {
        double v = k * step;
        ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    }
    return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
    HYDRA_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo > 0.0 && lo < hi,
                "log tick range [{}, {}] must be finite with 0 < lo < hi", lo, hi);
    double l0 = std::log10(lo), l1 = std::log10(hi);
    int k0 = int(std::ceil(l0 - 1e-9)), k1 = int(std::floor(l1 + 1e-9));
    std::vector<double> ticks;
    if (k1 - k0 + 1 >= 3) {
        int stride = (k1 - k0 + 8) / 8;                       // at most ~8 decade labels
        int first = k0 + ((-k0 % stride) + stride) % stride;  // align to multiples of stride
        for (int k = first; k <= k1; k += stride) ticks.push_back(std::pow(10.0, k));
        return ticks;
    }
    for (int k = int(std::floor(l0)); k <= k1; ++k)
        for (double m : {1.0, 2.0, 5.0}) {
            double v = m * std::pow(10.0, k);
            if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) ticks.push_back(v);
        }
    if (ticks.size() >= 2) return ticks;
    ticks.clear();
    for (double v : nice_ticks(lo, hi, 5))
        if (v > 0.0) ticks.push_back(v);
    return ticks;
}

std::string format_tick(double v, double step) {
    if (!std::isfinite(v)) return fmt::format("{}", v);
    if (!(step > 0.0) || !std::isfinite(step)) return format_g(v);
    if (std::abs(v) < step * 1e-6) v = 0.0;  // also turns -0 into 0
    double mag = std::abs(v);
    if (v == 0.0 && (step >= 1e6 || step < 1e-4)) return "0";
    if (mag >= 1e6 || step < 1e-4) {
        // Enough significant digits to tell neighbouring ticks apart.
        int digits = int(std::floor(std::log10(mag))) - int(std::floor(std::log10(step) + 1e-9)) + 1;
        digits = std::clamp(digits, 1, 15);
        std::string s = fmt::format("{:.{}e}", v, digits - 1);
        // Tidy "1.50e+06" -> "1.5e6".
        size_t e = s.find('e');
        std::string mant = s.substr(0, e), exp = s.substr(e + 1);
        if (mant.find('.') != std::string::npos) {
            while (mant.back() == '0') mant.pop_back();
            if (mant.back() == '.') mant.pop_back();
        }
        bool neg = exp[0] == '-';
        size_t d = 1;
        while (d + 1 < exp.size() && exp[d] == '0') ++d;
        return mant + "e" + (neg ? "-" : "") + exp.substr(d);
    }
    int decimals = std::max(0, -int(std::floor(std::log10(step) + 1e-9)));
    return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace hydra
