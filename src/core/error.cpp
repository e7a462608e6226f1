// Out-of-line part of error.h: formats internal invariant failures with their source location.
#include "core/error.h"

namespace hydra {

void fail_at(const char* file, int line, const std::string& message) {
    throw Error(fmt::format("{}:{}: {}", file, line, message));
}

}  // namespace hydra
