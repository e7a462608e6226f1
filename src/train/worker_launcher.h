// `--gpus N`: hydra starts N copies of itself, one per GPU, each with RANK / WORLD_SIZE / LOCAL_RANK /
// MASTER_ADDR / MASTER_PORT set (train/dist_env.h), and supervises them: when one exits with a failure
// (non-zero status or a signal), the others get SIGTERM and, after a grace period, SIGKILL, and the
// launcher returns the failed worker's status with a message naming it. SIGINT / SIGTERM sent to the
// launcher are passed on to the workers (which save a checkpoint and stop, as a single process does).
#pragma once

#include <sys/types.h>
#include <map>
#include <string>
#include <vector>

namespace hydra {

// fork + execv(exe, argv) with `env` added to the environment. Throws hydra::Error when fork fails; a
// failed exec makes the child exit with status 127 (after printing why).
pid_t spawn_worker(const std::string& exe, const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env);

struct SupervisionResult {
    int exit_code = 0;  // 0 when every worker succeeded, else the first failure's (128 + signal if killed)
    int failed_rank = -1;
    std::string message;  // empty on success
};

// Waits for the workers (index = rank). On the first failure the others are stopped (SIGTERM, then SIGKILL
// after grace_s) and reaped.
SupervisionResult supervise_workers(const std::vector<pid_t>& workers, double grace_s);

// A TCP port that was free a moment ago (bound to port 0 and released), for MASTER_PORT.
int pick_free_port();

// The `--gpus N` launcher: N workers of this executable (/proc/self/exe) with the command line `argv`
// (argv[0] included, `--gpus` left out by the caller), MASTER_ADDR 127.0.0.1 and a free port unless the
// environment names them. Returns the process exit code (prints the failure message on stderr).
int launch_local_workers(int n, const std::vector<std::string>& argv, double grace_s = 15.0);

// One process of this executable with the command line `argv` (argv[0] included), supervised the same
// way (SIGINT / SIGTERM passed on); returns its exit code. `hydra pipeline --gpus N` runs each training
// stage so, as `hydra train ... --gpus N`.
int run_self(const std::vector<std::string>& argv, double grace_s = 15.0);

}  // namespace hydra
