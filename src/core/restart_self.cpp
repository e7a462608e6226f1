// The running executable and its restart (see restart_self.h).
#include "core/restart_self.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hydra {

std::string self_executable() {
    char exe[4096];
    const ssize_t k = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    HYDRA_CHECK(k > 0, "cannot find this program's executable (/proc/self/exe): {}", std::strerror(errno));
    exe[k] = '\0';
    return exe;
}

void restart_self(char** argv) {
    try {
        const std::string exe = self_executable();
        ::execv(exe.c_str(), argv);  // returns only on failure
    } catch (const Error&) {
    }
}

}  // namespace hydra
