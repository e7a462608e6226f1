// Device arrays for the GPU parity tests: Dev<T> holds n elements (at least one allocated, so a kernel
// handed an empty array still gets a valid pointer) and starts poisoned with 0xFF bytes, NaN in bf16 and
// fp32, so an element a kernel does not write fails the finite check; uploads from host floats (bf16 by
// round to nearest even, as the model upload does), downloads that wait for the device and surface a
// failed launch as an exception.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cuda/device_arena.h"

namespace hydra::gputest {

using cuda::bf16;

template <typename T>
class Dev {
  public:
    explicit Dev(int64_t n) : n_(n), buf_(n > 0 ? n : 1) { poison(); }
    T* p() const { return buf_.data(); }
    int64_t n() const { return n_; }
    void poison() { buf_.fill_bytes(0xFF); }

  private:
    int64_t n_;
    cuda::DeviceBuffer<T> buf_;
};

Dev<bf16> dev_bf16(const std::vector<float>& host);
Dev<float> dev_f32(const std::vector<float>& host);
Dev<int32_t> dev_i32(const std::vector<int32_t>& host);
Dev<uint8_t> dev_u8(const std::vector<uint8_t>& host);

// n() elements back as floats, after the device finished (throws hydra::Error on a failed launch).
std::vector<float> host(const Dev<bf16>& d);
std::vector<float> host(const Dev<float>& d);

// The device's SM count and name (a CUDA call: only from inside a test, never at listing time).
int device_sms();
std::string device_name();

}  // namespace hydra::gputest
