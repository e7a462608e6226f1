// ParamArena layout and views (see param_arena.h).
#include "core/param_arena.h"

namespace hydra {

size_t ParamArena::declare(const std::string& name, const Shape& shape, const std::string& group) {
    HYDRA_ASSERT(!allocated(), "declare('{}') after allocate()", name);
    HYDRA_ASSERT(!has(name), "parameter '{}' declared twice", name);
    ArenaEntry e{name, shape, total_, group};
    total_ += (shape_numel(shape) + 15) / 16 * 16;
    index_[name] = entries_.size();
    entries_.push_back(std::move(e));
    return entries_.size() - 1;
}

void ParamArena::allocate() {
    HYDRA_ASSERT(!allocated(), "allocate() called twice");
    buffer_ = Tensor::zeros({total_ > 0 ? total_ : 1});
}

Tensor ParamArena::get(const std::string& name) const {
    auto it = index_.find(name);
    HYDRA_CHECK(it != index_.end(), "no parameter named '{}'", name);
    return get(it->second);
}

Tensor ParamArena::get(size_t index) const {
    HYDRA_ASSERT(allocated() && index < entries_.size(), "bad parameter index {}", index);
    const ArenaEntry& e = entries_[index];
    return Tensor::view(data() + e.offset, e.shape, DType::F32);
}

const ArenaEntry& ParamArena::entry(const std::string& name) const {
    auto it = index_.find(name);
    HYDRA_CHECK(it != index_.end(), "no parameter named '{}'", name);
    return entries_[it->second];
}

int64_t ParamArena::parameter_count() const {
    int64_t n = 0;
    for (const auto& e : entries_) n += shape_numel(e.shape);
    return n;
}

}  // namespace hydra
