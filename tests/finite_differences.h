// Gradient checks by finite differences, shared by the op tests (test_grad_ops.cpp) and the GDN tests
// (test_gdn.cpp): seeded double inputs, and check_fd, which compares an analytic gradient with fourth-order
// central differences element by element.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace hydra::test {

using Vec = std::vector<double>;

// Fourth-order central difference (f(x-2h) - 8 f(x-h) + 8 f(x+h) - f(x+2h)) / 12h with h = 1e-3:
// truncation O(h^4) ~ 1e-12 and rounding ~ 1e-16 / h ~ 1e-13. The plain two-point difference with
// h = 1e-6 sits at its rounding floor (~1e-10 absolute per output), which for gradient elements of
// 1e-4..1e-6 in the 37-token attention case gives relative errors up to 3e-5: too coarse for 1e-6.
constexpr double kFdStep = 1e-3;
constexpr double kFdRelTol = 1e-6;  // per element, relative to max(|analytic|, |numeric|, 1e-8)

inline Vec randn(size_t n, uint32_t seed, double sd = 1.0) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> dist(0.0, sd);
    Vec v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

inline std::vector<float> to_float(const Vec& v) {
    return std::vector<float>(v.begin(), v.end());
}

// Runs the finite-difference forwards on one thread: thousands of tiny OpenMP regions would otherwise
// spend their time in barriers on a loaded machine. (The analytic backward runs with all threads.)
class SingleThread {
  public:
    SingleThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
    ~SingleThread() { omp_set_num_threads(saved_); }
    SingleThread(const SingleThread&) = delete;
    SingleThread& operator=(const SingleThread&) = delete;

  private:
    int saved_;
};

// Compares the analytic gradient `grad` of L = sum(forward() * R) w.r.t. every element of `param` with
// fourth-order central differences; returns the worst relative error and fails the test on any element
// above `tol`. L(x+e) - L(x-e) is taken as sum((out+ - out-) * R): outputs the perturbation does not
// reach cancel exactly, so the difference keeps far fewer rounding errors than subtracting full sums.
// forward() runs once more at the end, so the caller's buffers hold the unperturbed point's values.
inline double check_fd(const std::string& what, Vec& param, const Vec& grad,
                       const std::function<Vec()>& forward, const Vec& R, double tol = kFdRelTol,
                       double step = kFdStep) {
    SingleThread one;
    EXPECT_EQ(param.size(), grad.size()) << what;
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < param.size(); ++i) {
        const double saved = param[i];
        param[i] = saved + step;
        const Vec p1 = forward();
        param[i] = saved - step;
        const Vec m1 = forward();
        param[i] = saved + 2 * step;
        const Vec p2 = forward();
        param[i] = saved - 2 * step;
        const Vec m2 = forward();
        param[i] = saved;
        EXPECT_EQ(p1.size(), R.size()) << what;
        double diff = 0;
        for (size_t j = 0; j < R.size(); ++j) diff += (8 * (p1[j] - m1[j]) - (p2[j] - m2[j])) * R[j];
        const double num = diff / (12 * step);
        const double rel = std::fabs(num - grad[i]) / std::max({std::fabs(num), std::fabs(grad[i]), 1e-8});
        EXPECT_LT(rel, tol) << what << "[" << i << "]: analytic " << grad[i] << " numeric " << num;
        if (rel > worst) worst = rel, worst_i = i;
    }
    forward();
    std::printf("  %-34s %5zu elements, worst rel err %.2e (element %zu = %.3e)\n", what.c_str(),
                param.size(), worst, worst_i, param.empty() ? 0.0 : grad[worst_i]);
    return worst;
}

}  // namespace hydra::test
