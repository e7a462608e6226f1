// Reference quantizers (see quantize_ref.h). Each block function writes one block; layouts match
// the dequantizers in ggml_types.cpp (engines.md §2.3).
#include "io/quantize_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace hydra {

namespace {

inline void store_f16(uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
}

// Smallest f16 >= v (v >= 0, finite, below the f16 range), so a scale derived from it never
// undershoots the values it must cover.
inline uint16_t f16_round_up(float v) {
    uint16_t h = f32_to_f16(v);
    if (f16_to_f32(h) < v) ++h;
    return h;
}

// Signed value of largest magnitude in x[0..n).
inline float signed_absmax(const float* x, int n) {
    float amax = 0, mx = 0;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            mx = x[j];
        }
    }
    return mx;
}

// --- 32-element blocks

void q8_0_block(const float* x, uint8_t* out) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_f16(out, d);
    for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::lround(x[j] * id)));
}

// Q4_0: d = (signed absmax) / -8, so the extreme value maps to q = 0 (i.e. -8) exactly.
void q4_0_block(const float* x, uint8_t* out) {
    const float d = signed_absmax(x, 32) / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_f16(out, d);
    for (int j = 0; j < 16; ++j) {
        const int lo = std::min(15, int(x[j] * id + 8.5f));
        const int hi = std::min(15, int(x[j + 16] * id + 8.5f));
        out[2 + j] = uint8_t(lo | hi << 4);
    }
}

void q4_1_block(const float* x, uint8_t* out) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_f16(out, d);
    store_f16(out + 2, mn);
    for (int j = 0; j < 16; ++j) {
        const int lo = std::min(15, int((x[j] - mn) * id + 0.5f));
        const int hi = std::min(15, int((x[j + 16] - mn) * id + 0.5f));
        out[4 + j] = uint8_t(lo | hi << 4);
    }
}

void q5_0_block(const float* x, uint8_t* out) {
    const float d = signed_absmax(x, 32) / -16.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_f16(out, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const int lo = std::min(31, int(x[j] * id + 16.5f));
        const int hi = std::min(31, int(x[j + 16] * id + 16.5f));
        out[6 + j] = uint8_t((lo & 15) | (hi & 15) << 4);
        qh |= uint32_t(lo >> 4) << j;
        qh |= uint32_t(hi >> 4) << (j + 16);
    }
    std::memcpy(out + 2, &qh, 4);
}

void q5_1_block(const float* x, uint8_t* out) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_f16(out, d);
    store_f16(out + 2, mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const int lo = std::min(31, int((x[j] - mn) * id + 0.5f));
        const int hi = std::min(31, int((x[j + 16] - mn) * id + 0.5f));
        out[8 + j] = uint8_t((lo & 15) | (hi & 15) << 4);
        qh |= uint32_t(lo >> 4) << j;
        qh |= uint32_t(hi >> 4) << (j + 16);
    }
    std::memcpy(out + 4, &qh, 4);
}

// --- 256-element K blocks

// Packs eight 6-bit scales and mins into 12 bytes (inverse of the unpacking in ggml_types.cpp).
void pack_k_scales(const int sc[8], const int mn[8], uint8_t s[12]) {
    std::memset(s, 0, 12);
    for (int k = 0; k < 4; ++k) {
        s[k] = uint8_t(sc[k] & 63);
        s[k + 4] = uint8_t(mn[k] & 63);
    }
    for (int k = 4; k < 8; ++k) {
        s[k + 4] = uint8_t((sc[k] & 15) | (mn[k] & 15) << 4);
        s[k - 4] |= uint8_t((sc[k] >> 4) << 6);
        s[k] |= uint8_t((mn[k] >> 4) << 6);
    }
}

inline int ceil_div_clamped(float v, float d, int hi) {
    if (d <= 0 || v <= 0) return 0;
    return std::clamp(int(std::ceil(v / d)), 0, hi);
}

// Shared by Q4_K (qmax 15) and Q5_K (qmax 31): y = d*sc*q - dmin*m per sub-block of 32.
// Chooses, per sub-block, m so that -dmin*m <= min(x, 0), then sc so that d*sc*qmax >= max + dmin*m.
void k_scales(const float* x, int qmax, float& d_out, float& dmin_out, uint16_t& dh, uint16_t& dminh,
              int sc[8], int mn[8], float ds[8], float dm[8]) {
    float minv[8], maxv[8];
    float max_minv = 0;
    for (int k = 0; k < 8; ++k) {
        float lo = 0, hi = 0;  // include 0: mins are non-positive, maxima non-negative
        for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * k + l]), hi = std::max(hi, x[32 * k + l]);
        minv[k] = -lo;
        maxv[k] = hi;
        max_minv = std::max(max_minv, minv[k]);
    }
    dminh = f16_round_up(max_minv / 63.0f);
    const float dmin = f16_to_f32(dminh);
    float need[8], max_need = 0;
    for (int k = 0; k < 8; ++k) {
        mn[k] = ceil_div_clamped(minv[k], dmin, 63);
        dm[k] = dmin * float(mn[k]);
        need[k] = (maxv[k] + dm[k]) / float(qmax);
        max_need = std::max(max_need, need[k]);
    }
    dh = f16_round_up(max_need / 63.0f);
    const float d = f16_to_f32(dh);
    for (int k = 0; k < 8; ++k) {
        sc[k] = ceil_div_clamped(need[k], d, 63);
        ds[k] = d * float(sc[k]);
    }
    d_out = d;
    dmin_out = dmin;
}

inline int quant_k(float x, float ds, float dm, int qmax) {
    if (ds <= 0) return 0;
    return std::clamp(int(std::lround((x + dm) / ds)), 0, qmax);
}

