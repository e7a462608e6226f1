// Directory kinds, manifests and recognition (see dir_kind.h).
#include "io/dir_kind.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_parse.h"

namespace hydra {

namespace fs = std::filesystem;

const DirKind& checkpoint_dir_kind() {
    static const DirKind k{"checkpoint",
                           {"model.safetensors", "optim.safetensors", "config.json", "state.json",
                            "log.jsonl", "loss_curve.png", "tokenizer.json", "tokenizer_config.json"},
                           {"log.jsonl", "loss_curve.png"},
                           "train_config"};
    return k;
}

const DirKind& model_dir_kind() {
    static const DirKind k{"model directory",
                           {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                            "chat_template.jinja"},
                           {},
                           "plan"};
    return k;
}

namespace {

const std::vector<const DirKind*>& all_kinds() {
    static const std::vector<const DirKind*> kinds = {&checkpoint_dir_kind(), &model_dir_kind()};
    return kinds;
}

bool listed(const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

struct Entry {
    std::string name;
    bool is_file = false;
};

std::vector<Entry> list_entries(const fs::path& dir) {
    std::vector<Entry> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        std::error_code ec2;
        out.push_back({e.path().filename().string(), e.is_regular_file(ec2) && !e.is_symlink(ec2)});
    }
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
    return out;
}

// The hydra object of a pre-manifest directory's config.json (null when absent or unreadable).
nlohmann::json legacy_hydra_section(const fs::path& dir) {
    try {
        const nlohmann::json root =
            parse_json_bounded(read_file_limited(dir / "config.json", kMaxConfigBytes, "config.json"),
                               (dir / "config.json").string());
        if (root.is_object() && root.contains("hydra") && root["hydra"].is_object()) return root["hydra"];
    } catch (const Error&) {
    }
    return nullptr;
}

// Whether `entries` are all files `kind` (or the manifest) allows, scratch files included.
bool entries_fit(const std::vector<Entry>& entries, const DirKind& kind) {
    for (const Entry& e : entries) {
        const bool known = e.name == kManifestName || listed(kind.files, e.name) || is_scratch_name(e.name);
        if (!e.is_file || !known) return false;
    }
    return true;
}

std::string describe(const std::vector<Entry>& entries, const DirKind& kind) {
    std::string out;
    int shown = 0, unknown = 0;
    for (const Entry& e : entries) {
        if (e.is_file && (listed(kind.files, e.name) || e.name == kManifestName || is_scratch_name(e.name)))
            continue;
        ++unknown;
        if (shown < 4) {
            out += (out.empty() ? "" : ", ") + e.name + (e.is_file ? "" : "/");
            ++shown;
        }
    }
    if (unknown > shown) out += fmt::format(" and {} more", unknown - shown);
    return out;
}

}  // namespace

bool is_scratch_name(const std::string& name) {
    if (name.size() > 5 && name.ends_with(".part")) return true;
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 >= name.size()) return false;
    return std::all_of(name.begin() + long(at) + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<DirManifest> read_manifest(const fs::path& dir) {
    try {
        const fs::path p = dir / kManifestName;
        const nlohmann::json j =
            parse_json_bounded(read_file_limited(p, kMaxConfigBytes, "the manifest"), p.string());
        DirManifest m;
        m.kind = j.at("kind").get<std::string>();
        m.generation = j.at("generation").get<int64_t>();
        for (const auto& [name, size] : j.at("files").items()) {
            if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
                return std::nullopt;
            m.files[name] = size.get<uint64_t>();
        }
        return m;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::string manifest_text(const fs::path& dir, const DirKind& kind, int64_t generation) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().filename() != kManifestName &&
            !listed(kind.live, e.path().filename().string()))
            files[e.path().filename().string()] = uint64_t(e.file_size());
    nlohmann::json j = {{"format", "hydra-directory"},
                        {"version", 1},
                        {"kind", kind.name},
                        {"generation", generation},
                        {"files", files}};
    return j.dump(2) + "\n";
}

bool manifest_complete(const fs::path& dir, const DirManifest& m) {
    for (const auto& [name, size] : m.files) {
        struct stat st {};
        if (::lstat((dir / name).c_str(), &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) != size)
            return false;
    }
    return true;
}

fs::path normalize_dir_path(const std::string& path, const std::string& option) {
    HYDRA_CHECK(!path.empty(), "{}: the path is empty", option);
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(fs::path(path)), ec);
    if (ec) p = fs::absolute(fs::path(path)).lexically_normal();
    while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
    HYDRA_CHECK(p.has_relative_path() && p.has_filename() && p.filename() != "." && p.filename() != "..",
                "{} {}: not a usable directory path (the filesystem root?)", option, path);
    return p;
}

DirInspection inspect_directory(const fs::path& dir, const DirKind& kind) {
    DirInspection out;
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);
    if (!fs::exists(st)) {
        out.state = fs::exists(fs::symlink_status(dir, ec)) ? DirState::Foreign : DirState::Missing;
        if (out.state == DirState::Foreign) out.foreign = "a broken symbolic link";
        return out;
    }
    if (!fs::is_directory(st)) {
        out.state = DirState::Foreign;
        out.foreign = fs::is_regular_file(st) ? "a file" : "not a directory";
        return out;
    }
    const std::vector<Entry> entries = list_entries(dir);
    if (entries.empty()) {
        out.state = DirState::Empty;
        return out;
    }
    out.manifest = read_manifest(dir);
    nlohmann::json legacy;
    bool legacy_read = false;
    for (const DirKind* k : all_kinds()) {
        if (!entries_fit(entries, *k)) continue;
        bool is_k = false, complete = false;
        if (out.manifest) {
            is_k = out.manifest->kind == k->name;
            complete = is_k && manifest_complete(dir, *out.manifest);
        } else if (fs::exists(dir / "config.json")) {
            if (!legacy_read) {
                legacy = legacy_hydra_section(dir);
                legacy_read = true;
            }
            is_k = legacy.is_object() && legacy.contains(k->hydra_key) &&
                   (k == all_kinds().front() || !legacy.contains(all_kinds().front()->hydra_key));
            complete = is_k && fs::exists(dir / "model.safetensors");
        } else {
            // Only the files a run writes before its first save (a run that stopped early).
            is_k = std::all_of(entries.begin(), entries.end(), [&](const Entry& e) {
                return listed(k->live, e.name) || is_scratch_name(e.name);
            });
        }
        if (!is_k) continue;
        out.state = k->name == kind.name ? DirState::Ours : DirState::OtherKind;
        out.other = k->name;
        out.complete = complete;
        return out;
    }
    out.state = DirState::Foreign;
    out.foreign = describe(entries, kind);
    if (out.foreign.empty()) out.foreign = "a config.json that hydra did not write";
    return out;
}

std::string refusal_message(const fs::path& dir, const DirKind& kind, const DirInspection& found) {
    if (found.state == DirState::OtherKind)
        return fmt::format(
            "{} is a hydra {}, not a hydra {}; refusing to replace it (choose another path, or pass "
            "--force to replace it)",
            dir.string(), found.other, kind.name);
    if (found.foreign == "a file" || found.foreign == "not a directory" ||
        found.foreign == "a broken symbolic link")
        return fmt::format(
            "{} exists and is {}, not a hydra {}; refusing to replace it (choose another path, or pass "
            "--force to replace it)",
            dir.string(), found.foreign, kind.name);
    return fmt::format(
        "{} exists and is not a hydra {} (it holds {}); refusing to replace files hydra did not write "
        "(choose another path, or pass --force to delete it and write there)",
        dir.string(), kind.name, found.foreign);
}

}  // namespace hydra
