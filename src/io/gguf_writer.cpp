// GgufWriter: serialises metadata and tensors in GGUF layout (engines.md §2.1): header, kv pairs,
// tensor infos, zero padding to the alignment, then each tensor's data padded to the alignment.
#include "io/gguf_writer.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace hydra {

GgufValue gguf_uint(GgufValueType type, uint64_t v) {
    HYDRA_ASSERT(type == GgufValueType::UINT8 || type == GgufValueType::UINT16 ||
                     type == GgufValueType::UINT32 || type == GgufValueType::UINT64,
                 "gguf_uint: not an unsigned type");
    GgufValue out;
    out.type = type;
    out.u = v;
    out.i = int64_t(v);
    return out;
}

GgufValue gguf_int(GgufValueType type, int64_t v) {
    HYDRA_ASSERT(type == GgufValueType::INT8 || type == GgufValueType::INT16 ||
                     type == GgufValueType::INT32 || type == GgufValueType::INT64,
                 "gguf_int: not a signed type");
    GgufValue out;
    out.type = type;
    out.i = v;
    out.u = uint64_t(v);
    return out;
}

GgufValue gguf_float(GgufValueType type, double v) {
    HYDRA_ASSERT(type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64,
                 "gguf_float: not a float type");
    GgufValue out;
    out.type = type;
    out.f = v;
    return out;
}

GgufValue gguf_bool(bool v) {
    GgufValue out;
    out.type = GgufValueType::BOOL;
    out.b = v;
    out.i = v;
    out.u = v;
    return out;
}

GgufValue gguf_string(std::string v) {
    GgufValue out;
    out.type = GgufValueType::STRING;
    out.s = std::move(v);
    return out;
}

GgufValue gguf_array(GgufValueType elem_type, std::vector<GgufValue> elems) {
    for (const GgufValue& e : elems)
        HYDRA_ASSERT(e.type == elem_type, "gguf_array: element of the wrong type");
    GgufValue out;
    out.type = GgufValueType::ARRAY;
    out.elem_type = elem_type;
    out.array = std::move(elems);
    return out;
}

GgufValue gguf_string_array(const std::vector<std::string>& v) {
    std::vector<GgufValue> elems;
    elems.reserve(v.size());
    for (const std::string& s : v) elems.push_back(gguf_string(s));
    return gguf_array(GgufValueType::STRING, std::move(elems));
}

namespace {

class Out {
  public:
    std::vector<uint8_t> bytes;

