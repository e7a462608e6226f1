// The tokenizer files a derived model carries (see tokenizer_files.h).
#include "model/tokenizer_files.h"

#include <filesystem>

#include "io/atomic_dir.h"
#include "tokenizer/vocab_to_tokenizer_json.h"

namespace hydra {

std::map<std::string, std::string> tokenizer_files_of(const std::string& source_path,
                                                      const LoadedModel& source) {
    namespace fs = std::filesystem;
    std::map<std::string, std::string> files;
    if (fs::is_directory(source_path)) {
        for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
            if (fs::exists(fs::path(source_path) / name))
                files[name] = read_text_file(fs::path(source_path) / name);
    } else if (source.vocab) {
        files["tokenizer.json"] = vocab_to_tokenizer_json(*source.vocab);
        files["tokenizer_config.json"] = vocab_to_tokenizer_config_json(*source.vocab);
    }
    return files;
}

}  // namespace hydra
