// Linear CKA from batch-accumulated feature moments (see linear_cka.h for the estimators).
#include "interp/linear_cka.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/gemm.h"

namespace hydra {

CkaAccumulator::CkaAccumulator(std::vector<int64_t> dims, std::vector<std::pair<int, int>> pairs)
    : dims_(std::move(dims)) {
    HYDRA_CHECK(!dims_.empty(), "CKA: no representations");
    for (size_t r = 0; r < dims_.size(); ++r)
        HYDRA_CHECK(dims_[r] >= 1, "CKA: representation {} has width {}", r, dims_[r]);
    self_.resize(dims_.size());
    for (size_t r = 0; r < dims_.size(); ++r) {
        const size_t d = size_t(dims_[r]);
        self_[r].sum.assign(d, 0.0);
        self_[r].gram.assign(d * d, 0.0);
        self_[r].sq_x.assign(d, 0.0);
    }
    const int R = int(dims_.size());
    for (auto [i, j] : pairs) {
        HYDRA_CHECK(i >= 0 && j >= 0 && i < R && j < R && i != j,
                    "CKA: pair ({}, {}) is not two of the {} representations", i, j, R);
        if (i > j) std::swap(i, j);
        bool seen = false;
        for (const Cross& c : cross_) seen = seen || (c.i == i && c.j == j);
        if (seen) continue;
        Cross c;
        c.i = i;
        c.j = j;
        c.xty.assign(size_t(dims_[size_t(i)] * dims_[size_t(j)]), 0.0);
        c.bx.assign(size_t(dims_[size_t(i)]), 0.0);
        c.ay.assign(size_t(dims_[size_t(j)]), 0.0);
        cross_.push_back(std::move(c));
    }
    col_.assign(size_t(R) + 1, 0);
    for (int r = 0; r < R; ++r) col_[size_t(r) + 1] = col_[size_t(r)] + dims_[size_t(r)];
    index_.assign(size_t(R * R), -1);
    for (size_t k = 0; k < cross_.size(); ++k) index_[size_t(cross_[k].i * R + cross_[k].j)] = int(k);
    for (int i = 0; i < R; ++i) {
        // Partners of i: itself, then every j > i with a kept pair, grouped into consecutive runs.
        Run run{i, i, i};
        for (int j = i + 1; j < R; ++j) {
            if (index_[size_t(i * R + j)] < 0) continue;
            if (j == run.last + 1) {
                run.last = j;
            } else {
                runs_.push_back(run);
                run = {i, j, j};
            }
        }
        runs_.push_back(run);
    }
}

int CkaAccumulator::cross_index(int i, int j) const {
    const int k = index_[size_t(i) * dims_.size() + size_t(j)];
    HYDRA_ASSERT(k >= 0, "CKA: pair ({}, {}) not kept", i, j);
    return k;
}

int64_t CkaAccumulator::bytes() const {
    int64_t b = 0;
    for (const Self& s : self_) b += int64_t(s.gram.size() + s.sum.size() + s.sq_x.size()) * 8;
    for (const Cross& c : cross_) b += int64_t(c.xty.size() + c.bx.size() + c.ay.size()) * 8;
    return b;
}

void CkaAccumulator::add(std::span<const float* const> reps, int64_t rows) {
    const size_t R = dims_.size();
    HYDRA_CHECK(reps.size() == R, "CKA: {} representations given, {} expected", reps.size(), R);
    HYDRA_CHECK(rows >= 0, "CKA: negative row count");
    if (rows == 0) return;
    // The shifted batch as one (rows, D) matrix, representation r in columns [col_[r], col_[r + 1]), so that
    // one GEMM serves a whole run of partners.
    const int64_t D = col_[R];
    shifted_.resize(size_t(rows * D));
    norms_.assign(R * size_t(rows), 0.0);
    for (size_t r = 0; r < R; ++r) {
        const int64_t d = dims_[r];
        const float* x = reps[r];
        for (int64_t i = 0; i < rows * d; ++i)
            HYDRA_CHECK(std::isfinite(x[i]),
                        "CKA: representation {} holds a non-finite value (row {}, column {})", r, i / d,
                        i % d);
        Self& s = self_[r];
        if (n_ == 0) {  // the first batch's mean becomes the shift
            std::vector<double> mean(static_cast<size_t>(d), 0.0);
            for (int64_t t = 0; t < rows; ++t)
                for (int64_t c = 0; c < d; ++c) mean[size_t(c)] += x[t * d + c];
            s.shift.resize(size_t(d));
            for (int64_t c = 0; c < d; ++c) s.shift[size_t(c)] = float(mean[size_t(c)] / double(rows));
        }
        double* a = norms_.data() + r * size_t(rows);
        for (int64_t t = 0; t < rows; ++t) {
            float* xs = shifted_.data() + t * D + col_[r];
            double sq = 0;
            for (int64_t c = 0; c < d; ++c) {
                const float v = x[t * d + c] - s.shift[size_t(c)];
                xs[c] = v;
                s.sum[size_t(c)] += v;
                sq += double(v) * double(v);
            }
            a[t] = sq;
            s.sq += sq;
            s.sq_sq += sq * sq;
            for (int64_t c = 0; c < d; ++c) s.sq_x[size_t(c)] += sq * double(xs[c]);
        }
    }
    for (Cross& c : cross_) {
        const int64_t di = dims_[size_t(c.i)], dj = dims_[size_t(c.j)];
        const double* a = norms_.data() + size_t(c.i) * size_t(rows);
        const double* b = norms_.data() + size_t(c.j) * size_t(rows);
        for (int64_t t = 0; t < rows; ++t) {
            const float* xi = shifted_.data() + t * D + col_[size_t(c.i)];
            const float* xj = shifted_.data() + t * D + col_[size_t(c.j)];
            for (int64_t k = 0; k < di; ++k) c.bx[size_t(k)] += b[t] * double(xi[k]);
            for (int64_t k = 0; k < dj; ++k) c.ay[size_t(k)] += a[t] * double(xj[k]);
            c.ab += a[t] * b[t];
        }
    }
    // X_i^T X_j for every kept (i, j), j >= i: one GEMM per run of consecutive partners, then each block
    // added into its double accumulator.
    for (const Run& run : runs_) {
        const int64_t di = dims_[size_t(run.i)];
        const int64_t c0 = col_[size_t(run.first)], N = col_[size_t(run.last) + 1] - c0;
        product_.resize(size_t(di * N));
        gemm(true, false, di, N, rows, 1.0f, shifted_.data() + col_[size_t(run.i)], D, shifted_.data() + c0,
             D, 0.0f, product_.data(), N);
        for (int j = run.first; j <= run.last; ++j) {
            const int64_t dj = dims_[size_t(j)], off = col_[size_t(j)] - c0;
            double* acc =
                j == run.i ? self_[size_t(j)].gram.data() : cross_[size_t(cross_index(run.i, j))].xty.data();
            for (int64_t p = 0; p < di; ++p)
                for (int64_t q = 0; q < dj; ++q) acc[p * dj + q] += double(product_[size_t(p * N + off + q)]);
        }
    }
    n_ += rows;
}

CkaAccumulator::PairMoments CkaAccumulator::moments(int i, int j) const {
    if (i == j) {
        const Self& s = self_[size_t(i)];
        return {s.gram.data(), s.sq_x.data(), s.sq_x.data(), s.sq_sq};
    }
    const int k = index_[size_t(i) * dims_.size() + size_t(j)];
    HYDRA_CHECK(k >= 0, "CKA: the pair ({}, {}) was not accumulated", i, j);
    const Cross& c = cross_[size_t(k)];
    return {c.xty.data(), c.bx.data(), c.ay.data(), c.ab};
}

double CkaAccumulator::hsic(int i, int j, CkaEstimator estimator) const {
    if (i > j) std::swap(i, j);
    const PairMoments m = moments(i, j);
    const Self& x = self_[size_t(i)];
    const Self& y = self_[size_t(j)];
    const int64_t dx = dims_[size_t(i)], dy = dims_[size_t(j)];
    const double n = double(n_);
    std::vector<double> mx(static_cast<size_t>(dx)), my(static_cast<size_t>(dy));
    double mx2 = 0, my2 = 0;
    for (int64_t k = 0; k < dx; ++k)
        mx[size_t(k)] = x.sum[size_t(k)] / n, mx2 += mx[size_t(k)] * mx[size_t(k)];
    for (int64_t k = 0; k < dy; ++k)
        my[size_t(k)] = y.sum[size_t(k)] / n, my2 += my[size_t(k)] * my[size_t(k)];
    // ||Xc^T Yc||_F^2 with Xc^T Yc = X^T Y - n mx my^T, and mx^T (X^T Y) my for <a', b'> below.
    double xty = 0, mcm = 0;
    for (int64_t p = 0; p < dx; ++p) {
        const double* row = m.xty + p * dy;
        double rm = 0;
        for (int64_t q = 0; q < dy; ++q) {
            const double c = row[q] - n * mx[size_t(p)] * my[size_t(q)];
            xty += c * c;
            rm += row[q] * my[size_t(q)];
        }
        mcm += mx[size_t(p)] * rm;
    }
    if (estimator == CkaEstimator::Biased) return xty;
    // Centered row norms a'_t = |x_t - mx|^2, b'_t = |y_t - my|^2: their totals and <a', b'> expanded in
    // the raw moments (linear_cka.h).
    double bx_mx = 0, ay_my = 0;
    for (int64_t k = 0; k < dx; ++k) bx_mx += m.bx[k] * mx[size_t(k)];
    for (int64_t k = 0; k < dy; ++k) ay_my += m.ay[k] * my[size_t(k)];
    const double a_tot = x.sq - n * mx2, b_tot = y.sq - n * my2;
    const double ab = m.ab - 2 * ay_my - 2 * bx_mx + 4 * mcm + my2 * x.sq + mx2 * y.sq - 3 * n * mx2 * my2;
    return xty - n / (n - 2) * ab + a_tot * b_tot / ((n - 1) * (n - 2));
}

double CkaAccumulator::cka(int i, int j, CkaEstimator estimator) const {
    const int R = int(dims_.size());
    HYDRA_CHECK(i >= 0 && j >= 0 && i < R && j < R, "CKA: pair ({}, {}) out of range", i, j);
    HYDRA_CHECK(n_ >= 4, "CKA: {} examples accumulated, at least 4 are needed", n_);
    const double hxx = hsic(i, i, estimator), hyy = hsic(j, j, estimator);
    if (!(hxx > 0) || !(hyy > 0)) return NAN;
    if (i == j) return 1.0;
    return hsic(i, j, estimator) / std::sqrt(hxx * hyy);
}

double linear_cka(const float* x, int64_t dx, const float* y, int64_t dy, int64_t n, CkaEstimator estimator) {
    CkaAccumulator acc({dx, dy}, {{0, 1}});
    const float* reps[2] = {x, y};
    acc.add(reps, n);
    return acc.cka(0, 1, estimator);
}

}  // namespace hydra
