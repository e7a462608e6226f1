// Read-only memory mapping of a whole file; the unit every model-file parser works on.
// Errors name the path and say what went wrong (missing, a directory, unreadable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hydra {

class MappedFile {
public:
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace hydra
