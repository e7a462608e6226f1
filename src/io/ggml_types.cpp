// ggml type table (ids, names, block geometry) and the f32 dequantizers for the types HydraHead loads:
// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
// Block layouts and formulas: shared/research/engines.md §2.3-2.4. Source pointers may be unaligned
// (tensor data in a mapped file is only aligned to the file's alignment, blocks are 18..210 bytes),
// so every multi-byte field is read with memcpy.
#include "io/ggml_types.h"

#include <array>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace hydra {

namespace {

// ---------------------------------------------------------------------------------------------
// Type table, indexed by id. block_elems == 0 marks a retired / unused id.
constexpr int kTypeCount = 43;

struct TypeRow {
    const char* name;
    int64_t block_elems;
    int64_t block_bytes;
    bool can_dequantize;
};

constexpr std::array<TypeRow, kTypeCount> kRows = {{
    {"F32", 1, 4, true},          // 0
    {"F16", 1, 2, true},          // 1
    {"Q4_0", 32, 18, true},       // 2
    {"Q4_1", 32, 20, true},       // 3
    {"Q4_2", 0, 0, false},        // 4 retired
    {"Q4_3", 0, 0, false},        // 5 retired
    {"Q5_0", 32, 22, true},       // 6
    {"Q5_1", 32, 24, true},       // 7
    {"Q8_0", 32, 34, true},       // 8
    {"Q8_1", 32, 36, false},      // 9
    {"Q2_K", 256, 84, false},     // 10
    {"Q3_K", 256, 110, false},    // 11
    {"Q4_K", 256, 144, true},     // 12
    {"Q5_K", 256, 176, true},     // 13
    {"Q6_K", 256, 210, true},     // 14
    {"Q8_K", 256, 292, false},    // 15
    {"IQ2_XXS", 256, 66, false},  // 16
    {"IQ2_XS", 256, 74, false},   // 17
    {"IQ3_XXS", 256, 98, false},  // 18
    {"IQ1_S", 256, 50, false},    // 19
    {"IQ4_NL", 32, 18, false},    // 20
    {"IQ3_S", 256, 110, false},   // 21
    {"IQ2_S", 256, 82, false},    // 22
    {"IQ4_XS", 256, 136, false},  // 23
    {"I8", 1, 1, false},          // 24
    {"I16", 1, 2, false},         // 25
    {"I32", 1, 4, false},         // 26
    {"I64", 1, 8, false},         // 27
    {"F64", 1, 8, false},         // 28
    {"IQ1_M", 256, 56, false},    // 29
    {"BF16", 1, 2, true},         // 30
    {"Q4_0_4_4", 0, 0, false},    // 31 retired
    {"Q4_0_4_8", 0, 0, false},    // 32 retired
    {"Q4_0_8_8", 0, 0, false},    // 33 retired
    {"TQ1_0", 256, 54, false},    // 34
    {"TQ2_0", 256, 66, false},    // 35
    {"IQ4_NL_4_4", 0, 0, false},  // 36 retired
    {"IQ4_NL_4_8", 0, 0, false},  // 37 retired
    {"IQ4_NL_8_8", 0, 0, false},  // 38 retired
    {"MXFP4", 32, 17, false},     // 39
    {"NVFP4", 64, 36, false},     // 40
    {"Q1_0", 128, 18, false},     // 41
    {"Q2_0", 64, 18, false},      // 42
}};

struct TypeTable {
    std::array<GgmlTypeInfo, kTypeCount> info{};
    TypeTable() {
        for (int i = 0; i < kTypeCount; ++i)
            info[i] = {kRows[i].name, kRows[i].block_elems, kRows[i].block_bytes, kRows[i].can_dequantize};
    }
};

const TypeTable& table() {
    static const TypeTable t;
    return t;
}

// ---------------------------------------------------------------------------------------------
// Field readers for unaligned block bytes (f16: core/half.h's load_f16).
inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// f16 -> f32 through a 64K-entry table: F16 tensors are dequantized element by element.
const float* f16_table() {
    static const std::array<float, 65536>* table = [] {
        auto* t = new std::array<float, 65536>;
        for (uint32_t i = 0; i < 65536; ++i) (*t)[i] = f16_to_f32(uint16_t(i));
        return t;
    }();
    return table->data();
}

// ---------------------------------------------------------------------------------------------
// One function per type; n_blocks blocks from src into dst (n_blocks * block_elems floats).

void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
    const float* t = f16_table();
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = t[h];
    }
}

