// Stop string matching with held-back text (see stop_matcher.h).
#include "serve/stop_matcher.h"

#include <algorithm>

namespace hydra::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
    for (std::string& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
    held_.append(text);
    Result r;
    // The earliest occurrence of any stop string ends the output.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        r.text = held_.substr(0, first);
        r.stopped = true;
        held_.clear();
        return r;
    }
    // Hold back the longest tail of the text that is a proper prefix of some stop string: any later
    // occurrence must start inside it (the text before it contains no start of an occurrence).
    size_t hold = 0;
    for (const std::string& s : stops_)
        for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    r.text = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return r;
}

std::string StopMatcher::flush() {
    std::string rest;
    rest.swap(held_);
    return rest;
}

}  // namespace hydra::serve
