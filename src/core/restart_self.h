// This program's executable, and executing it again: for settings its libraries read only once, when
// they load or start (OpenBLAS's kernel choice, OpenMP's wait policy), which a process can change only by
// setting the environment and starting over.
#pragma once

#include <string>

namespace hydra {

// The running executable's path (/proc/self/exe); throws hydra::Error when it cannot be read.
std::string self_executable();

// Replaces this process by a fresh run of its executable with the same argv and the current environment.
// Returns only when that fails (nothing has changed then).
void restart_self(char** argv);

}  // namespace hydra