void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
    }
}

// Q4_0: d; qs[16]. Low nibbles are elements 0..15, high nibbles 16..31.
void dequant_q4_0(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 18, dst += 32) {
        const float d = load_f16(src);
        const uint8_t* qs = src + 2;
        for (int j = 0; j < 16; ++j) {
            dst[j] = float(int(qs[j] & 15) - 8) * d;
            dst[j + 16] = float(int(qs[j] >> 4) - 8) * d;
        }
    }
}

// Q4_1: d, m; qs[16].
void dequant_q4_1(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 20, dst += 32) {
        const float d = load_f16(src);
        const float m = load_f16(src + 2);
        const uint8_t* qs = src + 4;
        for (int j = 0; j < 16; ++j) {
            dst[j] = float(qs[j] & 15) * d + m;
            dst[j + 16] = float(qs[j] >> 4) * d + m;
        }
    }
}

// Q5_0: d; qh (LE u32, bit i = 5th bit of element i); qs[16].
void dequant_q5_0(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 22, dst += 32) {
        const float d = load_f16(src);
        const uint32_t qh = load_u32(src + 2);
        const uint8_t* qs = src + 6;
        for (int j = 0; j < 16; ++j) {
            const int lo = int(qs[j] & 15) | int((qh >> j) & 1) << 4;
            const int hi = int(qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
            dst[j] = float(lo - 16) * d;
            dst[j + 16] = float(hi - 16) * d;
        }
    }
}

// Q5_1: d, m; qh; qs[16].
void dequant_q5_1(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 24, dst += 32) {
        const float d = load_f16(src);
        const float m = load_f16(src + 2);
        const uint32_t qh = load_u32(src + 4);
        const uint8_t* qs = src + 8;
        for (int j = 0; j < 16; ++j) {
            const int lo = int(qs[j] & 15) | int((qh >> j) & 1) << 4;
            const int hi = int(qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
            dst[j] = float(lo) * d + m;
            dst[j + 16] = float(hi) * d + m;
        }
    }
}

// Q8_0: d; qs[32] int8.
void dequant_q8_0(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 34, dst += 32) {
        const float d = load_f16(src);
        const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
        for (int j = 0; j < 32; ++j) dst[j] = float(qs[j]) * d;
    }
}

// Unpacks the 12 scale bytes of Q4_K/Q5_K into eight 6-bit scales and eight 6-bit mins.
inline void unpack_k_scales(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
    for (int k = 0; k < 4; ++k) {
        sc[k] = s[k] & 63;
        mn[k] = s[k + 4] & 63;
    }
    for (int k = 4; k < 8; ++k) {
        sc[k] = uint8_t((s[k + 4] & 15) | ((s[k - 4] >> 6) << 4));
        mn[k] = uint8_t((s[k + 4] >> 4) | ((s[k] >> 6) << 4));
    }
}

// Q4_K: d, dmin; scales[12]; qs[128]. Chunk c of 64 outputs: low nibbles of qs[32c..] are sub-block
// 2c, high nibbles sub-block 2c+1.
void dequant_q4_k(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 144, dst += 256) {
        const float d = load_f16(src);
        const float dmin = load_f16(src + 2);
        uint8_t sc[8], mn[8];
        unpack_k_scales(src + 4, sc, mn);
        const uint8_t* qs = src + 16;
        for (int c = 0; c < 4; ++c) {
            const float d1 = d * sc[2 * c], m1 = dmin * mn[2 * c];
            const float d2 = d * sc[2 * c + 1], m2 = dmin * mn[2 * c + 1];
            const uint8_t* q = qs + 32 * c;
            float* y = dst + 64 * c;
            for (int l = 0; l < 32; ++l) {
                y[l] = d1 * float(q[l] & 15) - m1;
                y[l + 32] = d2 * float(q[l] >> 4) - m2;
            }
        }
    }
}

