// Heatmaps as PNG, drawn by PLplot: head scores as a (layers x heads) grid of viridis-coloured cells,
// with row and column tick labels, axis labels, a colour bar with min/max labels, and optional
// outlined cells (e.g. the heads selected to keep full attention).
//
// Row 0 is at the top. The image size follows from the cell size (automatic unless given).
// Non-finite values (NaN, inf) are drawn as grey "missing" cells.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "report/colors.h"

namespace hydra {

struct HeatmapOptions {
    std::string title;
    std::string row_label, col_label;               // axis names, e.g. "layer" and "head"
    std::string value_label;                        // colour bar name, e.g. "retrieval score"
    int row_tick_every = 0, col_tick_every = 0;     // label every k-th row/col; 0 = as dense as fits
    int index_base = 0;                             // number printed for row/col 0
    std::vector<std::string> row_names, col_names;  // replace the numbers when non-empty (one per row/col)
    double vmin = NAN, vmax = NAN;        // colour scale ends; NaN = data min/max (values beyond are clamped)
    int cell_width = 0, cell_height = 0;  // pixels in [2, 200]; 0 = automatic (matrix about 560 px)
    std::vector<std::pair<int, int>> outlined;  // (row, col) cells to outline
};

// Where things went, for callers (and tests) that need to locate a cell. Pixel coordinates, y down.
struct HeatmapFrame {
    int x0 = 0, y0 = 0, cell_w = 0, cell_h = 0, rows = 0,
        cols = 0;                                    // cell (r, c) covers x0 + c*cell_w, y0 + r*cell_h
    int bar_x = 0, bar_y = 0, bar_w = 0, bar_h = 0;  // colour bar, vmax at the top
    int width = 0, height = 0;                       // the image
    double vmin = 0, vmax = 1;
};

// Cell colours: viridis((v - vmin) / (vmax - vmin)) (colors.h), heatmap_missing_color() for
// non-finite values. Writes the PNG atomically (a temporary file renamed into place). Throws
// hydra::Error naming path for: no rows or no columns, ragged rows, too many rows/cols for the image
// size, a names vector of the wrong length, an outlined cell out of range, vmin >= vmax, no finite
// value when vmin/vmax are not both given, PLplot's PNG device missing (the message names the Debian
// package), or a path that cannot be written. frame, when given, receives the layout.
void write_heatmap(const std::string& path, const std::vector<std::vector<double>>& values,
                   const HeatmapOptions& options, HeatmapFrame* frame = nullptr);

}  // namespace hydra
