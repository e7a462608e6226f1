// CUDA error checking: every CUDA runtime and cuBLAS call goes through these macros, which throw
// hydra::Error with the call's file:line and the CUDA error string.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(call)                                                                                  \
    do {                                                                                                  \
        cudaError_t err_ = (call);                                                                        \
        if (err_ != cudaSuccess)                                                                          \
            ::hydra::fail_at(__FILE__, __LINE__, std::string(#call " failed: ") + cudaGetErrorString(err_)); \
    } while (0)

#define CUBLAS_CHECK(call)                                                                                 \
    do {                                                                                                   \
        cublasStatus_t st_ = (call);                                                                       \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                  \
            ::hydra::fail_at(__FILE__, __LINE__, std::string(#call " failed: ") + cublasGetStatusString(st_)); \
    } while (0)
