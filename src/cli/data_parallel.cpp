// `--gpus N` and the rank environment for the training commands (see data_parallel.h).
#include "cli/data_parallel.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "cli/commands.h"
#include "cli/gpu_generator.h"
#include "core/error.h"
#include "train/dist_env.h"
#include "train/worker_launcher.h"
#ifdef HYDRA_WITH_CUDA
#include "gpu/nccl_collective.h"
#endif

namespace hydra::cli {

namespace {

// This process's command line (argv as the kernel holds it), without `--gpus N` / `--gpus=N`.
std::vector<std::string> worker_command_line() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> args;
    size_t start = 0;
    for (size_t i = 0; i < all.size(); ++i)
        if (all[i] == '\0') args.push_back(all.substr(start, i - start)), start = i + 1;
    HYDRA_CHECK(!args.empty(), "cannot read this process's command line (/proc/self/cmdline)");
    std::vector<std::string> out;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--gpus") {
            ++i;  // and its value
            continue;
        }
        if (args[i].rfind("--gpus=", 0) == 0) continue;
        out.push_back(args[i]);
    }
    return out;
}

}  // namespace

void add_gpus_option(CLI::App& cmd, int& gpus) {
    cmd.add_option(
           "--gpus", gpus,
           "data parallel over N GPUs of this host: hydra starts one worker process per GPU (NCCL; "
           "run.batch_size "
           "is the global batch). Under a cluster launcher set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
           "MASTER_PORT instead")
        ->check(at_least(1));
}

std::unique_ptr<Collective> join_data_parallel(int gpus, const std::string& device) {
    const std::optional<DistEnv> env = dist_env_from_process();
    if (!env) {
        if (gpus <= 1) return nullptr;  // one GPU: the plain path
#ifndef HYDRA_WITH_CUDA
        require_cuda_build("--gpus");  // throws
#endif
        HYDRA_CHECK(device == "cuda",
                    "--gpus {} trains on the GPUs: give --device cuda (or run.device = \"cuda\")", gpus);
        std::fflush(stdout);
        std::fflush(stderr);
        std::exit(launch_local_workers(gpus, worker_command_line()));
    }
    HYDRA_CHECK(
        gpus == 0 || gpus == env->world_size,
        "--gpus {} but WORLD_SIZE={} is set: let hydra start the workers (no RANK / WORLD_SIZE in the "
        "environment) or the cluster launcher (no --gpus)",
        gpus, env->world_size);
    HYDRA_CHECK(
        device == "cuda",
        "RANK / WORLD_SIZE are set (data-parallel training) but the device is {}: data parallel runs on the "
        "GPUs (--device cuda); unset RANK and WORLD_SIZE for a single-process run",
        device);
#ifdef HYDRA_WITH_CUDA
    return std::make_unique<gpu::NcclCollective>(*env);
#else
    require_cuda_build("data-parallel training (RANK / WORLD_SIZE set)");
    return nullptr;
#endif
}

}  // namespace hydra::cli
