// xoshiro256** and helpers (see rng.h).
#include "core/rng.h"

#include <cmath>

#include "core/hash_mix.h"

namespace hydra {

namespace {
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Rng::reseed(uint64_t seed) {
    for (auto& word : s_) {  // splitmix64 expands the seed so nearby seeds give unrelated streams
        word = splitmix64(seed);
        seed += 0x9e3779b97f4a7c15ull;
    }
}

uint64_t Rng::next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

float Rng::normal() {
    double u1 = uniform();
    while (u1 <= 0) u1 = uniform();
    const double u2 = uniform();
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace hydra
