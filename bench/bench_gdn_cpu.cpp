// bench_gdn_cpu: tokens/s of the Gated DeltaNet core on the CPU (ops/cpu/gdn_recurrence), chunked
// vs recurrent, forward and forward+backward (the recurrent backward is BPTT), at one head group's
// shape, plus the single-token decode step. Random L2-normalised q, k, typical gates. The chunked
// forward saves the per-chunk states (as training does) and its backward reads them.
//   bench_gdn_cpu [--threads N] [--reps R] [--H H] [--HV HV] [--K K] [--V V] [--chunk C] [--T T1,T2,...]
// Prints a markdown table (median over R repetitions after one warm-up).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/blas_kernels.h"
#include "core/threading.h"
#include "ops/cpu/gdn_recurrence.h"

using namespace hydra;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

void unit_rows(std::vector<float>& x, int64_t C) {
    for (size_t r = 0; r < x.size() / size_t(C); ++r) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += double(x[r * C + c]) * x[r * C + c];
        for (int64_t c = 0; c < C; ++c) x[r * C + c] = float(x[r * C + c] / std::sqrt(ss));
    }
}

// Median seconds of fn over reps runs after one warm-up.
double median_seconds(int reps, const std::function<void()>& fn) {
    fn();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    hydra::ensure_blas_kernels(argv);
    int threads = 0, reps = 5;
    int64_t H = 8, HV = 8, K = 64, V = 64, C = 64;
    std::vector<int64_t> Ts = {512, 2048, 4096};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fmt::print(stderr, "bench_gdn_cpu: {} needs a value\n", a);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--threads")
            threads = std::stoi(next());
        else if (a == "--reps")
            reps = std::stoi(next());
        else if (a == "--H")
            H = std::stoll(next());
        else if (a == "--HV")
            HV = std::stoll(next());
        else if (a == "--K")
            K = std::stoll(next());
        else if (a == "--V")
            V = std::stoll(next());
        else if (a == "--chunk")
            C = std::stoll(next());
        else if (a == "--T") {
            Ts.clear();
            std::stringstream ss(next());
            for (std::string item; std::getline(ss, item, ',');) Ts.push_back(std::stoll(item));
        } else {
            fmt::print(stderr,
                       "usage: bench_gdn_cpu [--threads N] [--reps R] [--H H] [--HV HV] [--K K] [--V V] "
                       "[--chunk C] [--T T1,T2,...]\n");
            return 2;
        }
    }
    set_num_threads(threads);
    const double scale = 1.0 / std::sqrt(double(K));
    fmt::print("GDN core, fp32, H={} HV={} K={} V={} chunk={}, batch 1, {} threads, median of {} runs\n\n", H,
               HV, K, V, C, num_threads(), reps);
    fmt::print(
        "| T | chunked fwd tok/s | chunked fwd+bwd tok/s | recurrent fwd tok/s | recurrent fwd+bwd (BPTT) "
        "tok/s |\n");
    fmt::print("|---|---|---|---|---|\n");
    for (int64_t T : Ts) {
        const cpu::GdnDims d{T, H, HV, K, V};
        std::vector<float> q = randn(size_t(T * H * K), 1), k = randn(size_t(T * H * K), 2);
        unit_rows(q, K), unit_rows(k, K);
        const std::vector<float> v = randn(size_t(T * HV * V), 3),
                                 g = uniform(size_t(T * HV), 4, -1.0f, -0.01f),
                                 beta = uniform(size_t(T * HV), 5, 0.0f, 1.0f),
                                 dout = randn(size_t(T * HV * V), 6);
        std::vector<float> o(size_t(T * HV * V)), state(size_t(HV * V * K)),
            states(size_t(cpu::gdn_chunk_states_numel(d, C)));
        std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dg(g.size()), db(beta.size());
        auto chunked_fwd = [&] {
            cpu::gdn_chunked_forward(o.data(), state.data(), states.data(), q.data(), k.data(), v.data(),
                                     g.data(), beta.data(), (const float*)nullptr, d, scale, C);
        };
        auto chunked_bwd = [&] {
            cpu::gdn_chunked_backward(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), (float*)nullptr,
                                      dout.data(), (const float*)nullptr, q.data(), k.data(), v.data(),
                                      g.data(), beta.data(), (const float*)nullptr, states.data(), d, scale,
                                      C);
        };
        auto recurrent_fwd = [&] {
            cpu::gdn_recurrent_forward(o.data(), state.data(), q.data(), k.data(), v.data(), g.data(),
                                       beta.data(), (const float*)nullptr, d, scale);
        };
        auto recurrent_bwd = [&] {
            cpu::gdn_recurrent_backward(dq.data(), dk.data(), dv.data(), dg.data(), db.data(),
                                        (float*)nullptr, dout.data(), (const float*)nullptr, q.data(),
                                        k.data(), v.data(), g.data(), beta.data(), (const float*)nullptr, d,
                                        scale);
        };
        const double cf = median_seconds(reps, chunked_fwd);
        const double cfb = median_seconds(reps, [&] { chunked_fwd(), chunked_bwd(); });
        const double rf = median_seconds(reps, recurrent_fwd);
        const double rfb = median_seconds(reps, [&] { recurrent_fwd(), recurrent_bwd(); });
        fmt::print("| {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |\n", T, T / cf, T / cfb, T / rf, T / rfb);
    }
    // Decode: one token at a time on a state updated in place (the recurrent step, T = 1).
    {
        const cpu::GdnDims d{1, H, HV, K, V};
        std::vector<float> q = randn(size_t(H * K), 7), k = randn(size_t(H * K), 8);
        unit_rows(q, K), unit_rows(k, K);
        const std::vector<float> v = randn(size_t(HV * V), 9), g = uniform(size_t(HV), 10, -1.0f, -0.01f),
                                 beta = uniform(size_t(HV), 11, 0.0f, 1.0f);
        std::vector<float> o(size_t(HV * V)), state(size_t(HV * V * K), 0.0f);
        const int steps = 2000;
        const double s = median_seconds(reps, [&] {
            for (int i = 0; i < steps; ++i)
                cpu::gdn_recurrent_forward(o.data(), state.data(), q.data(), k.data(), v.data(), g.data(),
                                           beta.data(), state.data(), d, scale);
        });
        fmt::print("\nDecode step (recurrent, T = 1, state in place): {:.2f} us/token, {:.0f} tok/s\n",
                   1e6 * s / steps, steps / s);
    }
    return 0;
}
