// Scalar conversions between float and the 16-bit formats used by model files (IEEE f16, bf16).
// Exact: f16 subnormals, infinities and NaN are handled; bf16 rounds to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

namespace hydra {

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1f;
    uint32_t mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mantissa <<= 1;
            } while ((mantissa & 0x400) == 0);
            bits = sign | uint32_t(127 - 15 - e) << 23 | (mantissa & 0x3ff) << 13;
        }
    } else if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | mantissa << 13;
    } else {
        bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
    }
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

// An f16 at an unaligned place in a file's bytes (GGUF / GGML block scales).
inline float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

inline uint16_t f32_to_f16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    const uint32_t sign = (bits >> 16) & 0x8000;
    const int32_t exponent = int32_t((bits >> 23) & 0xff) - 127 + 15;
    uint32_t mantissa = bits & 0x7fffff;
    if (((bits >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mantissa ? 0x200 : 0));
    if (exponent >= 0x1f) return uint16_t(sign | 0x7c00);
    if (exponent <= 0) {
        if (exponent < -10) return uint16_t(sign);
        mantissa |= 0x800000;
        const int shift = 14 - exponent;
        uint32_t half = mantissa >> shift;
        const uint32_t rem = mantissa & ((1u << shift) - 1);
        const uint32_t midpoint = 1u << (shift - 1);
        if (rem > midpoint || (rem == midpoint && (half & 1))) ++half;
        return uint16_t(sign | half);
    }
    uint32_t half = uint32_t(exponent) << 10 | mantissa >> 13;
    const uint32_t rem = mantissa & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: correct
    return uint16_t(sign | half);
}

inline float bf16_to_f32(uint16_t h) {
    const uint32_t bits = uint32_t(h) << 16;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

inline uint16_t f32_to_bf16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if ((bits & 0x7fffffff) > 0x7f800000) return uint16_t((bits >> 16) | 0x40);  // keep NaN a NaN
    bits += 0x7fff + ((bits >> 16) & 1);
    return uint16_t(bits >> 16);
}

}  // namespace hydra
