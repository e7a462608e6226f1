// The one harness of the GPU parity tests: a GPU result against the CPU float reference (hydra_lib) as
// the relative RMS error ||gpu - ref|| / ||ref||, one tolerance per compared output, every GPU element
// finite (outputs are poisoned with NaN before a call, so an element a kernel leaves unwritten fails).
// Each check prints one row (what, error, tolerance) whether it passes or not, so a passing log still
// shows how close every output came; a failure names the call site.
//
// Tolerances (DESIGN.md §3): 1e-2 where the GPU output is bf16 or computed from bf16 operands, 1e-5
// where it is fp32 arithmetic on fp32 inputs; cases with other needs name their own beside the check.
// Model-level checks add the bf16 floor (expect_rel_floor): how far bf16 rounding moves the CPU's own fp32
// result (the forward checks round the weights; the training step also its products' operands and fresh
// outputs, as the GPU reads and stores them); an output passes within max(tolerance, 2 x its floor).
//
// Inputs: random, from a generator seeded per case by its name (reproducible in CTest);
// HYDRA_TEST_SEED=N mixes N into every case's seed to draw other inputs (printed at each case's start).
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "core/rng.h"

namespace hydra::gputest {

inline constexpr double kTolBf16 = 1e-2;
inline constexpr double kTolF32 = 1e-5;

struct RelRms {
    double value = 0;
    bool finite = true;  // false: a non-finite element, or sizes that differ
};

// ||got - ref|| / ||ref|| over n elements; a reference of all zeros gives 0 when got is all zeros too,
// else +inf (no relative error is defined, and the programs this harness replaces never compared one).
RelRms rel_rms(const float* got, const float* ref, size_t n);
RelRms rel_rms(const std::vector<float>& got, const std::vector<float>& ref);

// The checks: each adds a non-fatal gtest failure at the caller's line when it fails.
// rel_rms(got, ref) <= tol, everything finite.
void expect_rel(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                double tol, std::source_location at = std::source_location::current());
// An accumulated (+=) output: its increment (got - init) against the reference's (ref - init).
void expect_delta(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                  const std::vector<float>& init, double tol,
                  std::source_location at = std::source_location::current());
// rel_rms(got, ref) <= max(tol, 2 floor), where floor = rel_rms(floor_ref, ref): floor_ref is the CPU
// result with bf16-rounded weights.
void expect_rel_floor(const std::string& what, const float* got, const float* floor_ref, const float* ref,
                      size_t n, double tol, std::source_location at = std::source_location::current());
// |got - ref| / max(|ref|, denom_min) <= tol, got finite.
void expect_scalar(const std::string& what, double got, double ref, double tol, double denom_min = 1e-30,
                   std::source_location at = std::source_location::current());
// Exact checks (counts, bit identity): `mismatches` must be 0.
void expect_exact(const std::string& what, long long mismatches,
                  std::source_location at = std::source_location::current());
// Elements of a and b whose bits differ, or that are NaN on either side (an unwritten, poisoned output);
// arrays of different sizes count as the larger size.
long long bit_mismatches(const std::vector<float>& a, const std::vector<float>& b);

// The case's generator: seeded from its name (FNV-1a) and HYDRA_TEST_SEED; prints the seed.
Rng case_rng(const std::string& case_name);

float round_bf16(float x);
// n values scale * N(0, 1) + offset, rounded to bf16 (what the GPU reads, exactly) or kept fp32.
std::vector<float> bf16_values(size_t n, Rng& rng, float scale = 1.f, float offset = 0.f);
std::vector<float> f32_values(size_t n, Rng& rng, float scale = 1.f, float offset = 0.f);
int64_t uniform_below(Rng& rng, int64_t n);  // [0, n)
std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b);
std::vector<float> round_all_bf16(std::vector<float> v);

}  // namespace hydra::gputest
