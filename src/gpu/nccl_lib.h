// NCCL loaded at run time (dlopen), the few entry points data-parallel training calls, so the hydra
// binary builds without NCCL's headers and runs where NCCL is absent: single-GPU users never need it, and
// only `--gpus N` / a RANK environment asks for it. The ABI types are declared here (stable since NCCL 2.x:
// a 128-byte unique id, an opaque communicator, int enums); ncclAvg needs NCCL 2.10 or newer (checked).
// Library: $HYDRA_NCCL_LIB, else libnccl.so.2 / libnccl.so on the loader's path (CUDA's lib directory or
// PyTorch's wheel, nvidia/nccl/lib: tools/nccl_lib_dir.sh prints it for LD_LIBRARY_PATH).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace hydra::gpu::nccl {

struct UniqueId {
    char internal[128];
};
using Comm = struct ncclComm*;
using Result = int;  // 0 = ncclSuccess, 7 = ncclInProgress
enum DataType : int { kFloat32 = 7, kFloat64 = 8, kInt64 = 4, kBfloat16 = 9 };
enum RedOp : int { kSum = 0, kAvg = 4 };
constexpr Result kSuccess = 0, kInProgress = 7;

struct Api {
    std::string why;  // empty when loaded
    int version = 0;  // NCCL_VERSION_CODE of the library, e.g. 22809
    Result (*get_version)(int*) = nullptr;
    Result (*get_unique_id)(UniqueId*) = nullptr;
    Result (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
    Result (*comm_abort)(Comm) = nullptr;
    Result (*comm_destroy)(Comm) = nullptr;
    Result (*comm_get_async_error)(Comm, Result*) = nullptr;
    const char* (*get_error_string)(Result) = nullptr;
    Result (*all_reduce)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
    Result (*broadcast)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
    Result (*send)(const void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
    Result (*recv)(void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
    Result (*group_start)() = nullptr;
    Result (*group_end)() = nullptr;
};

// The library, loaded once; throws hydra::Error saying what is missing and how to point hydra at it.
const Api& api();

}  // namespace hydra::gpu::nccl
