// DistEnv: which rank of how many this process is in a data-parallel run, and where rank 0 waits for
// the others (the torchrun / srun convention: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
// `hydra train|distill|pipeline --gpus N` sets these for the workers it starts (train/worker_launcher.h);
// a cluster launcher sets them itself. Parsing is separate from getenv so the checks are unit-tested.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace hydra {

struct DistEnv {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;       // the GPU index on this host
    std::string master_addr;  // rank 0's host (empty only when world_size == 1)
    int master_port = 0;      // rank 0's TCP port for the rendezvous (0 only when world_size == 1)

    bool is_root() const { return rank == 0; }
    // The variables as a worker's environment gets them (worker_launcher.h).
    std::map<std::string, std::string> to_env() const;
};

// Reads the five variables through `lookup` (nullptr: unset). Returns nullopt when none of RANK,
// WORLD_SIZE, LOCAL_RANK is set (a plain single-process run). Throws hydra::Error naming the variable
// and the fix when a value is not a decimal integer, RANK is outside [0, WORLD_SIZE), WORLD_SIZE < 1,
// one of RANK / WORLD_SIZE is missing, LOCAL_RANK < 0, or MASTER_ADDR / MASTER_PORT (1..65535) is
// missing or bad while WORLD_SIZE > 1. LOCAL_RANK defaults to RANK.
std::optional<DistEnv> parse_dist_env(const std::function<const char*(const char*)>& lookup);

// parse_dist_env over the process environment.
std::optional<DistEnv> dist_env_from_process();

}  // namespace hydra
