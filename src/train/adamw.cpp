// AdamW and gradient helpers over the parameter arena (see adamw.h).
#include "train/adamw.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace hydra {

namespace {

constexpr int64_t kParallelMin = 1 << 14;

void check_spans(const std::vector<ParamSpan>& spans, int64_t n_total, const char* what) {
    for (const ParamSpan& s : spans)
        HYDRA_CHECK(s.offset >= 0 && s.size >= 0 && s.offset <= n_total && s.size <= n_total - s.offset,
                    "{}: span '{}' [{}, +{}) lies outside the arena of {} elements", what, s.name, s.offset,
                    s.size, n_total);
}

// Largest offset + size over the spans: the extent the buffers must cover.
int64_t spans_end(const std::vector<ParamSpan>& spans) {
    int64_t end = 0;
    for (const ParamSpan& s : spans) end = std::max(end, s.offset + s.size);
    return end;
}

}  // namespace

AdamW::AdamW(const AdamWConfig& config, int64_t n_total) : config_(config) {
    HYDRA_CHECK(n_total >= 0, "AdamW: negative arena size {}", n_total);
    m_.assign(size_t(n_total), 0.0f);
    v_.assign(size_t(n_total), 0.0f);
}

void AdamW::set_step_count(int64_t step) {
    HYDRA_CHECK(step >= 0, "AdamW: step counter must be >= 0 (got {})", step);
    step_ = step;
}

void AdamW::load_state(const float* m, const float* v, int64_t n, int64_t step) {
    HYDRA_CHECK(n == size(),
                "AdamW state has {} elements but the parameter arena has {}: the checkpoint "
                "belongs to a different model layout",
                n, size());
    set_step_count(step);
    if (n > 0) {
        std::memcpy(m_.data(), m, size_t(n) * sizeof(float));
        std::memcpy(v_.data(), v, size_t(n) * sizeof(float));
    }
}

void AdamW::step(float* params, const float* grads, int64_t n_total, const std::vector<ParamSpan>& spans) {
    HYDRA_CHECK(n_total == size(), "AdamW::step: arena has {} elements but the optimizer state {}", n_total,
                size());
    check_spans(spans, n_total, "AdamW::step");
    const AdamWConfig& c = config_;
    HYDRA_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1 && c.eps >= 0,
                "AdamW: need 0 <= beta1, beta2 < 1 and eps >= 0 (got {}, {}, {})", c.beta1, c.beta2, c.eps);
    ++step_;
    // Bias corrections in double: beta2^t is close to 1 for small t and the difference matters.
    const double bc1 = 1.0 - std::pow(double(c.beta1), double(step_));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(double(c.beta2), double(step_)));
    const float b1 = c.beta1, b2 = c.beta2, one_m_b1 = 1.0f - c.beta1, one_m_b2 = 1.0f - c.beta2, eps = c.eps;
    const float inv_bc2_sqrt = float(1.0 / bc2_sqrt);
    for (const ParamSpan& s : spans) {
        if (!s.trainable || s.size == 0) continue;
        const float lr = c.lr * s.lr_scale;
        const float decay = float(1.0 - double(lr) * double(c.weight_decay) * double(s.wd_scale));
        const float step_size = float(double(lr) / bc1);
        float* p = params + s.offset;
        const float* g = grads + s.offset;
        float* m = m_.data() + s.offset;
        float* v = v_.data() + s.offset;
#pragma omp parallel for schedule(static) if (s.size >= kParallelMin)
        for (int64_t i = 0; i < s.size; ++i) {
            const float gi = g[i];
            const float mi = b1 * m[i] + one_m_b1 * gi;
            const float vi = b2 * v[i] + one_m_b2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            const float denom = std::sqrt(vi) * inv_bc2_sqrt + eps;
            p[i] = p[i] * decay - step_size * mi / denom;
        }
    }
}

double grad_norm(const float* grads, const std::vector<ParamSpan>& spans) {
    check_spans(spans, spans_end(spans), "grad_norm");
    double sum = 0;
    for (const ParamSpan& s : spans) {
        if (!s.trainable) continue;
        const float* g = grads + s.offset;
        double part = 0;
#pragma omp parallel for schedule(static) reduction(+ : part) if (s.size >= kParallelMin)
        for (int64_t i = 0; i < s.size; ++i) part += double(g[i]) * double(g[i]);
        sum += part;
    }
    return std::sqrt(sum);
}

double clip_grads(float* grads, const std::vector<ParamSpan>& spans, double max_norm, double norm) {
    HYDRA_CHECK(max_norm > 0, "clip_grads: max_norm must be > 0 (got {})", max_norm);
    const double coef = max_norm / (norm + 1e-6);
    if (!(coef < 1.0)) return 1.0;
    const float f = float(coef);
    for (const ParamSpan& s : spans) {
        if (!s.trainable) continue;
        float* g = grads + s.offset;
#pragma omp parallel for schedule(static) if (s.size >= kParallelMin)
        for (int64_t i = 0; i < s.size; ++i) g[i] *= f;
    }
    return coef;
}

bool all_finite(const float* grads, const std::vector<ParamSpan>& spans) {
    for (const ParamSpan& s : spans) {
        if (!s.trainable) continue;
        const float* g = grads + s.offset;
        int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (s.size >= kParallelMin)
        for (int64_t i = 0; i < s.size; ++i) bad |= !std::isfinite(g[i]);
        if (bad) return false;
    }
    return true;
}

}  // namespace hydra
