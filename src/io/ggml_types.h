// ggml tensor types as stored in GGUF files: ids, block geometry, and dequantization to f32.
// Block layouts and formulas follow shared/research/engines.md §2.3-2.4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hydra {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
};

struct GgmlTypeInfo {
    std::string_view name;  // "Q4_1"
    int64_t block_elems;    // elements per block (1 for plain types)
    int64_t block_bytes;    // bytes per block
    bool can_dequantize;    // dequantize_row supports it
};

// Info for a type id read from a file, or nullptr if the id is unknown or retired.
const GgmlTypeInfo* ggml_type_info(uint32_t type_id);

// Display name for any id: "Q4_1", "Q4_2 (retired)", or "unknown type 99". For error messages.
std::string ggml_type_name(uint32_t type_id);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by the caller).
size_t ggml_row_bytes(GgmlType type, int64_t n);

// Dequantizes n elements (a multiple of the block size) from src into dst (f32).
// Throws hydra::Error for types without a dequantizer.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace hydra
