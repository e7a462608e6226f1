// safetensors parsing, validation, conversion and atomic deterministic writing (see safetensors.h).
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/half.h"
#include "io/fault_injection.h"
#include "io/json_kind.h"

namespace hydra {

namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // 100 MB, as the reference implementation
constexpr int kMaxJsonDepth = 64;                 // our headers nest 3 deep; this only stops abuse

struct DTypeRow {
    StDType type;
    std::string_view name;
    size_t bits;
};

constexpr DTypeRow kDTypes[] = {
    {StDType::BOOL, "BOOL", 8},
    {StDType::U8, "U8", 8},
    {StDType::I8, "I8", 8},
    {StDType::I16, "I16", 16},
    {StDType::U16, "U16", 16},
    {StDType::F16, "F16", 16},
    {StDType::BF16, "BF16", 16},
    {StDType::I32, "I32", 32},
    {StDType::U32, "U32", 32},
    {StDType::F32, "F32", 32},
    {StDType::F64, "F64", 64},
    {StDType::I64, "I64", 64},
    {StDType::U64, "U64", 64},
    {StDType::C64, "C64", 64},
    {StDType::F8_E4M3, "F8_E4M3", 8},
    {StDType::F8_E5M2, "F8_E5M2", 8},
    {StDType::F8_E8M0, "F8_E8M0", 8},
    {StDType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {StDType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {StDType::F4, "F4", 4},
    {StDType::F6_E2M3, "F6_E2M3", 6},
    {StDType::F6_E3M2, "F6_E3M2", 6},
};

const DTypeRow& dtype_row(StDType t) {
    for (const DTypeRow& row : kDTypes)
        if (row.type == t) return row;
    fail_at(__FILE__, __LINE__, fmt::format("unknown StDType {}", int(t)));
}

std::string all_dtype_names() {
    std::string s;
    for (const DTypeRow& row : kDTypes) s += (s.empty() ? "" : ", ") + std::string(row.name);
    return s;
}


// Parses JSON text, rejecting duplicate keys (nlohmann would silently keep one of them) and absurd
// nesting. Keeps key order. Errors name `source`.
ojson parse_json_strict(const char* begin, const char* end, const std::string& source, const char* what) {
    std::vector<std::set<std::string>> open_objects;
    auto callback = [&](int depth, ojson::parse_event_t event, ojson& parsed) -> bool {
        if (depth > kMaxJsonDepth) fail("{}: {} nests deeper than {} levels", source, what, kMaxJsonDepth);
        switch (event) {
            case ojson::parse_event_t::object_start:
                open_objects.emplace_back();
                break;
            case ojson::parse_event_t::object_end:
                if (!open_objects.empty()) open_objects.pop_back();
                break;
            case ojson::parse_event_t::key: {
                HYDRA_ASSERT(!open_objects.empty(), "JSON key outside an object");
                const std::string& key = parsed.get_ref<const std::string&>();
                if (!open_objects.back().insert(key).second)
                    fail("{}: {} has the key \"{}\" twice (duplicate keys are not allowed)", source, what,
                         key);
                break;
            }
            default:
                break;
        }
        return true;
    };
    try {
        return ojson::parse(begin, end, callback);
    } catch (const ojson::exception& e) {
        fail("{}: {} is not valid JSON: {}", source, what, e.what());
    }
}

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
    return v;
}

// A non-negative JSON integer no larger than `max`, or an error naming `field`.
uint64_t json_uint(const ojson& j, uint64_t max, const std::string& source, const std::string& tensor,
                   const char* field) {
    if (j.is_number_unsigned()) {
        const uint64_t v = j.get<uint64_t>();
        if (v <= max) return v;
        fail("{}: tensor '{}': {} value {} is too large (at most {})", source, tensor, field, v, max);
    }
    if (j.is_number_integer())
        fail("{}: tensor '{}': {} value {} is negative", source, tensor, field, j.get<int64_t>());
    fail("{}: tensor '{}': {} holds {}, expected a non-negative integer", source, tensor, field,
         json_kind(j));
}

SafetensorsTensorInfo parse_tensor_info(const std::string& name, const ojson& entry,
                                        const std::string& source) {
    HYDRA_CHECK(entry.is_object(),
                "{}: tensor '{}' is {}, expected an object with dtype, shape and data_offsets", source, name,
                json_kind(entry));
    SafetensorsTensorInfo info;
    info.name = name;

    auto dtype_it = entry.find("dtype");
    HYDRA_CHECK(dtype_it != entry.end(), "{}: tensor '{}' has no \"dtype\"", source, name);
    HYDRA_CHECK(dtype_it->is_string(), "{}: tensor '{}': dtype is {}, expected a string", source, name,
                json_kind(*dtype_it));
    const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
    auto dtype = st_dtype_from_name(dtype_name);
    HYDRA_CHECK(dtype.has_value(), "{}: tensor '{}': unknown dtype \"{}\" (known: {})", source, name,
                dtype_name, all_dtype_names());
    info.dtype = *dtype;

    auto shape_it = entry.find("shape");
    HYDRA_CHECK(shape_it != entry.end(), "{}: tensor '{}' has no \"shape\"", source, name);
    HYDRA_CHECK(shape_it->is_array(), "{}: tensor '{}': shape is {}, expected an array of integers", source,
                name, json_kind(*shape_it));
    // numel is accumulated left to right with an overflow check, as the reference implementation does,
    // so shape_numel() on the result never overflows either.
    int64_t numel = 1;
    for (const ojson& d : *shape_it) {
        const int64_t dim = int64_t(json_uint(d, uint64_t(INT64_MAX), source, name, "shape"));
        info.shape.push_back(dim);
        if (__builtin_mul_overflow(numel, dim, &numel))
            fail("{}: tensor '{}': shape {} has too many elements", source, name, shape_str(info.shape));
    }
    info.numel = numel;

    auto offsets_it = entry.find("data_offsets");
    HYDRA_CHECK(offsets_it != entry.end(), "{}: tensor '{}' has no \"data_offsets\"", source, name);
    HYDRA_CHECK(offsets_it->is_array() && offsets_it->size() == 2,
                "{}: tensor '{}': data_offsets must be an array [begin, end]", source, name);
    info.begin = json_uint((*offsets_it)[0], UINT64_MAX, source, name, "data_offsets");
    info.end = json_uint((*offsets_it)[1], UINT64_MAX, source, name, "data_offsets");
    HYDRA_CHECK(info.begin <= info.end, "{}: tensor '{}': data_offsets [{}, {}] end before they begin",
                source, name, info.begin, info.end);

    const size_t bits = st_dtype_bits(info.dtype);
    uint64_t total_bits = 0;
    if (__builtin_mul_overflow(uint64_t(numel), uint64_t(bits), &total_bits))
        fail("{}: tensor '{}': shape {} is too large", source, name, shape_str(info.shape));
    HYDRA_CHECK(total_bits % 8 == 0, "{}: tensor '{}': {} elements of {} do not fill whole bytes", source,
                name, numel, dtype_name);
    HYDRA_CHECK(info.end - info.begin == total_bits / 8,
                "{}: tensor '{}': data_offsets [{}, {}] span {} bytes but shape {} of {} needs {}", source,
                name, info.begin, info.end, info.end - info.begin, shape_str(info.shape), dtype_name,
                total_bits / 8);
    return info;
}

}  // namespace

std::string_view st_dtype_name(StDType t) {
    return dtype_row(t).name;
}
size_t st_dtype_bits(StDType t) {
    return dtype_row(t).bits;
}

std::optional<StDType> st_dtype_from_name(std::string_view name) {
    for (const DTypeRow& row : kDTypes)
        if (row.name == name) return row.type;
    return std::nullopt;
}

std::optional<DType> st_to_dtype(StDType t) {
    switch (t) {
        case StDType::F32:
            return DType::F32;
        case StDType::BF16:
            return DType::BF16;
        case StDType::F16:
            return DType::F16;
        case StDType::I32:
            return DType::I32;
        default:
            return std::nullopt;
    }
}

StDType dtype_to_st(DType t) {
    switch (t) {
        case DType::F32:
            return StDType::F32;
        case DType::BF16:
            return StDType::BF16;
        case DType::F16:
            return StDType::F16;
        case DType::I32:
            return StDType::I32;
    }
    fail_at(__FILE__, __LINE__, fmt::format("unknown DType {}", int(t)));
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    auto file = std::make_shared<MappedFile>(path);
    SafetensorsFile st = parse(file->data(), file->size(), path);
    st.file_ = std::move(file);
    return st;
}

SafetensorsFile SafetensorsFile::parse(const uint8_t* data, size_t size, const std::string& source) {
    SafetensorsFile st;
    st.data_ = data;
    st.size_ = size;
    st.source_ = source;

    HYDRA_CHECK(size >= 8, "{}: file is {} bytes, too short for a safetensors header (truncated?)", source,
                size);
    const uint64_t n = read_u64_le(data);
    HYDRA_CHECK(n <= kMaxHeaderSize, "{}: header length {} is absurd (at most {}); not a safetensors file?",
                source, n, kMaxHeaderSize);
    HYDRA_CHECK(n <= size - 8, "{}: header length {} runs past the end of the {}-byte file (truncated?)",
                source, n, size);
    st.header_size_ = n;

    const char* text = reinterpret_cast<const char*>(data + 8);
    const ojson header = parse_json_strict(text, text + n, source, "header");
    HYDRA_CHECK(header.is_object(), "{}: header is {}, expected a JSON object", source, json_kind(header));

    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            if (value.is_null()) continue;
            HYDRA_CHECK(value.is_object(), "{}: __metadata__ is {}, expected an object of strings", source,
                        json_kind(value));
            for (const auto& [mkey, mvalue] : value.items()) {
                HYDRA_CHECK(mvalue.is_string(), "{}: __metadata__ value of \"{}\" is {}, expected a string",
                            source, mkey, json_kind(mvalue));
                st.metadata_[mkey] = mvalue.get<std::string>();
            }
            continue;
        }
        st.index_[key] = st.tensors_.size();
        st.tensors_.push_back(parse_tensor_info(key, value, source));
    }

    // The tensors must tile the byte buffer exactly: sorted by offsets, each begins where the
    // previous one ends, and the last one ends at the end of the file.
    const uint64_t buffer_size = size - 8 - n;
    std::vector<const SafetensorsTensorInfo*> order;
    order.reserve(st.tensors_.size());
    for (const auto& t : st.tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    const SafetensorsTensorInfo* previous = nullptr;
    for (const SafetensorsTensorInfo* t : order) {
        HYDRA_CHECK(t->end <= buffer_size,
                    "{}: tensor '{}': data_offsets [{}, {}] run past the {}-byte data buffer (truncated?)",
                    source, t->name, t->begin, t->end, buffer_size);
        if (t->begin < cursor)
            fail("{}: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (ends at {})", source, t->name,
                 t->begin, t->end, previous->name, cursor);
        if (t->begin > cursor)
            fail("{}: bytes [{}, {}) of the data buffer belong to no tensor (a hole before tensor '{}')",
                 source, cursor, t->begin, t->name);
        cursor = t->end;
        previous = t;
    }
    HYDRA_CHECK(cursor == buffer_size,
                "{}: the tensors end at byte {} of the data buffer but the file has {} more bytes after them "
                "(8 + header {} + {} != file size {})",
                source, cursor, buffer_size - cursor, n, cursor, size);
    return st;
}

