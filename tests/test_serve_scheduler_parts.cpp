// The scheduler's parts on their own: stop-string matching with held-back text, and the reported
// logprobs (log-softmax and the top alternatives).
#include <gtest/gtest.h>

#include <cmath>

#include "serve/stop_matcher.h"
#include "serve/token_logprobs.h"
#include "serve/utf8_sanitize.h"

namespace hydra::serve {
namespace {

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheFirstStop) {
    StopMatcher m({"END", "\n\n"});
    EXPECT_EQ(m.push("hello E").text, "hello ");  // "E" may start "END"
    StopMatcher::Result r = m.push("X");
    EXPECT_EQ(r.text, "EX");
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(m.push("a\n").text, "a");
    r = m.push("\nmore");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "");
}

TEST(StopMatcher, StopSplitOverManyPiecesAndEarliestWins) {
    StopMatcher m({"abc", "bcd"});
    EXPECT_EQ(m.push("xa").text, "x");
    EXPECT_EQ(m.push("b").text, "");
    const StopMatcher::Result r = m.push("cd");  // "abc" starts before "bcd"
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "");
    StopMatcher n({"aab"});
    EXPECT_EQ(n.push("aa").text, "");
    EXPECT_EQ(n.push("a").text, "a");  // "aaa": only the last "aa" may still start it
    const StopMatcher::Result s = n.push("b!");
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.text, "");
    StopMatcher held({"xyz"});
    EXPECT_EQ(held.push("abxy").text, "ab");
    EXPECT_EQ(held.flush(), "xy");  // generation ended: the held text was not a stop string
    StopMatcher none({});
    EXPECT_EQ(none.push("anything").text, "anything");
}

TEST(TokenLogprob, LogSoftmaxAndTopAlternatives) {
    const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
    double z = 0;
    for (float x : logits) z += std::exp(double(x));
    const TokenLogprob lp = token_logprob(logits, 4, 3);
    EXPECT_EQ(lp.token, 4);
    EXPECT_NEAR(lp.logprob, 0.5 - std::log(z), 1e-6);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first, 1);  // ties: lower id first
    EXPECT_EQ(lp.top[1].first, 3);
    EXPECT_EQ(lp.top[2].first, 0);
    EXPECT_NEAR(lp.top[2].second, 1.0 - std::log(z), 1e-6);
    EXPECT_TRUE(token_logprob(logits, 0, 0).top.empty());
    EXPECT_EQ(token_logprob(logits, 0, 20).top.size(), logits.size());
}

TEST(SanitizeUtf8, KeepsValidTextAndReplacesEveryBadByte) {
    const std::string valid = "plain, \xC3\xA9t\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80";
    EXPECT_EQ(sanitize_utf8(valid), valid);
    const std::string fffd = "\xEF\xBF\xBD";
    EXPECT_EQ(sanitize_utf8("a\x80"
                            "b"),
              "a" + fffd + "b");                                              // lone continuation byte
    EXPECT_EQ(sanitize_utf8("x\xE2\x82"), "x" + fffd + fffd);                 // cut-off character
    EXPECT_EQ(sanitize_utf8("\xC0\xAF"), fffd + fffd);                        // overlong
    EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), fffd + fffd + fffd);             // surrogate
    EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // past U+10FFFF
}

}  // namespace
}  // namespace hydra::serve
