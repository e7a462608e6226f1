// The kinds of directory hydra writes (training checkpoints, model directories), how to recognise
// one before replacing it, and the manifest that marks a saved copy complete. hydra never deletes a
// path unless it recognises it as its own directory of the expected kind: every entry is a file
// hydra writes there, and the manifest (or, for directories saved before manifests existed, the
// "hydra" object of config.json) says which kind it is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hydra {

struct DirKind {
    std::string name;                // "checkpoint" | "model directory" (messages: "a hydra checkpoint")
    std::vector<std::string> files;  // every file hydra writes into such a directory (manifest excluded)
    std::vector<std::string> live;   // of those, files a run writes before its first save (log, plot)
    std::string hydra_key;           // pre-manifest directories: config.json["hydra"] holds this key
};

const DirKind& checkpoint_dir_kind();
const DirKind& model_dir_kind();

// "hydra_manifest.json": written last into every saved directory.
inline constexpr const char* kManifestName = "hydra_manifest.json";

struct DirManifest {
    std::string kind;                       // DirKind::name
    int64_t generation = 0;                 // one more than the copy it replaced
    std::map<std::string, uint64_t> files;  // name -> size in bytes
};

// The manifest of `dir`, or nullopt when it is missing or unreadable.
std::optional<DirManifest> read_manifest(const std::filesystem::path& dir);
// The manifest's JSON text for the regular files now in `dir`, except the kind's live files (a run
// continues its log in place after a save, so their sizes do not mark completeness).
std::string manifest_text(const std::filesystem::path& dir, const DirKind& kind, int64_t generation);
// True when every file the manifest lists is in `dir` with its listed size.
bool manifest_complete(const std::filesystem::path& dir, const DirManifest& m);

// Absolute, "." / ".." and symlinks of existing parts resolved, no trailing slash ("runs/x/" and
// "./runs/x" name the same directory). Refuses an empty path and the filesystem root.
std::filesystem::path normalize_dir_path(const std::string& path, const std::string& option);

enum class DirState {
    Missing,    // nothing there
    Empty,      // an empty directory
    Ours,       // a hydra directory of the expected kind (complete or not)
    OtherKind,  // a hydra directory of another kind (`other` names it)
    Foreign,    // anything else: a file, or a directory holding files hydra did not write
};

struct DirInspection {
    DirState state = DirState::Missing;
    std::string other;    // OtherKind: the kind's name
    std::string foreign;  // Foreign: what is there ("a file", "important.txt, sub/, ...")
    std::optional<DirManifest> manifest;
    bool complete =
        false;  // Ours: a manifest whose files are all there, or a pre-manifest copy with config.json
};

DirInspection inspect_directory(const std::filesystem::path& dir, const DirKind& kind);

// Whether `name` is a scratch file of an interrupted write ("x.part", "x.tmp.<pid>").
bool is_scratch_name(const std::string& name);

// The refusal for a path that inspect_directory did not find to be ours ("... pass --force ...").
std::string refusal_message(const std::filesystem::path& dir, const DirKind& kind,
                            const DirInspection& found);

}  // namespace hydra
