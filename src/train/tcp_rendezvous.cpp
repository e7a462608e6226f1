// TCP rendezvous of the data-parallel ranks (see tcp_rendezvous.h).
#include "train/tcp_rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace hydra {

namespace {

constexpr uint32_t kMagic = 0x48594452u;  // "HYDR"
using Clock = std::chrono::steady_clock;

struct Fd {
    int fd = -1;
    explicit Fd(int f = -1) : fd(f) {}
    Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
    Fd& operator=(Fd&& o) noexcept {
        std::swap(fd, o.fd);
        return *this;
    }
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

int ms_left(Clock::time_point deadline) {
    const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return d > 0 ? int(std::min<long long>(d, 1 << 30)) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int r = ::poll(&p, 1, ms_left(deadline));
        if (r > 0) return true;
        if (r == 0) return false;
        if (errno != EINTR) fail("rendezvous: poll failed: {}", std::strerror(errno));
    }
}

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& who) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        HYDRA_CHECK(wait_fd(fd, POLLOUT, deadline), "rendezvous: timed out sending to {}", who);
        const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        HYDRA_CHECK(k > 0, "rendezvous: sending to {} failed: {}", who, std::strerror(errno));
        p += k, n -= size_t(k);
    }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& who) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
        HYDRA_CHECK(wait_fd(fd, POLLIN, deadline), "rendezvous: timed out waiting for {}", who);
        const ssize_t k = ::recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        HYDRA_CHECK(k != 0, "rendezvous: {} closed the connection", who);
        HYDRA_CHECK(k > 0, "rendezvous: receiving from {} failed: {}", who, std::strerror(errno));
        p += k, n -= size_t(k);
    }
}

std::string root(const DistEnv& env, const std::string& blob, Clock::time_point deadline) {
    Fd lis(::socket(AF_INET6, SOCK_STREAM, 0));
    bool v6 = lis.fd >= 0;
    if (!v6) lis = Fd(::socket(AF_INET, SOCK_STREAM, 0));
    HYDRA_CHECK(lis.fd >= 0, "rendezvous: cannot create a socket: {}", std::strerror(errno));
    const int one = 1, zero = 0;
    ::setsockopt(lis.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc;
    if (v6) {
        ::setsockopt(lis.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 peers too
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons(uint16_t(env.master_port));
        rc = ::bind(lis.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    } else {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons(uint16_t(env.master_port));
        rc = ::bind(lis.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    }
    HYDRA_CHECK(rc == 0, "rendezvous: rank 0 cannot listen on port {} (MASTER_PORT): {}; choose a free port",
                env.master_port, std::strerror(errno));
    HYDRA_CHECK(::listen(lis.fd, env.world_size) == 0, "rendezvous: listen on port {} failed: {}",
                env.master_port, std::strerror(errno));
    std::vector<Fd> peers(size_t(env.world_size));
    int joined = 0;
    while (joined < env.world_size - 1) {
        HYDRA_CHECK(wait_fd(lis.fd, POLLIN, deadline),
                    "rendezvous: only {} of {} ranks reached rank 0 on port {} before the timeout (is every "
                    "rank started, with the same MASTER_ADDR / MASTER_PORT?)",
                    joined + 1, env.world_size, env.master_port);
        Fd c(::accept(lis.fd, nullptr, nullptr));
        if (c.fd < 0) continue;
        uint32_t hello[3];
        recv_all(c.fd, hello, sizeof(hello), deadline, "a connecting rank");
        HYDRA_CHECK(hello[0] == kMagic, "rendezvous: something that is not a hydra rank connected to port {}",
                    env.master_port);
        const int r = int(hello[1]), w = int(hello[2]);
        HYDRA_CHECK(w == env.world_size, "rendezvous: rank {} says WORLD_SIZE={}, rank 0 has {}", r, w,
                    env.world_size);
        HYDRA_CHECK(r > 0 && r < env.world_size, "rendezvous: a peer claims rank {} of {}", r, w);
        HYDRA_CHECK(peers[size_t(r)].fd < 0, "rendezvous: two processes claim RANK={}", r);
        peers[size_t(r)] = std::move(c);
        ++joined;
    }
    const uint32_t len = uint32_t(blob.size());
    for (int r = 1; r < env.world_size; ++r) {
        const std::string who = "rank " + std::to_string(r);
        send_all(peers[size_t(r)].fd, &len, sizeof(len), deadline, who);
        send_all(peers[size_t(r)].fd, blob.data(), blob.size(), deadline, who);
    }
    // each peer acknowledges, so no rank goes on (and rank 0 closes its sockets) before all have the blob
    for (int r = 1; r < env.world_size; ++r) {
        uint32_t ack = 0;
        recv_all(peers[size_t(r)].fd, &ack, sizeof(ack), deadline, "rank " + std::to_string(r));
        HYDRA_CHECK(ack == kMagic, "rendezvous: rank {} sent a bad acknowledgement", r);
    }
    return blob;
}

std::string peer(const DistEnv& env, Clock::time_point deadline) {
    const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int g =
        ::getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(), &hints, &res);
    HYDRA_CHECK(g == 0, "rendezvous: cannot resolve MASTER_ADDR={}: {}", env.master_addr, ::gai_strerror(g));
    Fd s;
    std::string last = "no address";
    // rank 0 may not listen yet: retry until the deadline
    while (s.fd < 0) {
        for (addrinfo* a = res; a && s.fd < 0; a = a->ai_next) {
            Fd c(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
            if (c.fd < 0) continue;
            if (::connect(c.fd, a->ai_addr, a->ai_addrlen) == 0)
                s = std::move(c);
            else
                last = std::strerror(errno);
        }
        if (s.fd >= 0) break;
        if (ms_left(deadline) == 0) {
            ::freeaddrinfo(res);
            fail("rendezvous: rank {} could not reach rank 0 at {} before the timeout ({})", env.rank, where,
                 last);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::freeaddrinfo(res);
    const int one = 1;
    ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint32_t hello[3] = {kMagic, uint32_t(env.rank), uint32_t(env.world_size)};
    send_all(s.fd, hello, sizeof(hello), deadline, "rank 0 at " + where);
    uint32_t len = 0;
    recv_all(s.fd, &len, sizeof(len), deadline, "rank 0 at " + where);
    HYDRA_CHECK(len <= (1u << 20), "rendezvous: rank 0 announced a blob of {} bytes", len);
    std::string blob(len, '\0');
    recv_all(s.fd, blob.data(), len, deadline, "rank 0 at " + where);
    send_all(s.fd, &kMagic, sizeof(kMagic), deadline, "rank 0 at " + where);
    return blob;
}

}  // namespace

std::string rendezvous_broadcast(const DistEnv& env, const std::string& root_blob, double timeout_s) {
    if (env.world_size == 1) return root_blob;
    HYDRA_CHECK(timeout_s > 0, "rendezvous: timeout must be > 0 (got {})", timeout_s);
    const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    return env.is_root() ? root(env, root_blob, deadline) : peer(env, deadline);
}

}  // namespace hydra
