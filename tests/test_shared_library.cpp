// open_first_library (core/shared_library.h): the first name that loads, the environment's path first, and
// every failure named when none does.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/shared_library.h"

namespace hydra {
namespace {

TEST(SharedLibrary, FirstNameThatLoads) {
    const OpenedLibrary lib = open_first_library(nullptr, {"libhydra_no_such_library.so.7", "libm.so.6"});
    EXPECT_NE(lib.handle, nullptr);
    EXPECT_NE(lib.errors.find("libhydra_no_such_library.so.7"), std::string::npos) << lib.errors;
}

TEST(SharedLibrary, NoneLoadsNamesEveryTry) {
    const OpenedLibrary lib = open_first_library(nullptr, {"libhydra_no_such_a.so", "libhydra_no_such_b.so"});
    EXPECT_EQ(lib.handle, nullptr);
    EXPECT_NE(lib.errors.find("libhydra_no_such_a.so"), std::string::npos) << lib.errors;
    EXPECT_NE(lib.errors.find("libhydra_no_such_b.so"), std::string::npos) << lib.errors;
}

TEST(SharedLibrary, EnvironmentPathFirstAndEmptyIgnored) {
    ::setenv("HYDRA_TEST_SHARED_LIB", "libm.so.6", 1);
    const OpenedLibrary lib = open_first_library("HYDRA_TEST_SHARED_LIB", {"libhydra_no_such_c.so"});
    EXPECT_NE(lib.handle, nullptr);
    EXPECT_TRUE(lib.errors.empty()) << lib.errors;  // the names after it were not tried
    ::setenv("HYDRA_TEST_SHARED_LIB", "", 1);       // empty: not a name (dlopen("") is the program itself)
    const OpenedLibrary none = open_first_library("HYDRA_TEST_SHARED_LIB", {"libhydra_no_such_c.so"});
    EXPECT_EQ(none.handle, nullptr);
    ::unsetenv("HYDRA_TEST_SHARED_LIB");
}

}  // namespace
}  // namespace hydra
