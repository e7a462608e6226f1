// libFuzzer target for the safetensors reader: any input must either parse into tensors whose bytes
// lie inside the input, or throw hydra::Error. Every tensor is touched; small float ones are converted.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // An exact-size copy so AddressSanitizer catches a read one byte past the end.
    std::vector<uint8_t> copy(data, data + size);
    try {
        const hydra::SafetensorsFile f =
            hydra::SafetensorsFile::parse(copy.data(), copy.size(), "fuzz.safetensors");
        volatile uint8_t sink = 0;
        for (const auto& info : f.tensors()) {
            // The validated range must be readable: touch its first and last byte.
            if (info.nbytes() > 0) {
                const uint8_t* p = f.raw(info);
                sink = sink ^ p[0] ^ p[info.nbytes() - 1];
            }
            (void)f.find(info.name);
            if (info.numel <= 4096) {
                try {
                    hydra::Tensor t = f.to_f32(info);
                    if (t.numel() > 0) sink = sink ^ uint8_t(t.f32()[0] != 0);
                } catch (const hydra::Error&) {
                    // dtypes without an f32 conversion
                }
            }
        }
        for (const auto& [k, v] : f.metadata()) sink = sink ^ uint8_t(k.size() + v.size());
        (void)sink;
    } catch (const hydra::Error&) {
    }
    return 0;
}
