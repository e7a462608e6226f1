// Tap registration and dispatch (see taps.h).
#include "model/taps.h"

#include <charconv>

#include "core/error.h"

namespace hydra {

void Taps::on(const std::string& name, Hook hook) {
    Entry e{name, -1, std::move(hook)};
    if (name.rfind("blk.", 0) == 0) {
        const size_t dot = name.find('.', 4);
        HYDRA_CHECK(dot != std::string::npos && dot + 1 < name.size(), "tap name '{}': expected blk.<layer>.<point>",
                    name);
        const std::string layer = name.substr(4, dot - 4);
        e.point = name.substr(dot + 1);
        if (layer == "*") {
            e.layer = -2;
        } else {
            int value = 0;
            auto [ptr, ec] = std::from_chars(layer.data(), layer.data() + layer.size(), value);
            HYDRA_CHECK(ec == std::errc() && ptr == layer.data() + layer.size() && value >= 0,
                        "tap name '{}': layer '{}' is not a number or *", name, layer);
            e.layer = value;
        }
    }
    hooks_.push_back(std::move(e));
}

bool Taps::wants(std::string_view point, int layer) const {
    for (const auto& e : hooks_)
        if (e.point == point && (e.layer == layer || (e.layer == -2 && layer >= 0))) return true;
    return false;
}

void Taps::fire(std::string_view point, int layer, Tensor& value) const {
    for (const auto& e : hooks_)
        if (e.point == point && (e.layer == layer || (e.layer == -2 && layer >= 0))) e.hook(point, layer, value);
}

}  // namespace hydra
