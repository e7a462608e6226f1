// libFuzzer target for the HF config.json import: parse_hf_config on arbitrary text must either return
// a ModelConfig that passes its own validate() with sizes that multiply without overflow, or throw
// hydra::Error. Anything else (a crash, a sanitizer report, a nlohmann or std exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_hf_config 300   (seeds: fuzz/seeds/hf_config)
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/hf_config.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const hydra::ModelConfig c = hydra::parse_hf_config(text, "fuzz/model/config.json");
        // A returned config is a validated one: re-validating must not throw, and the derived sizes
        // downstream code computes must be consistent.
        c.validate("fuzz/model/config.json");
        if (c.architecture != "llama" && c.architecture != "qwen2" && c.architecture != "qwen3")
            __builtin_trap();
        if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) __builtin_trap();
        if (c.q_dim() <= 0 || c.kv_dim() <= 0 || c.group_size() <= 0) __builtin_trap();
        if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 1)) __builtin_trap();
        if (c.name.empty()) __builtin_trap();
        volatile int64_t sink = 0;
        for (int32_t id : c.bos_token_ids) sink = sink + id;
        for (int32_t id : c.eos_token_ids) sink = sink + id;
        (void)sink;
    } catch (const hydra::Error&) {
    }
    return 0;
}
