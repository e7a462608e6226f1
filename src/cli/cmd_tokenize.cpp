// `hydra tokenize MODEL TEXT`: token ids and their pieces, one per line (or --ids-only).
#include <fmt/format.h>

#include "cli/commands.h"
#include "model/model_loader.h"
#include "core/error.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::cli {

namespace {
struct TokenizeOptions {
    std::string model = default_model_path();
    std::string text;
    bool ids_only = false;
    bool no_special = false;
};

// Printable form of a token's bytes: escapes control characters and invalid UTF-8.
std::string printable(const std::string& bytes) {
    std::string out;
    for (unsigned char c : bytes) {
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += char(c);
    }
    return out;
}
}  // namespace

void register_tokenize(CLI::App& app) {
    auto* o = new TokenizeOptions;
    auto* cmd = app.add_subcommand("tokenize", "Show the token ids and pieces of a text");
    cmd->add_option("MODEL", o->model, "a .gguf file or a model directory")->required();
    cmd->add_option("TEXT", o->text, "the text to tokenize")->required();
    cmd->add_flag("--ids-only", o->ids_only, "print only the ids, space-separated");
    cmd->add_flag("--no-special", o->no_special, "treat special-token text as plain text");
    cmd->callback([o] {
        std::optional<TokenizerVocab> vocab = load_vocab(o->model);  // the weights are not needed
        HYDRA_CHECK(vocab.has_value(), "{}: the model has no tokenizer", o->model);
        Tokenizer tok(*vocab, o->model);
        std::vector<int32_t> ids = tok.encode(o->text, !o->no_special);
        if (o->ids_only) {
            for (size_t i = 0; i < ids.size(); ++i) fmt::print("{}{}", i ? " " : "", ids[i]);
            fmt::print("\n");
            return;
        }
        for (int32_t id : ids) fmt::print("{:>7} '{}'\n", id, printable(tok.token_bytes(id)));
        fmt::print("{} tokens\n", ids.size());
    });
}

}  // namespace hydra::cli
