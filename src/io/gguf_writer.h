// Small GGUF writer (v3 by default, v2 on request): metadata of every value type including nested
// arrays, tensors of any ggml type given as raw bytes, configurable alignment. Files are written to
// "<path>.tmp.<pid>" and renamed, so a crash never leaves a half file under the real name.
// Used by tests to build inputs, and by exporters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace hydra {

// GgufValue builders. Unsigned types store their value in `u`, signed ones in `i`, as the reader does.
GgufValue gguf_uint(GgufValueType type, uint64_t v);  // UINT8/16/32/64
GgufValue gguf_int(GgufValueType type, int64_t v);    // INT8/16/32/64
GgufValue gguf_float(GgufValueType type, double v);   // FLOAT32/64
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_array(GgufValueType elem_type, std::vector<GgufValue> elems);
GgufValue gguf_string_array(const std::vector<std::string>& v);

class GgufWriter {
  public:
    // `alignment` must be a power of two; when it is not 32 a general.alignment key is written
    // first (unless the caller adds one).
    explicit GgufWriter(uint32_t alignment = 32, uint32_t version = 3);

    void add(const std::string& key, GgufValue value);  // throws on a duplicate key
    void add_u32(const std::string& key, uint32_t v) { add(key, gguf_uint(GgufValueType::UINT32, v)); }
    void add_i32(const std::string& key, int32_t v) { add(key, gguf_int(GgufValueType::INT32, v)); }
    void add_f32(const std::string& key, float v) { add(key, gguf_float(GgufValueType::FLOAT32, v)); }
    void add_bool(const std::string& key, bool v) { add(key, gguf_bool(v)); }
    void add_string(const std::string& key, std::string v) { add(key, gguf_string(std::move(v))); }

    // Copies `nbytes` bytes of tensor data; nbytes must equal the size implied by dims and type.
    // dims are ggml ne[] (dims[0] contiguous).
    void add_tensor(const std::string& name, const std::vector<int64_t>& dims, GgmlType type,
                    const void* data, size_t nbytes);
    // f32 convenience.
    void add_tensor_f32(const std::string& name, const std::vector<int64_t>& dims,
                        const std::vector<float>& data);

    std::vector<uint8_t> to_bytes() const;
    void write(const std::string& path) const;  // atomic: temp file + rename

  private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> dims;
        GgmlType type;
        std::vector<uint8_t> data;
    };
    uint32_t alignment_;
    uint32_t version_;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::vector<Tensor> tensors_;
};

}  // namespace hydra
