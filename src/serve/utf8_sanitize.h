// Valid UTF-8 for clients: a model can emit byte tokens that never form a character (a lone
// continuation byte, a lead byte cut off at the end of generation); JSON needs valid UTF-8, so each
// byte that is not part of a well-formed character becomes U+FFFD, as Python's errors="replace" does.
#pragma once

#include <string>
#include <string_view>

namespace hydra::serve {

std::string sanitize_utf8(std::string_view bytes);

}  // namespace hydra::serve
