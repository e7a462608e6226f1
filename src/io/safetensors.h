// safetensors reader and writer (format: research/engines.md §4), plus HF checkpoint directories
// (one model.safetensors, or model.safetensors.index.json naming several shards).
// The reader validates the whole header against the file size before anything is touched
// (hostile files are expected); errors are one line naming the file, the tensor and the problem.
// The writer is deterministic (byte-identical output for identical input) and atomic
// (written to <path>.tmp.<pid>, fsync'ed, then renamed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "io/mapped_file.h"

namespace hydra {

// Every element type of the safetensors format (names as written in headers).
enum class StDType : uint8_t {
    BOOL,
    U8,
    I8,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    F64,
    I64,
    U64,
    C64,
    F8_E4M3,
    F8_E5M2,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    F4,
    F6_E2M3,
    F6_E3M2,
};

std::string_view st_dtype_name(StDType t);
size_t st_dtype_bits(StDType t);  // 4 for F4, 6 for F6_*, 8 * bytes otherwise
std::optional<StDType> st_dtype_from_name(std::string_view name);
// The HydraHead dtype of a safetensors dtype, when there is one (F32, BF16, F16, I32).
std::optional<DType> st_to_dtype(StDType t);
StDType dtype_to_st(DType t);

struct SafetensorsTensorInfo {
    std::string name;
    StDType dtype = StDType::F32;
    Shape shape;
    int64_t numel = 0;
    uint64_t begin = 0;  // data_offsets, relative to the start of the byte buffer; end exclusive
    uint64_t end = 0;
    uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
  public:
    // Maps and parses `path`. Throws hydra::Error naming the path and the problem.
    static SafetensorsFile open(const std::string& path);
    // Parses an in-memory image (not owned; must outlive the result). `source` names it in errors.
    static SafetensorsFile parse(const uint8_t* data, size_t size, const std::string& source);

    const std::string& source() const { return source_; }
    uint64_t header_size() const { return header_size_; }      // N
    uint64_t data_offset() const { return 8 + header_size_; }  // absolute start of the byte buffer
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    // Tensor infos in header order.
    const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
    const SafetensorsTensorInfo* find(const std::string& name) const;
    const SafetensorsTensorInfo& tensor(const std::string& name) const;  // throws naming the missing tensor
    // Raw little-endian bytes of a tensor (info.nbytes() of them; no alignment guarantee).
    const uint8_t* raw(const SafetensorsTensorInfo& info) const { return data_ + data_offset() + info.begin; }

    // A fresh f32 CPU tensor converted from F32, F16, BF16 or F64 data; other dtypes throw.
    Tensor to_f32(const std::string& name) const;
    Tensor to_f32(const SafetensorsTensorInfo& info) const;
    // A fresh CPU copy in the stored dtype (F32, BF16, F16 or I32); other dtypes throw.
    Tensor copy(const std::string& name) const;

  private:
    std::shared_ptr<MappedFile> file_;  // keeps the mapping alive when opened from a path
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::string source_;
    uint64_t header_size_ = 0;
    std::map<std::string, std::string> metadata_;
    std::vector<SafetensorsTensorInfo> tensors_;
    std::unordered_map<std::string, size_t> index_;
};

// The weights of an HF model directory: `model.safetensors` if present (as transformers prefers),
// else `model.safetensors.index.json` whose weight_map names the shard holding each tensor.
// Tensor names are unique across shards.
class SafetensorsShards {
  public:
    static SafetensorsShards open_dir(const std::string& dir);

    const std::vector<SafetensorsFile>& files() const { return files_; }
    // All tensor names, shard by shard in header order.
    std::vector<std::string> names() const;
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    const SafetensorsTensorInfo& tensor(const std::string& name) const;  // throws naming the missing tensor
    const SafetensorsFile& file_of(const std::string& name) const;       // throws naming the missing tensor
    Tensor to_f32(const std::string& name) const { return file_of(name).to_f32(name); }

  private:
    std::string dir_;
    std::vector<SafetensorsFile> files_;
    std::unordered_map<std::string, size_t> index_;  // tensor name -> file index
};

struct SafetensorsEntry {
    std::string name;
    Tensor tensor;  // F32, BF16, F16 or I32, on the CPU, contiguous
};

// Writes a safetensors file. Floating tensors are converted to `out_dtype` when given (F32, BF16 or
// F16; I32 tensors are always written as I32). Tensors are ordered by element size (largest first,
// so every tensor is aligned to its element size) and then by name; the header is padded with
// spaces so the data starts at a multiple of 64 bytes. Identical input gives identical bytes.
// Atomic: writes `<path>.tmp.<pid>`, fsyncs it and renames it over `path`.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {},
                       std::optional<DType> out_dtype = std::nullopt);

// The exact bytes write_safetensors would write (for tests and in-memory use).
std::vector<uint8_t> serialize_safetensors(const std::vector<SafetensorsEntry>& entries,
                                           const std::map<std::string, std::string>& metadata = {},
                                           std::optional<DType> out_dtype = std::nullopt);

}  // namespace hydra
