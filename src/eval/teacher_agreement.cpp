// Teacher-student agreement on held-out tokens (see teacher_agreement.h).
#include "eval/teacher_agreement.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"

namespace hydra {

TeacherAgreement teacher_agreement(const LlamaModel& teacher, const LlamaModel& student,
                                   const std::vector<int32_t>& tokens, int64_t window) {
    HYDRA_CHECK(window >= 2, "teacher agreement: window {} is below 2 tokens", window);
    HYDRA_CHECK(teacher.config().vocab_size == student.config().vocab_size,
                "teacher agreement: vocabularies differ ({} vs {} ids)", teacher.config().vocab_size,
                student.config().vocab_size);
    int64_t agree = 0, count = 0;
    double kl = 0, nll = 0;
    const int64_t V = student.config().vocab_size;
    for (int64_t b = 0; b + 1 < int64_t(tokens.size()); b += window) {
        const int64_t n = std::min<int64_t>(window, int64_t(tokens.size()) - b - 1);
        if (n < 2) break;
        std::span<const int32_t> in(tokens.data() + b, size_t(n));
        ForwardOptions fo;
        fo.quantized_decode = false;
        KVCache ct(teacher, n), cs(student, n);
        const Tensor lt = compute_logits(teacher, forward_hidden(teacher, in, ct, fo));  // (n, V)
        const Tensor ls = compute_logits(student, forward_hidden(student, in, cs, fo));  // (n, V)
        for (int64_t t = 0; t < n; ++t) {
            const float* a = lt.f32() + t * V;
            const float* s = ls.f32() + t * V;
            double ma = -INFINITY, ms = -INFINITY;
            int64_t ia = 0, is = 0;
            for (int64_t v = 0; v < V; ++v) {
                if (a[v] > ma) ma = a[v], ia = v;
                if (s[v] > ms) ms = s[v], is = v;
            }
            double za = 0, zs = 0;
            for (int64_t v = 0; v < V; ++v) za += std::exp(a[v] - ma), zs += std::exp(s[v] - ms);
            const double lza = std::log(za) + ma, lzs = std::log(zs) + ms;
            double k = 0;
            for (int64_t v = 0; v < V; ++v) {
                const double pa = std::exp(a[v] - lza);
                k += pa * ((a[v] - lza) - (s[v] - lzs));
            }
            kl += k;
            agree += ia == is;
            nll += lzs - s[tokens[size_t(b + t + 1)]];
            ++count;
        }
    }
    TeacherAgreement r;
    r.tokens = count;
    r.top1 = count ? double(agree) / double(count) : NAN;
    r.kl = count ? kl / double(count) : NAN;
    r.ppl = count ? std::exp(nll / double(count)) : NAN;
    return r;
}

nlohmann::json to_json(const TeacherAgreement& a) {
    return {{"tokens", a.tokens}, {"top1_agreement", a.top1}, {"kl", a.kl}, {"ppl", a.ppl}};
}

}  // namespace hydra
