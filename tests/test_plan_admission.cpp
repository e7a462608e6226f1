// When inference prefill builds cuDNN's per-shape plan (src/gpu/plan_admission.h): a shape's first sighting
// runs our kernels, the next ones cuDNN; 0 = at once; the environment value is checked; the table stays
// bounded under an endless stream of new shapes.
#include <gtest/gtest.h>

#include "core/error.h"
#include "gpu/plan_admission.h"

namespace hydra::gpu {
namespace {

TEST(PlanAdmission, FirstSightingRunsOursThenThePlan) {
    PlanAdmission a(1);
    EXPECT_FALSE(a.admit(42));
    EXPECT_TRUE(a.admit(42));
    EXPECT_TRUE(a.admit(42));
    EXPECT_FALSE(a.admit(7));  // another shape starts over
    PlanAdmission three(3);
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(three.admit(1)) << i;
    EXPECT_TRUE(three.admit(1));
    PlanAdmission now;  // the default: at once
    EXPECT_TRUE(now.admit(5));
    EXPECT_THROW(PlanAdmission(-1), Error);
}

TEST(PlanAdmission, EnvironmentValue) {
    EXPECT_EQ(PlanAdmission::after_from_env(nullptr), 0);
    EXPECT_EQ(PlanAdmission::after_from_env(""), 0);
    EXPECT_EQ(PlanAdmission::after_from_env("1"), 1);
    EXPECT_EQ(PlanAdmission::after_from_env("0"), 0);
    EXPECT_EQ(PlanAdmission::after_from_env("4"), 4);
    for (const char* bad : {"-1", "two", "1.5", " 1", "99999999999"}) {
        try {
            PlanAdmission::after_from_env(bad);
            ADD_FAILURE() << bad << " accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("HYDRA_PREFILL_CUDNN_AFTER"), std::string::npos) << e.what();
        }
    }
}

TEST(PlanAdmission, TableStaysBounded) {
    PlanAdmission a(1);
    for (uint64_t s = 0; s < 3 * PlanAdmission::kMaxShapes; ++s) EXPECT_FALSE(a.admit(s));
    // a shape seen just before the table was forgotten needs a sighting again; one seen since is admitted
    const uint64_t last = 3 * PlanAdmission::kMaxShapes - 1;
    EXPECT_TRUE(a.admit(last));
}

}  // namespace
}  // namespace hydra::gpu
