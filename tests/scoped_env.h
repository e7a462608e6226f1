// ScopedEnv: one environment variable set (or unset) for a test's scope; the previous value comes back
// when it ends, so tests that change PLPLOT_DRV_DIR, HYDRA_GDN_STREAM, RANK ... leave the process as found.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace hydra {

class ScopedEnv {
  public:
    // value null: the variable is unset for the scope.
    ScopedEnv(const std::string& name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name.c_str())) old_ = old;
        if (value)
            ::setenv(name.c_str(), value, 1);
        else
            ::unsetenv(name.c_str());
    }
    ScopedEnv(const std::string& name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
    ~ScopedEnv() {
        if (old_)
            ::setenv(name_.c_str(), old_->c_str(), 1);
        else
            ::unsetenv(name_.c_str());
    }

  private:
    std::string name_;
    std::optional<std::string> old_;
};

}  // namespace hydra
