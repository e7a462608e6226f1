// The start of a data-parallel run: rank 0 listens on MASTER_PORT, every other rank connects to
// MASTER_ADDR:MASTER_PORT and says who it is (magic, rank, world size); once all W - 1 peers are in, rank
// 0 sends each of them the same blob (the NCCL unique id, 128 bytes). Plain POSIX sockets with deadlines:
// a rank that never shows up, a wrong world size, a duplicate rank or a peer that hangs up gives a
// hydra::Error naming it, never a hang. It doubles as the job's first barrier.
#pragma once

#include <string>

#include "train/dist_env.h"

namespace hydra {

// Rank 0 passes the blob and gets it back; the other ranks get rank 0's. timeout_s bounds the whole
// exchange (connection retries included). With world_size 1 the blob is returned without any socket.
std::string rendezvous_broadcast(const DistEnv& env, const std::string& root_blob, double timeout_s);

}  // namespace hydra
