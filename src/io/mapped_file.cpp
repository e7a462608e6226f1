// mmap-based implementation of MappedFile.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hydra {

MappedFile::MappedFile(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        fail("{}: cannot stat: {}", path, std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path);
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            ::close(fd);
            fail("{}: cannot map {} bytes: {}", path, size_, std::strerror(errno));
        }
        data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace hydra
