// Device arrays for the GPU parity tests (device_io.h).
#include "device_io.h"

#include <cuda_runtime.h>

#include <string>

#include "ops/cuda/cuda_check.h"

namespace hydra::gputest {

namespace {

void sync_checked() {
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

Dev<bf16> dev_bf16(const std::vector<float>& host) {
    Dev<bf16> d(int64_t(host.size()));
    if (!host.empty()) cuda::upload_f32_as_bf16(d.p(), host.data(), int64_t(host.size()));
    return d;
}

Dev<float> dev_f32(const std::vector<float>& host) {
    Dev<float> d(int64_t(host.size()));
    if (!host.empty()) cuda::upload(d.p(), host.data(), int64_t(host.size()));
    sync_checked();
    return d;
}

Dev<int32_t> dev_i32(const std::vector<int32_t>& host) {
    Dev<int32_t> d(int64_t(host.size()));
    if (!host.empty()) cuda::upload(d.p(), host.data(), int64_t(host.size()));
    sync_checked();
    return d;
}

Dev<uint8_t> dev_u8(const std::vector<uint8_t>& host) {
    Dev<uint8_t> d(int64_t(host.size()));
    if (!host.empty()) cuda::upload(d.p(), host.data(), int64_t(host.size()));
    sync_checked();
    return d;
}

std::vector<float> host(const Dev<bf16>& d) {
    sync_checked();
    return cuda::download_bf16_as_f32(d.p(), d.n());
}

std::vector<float> host(const Dev<float>& d) {
    sync_checked();
    return cuda::download_f32(d.p(), d.n());
}

int device_sms() {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

std::string device_name() {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    return std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
           std::to_string(prop.multiProcessorCount) + " SMs";
}

}  // namespace hydra::gputest
