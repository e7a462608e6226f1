// Rank / world-size environment parsing (see dist_env.h).
#include "train/dist_env.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace hydra {

namespace {

// A decimal integer in [lo, hi] or a hydra::Error naming the variable.
long long parse_int(const char* name, const char* text, long long lo, long long hi) {
    const std::string s = text;
    size_t i = 0;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    bool digits = i < s.size();
    for (size_t k = i; k < s.size(); ++k) digits = digits && s[k] >= '0' && s[k] <= '9';
    HYDRA_CHECK(digits, "environment variable {}='{}' is not a decimal integer", name, s);
    errno = 0;
    const long long v = std::strtoll(s.c_str(), nullptr, 10);
    HYDRA_CHECK(errno == 0 && v >= lo && v <= hi, "environment variable {}={} is outside [{}, {}]", name, s,
                lo, hi);
    return v;
}

}  // namespace

std::map<std::string, std::string> DistEnv::to_env() const {
    std::map<std::string, std::string> e{{"RANK", std::to_string(rank)},
                                         {"WORLD_SIZE", std::to_string(world_size)},
                                         {"LOCAL_RANK", std::to_string(local_rank)}};
    if (!master_addr.empty()) e["MASTER_ADDR"] = master_addr;
    if (master_port > 0) e["MASTER_PORT"] = std::to_string(master_port);
    return e;
}

std::optional<DistEnv> parse_dist_env(const std::function<const char*(const char*)>& lookup) {
    const char* rank = lookup("RANK");
    const char* world = lookup("WORLD_SIZE");
    const char* local = lookup("LOCAL_RANK");
    if (!rank && !world && !local) return std::nullopt;
    HYDRA_CHECK(rank && world,
                "data-parallel environment incomplete: {} is set but {} is not (a launcher sets RANK and "
                "WORLD_SIZE together; unset both for a single-process run)",
                rank    ? "RANK"
                : world ? "WORLD_SIZE"
                        : "LOCAL_RANK",
                rank ? "WORLD_SIZE" : "RANK");
    DistEnv e;
    constexpr long long kMaxWorld = 1 << 20;
    e.world_size = int(parse_int("WORLD_SIZE", world, 1, kMaxWorld));
    e.rank = int(parse_int("RANK", rank, 0, kMaxWorld));
    HYDRA_CHECK(e.rank < e.world_size, "RANK={} must be smaller than WORLD_SIZE={} (ranks are 0..{})", e.rank,
                e.world_size, e.world_size - 1);
    e.local_rank = local ? int(parse_int("LOCAL_RANK", local, 0, kMaxWorld)) : e.rank;
    const char* addr = lookup("MASTER_ADDR");
    const char* port = lookup("MASTER_PORT");
    if (addr) e.master_addr = addr;
    if (port) e.master_port = int(parse_int("MASTER_PORT", port, 1, 65535));
    if (e.world_size > 1) {
        HYDRA_CHECK(!e.master_addr.empty(),
                    "WORLD_SIZE={} needs MASTER_ADDR (the host name or address of rank 0)", e.world_size);
        HYDRA_CHECK(port != nullptr, "WORLD_SIZE={} needs MASTER_PORT (a free TCP port on rank 0's host)",
                    e.world_size);
    }
    return e;
}

std::optional<DistEnv> dist_env_from_process() {
    return parse_dist_env([](const char* n) { return std::getenv(n); });
}

}  // namespace hydra