const SafetensorsTensorInfo* SafetensorsFile::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensorInfo& SafetensorsFile::tensor(const std::string& name) const {
    const SafetensorsTensorInfo* info = find(name);
    HYDRA_CHECK(info != nullptr, "{}: no tensor named '{}'", source_, name);
    return *info;
}

Tensor SafetensorsFile::to_f32(const std::string& name) const {
    return to_f32(tensor(name));
}

Tensor SafetensorsFile::to_f32(const SafetensorsTensorInfo& info) const {
    Tensor out = Tensor::zeros(info.shape, DType::F32);
    float* dst = out.f32();
    const uint8_t* src = raw(info);
    const size_t n = size_t(info.numel);
    // The mapped data has no alignment guarantee, so every element is read with memcpy.
    switch (info.dtype) {
        case StDType::F32:
            if (n) std::memcpy(dst, src, n * 4);
            break;
        case StDType::F16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = f16_to_f32(h);
            }
            break;
        case StDType::BF16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = bf16_to_f32(h);
            }
            break;
        case StDType::F64:
            for (size_t i = 0; i < n; ++i) {
                double d;
                std::memcpy(&d, src + 8 * i, 8);
                dst[i] = float(d);
            }
            break;
        default:
            fail(
                "{}: tensor '{}' has dtype {}, which cannot be converted to f32 (supported: F32, F16, BF16, "
                "F64)",
                source_, info.name, st_dtype_name(info.dtype));
    }
    return out;
}

