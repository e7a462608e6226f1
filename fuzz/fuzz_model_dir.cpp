// libFuzzer target for opening a Hugging Face or converted model directory (model/model_loader.h), the
// config.json being the input and the weights a fixed tiny Llama (tests/data/tiny_hf/llama/model.safetensors,
// linked into a scratch directory once). load_model must either return a model whose config validates and
// whose weights are all present, or throw hydra::Error, and never allocate what the config merely claims:
// a config that describes more parameters than the file holds is refused before the model exists (the
// target runs under libFuzzer's RSS limit). Anything else (a crash, a sanitizer report, a std or nlohmann
// exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_model_dir 300   (seeds: fuzz/seeds/model_dir)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "model/model_loader.h"

namespace fs = std::filesystem;

namespace {

fs::path g_dir;  // the scratch directory, removed at exit

fs::path scratch() {
    if (g_dir.empty()) {
        g_dir = fs::temp_directory_path() / ("fuzz_model_dir_" + std::to_string(getpid()));
        fs::create_directories(g_dir);
        fs::create_symlink(HYDRA_SOURCE_DIR "/tests/data/tiny_hf/llama/model.safetensors",
                           g_dir / "model.safetensors");
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(g_dir, ec);
        });
    }
    return g_dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const fs::path dir = scratch();
    {
        std::ofstream f(dir / "config.json", std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    }
    try {
        const hydra::LoadedModel m = hydra::load_model(dir.string());
        if (!m.model) __builtin_trap();
        m.model->config().validate("fuzz/config.json");
        if (m.format != "hf-safetensors") __builtin_trap();
    } catch (const hydra::Error&) {
    }
    return 0;
}
