// GGUF v2/v3 reader: metadata (every value type, nested arrays), tensor infos, alignment and data
// offset, validated against the file size before anything is allocated (hostile files are expected).
// Metadata arrays may hold at most 2^23 elements in total (each parsed value costs ~100 bytes).
// Errors are one line naming the file and the field, e.g.
//   "model.gguf: tensor 'blk.0.attn_q.weight': data [..] runs past the end of the file (...)".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/ggml_types.h"
#include "io/mapped_file.h"

namespace hydra {

enum class GgufValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

struct GgufValue {
    GgufValueType type = GgufValueType::UINT8;
    // Scalars: integers in `i` (unsigned types also set `u`, which alone holds values above
    // INT64_MAX; signed types also set `u` = uint64_t(i)), floats in `f`,
    // bools in `b`, strings in `s`. Arrays: element type in `elem_type`, elements in `array`.
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0;
    bool b = false;
    std::string s;
    GgufValueType elem_type = GgufValueType::UINT8;
    std::vector<GgufValue> array;

    bool is_integer() const;
    bool is_float() const { return type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64; }
};

struct GgufTensorInfo {
    std::string name;
    std::vector<int64_t>
        dims;  // ggml ne[]: dims[0] is the contiguous axis; an HF [out, in] weight is [in, out]
    GgmlType type = GgmlType::F32;
    uint64_t offset = 0;  // relative to the data section
    uint64_t nbytes = 0;
    int64_t numel = 0;
};

class GgufFile {
  public:
    // Maps and parses `path`. Throws hydra::Error naming the path and the bad field.
    static GgufFile open(const std::string& path);
    // Parses an in-memory image (not owned; must outlive the result). `source` names it in errors.
    static GgufFile parse(const uint8_t* data, size_t size, const std::string& source);

    const std::string& source() const { return source_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    // Absolute offset of the tensor data section. A file without tensors may end before it.
    uint64_t data_offset() const { return data_offset_; }

    // Metadata in file order.
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
    const GgufValue* find(const std::string& key) const;
    bool has(const std::string& key) const { return find(key) != nullptr; }

    // Typed getters: throw "<file>: missing metadata key '<key>'" or
    // "<file>: metadata key '<key>': expected an integer, found string".
    std::string get_string(const std::string& key) const;
    int64_t get_int(const std::string& key) const;   // any integer type
    double get_float(const std::string& key) const;  // float or integer types
    bool get_bool(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<int64_t> get_int_array(const std::string& key) const;
    std::vector<float> get_float_array(const std::string& key) const;
    std::optional<int64_t> get_int_opt(const std::string& key) const;
    std::optional<double> get_float_opt(const std::string& key) const;
    std::optional<bool> get_bool_opt(const std::string& key) const;
    std::optional<std::string> get_string_opt(const std::string& key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(const std::string& name) const;
    const GgufTensorInfo& tensor(const std::string& name) const;  // throws naming the missing tensor
    const uint8_t* tensor_data(const GgufTensorInfo& info) const {
        return data_ + data_offset_ + info.offset;
    }

  private:
    std::shared_ptr<MappedFile> file_;  // keeps the mapping alive when opened from a path
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::string source_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::unordered_map<std::string, size_t> metadata_index_;
    std::vector<GgufTensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace hydra