Tensor SafetensorsFile::copy(const std::string& name) const {
    const SafetensorsTensorInfo& info = tensor(name);
    auto dtype = st_to_dtype(info.dtype);
    HYDRA_CHECK(dtype.has_value(), "{}: tensor '{}' has dtype {}, which HydraHead tensors cannot hold",
                source_, name, st_dtype_name(info.dtype));
    Tensor out = Tensor::zeros(info.shape, *dtype);
    HYDRA_ASSERT(out.nbytes() == info.nbytes(), "size of '{}'", name);
    if (info.nbytes()) std::memcpy(out.raw(), raw(info), info.nbytes());
    return out;
}

// ---------------------------------------------------------------------------------------------
// HF directories

SafetensorsShards SafetensorsShards::open_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    SafetensorsShards shards;
    shards.dir_ = dir;
    const fs::path root(dir);
    std::error_code ec;
    HYDRA_CHECK(fs::is_directory(root, ec), "{}: not a directory", dir);

    auto add_file = [&](const fs::path& path) {
        shards.files_.push_back(SafetensorsFile::open(path.string()));
        const size_t file_index = shards.files_.size() - 1;
        for (const auto& info : shards.files_.back().tensors()) {
            auto [it, inserted] = shards.index_.emplace(info.name, file_index);
            HYDRA_CHECK(inserted, "{}: tensor '{}' is in both {} and {}", dir, info.name,
                        shards.files_[it->second].source(), path.string());
        }
    };

    const fs::path single = root / "model.safetensors";
    if (fs::is_regular_file(single, ec)) {
        add_file(single);
        return shards;
    }
    const fs::path index_path = root / "model.safetensors.index.json";
    HYDRA_CHECK(fs::is_regular_file(index_path, ec), "{}: has neither model.safetensors nor {}", dir,
                "model.safetensors.index.json");
    const std::string index_name = index_path.string();

    MappedFile index_file(index_name);
    const char* text = reinterpret_cast<const char*>(index_file.data());
    const ojson index = parse_json_strict(text, text + index_file.size(), index_name, "the index");
    HYDRA_CHECK(index.is_object(), "{}: expected a JSON object, found {}", index_name, json_kind(index));
    auto map_it = index.find("weight_map");
    HYDRA_CHECK(map_it != index.end(), "{}: no \"weight_map\"", index_name);
    HYDRA_CHECK(map_it->is_object(), "{}: weight_map is {}, expected an object {{tensor name: shard file}}",
                index_name, json_kind(*map_it));
    HYDRA_CHECK(!map_it->empty(), "{}: weight_map is empty", index_name);

    // Shards in order of first mention, so the result does not depend on directory listing order.
    std::vector<std::string> shard_names;
    std::map<std::string, size_t> shard_of_name;
    for (const auto& [tensor_name, shard] : map_it->items()) {
        HYDRA_CHECK(shard.is_string(), "{}: weight_map[\"{}\"] is {}, expected a file name", index_name,
                    tensor_name, json_kind(shard));
        const std::string& file = shard.get_ref<const std::string&>();
        HYDRA_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
                    "{}: weight_map[\"{}\"] = \"{}\" must be a file name inside the directory", index_name,
                    tensor_name, file);
        if (shard_of_name.emplace(file, shard_names.size()).second) shard_names.push_back(file);
    }
    for (const std::string& file : shard_names) {
        const fs::path path = root / file;
        HYDRA_CHECK(fs::is_regular_file(path, ec), "{}: shard {} (named in the weight_map) is missing",
                    index_name, path.string());
    }
    for (const std::string& file : shard_names) add_file(root / file);

    // Every tensor of the weight_map must be in the shard it names.
    for (const auto& [tensor_name, shard] : map_it->items()) {
        const size_t want = shard_of_name.at(shard.get<std::string>());
        auto it = shards.index_.find(tensor_name);
        HYDRA_CHECK(it != shards.index_.end(),
                    "{}: tensor '{}' is in the weight_map but in no shard (expected in {})", index_name,
                    tensor_name, shards.files_[want].source());
        HYDRA_CHECK(it->second == want, "{}: weight_map puts tensor '{}' in {}, but it is in {}", index_name,
                    tensor_name, shards.files_[want].source(), shards.files_[it->second].source());
    }
    return shards;
}