void q4_k_block(const float* x, uint8_t* out) {
    float d, dmin, ds[8], dm[8];
    uint16_t dh, dminh;
    int sc[8], mn[8];
    k_scales(x, 15, d, dmin, dh, dminh, sc, mn, ds, dm);
    std::memcpy(out, &dh, 2);
    std::memcpy(out + 2, &dminh, 2);
    pack_k_scales(sc, mn, out + 4);
    uint8_t* qs = out + 16;
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
            const int lo = quant_k(x[64 * c + l], ds[2 * c], dm[2 * c], 15);
            const int hi = quant_k(x[64 * c + 32 + l], ds[2 * c + 1], dm[2 * c + 1], 15);
            qs[32 * c + l] = uint8_t(lo | hi << 4);
        }
    }
}

void q5_k_block(const float* x, uint8_t* out) {
    float d, dmin, ds[8], dm[8];
    uint16_t dh, dminh;
    int sc[8], mn[8];
    k_scales(x, 31, d, dmin, dh, dminh, sc, mn, ds, dm);
    std::memcpy(out, &dh, 2);
    std::memcpy(out + 2, &dminh, 2);
    pack_k_scales(sc, mn, out + 4);
    uint8_t* qh = out + 16;
    uint8_t* qs = out + 48;
    std::memset(qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
            const int lo = quant_k(x[64 * c + l], ds[2 * c], dm[2 * c], 31);
            const int hi = quant_k(x[64 * c + 32 + l], ds[2 * c + 1], dm[2 * c + 1], 31);
            qs[32 * c + l] = uint8_t((lo & 15) | (hi & 15) << 4);
            qh[l] |= uint8_t((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
        }
    }
}

// Q6_K: 16 sub-blocks of 16 with positive int8 scales; q in -32..31 (symmetric use of -31..31).
void q6_k_block(const float* x, uint8_t* out) {
    float scale[16], max_scale = 0;
    for (int k = 0; k < 16; ++k) {
        float amax = 0;
        for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * k + l]));
        scale[k] = amax / 31.0f;
        max_scale = std::max(max_scale, scale[k]);
    }
    const uint16_t dh = f16_round_up(max_scale / 127.0f);
    const float d = f16_to_f32(dh);
    int sc[16];
    float ds[16];
    for (int k = 0; k < 16; ++k) {
        sc[k] = ceil_div_clamped(scale[k], d, 127);
        ds[k] = d * float(sc[k]);
    }
    uint8_t* ql = out;
    uint8_t* qh = out + 128;
    std::memset(out, 0, 192);
    for (int i = 0; i < 256; ++i) {
        const float s = ds[i / 16];
        const int q = (s > 0 ? std::clamp(int(std::lround(x[i] / s)), -32, 31) : 0) + 32;  // 0..63
        // Element i = 128h + 32k + l: low nibble in ql[64h + l + 32*(k&1)] (high half of the byte
        // for k >= 2), top 2 bits in qh[32h + l] at bit 2k.
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        uint8_t& lb = ql[64 * h + l + 32 * (k & 1)];
        lb |= uint8_t((q & 15) << (k >= 2 ? 4 : 0));
        qh[32 * h + l] |= uint8_t((q >> 4) << (2 * k));
    }
    for (int k = 0; k < 16; ++k) out[192 + k] = uint8_t(int8_t(sc[k]));
    std::memcpy(out + 208, &dh, 2);
}

}  // namespace

bool can_quantize_ref(GgmlType type) {
    switch (type) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16:
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
            return true;
        default:
            return false;
    }
}

void quantize_row_ref(GgmlType type, const float* src, void* dst_v, int64_t n) {
    const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
    if (info == nullptr || !can_quantize_ref(type))
        fail("quantize_row_ref: cannot quantize to {}", ggml_type_name(uint32_t(type)));
    HYDRA_CHECK(n >= 0 && n % info->block_elems == 0,
                "quantize_row_ref: {} elements is not a multiple of {}'s block size {}", n, info->name,
                info->block_elems);
    auto* dst = static_cast<uint8_t*>(dst_v);
    const int64_t nb = n / info->block_elems;
    const int64_t be = info->block_elems, bb = info->block_bytes;
    void (*block_fn)(const float*, uint8_t*) = nullptr;
    switch (type) {
        case GgmlType::F32:
            std::memcpy(dst, src, size_t(n) * 4);
            return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) store_f16(dst + 2 * i, src[i]);
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        case GgmlType::Q8_0:
            block_fn = q8_0_block;
            break;
        case GgmlType::Q4_0:
            block_fn = q4_0_block;
            break;
        case GgmlType::Q4_1:
            block_fn = q4_1_block;
            break;
        case GgmlType::Q5_0:
            block_fn = q5_0_block;
            break;
        case GgmlType::Q5_1:
            block_fn = q5_1_block;
            break;
        case GgmlType::Q4_K:
            block_fn = q4_k_block;
            break;
        case GgmlType::Q5_K:
            block_fn = q5_k_block;
            break;
        case GgmlType::Q6_K:
            block_fn = q6_k_block;
            break;
        default:
            HYDRA_ASSERT(false, "unreachable");
    }
    for (int64_t b = 0; b < nb; ++b) block_fn(src + b * be, dst + b * bb);
}

std::vector<uint8_t> quantize_ref(GgmlType type, const float* src, int64_t n) {
    const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
    if (info == nullptr) fail("quantize_ref: unknown type {}", uint32_t(type));
    HYDRA_CHECK(n >= 0 && n % info->block_elems == 0,
                "quantize_ref: {} elements is not a multiple of {}'s block size {}", n, info->name,
                info->block_elems);
    std::vector<uint8_t> out(ggml_row_bytes(type, n));
    quantize_row_ref(type, src, out.data(), n);
    return out;
}

}  // namespace hydra
