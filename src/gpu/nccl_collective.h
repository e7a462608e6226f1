// NcclCollective: train/collective.h over NCCL (gpu/nccl_lib.h) for one process per GPU. Construction
// selects the GPU (LOCAL_RANK), has rank 0 create the ncclUniqueId and share it over TCP
// (train/tcp_rendezvous.h), and creates the communicator; NCCL_NVLS_ENABLE is set to 0 unless the user set
// it (NVLink multicast stays off, as the device documentation asks). Collectives are enqueued on the bound
// stream (bind()); device buffers only.
//
// Failure: a watchdog thread polls ncclCommGetAsyncError every 200 ms and measures how long the oldest
// unfinished collective has been waiting (the communicator's init included). When NCCL reports an error,
// or nothing completes for HYDRA_NCCL_TIMEOUT seconds (default 900) -- a peer rank died or hangs -- it
// prints which rank and why, aborts the communicator and ends the process with status 3, so the launcher
// (or the cluster's) takes the job down instead of every rank hanging in a collective.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "gpu/nccl_lib.h"
#include "train/collective.h"
#include "train/dist_env.h"

namespace hydra::gpu {

class NcclCollective final : public Collective {
  public:
    // timeout_s <= 0: HYDRA_NCCL_TIMEOUT or 900 s. Throws hydra::Error when NCCL cannot be loaded, the
    // device does not exist or the rendezvous fails.
    explicit NcclCollective(const DistEnv& env, double timeout_s = 0);
    ~NcclCollective() override;
    NcclCollective(const NcclCollective&) = delete;
    NcclCollective& operator=(const NcclCollective&) = delete;

    int rank() const override { return env_.rank; }
    int world_size() const override { return env_.world_size; }
    const DistEnv& env() const { return env_; }
    int nccl_version() const { return nccl::api().version; }

    // The stream later calls enqueue on (null: the legacy default stream).
    void bind(cudaStream_t s) { stream_ = s; }
    cudaStream_t bound() const { return stream_; }

    void all_reduce(void* buf, CollType type, const std::vector<ElemRange>& ranges, bool mean) override;
    void all_gather(void* buf, CollType type, const std::vector<ElemRange>& owned) override;
    void gather_to_root(void* buf, CollType type, const std::vector<ElemRange>& owned, int root) override;
    // Waits for the bound stream (under the watchdog).
    void synchronise() override;
    void barrier() override;
    bool any(bool flag) override;

  private:
    void check(nccl::Result r, const char* what);
    void issued();  // a collective was enqueued: the watchdog starts timing it if none was pending
    void watchdog();
    [[noreturn]] void die(const std::string& why);

    DistEnv env_;
    double timeout_s_ = 900;
    nccl::Comm comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    int64_t* scratch_ = nullptr;  // barrier() / any()
    // watchdog state: the time the oldest pending collective was issued (0: none pending); a CUDA event
    // recorded after the last issued collective tells when everything pending completed
    std::mutex mu_;
    std::atomic<int64_t> pending_since_ms_{0};
    cudaEvent_t last_ = nullptr;
    bool last_recorded_ = false;
    std::atomic<bool> stop_{false};
    std::thread watchdog_;
};

}  // namespace hydra::gpu
