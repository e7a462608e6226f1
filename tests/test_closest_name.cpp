// closest_name (core/closest_name.h): the "did you mean" of unknown commands and config keys.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/closest_name.h"

namespace hydra {
namespace {

TEST(ClosestName, Distance) {
    EXPECT_EQ(typo_distance("eval", "eval"), 0);
    EXPECT_EQ(typo_distance("evall", "eval"), 1);   // insertion
    EXPECT_EQ(typo_distance("scroe", "score"), 1);  // adjacent swap
    EXPECT_EQ(typo_distance("optim.lr", "optim.lx"), 1);
    EXPECT_EQ(typo_distance("", "info"), 4);
    EXPECT_EQ(typo_distance("kitten", "sitting"), 3);
}

TEST(ClosestName, SuggestsOnlyNearNames) {
    const std::vector<std::string> commands = {"info", "eval", "serve", "score-heads", "pipeline", "ppl"};
    EXPECT_EQ(closest_name("evall", commands), "eval");
    EXPECT_EQ(closest_name("scroe-heads", commands), "score-heads");
    EXPECT_EQ(closest_name("pipline", commands), "pipeline");
    EXPECT_EQ(closest_name("serv", commands), "serve");
    EXPECT_EQ(closest_name("xyz", commands), std::nullopt);  // nothing near
    EXPECT_EQ(closest_name("pl", commands), "ppl");          // one edit from a short name
    EXPECT_EQ(closest_name("pll", commands), "ppl");
    EXPECT_EQ(closest_name("inof", commands), "info");  // a swap in a short name
    EXPECT_EQ(closest_name("ifo", commands), "info");
    EXPECT_EQ(closest_name("nfoo", commands), std::nullopt);   // two edits from a short name
    EXPECT_EQ(closest_name("eval", commands), std::nullopt);   // an exact name is not a typo
    EXPECT_EQ(closest_name("train", commands), std::nullopt);  // 4 edits from "info"
    const std::vector<std::string> keys = {"optim.lr", "optim.eps", "run.steps", "run.seed"};
    EXPECT_EQ(closest_name("optim.lrr", keys), "optim.lr");
    EXPECT_EQ(closest_name("run.step", keys), "run.steps");
    EXPECT_EQ(closest_name("run.sed", keys), "run.seed");
}

}  // namespace
}  // namespace hydra
