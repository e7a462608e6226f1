// Tensor: a dtype, a device, a shape and one contiguous block of data (row-major, last axis fastest).
// A tensor either owns its storage (shared, reference counted) or views memory owned elsewhere
// (an arena or a mapped file); copying a Tensor never copies data.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace hydra {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

class Tensor {
public:
    Tensor() = default;

    // Allocates zero-filled CPU storage (64-byte aligned).
    static Tensor zeros(const Shape& shape, DType dtype = DType::F32);
    // Wraps memory owned by someone else; the caller keeps it alive.
    static Tensor view(void* data, const Shape& shape, DType dtype, Device device = Device::CPU);

    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    const Shape& shape() const { return shape_; }
    int rank() const { return int(shape_.size()); }
    int64_t dim(int axis) const;  // negative axes count from the end
    int64_t numel() const { return shape_numel(shape_); }
    size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
    bool empty() const { return data_ == nullptr; }

    void* raw() const { return data_; }
    template <typename T>
    T* data() const {
        return static_cast<T*>(data_);
    }
    float* f32() const {
        HYDRA_ASSERT(dtype_ == DType::F32, "tensor is {}", dtype_name(dtype_));
        return static_cast<float*>(data_);
    }

    // Same data, new shape with the same number of elements.
    Tensor reshaped(const Shape& shape) const;
    // Rows [begin, end) of the first axis, as a view.
    Tensor rows(int64_t begin, int64_t end) const;
    // A deep copy into fresh CPU storage.
    Tensor clone() const;

private:
    std::shared_ptr<void> storage_;  // null for views
    void* data_ = nullptr;
    Shape shape_;
    DType dtype_ = DType::F32;
    Device device_ = Device::CPU;
};

}  // namespace hydra
