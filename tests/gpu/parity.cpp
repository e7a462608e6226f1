// The GPU parity harness (parity.h): metric, checks, seeds and random inputs.
#include "parity.h"

#include <gtest/gtest.h>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/half.h"

namespace hydra::gputest {

RelRms rel_rms(const float* got, const float* ref, size_t n) {
    double num = 0, den = 0;
    bool finite = true;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) finite = false;
        const double d = double(got[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    if (!finite) return {INFINITY, false};
    if (den == 0) return {num == 0 ? 0.0 : INFINITY, true};
    return {std::sqrt(num / den), true};
}

RelRms rel_rms(const std::vector<float>& got, const std::vector<float>& ref) {
    if (got.size() != ref.size()) return {INFINITY, false};
    return rel_rms(got.data(), ref.data(), ref.size());
}

namespace {

void row(const std::string& what, double err, double tol, bool ok, const char* note = "") {
    std::printf("  %-44s rel %.3e (tol %.0e)%s %s\n", what.c_str(), err, tol, note, ok ? "ok" : "FAIL");
    std::fflush(stdout);
}

void fail_at(const std::source_location& at, const std::string& msg) {
    ADD_FAILURE_AT(at.file_name(), int(at.line())) << msg;
}

std::string fmt_e(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3e", x);
    return b;
}

}  // namespace

void expect_rel(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                double tol, std::source_location at) {
    const RelRms e = rel_rms(got, ref);
    const bool ok = e.finite && e.value <= tol;
    row(what, e.value, tol, ok, e.finite ? "" : " (non-finite / unwritten / size)");
    if (!ok)
        fail_at(at, what + ": relative RMS " + fmt_e(e.value) + " > " + fmt_e(tol) +
                        (e.finite ? "" : " (non-finite element, unwritten output or size mismatch)"));
}

void expect_delta(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                  const std::vector<float>& init, double tol, std::source_location at) {
    if (got.size() != init.size() || ref.size() != init.size()) {
        fail_at(at, what + ": sizes differ");
        return;
    }
    expect_rel(what, minus(got, init), minus(ref, init), tol, at);
}

void expect_rel_floor(const std::string& what, const float* got, const float* floor_ref, const float* ref,
                      size_t n, double tol, std::source_location at) {
    const RelRms e = rel_rms(got, ref, n), f = rel_rms(floor_ref, ref, n);
    const double band = std::max(tol, 2.0 * (f.finite ? f.value : 0.0));
    const bool ok = e.finite && e.value <= band;
    const std::string note = " bf16 floor " + fmt_e(f.value) + ", band " + fmt_e(band);
    row(what, e.value, tol, ok, note.c_str());
    if (!ok)
        fail_at(at, what + ": relative RMS " + fmt_e(e.value) + " > max(" + fmt_e(tol) + ", 2 x bf16 floor " +
                        fmt_e(f.value) + ")" + (e.finite ? "" : " (non-finite)"));
}

void expect_scalar(const std::string& what, double got, double ref, double tol, double denom_min,
                   std::source_location at) {
    const double e = std::abs(got - ref) / std::max(std::abs(ref), denom_min);
    const bool ok = std::isfinite(got) && e <= tol;
    std::printf("  %-44s %.6g vs reference %.6g: rel %.3e (tol %.0e) %s\n", what.c_str(), got, ref, e, tol,
                ok ? "ok" : "FAIL");
    if (!ok)
        fail_at(at, what + ": " + fmt_e(got) + " against the reference " + fmt_e(ref) + ", rel " + fmt_e(e));
}

void expect_exact(const std::string& what, long long mismatches, std::source_location at) {
    std::printf("  %-44s %lld mismatches %s\n", what.c_str(), mismatches, mismatches == 0 ? "ok" : "FAIL");
    if (mismatches != 0) fail_at(at, what + ": " + std::to_string(mismatches) + " mismatches");
}

long long bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return (long long)std::max(a.size(), b.size());
    long long n = 0;
    for (size_t i = 0; i < a.size(); ++i)
        n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 || std::isnan(a[i]) || std::isnan(b[i]);
    return n;
}

Rng case_rng(const std::string& case_name) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : case_name) h = (h ^ c) * 1099511628211ull;
    if (const char* s = std::getenv("HYDRA_TEST_SEED"); s && *s)
        h ^= std::strtoull(s, nullptr, 10) * 0x9e3779b97f4a7c15ull;
    std::printf("%s: seed %llu (HYDRA_TEST_SEED mixes another number in)\n", case_name.c_str(),
                (unsigned long long)h);
    return Rng(h);
}

float round_bf16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}

std::vector<float> bf16_values(size_t n, Rng& rng, float scale, float offset) {
    std::vector<float> v(n);
    for (auto& x : v) x = round_bf16(offset + scale * rng.normal());
    return v;
}

std::vector<float> f32_values(size_t n, Rng& rng, float scale, float offset) {
    std::vector<float> v(n);
    for (auto& x : v) x = offset + scale * rng.normal();
    return v;
}

int64_t uniform_below(Rng& rng, int64_t n) {
    return std::min<int64_t>(n - 1, int64_t(rng.uniform() * double(n)));
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> d(a.size());
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d[i] = a[i] - b[i];
    return d;
}

std::vector<float> round_all_bf16(std::vector<float> v) {
    for (auto& x : v) x = round_bf16(x);
    return v;
}

}  // namespace hydra::gputest
