// libFuzzer target for `hydra serve`'s stop strings in streamed text (serve/stop_matcher.h): the client's
// stop strings and the generated text cut into tokens at arbitrary points. Input: up to four stop strings,
// each ended by '\x01', then the text, '\x02' marking token boundaries. What the matcher releases (plus its
// flush when no stop string occurred) must equal what generation would return: the text up to the first token
// after which it holds a stop string, cut right before the earliest occurrence there (or the whole text when
// none occurs).
// Build and run: tools/fuzz.sh fuzz_stop_matcher 300   (seeds: fuzz/seeds/stop_matcher)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serve/stop_matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> stops;
    while (stops.size() < 4) {
        const size_t end = in.find('\x01');
        if (end == std::string_view::npos) break;
        stops.emplace_back(in.substr(0, end));
        in.remove_prefix(end + 1);
    }
    std::vector<std::string_view> tokens;
    std::string text;
    for (size_t at = 0; at <= in.size();) {
        const size_t end = std::min(in.find('\x02', at), in.size());
        tokens.push_back(in.substr(at, end - at));
        text += in.substr(at, end - at);
        at = end + 1;
    }
    // Generation stops at the first token after which the text so far holds a stop string; the output is
    // that text cut before the earliest occurrence in it.
    std::string want = text;
    bool want_stop = false;
    {
        std::string so_far;
        for (std::string_view t : tokens) {
            so_far += t;
            size_t cut = std::string::npos;
            for (const std::string& s : stops)
                if (!s.empty()) cut = std::min(cut, so_far.find(s));
            if (cut != std::string::npos) {
                want = so_far.substr(0, cut);
                want_stop = true;
                break;
            }
        }
    }

    hydra::serve::StopMatcher m(stops);
    std::string got;
    bool stopped = false;
    for (std::string_view t : tokens) {
        const hydra::serve::StopMatcher::Result r = m.push(t);
        got += r.text;
        if (r.stopped) {
            stopped = true;
            break;
        }
    }
    if (!stopped) got += m.flush();
    if (got != want) __builtin_trap();
    if (stopped != want_stop) __builtin_trap();
    return 0;
}
