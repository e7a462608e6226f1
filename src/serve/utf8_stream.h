// Utf8Stream: buffers the raw bytes of streamed tokens and releases only complete UTF-8 sequences,
// because a byte-level BPE token may end in the middle of a multi-byte character.
#pragma once

#include <string>
#include <string_view>

namespace hydra {

class Utf8Stream {
public:
    // Appends bytes; returns the part that now forms complete characters.
    std::string push(std::string_view bytes);
    // Whatever is left at the end (possibly an incomplete sequence, emitted as is).
    std::string flush();

private:
    std::string pending_;
};

}  // namespace hydra
