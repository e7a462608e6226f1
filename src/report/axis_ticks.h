// Axis ticks for report figures: "nice" tick values (steps of 1, 2 or 5 times a power of ten), ticks
// for log axes, and their labels. PLplot draws the axes; the values come from here because PLplot's
// log axes label only whole decades (a 1k..8k context-length axis would get no label at all) and its
// linear labels switch to a separate "x10^n" factor; these functions also fix the label widths before
// drawing, which the layout needs.
#pragma once

#include <string>
#include <vector>

namespace hydra {

// Tick values: multiples of step = {1, 2, 5} x 10^k inside [lo, hi], with step chosen so that there
// are about target ticks (at least 2 whenever the range allows). E.g. (0, 0.87) -> 0, 0.2, ..., 0.8.
// Requires finite lo < hi.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// The step nice_ticks(lo, hi, target) uses.
double nice_step(double lo, double hi, int target = 6);
// Ticks for a log axis on [lo, hi] (0 < lo < hi): powers of ten (thinned if there are many decades),
// plus 2x and 5x when fewer than 3 decades show; linear nice ticks when even that gives fewer than 2.
std::vector<double> log_ticks(double lo, double hi);
// Label for a tick value on an axis whose tick step is step: as few decimals as the step needs,
// scientific notation for very large or very small values, never "-0".
std::string format_tick(double v, double step);
// Shortest "%g"-style label with at most 6 significant digits, exponent without '+' and zero padding
// (log-axis ticks: "1000", "2e6").
std::string format_g(double v);

}  // namespace hydra
