// NCCL loaded with dlopen (see nccl_lib.h).
#include "gpu/nccl_lib.h"

#include <dlfcn.h>

#include "core/error.h"
#include "core/shared_library.h"

namespace hydra::gpu::nccl {

namespace {

Api load() {
    Api r;
    const OpenedLibrary lib = open_first_library("HYDRA_NCCL_LIB", {"libnccl.so.2", "libnccl.so"});
    void* h = lib.handle;
    if (!h) {
        r.why = "NCCL not found (" + lib.errors +
                "); put its lib directory on LD_LIBRARY_PATH (tools/nccl_lib_dir.sh prints PyTorch's) or set "
                "HYDRA_NCCL_LIB to libnccl.so.2";
        return r;
    }
    std::string missing;
    auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
        if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
    };
    sym(r.get_version, "ncclGetVersion");
    sym(r.get_unique_id, "ncclGetUniqueId");
    sym(r.comm_init_rank, "ncclCommInitRank");
    sym(r.comm_abort, "ncclCommAbort");
    sym(r.comm_destroy, "ncclCommDestroy");
    sym(r.comm_get_async_error, "ncclCommGetAsyncError");
    sym(r.get_error_string, "ncclGetErrorString");
    sym(r.all_reduce, "ncclAllReduce");
    sym(r.broadcast, "ncclBroadcast");
    sym(r.send, "ncclSend");
    sym(r.recv, "ncclRecv");
    sym(r.group_start, "ncclGroupStart");
    sym(r.group_end, "ncclGroupEnd");
    if (!missing.empty()) {
        r.why = "the NCCL library lacks " + missing;
        return r;
    }
    r.get_version(&r.version);
    if (r.version < 21000)
        r.why =
            "NCCL " + std::to_string(r.version) + " is too old: data-parallel training needs 2.10 or newer";
    return r;
}

}  // namespace

const Api& api() {
    static const Api a = load();
    HYDRA_CHECK(a.why.empty(), "data-parallel training: {}", a.why);
    return a;
}

}  // namespace hydra::gpu::nccl
