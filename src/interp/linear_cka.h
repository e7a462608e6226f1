// Linear CKA (centered kernel alignment, Kornblith et al. 2019) between representations of the same
// examples, accumulated over batches in feature space, so that memory is O(d_x * d_y) per pair and
// independent of the number of examples n (the n x n Gram matrices are never formed).
//
// For X (n, d_x), Y (n, d_y) with column-centered copies Xc, Yc:
//   biased   HSIC_0 ∝ ||Xc^T Yc||_F^2                       (= tr(Kc Lc), K = X X^T, centered by H)
//   debiased HSIC_1 ∝ ||Xc^T Yc||_F^2 - n/(n-2) <a, b> + |Xc|_F^2 |Yc|_F^2 / ((n-1)(n-2))
//            with a_t = |xc_t|^2, b_t = |yc_t|^2 (the unbiased U-statistic of Song et al. 2012, in the
//            feature-space form of Kornblith et al.'s reference code; equals the Gram form with the
//            diagonal removed, which tests/data/cka_reference.json checks)
//   CKA = HSIC(X, Y) / sqrt(HSIC(X, X) HSIC(Y, Y)).
// Both need only moments that add over batches: n, the column sums, X^T Y, sum_t |x_t|^2 x-weighted
// vectors (sum_t b_t x_t, sum_t a_t y_t), sum_t a_t b_t and sum_t a_t; the centered quantities follow from
// them exactly. Each representation is shifted by the mean of its first batch before accumulating (CKA is
// invariant to the shift; the raw sums would otherwise cancel catastrophically for residual streams with
// a large mean). Batch products X^T Y run in fp32 through BLAS (one GEMM per run of consecutive partners),
// everything else accumulates in double.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace hydra {

enum class CkaEstimator { Biased, Debiased };

class CkaAccumulator {
  public:
    // `dims`: the width of each representation; `pairs`: the (i, j) pairs, i != j, whose CKA is wanted
    // (each representation's self moments are always kept, for the normalisation). Throws hydra::Error
    // for an empty dims, a width < 1, or a pair out of range or with i == j.
    CkaAccumulator(std::vector<int64_t> dims, std::vector<std::pair<int, int>> pairs);

    // One batch of `rows` examples: reps[r] is (rows, dims[r]) row-major, every representation of the
    // same examples in the same order. Non-finite values are an error.
    void add(std::span<const float* const> reps, int64_t rows);

    int64_t rows() const { return n_; }
    int64_t representations() const { return int64_t(dims_.size()); }
    // CKA of a listed pair (in either order) or 1 for i == j. Needs rows() >= 4 (the debiased estimator
    // divides by n - 3 in its scale; the biased one is given the same floor). A representation with zero
    // variance (or a non-positive debiased self-HSIC) gives NaN: similarity to a constant is undefined.
    double cka(int i, int j, CkaEstimator estimator) const;
    // Bytes held by the accumulators (for the caller to report).
    int64_t bytes() const;

  private:
    struct Self {                  // one representation (shifted)
        std::vector<float> shift;  // (d) mean of the first batch
        std::vector<double> sum;   // (d) sum_t x_t
        double sq = 0;             // sum_t |x_t|^2
        std::vector<double> gram;  // (d, d) X^T X
        std::vector<double> sq_x;  // (d) sum_t |x_t|^2 x_t
        double sq_sq = 0;          // sum_t |x_t|^4
    };
    struct Cross {  // one pair (i, j)
        int i = 0, j = 0;
        std::vector<double> xty;  // (d_i, d_j) X_i^T X_j
        std::vector<double> bx;   // (d_i) sum_t |x_j,t|^2 x_i,t
        std::vector<double> ay;   // (d_j) sum_t |x_i,t|^2 x_j,t
        double ab = 0;            // sum_t |x_i,t|^2 |x_j,t|^2
    };
    // The moments of (i, j), i <= j, as the HSIC formula needs them (i == j: the self moments).
    struct PairMoments {
        const double *xty, *bx, *ay;  // (d_i, d_j), (d_i), (d_j)
        double ab;
    };
    PairMoments moments(int i, int j) const;
    int cross_index(int i, int j) const;  // i < j, a kept pair
    double hsic(int i, int j, CkaEstimator estimator) const;

    std::vector<int64_t> dims_;
    std::vector<Self> self_;
    std::vector<Cross> cross_;
    int64_t n_ = 0;
    // One GEMM per run: X_i^T [X_first | ... | X_last] (the self gram is the run that starts at i).
    struct Run {
        int i, first, last;
    };
    std::vector<Run> runs_;
    std::vector<int64_t> col_;              // (R + 1) column offsets in the concatenated batch
    std::vector<int> index_;                // (R, R) cross_ index of pair (i, j), i < j; -1 where not kept
    std::vector<float> shifted_, product_;  // batch scratch: (rows, sum of dims), one run's product
    std::vector<double> norms_;             // (reps, rows) |x_t|^2 of the shifted batch
};

// One-shot convenience over whole matrices: x (n, dx), y (n, dy).
double linear_cka(const float* x, int64_t dx, const float* y, int64_t dy, int64_t n, CkaEstimator estimator);

}  // namespace hydra