    template <typename T>
    void put(T v) {
        const size_t at = bytes.size();
        bytes.resize(at + sizeof(T));
        std::memcpy(bytes.data() + at, &v, sizeof(T));
    }
    void put_string(const std::string& s) {
        put<uint64_t>(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
    }
    void pad_to(uint64_t alignment) {
        while (bytes.size() % alignment) bytes.push_back(0);
    }

    // The payload of a value of type `type` (no type tag).
    void put_value(const GgufValue& v) {
        switch (v.type) {
            case GgufValueType::UINT8:
                put<uint8_t>(uint8_t(v.u));
                break;
            case GgufValueType::INT8:
                put<int8_t>(int8_t(v.i));
                break;
            case GgufValueType::UINT16:
                put<uint16_t>(uint16_t(v.u));
                break;
            case GgufValueType::INT16:
                put<int16_t>(int16_t(v.i));
                break;
            case GgufValueType::UINT32:
                put<uint32_t>(uint32_t(v.u));
                break;
            case GgufValueType::INT32:
                put<int32_t>(int32_t(v.i));
                break;
            case GgufValueType::FLOAT32:
                put<float>(float(v.f));
                break;
            case GgufValueType::BOOL:
                put<uint8_t>(v.b ? 1 : 0);
                break;
            case GgufValueType::STRING:
                put_string(v.s);
                break;
            case GgufValueType::ARRAY:
                put<uint32_t>(uint32_t(v.elem_type));
                put<uint64_t>(v.array.size());
                for (const GgufValue& e : v.array) {
                    HYDRA_ASSERT(e.type == v.elem_type, "GgufWriter: array element of the wrong type");
                    put_value(e);
                }
                break;
            case GgufValueType::UINT64:
                put<uint64_t>(v.u);
                break;
            case GgufValueType::INT64:
                put<int64_t>(v.i);
                break;
            case GgufValueType::FLOAT64:
                put<double>(v.f);
                break;
            default:
                HYDRA_ASSERT(false, "GgufWriter: invalid value type {}", uint32_t(v.type));
        }
    }
};

uint64_t padded(uint64_t n, uint64_t a) {
    return (n + a - 1) / a * a;
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment, uint32_t version) : alignment_(alignment), version_(version) {
    HYDRA_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0,
                "GgufWriter: alignment {} is not a power of two", alignment);
    HYDRA_CHECK(version == 2 || version == 3, "GgufWriter: version {} (supported: 2, 3)", version);
    if (alignment != 32) add_u32("general.alignment", alignment);
}

void GgufWriter::add(const std::string& key, GgufValue value) {
    for (auto& [k, v] : metadata_) {
        if (k != key) continue;
        // The constructor's general.alignment may be overridden once by the caller, with the same value.
        HYDRA_CHECK(
            key == "general.alignment" && value.type == GgufValueType::UINT32 && value.u == alignment_,
            "GgufWriter: duplicate metadata key '{}'", key);
        v = std::move(value);
        return;
    }
    metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& dims, GgmlType type,
                            const void* data, size_t nbytes) {
    for (const Tensor& t : tensors_) HYDRA_CHECK(t.name != name, "GgufWriter: duplicate tensor '{}'", name);
    const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
    HYDRA_CHECK(info != nullptr, "GgufWriter: tensor '{}': unknown type {}", name, uint32_t(type));
    HYDRA_CHECK(!dims.empty() && dims.size() <= 4, "GgufWriter: tensor '{}': {} dims (expected 1..4)", name,
                dims.size());
    int64_t numel = 1;
    for (int64_t d : dims) {
        HYDRA_CHECK(d > 0, "GgufWriter: tensor '{}': dimension {} is not positive", name, d);
        numel *= d;
    }
    HYDRA_CHECK(dims[0] % info->block_elems == 0,
                "GgufWriter: tensor '{}': dims[0] = {} not a multiple of {}", name, dims[0],
                info->block_elems);
    const size_t expect = size_t(numel / info->block_elems) * size_t(info->block_bytes);
    HYDRA_CHECK(nbytes == expect, "GgufWriter: tensor '{}': {} bytes given, {} {} elements need {}", name,
                nbytes, numel, info->name, expect);
    const auto* p = static_cast<const uint8_t*>(data);
    tensors_.push_back({name, dims, type, std::vector<uint8_t>(p, p + nbytes)});
}

void GgufWriter::add_tensor_f32(const std::string& name, const std::vector<int64_t>& dims,
                                const std::vector<float>& data) {
    add_tensor(name, dims, GgmlType::F32, data.data(), data.size() * sizeof(float));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    Out o;
    o.put<uint32_t>(0x46554747);
    o.put<uint32_t>(version_);
    o.put<uint64_t>(tensors_.size());
    o.put<uint64_t>(metadata_.size());
    for (const auto& [key, value] : metadata_) {
        o.put_string(key);
        o.put<uint32_t>(uint32_t(value.type));
        o.put_value(value);
    }
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
        o.put_string(t.name);
        o.put<uint32_t>(uint32_t(t.dims.size()));
        for (int64_t d : t.dims) o.put<uint64_t>(uint64_t(d));
        o.put<uint32_t>(uint32_t(t.type));
        o.put<uint64_t>(offset);
        offset += padded(t.data.size(), alignment_);
    }
    o.pad_to(alignment_);
    for (const Tensor& t : tensors_) {
        o.bytes.insert(o.bytes.end(), t.data.begin(), t.data.end());
        o.pad_to(alignment_);
    }
    return std::move(o.bytes);
}

void GgufWriter::write(const std::string& path) const {
    const std::vector<uint8_t> bytes = to_bytes();
    const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) fail("{}: cannot create: {}", tmp, std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0 &&
                    ::fsync(::fileno(f)) == 0;
    const int err = errno;
    if (std::fclose(f) != 0 || !ok) {
        std::remove(tmp.c_str());
        fail("{}: write failed: {}", tmp, std::strerror(ok ? errno : err));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        std::remove(tmp.c_str());
        fail("{}: cannot rename {} into place: {}", path, tmp, std::strerror(e));
    }
}

}  // namespace hydra
