// Logit-difference metric and normalised effects (see patching_metric.h).
#include "interp/patching_metric.h"

#include <cmath>

#include "core/error.h"
#include "ops/cpu/rmsnorm.h"

namespace hydra {

template <typename T>
LogitDiff<T>::LogitDiff(const FaWeights<T>& w, int32_t answer, int32_t distractor) : w_(&w) {
    const ModelConfig& c = w.config();
    HYDRA_CHECK(answer >= 0 && answer < c.vocab_size && distractor >= 0 && distractor < c.vocab_size,
                "patching pair: answer token {} / distractor token {} outside the vocabulary (0..{})", answer,
                distractor, c.vocab_size - 1);
    HYDRA_CHECK(
        answer != distractor,
        "patching pair: the answer and distractor tokens are the same ({}), so the logit difference is 0",
        answer);
    const int64_t C = c.hidden_size;
    u_.resize(size_t(C));
    const T* a = w.lm_head() + int64_t(answer) * C;
    const T* d = w.lm_head() + int64_t(distractor) * C;
    for (int64_t i = 0; i < C; ++i) u_[size_t(i)] = a[i] - d[i];
}

template <typename T>
double LogitDiff<T>::operator()(const T* x) const {
    const ModelConfig& c = w_->config();
    const int64_t C = c.hidden_size;
    double ss = 0;
    for (int64_t i = 0; i < C; ++i) ss += double(x[i]) * double(x[i]);
    const double r = 1.0 / std::sqrt(ss / double(C) + double(c.rms_norm_eps));
    const T* g = w_->final_norm();
    double ld = 0;
    for (int64_t i = 0; i < C; ++i) ld += double(u_[size_t(i)]) * double(x[i]) * double(g[i]);
    return ld * r;
}

template <typename T>
void LogitDiff<T>::backward(const T* x, T* dx) const {
    const ModelConfig& c = w_->config();
    const int64_t C = c.hidden_size;
    T rstd;
    std::vector<T> y(static_cast<size_t>(C));
    cpu::rmsnorm_forward(y.data(), &rstd, x, w_->final_norm(), 1, C, c.rms_norm_eps);
    cpu::rmsnorm_backward(dx, (T*)nullptr, u_.data(), x, w_->final_norm(), &rstd, 1, C);
}

template <typename T>
std::vector<double> LogitDiff<T>::rows(const std::vector<T>& xs) const {
    const int64_t C = w_->config().hidden_size, n = int64_t(xs.size()) / C;
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = (*this)(xs.data() + i * C);
    return out;
}

std::vector<double> HeadPatchResult::noising_effect() const {
    std::vector<double> e(ld_noised.size());
    for (size_t i = 0; i < e.size(); ++i) e[i] = (ld_clean - ld_noised[i]) / gap();
    return e;
}

std::vector<double> HeadPatchResult::denoising_effect() const {
    std::vector<double> e(ld_denoised.size());
    for (size_t i = 0; i < e.size(); ++i) e[i] = (ld_denoised[i] - ld_corrupted) / gap();
    return e;
}

template class LogitDiff<float>;
template class LogitDiff<double>;

}  // namespace hydra
