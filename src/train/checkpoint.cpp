// Atomic checkpoint directories (see checkpoint.h).
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "model/hf_config.h"
#include "io/safetensors.h"

namespace hydra {

namespace fs = std::filesystem;

void save_checkpoint(const std::string& dir, const LlamaModel& model, const AdamW& optimizer,
                     const TrainState& state, const nlohmann::json& hydra_section,
                     const std::map<std::string, std::string>& extra_files) {
    write_directory_atomically(dir, checkpoint_dir_kind(), [&](const fs::path& tmp) {
        const ParamArena& params = model.params();
        std::vector<SafetensorsEntry> weights, optim;
        for (size_t i = 0; i < params.entries().size(); ++i) {
            const ArenaEntry& e = params.entries()[i];
            weights.push_back({e.name, params.get(i)});
            HYDRA_ASSERT(optimizer.size() == params.numel(), "optimizer size {} != arena {}", optimizer.size(),
                         params.numel());
            optim.push_back({"optim.m." + e.name,
                             Tensor::view(const_cast<float*>(optimizer.m()) + e.offset, e.shape, DType::F32)});
            optim.push_back({"optim.v." + e.name,
                             Tensor::view(const_cast<float*>(optimizer.v()) + e.offset, e.shape, DType::F32)});
        }
        write_safetensors((tmp / "model.safetensors").string(), weights, {{"format", "pt"}});
        write_safetensors((tmp / "optim.safetensors").string(), optim,
                          {{"adamw_step", std::to_string(optimizer.step_count())}});
        nlohmann::json config = hf_config_to_json(model.config());
        config["hydra"] = hydra_section;
        write_text_file(tmp / "config.json", config.dump(2) + "\n");
        nlohmann::json st;
        st["step"] = state.step;
        st["adamw_step"] = optimizer.step_count();
        st["rng"] = state.rng;
        st["data_cursor"] = state.data_cursor;
        st["bad_steps_in_row"] = state.bad_steps_in_row;
        st["last_loss"] = state.last_loss;
        st["format_version"] = 1;
        write_text_file(tmp / "state.json", st.dump(2) + "\n");
        for (const auto& [name, content] : extra_files) write_text_file(tmp / name, content);
    });
}

nlohmann::json read_checkpoint_config(const std::string& dir) {
    const fs::path path = fs::path(dir) / "config.json";
    nlohmann::json config =
        parse_json_bounded(read_file_limited(path, kMaxConfigBytes, "the checkpoint's config",
                                             "is this a hydra checkpoint directory?"),
                           path.string());
    HYDRA_CHECK(config.is_object(), "{}: not a JSON object", path.string());
    return config;
}

LoadedCheckpoint load_checkpoint(const std::string& dir, LlamaModel& model, AdamW& optimizer) {
    LoadedCheckpoint out;
    const nlohmann::json config = read_checkpoint_config(dir);
    out.hydra_section = config.value("hydra", nlohmann::json::object());
    const ModelConfig saved = parse_hf_config(config.dump(), (fs::path(dir) / "config.json").string());
    const ModelConfig& have = model.config();
    HYDRA_CHECK(saved.hidden_size == have.hidden_size && saved.num_layers == have.num_layers &&
                    saved.num_heads == have.num_heads && saved.num_kv_heads == have.num_kv_heads &&
                    saved.intermediate_size == have.intermediate_size && saved.vocab_size == have.vocab_size,
                "{}: the checkpoint's model shape differs from the configured model", dir);
    SafetensorsFile weights = SafetensorsFile::open((fs::path(dir) / "model.safetensors").string());
    SafetensorsFile optim = SafetensorsFile::open((fs::path(dir) / "optim.safetensors").string());
    std::vector<float> m(static_cast<size_t>(optimizer.size()), 0.0f), v(static_cast<size_t>(optimizer.size()), 0.0f);
    for (size_t i = 0; i < model.params().entries().size(); ++i) {
        const ArenaEntry& e = model.params().entries()[i];
        auto copy_into = [&](const SafetensorsFile& f, const std::string& name, float* dst) {
            const SafetensorsTensorInfo& info = f.tensor(name);
            HYDRA_CHECK(info.shape == e.shape, "{}: tensor '{}' has shape {}, expected {}", f.source(), name,
                        shape_str(info.shape), shape_str(e.shape));
            Tensor t = f.to_f32(name);
            std::memcpy(dst, t.f32(), size_t(t.numel()) * sizeof(float));
        };
        copy_into(weights, e.name, model.params().get(i).f32());
        copy_into(optim, "optim.m." + e.name, m.data() + e.offset);
        copy_into(optim, "optim.v." + e.name, v.data() + e.offset);
    }
    const fs::path state_path = fs::path(dir) / "state.json";
    const nlohmann::json st = parse_json_bounded(
        read_file_limited(state_path, kMaxConfigBytes, "the training state"), state_path.string());
    HYDRA_CHECK(st.is_object(), "{}: not a JSON object", state_path.string());
    int64_t adamw_step = 0;
    try {
        out.state.step = st.at("step").get<int64_t>();
        out.state.rng = st.at("rng").get<std::array<uint64_t, 4>>();
        out.state.data_cursor = st.at("data_cursor");
        out.state.bad_steps_in_row = st.value("bad_steps_in_row", int64_t(0));
        out.state.last_loss = st.value("last_loss", 0.0);
        adamw_step = st.at("adamw_step").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
        fail("{}: {}", state_path.string(), e.what());
    }
    // Every optimizer step is a training step (skipped non-finite steps are not optimizer steps).
    HYDRA_CHECK(out.state.step >= 0, "{}: step {} is negative (a corrupt checkpoint)", state_path.string(),
                out.state.step);
    HYDRA_CHECK(adamw_step >= 0 && adamw_step <= out.state.step,
                "{}: step {} is inconsistent with the optimizer's step count {} (a corrupt checkpoint)",
                state_path.string(), out.state.step, adamw_step);
    HYDRA_CHECK(out.state.bad_steps_in_row >= 0 && out.state.bad_steps_in_row <= out.state.step,
                "{}: bad_steps_in_row {} is out of range for step {}", state_path.string(),
                out.state.bad_steps_in_row, out.state.step);
    optimizer.load_state(m.data(), v.data(), optimizer.size(), adamw_step);
    return out;
}

}  // namespace hydra
