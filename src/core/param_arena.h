// ParamArena: every parameter of a model in one flat, 64-byte aligned f32 buffer with a table of
// named entries {name, shape, offset, group}. Zeroing, optimizer steps, checkpoints and all-reduce
// then each become one call over one buffer (the llm.c lesson); named views give per-tensor access.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace hydra {

struct ArenaEntry {
    std::string name;   // HF-style name, e.g. "model.layers.3.self_attn.q_proj.weight"
    Shape shape;
    int64_t offset = 0; // in elements from the arena start; multiple of 16 (64 bytes)
    std::string group;  // trainable group label (empty until a trainer assigns one)
};

class ParamArena {
public:
    // Declares a parameter; allowed only before allocate(). Returns its index.
    size_t declare(const std::string& name, const Shape& shape, const std::string& group = "");
    // Allocates the zero-filled buffer for everything declared.
    void allocate();

    bool allocated() const { return !buffer_.empty(); }
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    Tensor get(const std::string& name) const;  // view; throws naming the missing parameter
    Tensor get(size_t index) const;
    const ArenaEntry& entry(const std::string& name) const;  // throws naming the missing parameter
    const std::vector<ArenaEntry>& entries() const { return entries_; }
    float* data() const { return buffer_.f32(); }
    int64_t numel() const { return total_; }  // including alignment padding
    int64_t parameter_count() const;          // sum of entry sizes

private:
    std::vector<ArenaEntry> entries_;
    std::unordered_map<std::string, size_t> index_;
    int64_t total_ = 0;
    Tensor buffer_;
};

}  // namespace hydra
