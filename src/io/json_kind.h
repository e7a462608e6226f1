// json_kind: the JSON type of a value as a word for error messages ("an integer", "a string", ...),
// for any nlohmann::basic_json flavour (json, ordered_json).
#pragma once

#include <string>

namespace hydra {

template <typename Json>
std::string json_kind(const Json& j) {
    if (j.is_number_integer()) return "an integer";
    if (j.is_number_float()) return "a float";
    if (j.is_string()) return "a string";
    if (j.is_boolean()) return "a boolean";
    if (j.is_null()) return "null";
    if (j.is_array()) return "an array";
    if (j.is_object()) return "an object";
    return "a value";
}

}  // namespace hydra
