// Errors for HydraHead: one exception type carrying a message (and, for internal invariants, file:line).
// Loaders and the CLI throw hydra::Error with a message that names the file, the field and the fix;
// the CLI catches it at the edge and prints one line. HYDRA_ASSERT is for invariants inside our own code.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hydra {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws an Error whose message is formatted with fmt.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void fail_at(const char* file, int line, const std::string& message);

}  // namespace hydra

// Invariant check: a violation is a bug in HydraHead, so the message carries file:line.
#define HYDRA_ASSERT(cond, ...)                                                               \
    do {                                                                                     \
        if (!(cond)) ::hydra::fail_at(__FILE__, __LINE__, fmt::format("assertion `" #cond "` failed: " __VA_ARGS__)); \
    } while (0)

// Input check: a violation is bad outside input, so the message is for the user (no file:line).
#define HYDRA_CHECK(cond, ...)                                      \
    do {                                                            \
        if (!(cond)) throw ::hydra::Error(fmt::format(__VA_ARGS__)); \
    } while (0)
