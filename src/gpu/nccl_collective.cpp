// Collectives over NCCL with a watchdog (see nccl_collective.h).
#include "gpu/nccl_collective.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "train/tcp_rendezvous.h"

namespace hydra::gpu {

namespace {

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int nccl_type(CollType t) {
    switch (t) {
        case CollType::F32:
            return nccl::kFloat32;
        case CollType::BF16:
            return nccl::kBfloat16;
        case CollType::F64:
            return nccl::kFloat64;
        case CollType::I64:
            return nccl::kInt64;
    }
    return nccl::kFloat32;
}

char* at(void* buf, int64_t elem, CollType t) {
    return static_cast<char*>(buf) + elem * coll_type_bytes(t);
}

}  // namespace

NcclCollective::NcclCollective(const DistEnv& env, double timeout_s) : env_(env) {
    const nccl::Api& api = nccl::api();
    if (timeout_s <= 0) {
        timeout_s = 900;
        if (const char* t = std::getenv("HYDRA_NCCL_TIMEOUT")) {
            char* end = nullptr;
            const double v = std::strtod(t, &end);
            HYDRA_CHECK(end && *end == '\0' && v > 0,
                        "HYDRA_NCCL_TIMEOUT='{}' must be a positive number of seconds", t);
            timeout_s = v;
        }
    }
    timeout_s_ = timeout_s;
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    HYDRA_CHECK(env.local_rank < devices, "LOCAL_RANK={} but this host has {} CUDA device(s)", env.local_rank,
                devices);
    CUDA_CHECK(cudaSetDevice(env.local_rank));
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);  // keeps the user's value when set
    nccl::UniqueId id{};
    std::string blob;
    if (env.is_root()) {
        check(api.get_unique_id(&id), "ncclGetUniqueId");
        blob.assign(id.internal, sizeof(id.internal));
    }
    blob = rendezvous_broadcast(env, blob, timeout_s_);
    HYDRA_CHECK(blob.size() == sizeof(id.internal), "rendezvous: rank 0 sent {} bytes, not an NCCL id",
                blob.size());
    std::memcpy(id.internal, blob.data(), sizeof(id.internal));
    CUDA_CHECK(cudaEventCreateWithFlags(&last_, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&scratch_, sizeof(int64_t)));
    // the init is a collective too: timed by the watchdog (a peer that dies before its init would hang it)
    pending_since_ms_ = now_ms();
    watchdog_ = std::thread([this] { watchdog(); });
    const nccl::Result r = api.comm_init_rank(&comm_, env.world_size, id, env.rank);
    pending_since_ms_ = 0;
    if (r != nccl::kSuccess) {
        stop_ = true;
        watchdog_.join();
        check(r, "ncclCommInitRank");
    }
}

NcclCollective::~NcclCollective() {
    stop_ = true;
    if (watchdog_.joinable()) watchdog_.join();
    const nccl::Api& api = nccl::api();
    if (comm_) api.comm_destroy(comm_);
    if (scratch_) cudaFree(scratch_);
    if (last_) cudaEventDestroy(last_);
}

void NcclCollective::check(nccl::Result r, const char* what) {
    if (r == nccl::kSuccess || r == nccl::kInProgress) return;
    const nccl::Api& api = nccl::api();
    fail("NCCL {} failed on rank {} of {}: {}", what, env_.rank, env_.world_size, api.get_error_string(r));
}

void NcclCollective::issued() {
    std::lock_guard<std::mutex> lock(mu_);
    // the clock restarts when everything issued before has completed (steps synchronise between them)
    if (!last_recorded_ || cudaEventQuery(last_) == cudaSuccess || pending_since_ms_.load() == 0)
        pending_since_ms_ = now_ms();
    CUDA_CHECK(cudaEventRecord(last_, stream_));
    last_recorded_ = true;
}

void NcclCollective::die(const std::string& why) {
    std::fprintf(stderr,
                 "\nhydra: rank %d of %d: %s; aborting the NCCL communicator and stopping this rank\n",
                 env_.rank, env_.world_size, why.c_str());
    std::fflush(stderr);
    if (comm_) nccl::api().comm_abort(comm_);
    std::_Exit(3);
}