std::vector<std::string> SafetensorsShards::names() const {
    std::vector<std::string> out;
    for (const auto& f : files_)
        for (const auto& t : f.tensors()) out.push_back(t.name);
    return out;
}

const SafetensorsFile& SafetensorsShards::file_of(const std::string& name) const {
    auto it = index_.find(name);
    HYDRA_CHECK(it != index_.end(), "{}: no tensor named '{}' in the safetensors weights", dir_, name);
    return files_[it->second];
}

const SafetensorsTensorInfo& SafetensorsShards::tensor(const std::string& name) const {
    return file_of(name).tensor(name);
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

struct PlannedTensor {
    const SafetensorsEntry* entry;
    DType out;
    uint64_t begin;
    uint64_t end;
};

bool is_float(DType t) {
    return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

float load_as_f32(const Tensor& t, size_t i) {
    switch (t.dtype()) {
        case DType::F32:
            return t.data<const float>()[i];
        case DType::BF16:
            return bf16_to_f32(t.data<const uint16_t>()[i]);
        case DType::F16:
            return f16_to_f32(t.data<const uint16_t>()[i]);
        case DType::I32:
            break;
    }
    fail_at(__FILE__, __LINE__, fmt::format("load_as_f32 of {}", dtype_name(t.dtype())));
}

// Plans the layout and builds the padded header; `emit` then receives the bytes in order.
void serialize_to(const std::vector<SafetensorsEntry>& entries,
                  const std::map<std::string, std::string>& metadata, std::optional<DType> out_dtype,
                  const std::string& target, const std::function<void(const void*, size_t)>& emit) {
    if (out_dtype) {
        HYDRA_CHECK(is_float(*out_dtype), "{}: cannot write tensors as {} (choose f32, bf16 or f16)", target,
                    dtype_name(*out_dtype));
    }
    std::vector<PlannedTensor> plan;
    std::set<std::string> names;
    for (const SafetensorsEntry& e : entries) {
        HYDRA_CHECK(!e.name.empty(), "{}: a tensor has an empty name", target);
        HYDRA_CHECK(e.name != "__metadata__", "{}: '__metadata__' is reserved and cannot name a tensor",
                    target);
        HYDRA_CHECK(names.insert(e.name).second, "{}: tensor '{}' is given twice", target, e.name);
        HYDRA_CHECK(e.tensor.device() == Device::CPU, "{}: tensor '{}' is not on the CPU", target, e.name);
        HYDRA_CHECK(e.tensor.numel() == 0 || !e.tensor.empty(), "{}: tensor '{}' has no data", target,
                    e.name);
        const DType out = (out_dtype && is_float(e.tensor.dtype())) ? *out_dtype : e.tensor.dtype();
        plan.push_back({&e, out, 0, 0});
    }
    // Largest elements first, then by name: every tensor starts aligned to its element size.
    std::sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
        if (dtype_size(a.out) != dtype_size(b.out)) return dtype_size(a.out) > dtype_size(b.out);
        return a.entry->name < b.entry->name;
    });

    ojson header = ojson::object();
    if (!metadata.empty()) {
        ojson meta = ojson::object();
        for (const auto& [k, v] : metadata) meta[k] = v;  // std::map: sorted, deterministic
        header["__metadata__"] = std::move(meta);
    }
    uint64_t offset = 0;
    for (PlannedTensor& p : plan) {
        p.begin = offset;
        p.end = offset + uint64_t(p.entry->tensor.numel()) * dtype_size(p.out);
        offset = p.end;
        ojson info = ojson::object();
        info["dtype"] = std::string(st_dtype_name(dtype_to_st(p.out)));
        info["shape"] = p.entry->tensor.shape();
        info["data_offsets"] = {p.begin, p.end};
        header[p.entry->name] = std::move(info);
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const ojson::exception& e) {
        fail("{}: cannot encode the header (names and metadata must be valid UTF-8): {}", target, e.what());
    }
    // Pad with spaces so the data starts at a multiple of 64 bytes.
    const size_t padded = (8 + text.size() + 63) / 64 * 64 - 8;
    text.resize(padded, ' ');
    HYDRA_CHECK(text.size() <= kMaxHeaderSize, "{}: header of {} bytes is larger than readers accept ({})",
                target, text.size(), kMaxHeaderSize);

    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
    emit(len, 8);
    emit(text.data(), text.size());

    std::vector<uint16_t> buffer;
    for (const PlannedTensor& p : plan) {
        const Tensor& t = p.entry->tensor;
        const size_t n = size_t(t.numel());
        if (n == 0) continue;
        if (p.out == t.dtype()) {
            emit(t.raw(), t.nbytes());
            continue;
        }
        if (p.out == DType::F32) {
            std::vector<float> f(n);
            for (size_t i = 0; i < n; ++i) f[i] = load_as_f32(t, i);
            emit(f.data(), n * 4);
            continue;
        }
        // To bf16/f16, in chunks to bound the extra memory.
        constexpr size_t kChunk = 1 << 16;
        buffer.resize(std::min(n, kChunk));
        for (size_t start = 0; start < n; start += kChunk) {
            const size_t count = std::min(kChunk, n - start);
            for (size_t i = 0; i < count; ++i) {
                const float v = load_as_f32(t, start + i);
                buffer[i] = p.out == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
            }
            emit(buffer.data(), count * 2);
        }
    }
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<SafetensorsEntry>& entries,
                                           const std::map<std::string, std::string>& metadata,
                                           std::optional<DType> out_dtype) {
    std::vector<uint8_t> out;
    serialize_to(entries, metadata, out_dtype, "<memory>", [&](const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        out.insert(out.end(), b, b + n);
    });
    return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata, std::optional<DType> out_dtype) {
    const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
    // The file-system calls go through io/fault_injection.h, so tests can fail or cut each one.
    const int fd = io_create(tmp);
    if (fd < 0) fail("{}: cannot create: {}", tmp, std::strerror(errno));
    try {
        serialize_to(entries, metadata, out_dtype, path, [&](const void* p, size_t n) {
            const auto* b = static_cast<const uint8_t*>(p);
            while (n > 0) {
                const ssize_t w = io_write(fd, b, n, tmp);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) fail("{}: write failed: {}", tmp, std::strerror(errno));
                b += w;
                n -= size_t(w);
            }
        });
        if (io_fsync(fd, tmp) != 0) fail("{}: fsync failed: {}", tmp, std::strerror(errno));
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        ::unlink(tmp.c_str());
        fail("{}: close failed: {}", tmp, std::strerror(errno));
    }
    if (io_rename(tmp, path) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail("{}: cannot rename {} into place: {}", path, tmp, std::strerror(err));
    }
    // Make the rename itself durable.
    const std::string dir = std::filesystem::path(path).parent_path().string();
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        io_fsync(dfd, dir.empty() ? "." : dir);
        ::close(dfd);
    }
}

}  // namespace hydra
