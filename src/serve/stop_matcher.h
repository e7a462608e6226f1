// StopMatcher: finds the client's stop strings in streamed text. Text that might be the start of a
// stop string is held back until the next text decides it, so a stop string split across tokens is
// found and never reaches the client, while all other text is released as early as possible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hydra::serve {

class StopMatcher {
  public:
    explicit StopMatcher(std::vector<std::string> stops);  // empty strings are ignored

    struct Result {
        std::string text;      // text safe to emit now
        bool stopped = false;  // a stop string occurred: text ends right before it; nothing follows
    };
    Result push(std::string_view text);
    // The held-back text, at the end of generation (it did not become a stop string).
    std::string flush();

  private:
    std::vector<std::string> stops_;
    std::string held_;
};

}  // namespace hydra::serve
