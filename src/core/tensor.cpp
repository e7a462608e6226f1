// Tensor construction, views and copies (see tensor.h).
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace hydra {

int64_t shape_numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        HYDRA_ASSERT(d >= 0, "negative dimension in {}", shape_str(shape));
        n *= d;
    }
    return n;
}

std::string shape_str(const Shape& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    size_t bytes = t.nbytes();
    size_t padded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, padded ? padded : 64);
    if (!p) fail("out of memory allocating tensor {} ({} bytes)", shape_str(shape), bytes);
    std::memset(p, 0, padded ? padded : 64);
    t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    t.data_ = p;
    return t;
}

Tensor Tensor::view(void* data, const Shape& shape, DType dtype, Device device) {
    Tensor t;
    t.data_ = data;
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.device_ = device;
    return t;
}

int64_t Tensor::dim(int axis) const {
    if (axis < 0) axis += rank();
    HYDRA_ASSERT(axis >= 0 && axis < rank(), "axis {} out of range for {}", axis, shape_str(shape_));
    return shape_[size_t(axis)];
}

Tensor Tensor::reshaped(const Shape& shape) const {
    HYDRA_ASSERT(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_), shape_str(shape));
    Tensor t = *this;
    t.shape_ = shape;
    return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
    HYDRA_ASSERT(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [{}, {}) of {}", begin, end,
                 shape_str(shape_));
    Tensor t = *this;
    t.shape_[0] = end - begin;
    const int64_t row_elems = shape_[0] ? numel() / shape_[0] : 0;
    t.data_ = static_cast<char*>(data_) + size_t(begin * row_elems) * dtype_size(dtype_);
    return t;
}

Tensor Tensor::clone() const {
    HYDRA_ASSERT(device_ == Device::CPU, "clone of a device tensor needs the CUDA backend");
    Tensor t = zeros(shape_, dtype_);
    if (nbytes()) std::memcpy(t.data_, data_, nbytes());
    return t;
}

}  // namespace hydra
