// Rng: a small, fully deterministic generator (xoshiro256**, seeded through splitmix64) whose whole
// state can be saved and restored, so sampling and training resume bit-exactly.
#pragma once

#include <array>
#include <cstdint>

namespace hydra {

class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }
    void reseed(uint64_t seed);
    uint64_t next_u64();
    double uniform();  // [0, 1) with 53 random bits
    float normal();    // standard normal (Box-Muller)
    std::array<uint64_t, 4> state() const { return s_; }
    void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

private:
    std::array<uint64_t, 4> s_{};
};

}  // namespace hydra
