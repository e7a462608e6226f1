// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch every metadata value
// through the typed getters, every tensor info, and dequantize the first row of each tensor
// (bounded). Only hydra::Error may escape the parser; anything else (a crash, a sanitizer report,
// std::bad_alloc, another exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_gguf 600   (seeds: fuzz/seeds/gguf)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/ggml_types.h"
#include "io/gguf.h"

namespace {

// Calls every getter that applies; type mismatches must throw hydra::Error, not crash.
void touch_value(const hydra::GgufFile& g, const std::string& key, const hydra::GgufValue& v) {
    auto guarded = [](auto&& f) {
        try {
            f();
        } catch (const hydra::Error&) {
        }
    };
    guarded([&] { (void)g.get_int(key); });
    guarded([&] { (void)g.get_float(key); });
    guarded([&] { (void)g.get_bool(key); });
    guarded([&] { (void)g.get_string(key); });
    guarded([&] { (void)g.get_int_array(key); });
    guarded([&] { (void)g.get_float_array(key); });
    guarded([&] { (void)g.get_string_array(key); });
    guarded([&] { (void)g.get_int_opt(key); });
    (void)v.is_integer();
    (void)v.is_float();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const hydra::GgufFile g = hydra::GgufFile::parse(data, size, "fuzz.gguf");
        for (const auto& [key, value] : g.metadata()) {
            if (g.find(key) != &value) __builtin_trap();  // index must agree with the list
            touch_value(g, key, value);
        }
        (void)g.find("general.alignment");
        std::vector<float> row;
        for (const hydra::GgufTensorInfo& t : g.tensors()) {
            if (g.find_tensor(t.name) != &t) __builtin_trap();
            const hydra::GgmlTypeInfo* info = hydra::ggml_type_info(uint32_t(t.type));
            if (info == nullptr || t.dims.empty() || t.dims[0] % info->block_elems != 0) __builtin_trap();
            // The parser guarantees [data_offset + offset, + nbytes) lies inside the input.
            if (g.data_offset() + t.offset + t.nbytes > size) __builtin_trap();
            if (!info->can_dequantize || t.dims[0] > (int64_t(1) << 20)) continue;
            const int64_t ne0 = t.dims[0];
            row.resize(size_t(ne0));
            hydra::dequantize_row(t.type, g.tensor_data(t), row.data(), ne0);
            volatile float sink = 0;
            for (float v : row) sink = sink + v;
        }
    } catch (const hydra::Error&) {
    }
    return 0;
}
