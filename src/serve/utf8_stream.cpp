// UTF-8 boundary detection for streaming (see utf8_stream.h).
#include "serve/utf8_stream.h"

namespace hydra {

std::string Utf8Stream::push(std::string_view bytes) {
    pending_.append(bytes);
    // Find the start of the last (possibly incomplete) sequence within the final 4 bytes.
    size_t cut = pending_.size();
    for (size_t back = 1; back <= 4 && back <= pending_.size(); ++back) {
        const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t need = 1;
        if ((c & 0xE0) == 0xC0) need = 2;
        else if ((c & 0xF0) == 0xE0) need = 3;
        else if ((c & 0xF8) == 0xF0) need = 4;
        if (back < need) cut = pending_.size() - back;  // lead byte whose sequence is not complete yet
        break;
    }
    std::string ready = pending_.substr(0, cut);
    pending_.erase(0, cut);
    return ready;
}

std::string Utf8Stream::flush() {
    std::string rest;
    rest.swap(pending_);
    return rest;
}

}  // namespace hydra
