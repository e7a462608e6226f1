// json_member: a member of a JSON object read from outside, or null when it is absent or JSON null (both
// mean "not given" in the files and requests hydra reads), without nlohmann's const operator[], which is
// undefined for a missing key. For any nlohmann::basic_json flavour.
#pragma once

namespace hydra {

template <typename Json, typename Key>
const Json* json_member(const Json& obj, const Key& key) {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace hydra