void NcclCollective::watchdog() {
    const nccl::Api& api = nccl::api();
    (void)cudaSetDevice(env_.local_rank);  // this thread's event queries on the rank's device
    while (!stop_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (comm_) {
            nccl::Result async = nccl::kSuccess;
            if (api.comm_get_async_error(comm_, &async) == nccl::kSuccess && async != nccl::kSuccess &&
                async != nccl::kInProgress)
                die(fmt::format("NCCL reported an error ({}): a peer rank probably failed",
                                api.get_error_string(async)));
        }
        const int64_t since = pending_since_ms_.load();
        if (since == 0) continue;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (last_recorded_ && cudaEventQuery(last_) == cudaSuccess) {  // everything issued has completed
                pending_since_ms_ = 0;
                continue;
            }
        }
        if (double(now_ms() - since) / 1000.0 > timeout_s_)
            die(fmt::format(
                "a collective made no progress for {:.0f} s (HYDRA_NCCL_TIMEOUT): a peer rank died or "
                "hangs",
                timeout_s_));
    }
}

void NcclCollective::all_reduce(void* buf, CollType type, const std::vector<ElemRange>& ranges, bool mean) {
    const nccl::Api& api = nccl::api();
    check(api.group_start(), "ncclGroupStart");
    for (const ElemRange& r : ranges) {
        if (r.empty()) continue;
        char* p = at(buf, r.begin, type);
        check(api.all_reduce(p, p, size_t(r.size()), nccl_type(type), mean ? nccl::kAvg : nccl::kSum, comm_,
                             stream_),
              "ncclAllReduce");
    }
    check(api.group_end(), "ncclGroupEnd");
    issued();
}

void NcclCollective::all_gather(void* buf, CollType type, const std::vector<ElemRange>& owned) {
    HYDRA_ASSERT(int(owned.size()) == env_.world_size, "all_gather: {} ranges for {} ranks", owned.size(),
                 env_.world_size);
    // ranges of uneven size: one broadcast per owner, in one group (NCCL's all-gather needs equal counts)
    const nccl::Api& api = nccl::api();
    check(api.group_start(), "ncclGroupStart");
    for (int r = 0; r < env_.world_size; ++r) {
        const ElemRange o = owned[size_t(r)];
        if (o.empty()) continue;
        char* p = at(buf, o.begin, type);
        check(api.broadcast(p, p, size_t(o.size()), nccl_type(type), r, comm_, stream_), "ncclBroadcast");
    }
    check(api.group_end(), "ncclGroupEnd");
    issued();
}

void NcclCollective::gather_to_root(void* buf, CollType type, const std::vector<ElemRange>& owned, int root) {
    HYDRA_ASSERT(int(owned.size()) == env_.world_size && root >= 0 && root < env_.world_size,
                 "gather_to_root: {} ranges for {} ranks, root {}", owned.size(), env_.world_size, root);
    const nccl::Api& api = nccl::api();
    check(api.group_start(), "ncclGroupStart");
    for (int r = 0; r < env_.world_size; ++r) {
        const ElemRange o = owned[size_t(r)];
        if (o.empty() || r == root) continue;
        char* p = at(buf, o.begin, type);
        if (env_.rank == root)
            check(api.recv(p, size_t(o.size()), nccl_type(type), r, comm_, stream_), "ncclRecv");
        else if (env_.rank == r)
            check(api.send(p, size_t(o.size()), nccl_type(type), root, comm_, stream_), "ncclSend");
    }
    check(api.group_end(), "ncclGroupEnd");
    issued();
}

void NcclCollective::synchronise() {
    // the watchdog ends the process when this never returns; an error NCCL raised surfaces here too
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    nccl::Result async = nccl::kSuccess;
    nccl::api().comm_get_async_error(comm_, &async);
    check(async, "a collective");
}

void NcclCollective::barrier() {
    (void)any(false);
}

bool NcclCollective::any(bool flag) {
    const int64_t v = flag ? 1 : 0;
    CUDA_CHECK(cudaMemcpyAsync(scratch_, &v, sizeof(v), cudaMemcpyHostToDevice, stream_));
    all_reduce(scratch_, CollType::I64, {{0, 1}}, false);
    int64_t out = 0;
    CUDA_CHECK(cudaMemcpyAsync(&out, scratch_, sizeof(out), cudaMemcpyDeviceToHost, stream_));
    synchronise();
    return out > 0;
}

}  // namespace hydra::gpu