// Q5_K: d, dmin; scales[12]; qh[32]; qs[128]. As Q4_K plus a 5th bit: bit 2c of qh[l] for the low
// nibble outputs of chunk c, bit 2c+1 for the high ones.
void dequant_q5_k(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 176, dst += 256) {
        const float d = load_f16(src);
        const float dmin = load_f16(src + 2);
        uint8_t sc[8], mn[8];
        unpack_k_scales(src + 4, sc, mn);
        const uint8_t* qh = src + 16;
        const uint8_t* qs = src + 48;
        for (int c = 0; c < 4; ++c) {
            const float d1 = d * sc[2 * c], m1 = dmin * mn[2 * c];
            const float d2 = d * sc[2 * c + 1], m2 = dmin * mn[2 * c + 1];
            const uint8_t* q = qs + 32 * c;
            float* y = dst + 64 * c;
            for (int l = 0; l < 32; ++l) {
                const int lo = (q[l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4);
                const int hi = (q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
                y[l] = d1 * float(lo) - m1;
                y[l + 32] = d2 * float(hi) - m2;
            }
        }
    }
}

// Q6_K: ql[128]; qh[64]; scales[16] int8; d. Element i uses scales[i / 16].
void dequant_q6_k(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, src += 210, dst += 256) {
        const float d = load_f16(src + 208);
        const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = src + 64 * h;
            const uint8_t* qh = src + 128 + 32 * h;
            const int8_t* sc = scales + 8 * h;
            float* y = dst + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = int((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = int((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * float(sc[is]) * float(q1);
                y[l + 32] = d * float(sc[is + 2]) * float(q2);
                y[l + 64] = d * float(sc[is + 4]) * float(q3);
                y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
        }
    }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type_id) {
    if (type_id >= uint32_t(kTypeCount) || kRows[type_id].block_elems == 0) return nullptr;
    return &table().info[type_id];
}

std::string ggml_type_name(uint32_t type_id) {
    if (type_id >= uint32_t(kTypeCount)) return fmt::format("unknown type {}", type_id);
    if (kRows[type_id].block_elems == 0)
        return fmt::format("{} (retired type {})", kRows[type_id].name, type_id);
    return kRows[type_id].name;
}

size_t ggml_row_bytes(GgmlType type, int64_t n) {
    const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
    HYDRA_ASSERT(info != nullptr, "ggml_row_bytes: unknown type {}", uint32_t(type));
    HYDRA_ASSERT(n >= 0 && n % info->block_elems == 0,
                 "ggml_row_bytes: {} elements is not a multiple of {}'s block size {}", n, info->name,
                 info->block_elems);
    return size_t(n / info->block_elems) * size_t(info->block_bytes);
}

void dequantize_row(GgmlType type, const void* src_v, float* dst, int64_t n) {
    const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
    if (info == nullptr || !info->can_dequantize)
        fail(
            "cannot dequantize tensors of type {}: HydraHead supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
            "Q5_0, "
            "Q5_1, Q4_K, Q5_K and Q6_K (re-quantize the model to one of them)",
            ggml_type_name(uint32_t(type)));
    HYDRA_ASSERT(n >= 0 && n % info->block_elems == 0,
                 "dequantize_row: {} elements is not a multiple of {}'s block size {}", n, info->name,
                 info->block_elems);
    const auto* src = static_cast<const uint8_t*>(src_v);
    const int64_t nb = n / info->block_elems;
    switch (type) {
        case GgmlType::F32:
            std::memcpy(dst, src, size_t(n) * 4);
            break;
        case GgmlType::F16:
            dequant_f16(src, dst, n);
            break;
        case GgmlType::BF16:
            dequant_bf16(src, dst, n);
            break;
        case GgmlType::Q4_0:
            dequant_q4_0(src, dst, nb);
            break;
        case GgmlType::Q4_1:
            dequant_q4_1(src, dst, nb);
            break;
        case GgmlType::Q5_0:
            dequant_q5_0(src, dst, nb);
            break;
        case GgmlType::Q5_1:
            dequant_q5_1(src, dst, nb);
            break;
        case GgmlType::Q8_0:
            dequant_q8_0(src, dst, nb);
            break;
        case GgmlType::Q4_K:
            dequant_q4_k(src, dst, nb);
            break;
        case GgmlType::Q5_K:
            dequant_q5_k(src, dst, nb);
            break;
        case GgmlType::Q6_K:
            dequant_q6_k(src, dst, nb);
            break;
        default:
            HYDRA_ASSERT(false, "dequantize_row: no dequantizer for {}", info->name);
    }
}

}  // namespace hydra
