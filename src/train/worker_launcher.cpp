// Worker processes of `--gpus N` and their supervision (see worker_launcher.h).
#include "train/worker_launcher.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/restart_self.h"
#include "train/dist_env.h"

namespace hydra {

namespace {

volatile std::sig_atomic_t g_forward_signal = 0;
void remember_signal(int sig) {
    g_forward_signal = sig;
}

std::string describe(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    return "stopped";
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

}  // namespace

pid_t spawn_worker(const std::string& exe, const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env) {
    // everything the child needs is built before fork (no allocation between fork and exec)
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
        const std::string s = *e;
        const std::string key = s.substr(0, s.find('='));
        if (!env.count(key)) env_strings.push_back(s);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    HYDRA_CHECK(pid >= 0, "cannot start a worker process: {}", std::strerror(errno));
    if (pid == 0) {
        ::execve(exe.c_str(), args.data(), envp.data());
        const char* why = std::strerror(errno);
        (void)!::write(2, "hydra: cannot run the worker: ", 30);
        (void)!::write(2, why, std::strlen(why));
        (void)!::write(2, "\n", 1);
        ::_exit(127);
    }
    return pid;
}

SupervisionResult supervise_workers(const std::vector<pid_t>& workers, double grace_s) {
    SupervisionResult res;
    std::vector<char> alive(workers.size(), 1);
    size_t n_alive = workers.size();
    auto rank_of = [&](pid_t p) {
        for (size_t r = 0; r < workers.size(); ++r)
            if (workers[r] == p) return int(r);
        return -1;
    };
    auto signal_alive = [&](int sig) {
        for (size_t r = 0; r < workers.size(); ++r)
            if (alive[r]) ::kill(workers[r], sig);
    };
    std::chrono::steady_clock::time_point kill_at{};
    bool stopping = false;
    int forwarded = 0;
    while (n_alive > 0) {
        if (g_forward_signal && g_forward_signal != forwarded) {  // the user's ^C / a scheduler's SIGTERM
            forwarded = g_forward_signal;
            signal_alive(forwarded);
        }
        int status = 0;
        const pid_t p = ::waitpid(-1, &status, WNOHANG);
        if (p < 0 && errno == ECHILD) break;
        if (p > 0) {
            const int r = rank_of(p);
            if (r < 0) continue;  // not one of ours
            alive[size_t(r)] = 0;
            --n_alive;
            const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            if (failed && res.failed_rank < 0) {
                res.failed_rank = r;
                res.exit_code = exit_code_of(status);
                res.message = fmt::format("worker rank {} (pid {}) {}; stopping the other {} worker(s)", r, p,
                                          describe(status), n_alive);
                if (n_alive > 0) {
                    signal_alive(SIGTERM);
                    stopping = true;
                    kill_at = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(int64_t(std::max(0.0, grace_s) * 1000));
                }
            }
            continue;
        }
        if (stopping && std::chrono::steady_clock::now() >= kill_at) {
            signal_alive(SIGKILL);
            stopping = false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return res;
}

int pick_free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    HYDRA_CHECK(fd >= 0, "cannot create a socket: {}", std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    ::close(fd);
    HYDRA_CHECK(ok, "cannot find a free TCP port: {}", std::strerror(errno));
    return int(ntohs(a.sin_port));
}

namespace {

// Spawns processes of this executable, one per environment, and supervises them with SIGINT / SIGTERM
// passed on; returns the exit code (the failure message printed on stderr).
int spawn_and_supervise(const std::vector<std::string>& argv,
                        const std::vector<std::map<std::string, std::string>>& envs, double grace_s) {
    const std::string exe = self_executable();
    g_forward_signal = 0;
    auto old_int = std::signal(SIGINT, remember_signal);
    auto old_term = std::signal(SIGTERM, remember_signal);
    std::vector<pid_t> pids;
    for (const auto& env : envs) {
        try {
            pids.push_back(spawn_worker(exe, argv, env));
        } catch (...) {
            for (pid_t p : pids) ::kill(p, SIGKILL);
            for (pid_t p : pids) ::waitpid(p, nullptr, 0);
            std::signal(SIGINT, old_int);
            std::signal(SIGTERM, old_term);
            throw;
        }
    }
    const SupervisionResult res = supervise_workers(pids, grace_s);
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    if (!res.message.empty()) fmt::print(stderr, "hydra: {}\n", res.message);
    return res.exit_code;
}

}  // namespace

int launch_local_workers(int n, const std::vector<std::string>& argv, double grace_s) {
    HYDRA_CHECK(n >= 1, "--gpus must be >= 1 (got {})", n);
    DistEnv base;
    base.world_size = n;
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    base.master_addr = addr && *addr ? addr : "127.0.0.1";
    if (port && *port) {
        // validated like a worker would (a clear error here rather than N identical ones)
        const auto parsed = parse_dist_env([&](const char* k) -> const char* {
            const std::string s = k;
            return s == "RANK" ? "0" : s == "WORLD_SIZE" ? "1" : s == "MASTER_PORT" ? port : nullptr;
        });
        base.master_port = parsed->master_port;
    } else {
        base.master_port = pick_free_port();
    }
    std::vector<std::map<std::string, std::string>> envs;
    for (int r = 0; r < n; ++r) {
        DistEnv e = base;
        e.rank = r;
        e.local_rank = r;
        envs.push_back(e.to_env());
    }
    return spawn_and_supervise(argv, envs, grace_s);
}

int run_self(const std::vector<std::string>& argv, double grace_s) {
    return spawn_and_supervise(argv, {{}}, grace_s);
}

}  // namespace hydra
