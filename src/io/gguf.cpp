// GGUF v2/v3 parser (shared/research/engines.md §2.1-2.3). The file is hostile until proven otherwise:
// every count, length and offset is checked against the bytes that remain BEFORE anything is
// allocated, so a header claiming 2^60 elements fails at once with a message, never with bad_alloc.
// Errors are one line: "<source>: <field>: <problem>".
#include "io/gguf.h"

#include <cstring>
#include <limits>

#include "core/error.h"

namespace hydra {

namespace {

constexpr uint32_t kMagic = 0x46554747;        // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;              // arrays of arrays of ...; ggml allows none, the spec any
constexpr uint64_t kMaxKeyBytes = 65535;       // spec limit for keys
constexpr uint64_t kMaxTensorNameBytes = 256;  // ggml: 64; leave room, but reject absurd names
// Each GgufValue is ~100 bytes in memory, so a file of N one-byte array elements would cost ~100 N
// bytes; cap the total (real vocabularies + merges stay far below 1M).
constexpr uint64_t kMaxTotalArrayElems = uint64_t(1) << 23;
constexpr int kMaxDims = 4;

const char* value_type_name(GgufValueType t) {
    switch (t) {
        case GgufValueType::UINT8:
            return "uint8";
        case GgufValueType::INT8:
            return "int8";
        case GgufValueType::UINT16:
            return "uint16";
        case GgufValueType::INT16:
            return "int16";
        case GgufValueType::UINT32:
            return "uint32";
        case GgufValueType::INT32:
            return "int32";
        case GgufValueType::FLOAT32:
            return "float32";
        case GgufValueType::BOOL:
            return "bool";
        case GgufValueType::STRING:
            return "string";
        case GgufValueType::ARRAY:
            return "array";
        case GgufValueType::UINT64:
            return "uint64";
        case GgufValueType::INT64:
            return "int64";
        case GgufValueType::FLOAT64:
            return "float64";
    }
    return "invalid";
}

std::string describe(const GgufValue& v) {
    if (v.type == GgufValueType::ARRAY) return fmt::format("array of {}", value_type_name(v.elem_type));
    return value_type_name(v.type);
}

// Fixed size of a scalar type, 0 for STRING/ARRAY, -1 for an invalid id.
int scalar_size(uint32_t t) {
    switch (GgufValueType(t)) {
        case GgufValueType::UINT8:
        case GgufValueType::INT8:
        case GgufValueType::BOOL:
            return 1;
        case GgufValueType::UINT16:
        case GgufValueType::INT16:
            return 2;
        case GgufValueType::UINT32:
        case GgufValueType::INT32:
        case GgufValueType::FLOAT32:
            return 4;
        case GgufValueType::UINT64:
        case GgufValueType::INT64:
        case GgufValueType::FLOAT64:
            return 8;
        case GgufValueType::STRING:
        case GgufValueType::ARRAY:
            return 0;
    }
    return -1;
}

// Smallest encoding of one value of type t (used to bound array counts): a string is at least its
// u64 length, an array at least its u32 type + u64 count.
uint64_t min_encoded_size(uint32_t t) {
    if (t == uint32_t(GgufValueType::STRING)) return 8;
    if (t == uint32_t(GgufValueType::ARRAY)) return 12;
    return uint64_t(scalar_size(t));
}

// Cursor over the file image. `ctx` names what is being read, for "truncated" messages.
class Reader {
  public:
    Reader(const uint8_t* data, size_t size, const std::string& source)
        : data_(data), size_(size), source_(source) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }
    const std::string& source() const { return source_; }

    // `what` (optional) is appended to ctx, e.g. " (string length)"; kept separate so the hot path
    // (100k vocabulary strings) never builds a message it does not throw.
    void need(uint64_t n, const std::string& ctx, const char* what = "") const {
        if (n > remaining())
            fail("{}: truncated: {}{} needs {} more bytes at offset {} (file size {})", source_, ctx, what,
                 n - remaining(), pos_, size_);
    }

    template <typename T>
    T read(const std::string& ctx, const char* what = "") {
        need(sizeof(T), ctx, what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    // String: u64 length + bytes. `max_len` rejects absurd lengths with a field-specific message.
    std::string read_string(const std::string& ctx, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
        const uint64_t len = read<uint64_t>(ctx, " (string length)");
        if (len > max_len)
            fail("{}: {}: string length {} exceeds the limit of {} bytes", source_, ctx, len, max_len);
        if (len > remaining())
            fail("{}: truncated: {}: string of {} bytes needs {} more bytes at offset {} (file size {})",
                 source_, ctx, len, len - remaining(), pos_, size_);
        std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
        pos_ += size_t(len);
        return s;
    }

    void seek(size_t p) { pos_ = p; }

  private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& source_;
};

class Parser {
  public:
    Parser(Reader& r) : r_(r) {}

    GgufValue read_value(uint32_t type, const std::string& ctx, int depth) {
        GgufValue v;
        if (scalar_size(type) < 0)
            fail("{}: {}: invalid value type {} (valid: 0..12)", r_.source(), ctx, type);
        v.type = GgufValueType(type);
        switch (v.type) {
            case GgufValueType::UINT8:
                set_unsigned(v, r_.read<uint8_t>(ctx));
                break;
            case GgufValueType::UINT16:
                set_unsigned(v, r_.read<uint16_t>(ctx));
                break;
            case GgufValueType::UINT32:
                set_unsigned(v, r_.read<uint32_t>(ctx));
                break;
            case GgufValueType::UINT64:
                set_unsigned(v, r_.read<uint64_t>(ctx));
                break;
            case GgufValueType::INT8:
                set_signed(v, r_.read<int8_t>(ctx));
                break;
            case GgufValueType::INT16:
                set_signed(v, r_.read<int16_t>(ctx));
                break;
            case GgufValueType::INT32:
                set_signed(v, r_.read<int32_t>(ctx));
                break;
            case GgufValueType::INT64:
                set_signed(v, r_.read<int64_t>(ctx));
                break;
            case GgufValueType::FLOAT32:
                v.f = r_.read<float>(ctx);
                break;
            case GgufValueType::FLOAT64:
                v.f = r_.read<double>(ctx);
                break;
            case GgufValueType::BOOL: {
                const uint8_t b = r_.read<uint8_t>(ctx);
                if (b > 1) fail("{}: {}: invalid bool value {} (must be 0 or 1)", r_.source(), ctx, b);
                v.b = b != 0;
                v.i = b;
                v.u = b;
                break;
            }
            case GgufValueType::STRING:
                v.s = r_.read_string(ctx);
                break;
            case GgufValueType::ARRAY:
                read_array(v, ctx, depth);
                break;
        }
        return v;
    }

  private:
    static void set_unsigned(GgufValue& v, uint64_t x) {
        v.u = x;
        v.i = x <= uint64_t(std::numeric_limits<int64_t>::max()) ? int64_t(x) : 0;
    }
    static void set_signed(GgufValue& v, int64_t x) {
        v.i = x;
        v.u = uint64_t(x);
    }

    void read_array(GgufValue& v, const std::string& ctx, int depth) {
        if (depth >= kMaxArrayDepth)
            fail("{}: {}: arrays nested deeper than {} levels are not supported", r_.source(), ctx,
                 kMaxArrayDepth);
        const uint32_t elem = r_.read<uint32_t>(ctx, " (array element type)");
        if (scalar_size(elem) < 0)
            fail("{}: {}: invalid array element type {} (valid: 0..12)", r_.source(), ctx, elem);
        v.elem_type = GgufValueType(elem);
        const uint64_t count = r_.read<uint64_t>(ctx, " (array count)");
        const uint64_t min_size = min_encoded_size(elem);
        if (count > r_.remaining() / min_size)
            fail("{}: {}: array of {} elements of type {} cannot fit in the {} bytes left in the file",
                 r_.source(), ctx, count, value_type_name(v.elem_type), r_.remaining());
        total_elems_ += count;
        if (total_elems_ > kMaxTotalArrayElems)
            fail("{}: {}: metadata arrays hold more than {} elements in total (HydraHead's limit)",
                 r_.source(), ctx, kMaxTotalArrayElems);
        v.array.reserve(size_t(count));
        for (uint64_t k = 0; k < count; ++k) v.array.push_back(read_value(elem, ctx, depth + 1));
    }

    Reader& r_;
    uint64_t total_elems_ = 0;
};

bool is_power_of_two(uint64_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

}  // namespace

bool GgufValue::is_integer() const {
    switch (type) {
        case GgufValueType::UINT8:
        case GgufValueType::INT8:
        case GgufValueType::UINT16:
        case GgufValueType::INT16:
        case GgufValueType::UINT32:
        case GgufValueType::INT32:
        case GgufValueType::UINT64:
        case GgufValueType::INT64:
            return true;
        default:
            return false;
    }
}

GgufFile GgufFile::open(const std::string& path) {
    auto file = std::make_shared<MappedFile>(path);
    GgufFile g = parse(file->data(), file->size(), path);
    g.file_ = std::move(file);
    return g;
}

GgufFile GgufFile::parse(const uint8_t* data, size_t size, const std::string& source) {
    GgufFile g;
    g.data_ = data;
    g.size_ = size;
    g.source_ = source;
    Reader r(data, size, g.source_);
    Parser p(r);

    // --- header
    if (size < 4) fail("{}: not a GGUF file ({} bytes, too short for the 'GGUF' magic)", source, size);
    const uint32_t magic = r.read<uint32_t>("magic");
    if (magic != kMagic) {
        char shown[5] = {};
        for (int k = 0; k < 4; ++k) {
            const char c = char(data[k]);
            shown[k] = (c >= 32 && c < 127) ? c : '.';
        }
        fail("{}: not a GGUF file (magic 0x{:08x} '{}', expected 'GGUF')", source, magic, shown);
    }
    const uint32_t version = r.read<uint32_t>("header: version");
    if ((version & 0xffff) == 0)
        fail(
            "{}: version: 0x{:08x} looks like a big-endian GGUF file; only little-endian files are supported "
            "(re-convert on a little-endian machine)",
            source, version);
    if (version == 1)
        fail(
            "{}: version: GGUF v1 is not supported (it uses 32-bit counts); re-convert the model with a "
            "current "
            "llama.cpp to get v3",
            source);
    if (version != 2 && version != 3)
        fail("{}: version: unsupported GGUF version {} (supported: 2, 3)", source, version);
    g.version_ = version;

    const uint64_t n_tensors = r.read<uint64_t>("header: tensor count");
    const uint64_t n_kv = r.read<uint64_t>("header: metadata kv count");
    if (n_tensors > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("{}: tensor count: {} is negative as an int64", source, int64_t(n_tensors));
    if (n_kv > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("{}: metadata kv count: {} is negative as an int64", source, int64_t(n_kv));
    // Smallest encodings: kv = key length (8) + 1 key byte + type (4) + 1 value byte; tensor info =
    // name length (8) + 1 name byte + n_dims (4) + one dim (8) + type (4) + offset (8).
    constexpr uint64_t kMinKv = 14, kMinTensor = 33;
    if (n_kv > r.remaining() / kMinKv)
        fail(
            "{}: metadata kv count: {} pairs cannot fit in the {} bytes after the header (file truncated or "
            "corrupt)",
            source, n_kv, r.remaining());
    if (n_tensors > r.remaining() / kMinTensor || n_tensors * kMinTensor + n_kv * kMinKv > r.remaining())
        fail(
            "{}: tensor count: {} tensor infos (plus {} kv pairs) cannot fit in the {} bytes after the "
            "header "
            "(file truncated or corrupt)",
            source, n_tensors, n_kv, r.remaining());

    // --- metadata
    g.metadata_.reserve(size_t(n_kv));
    for (uint64_t k = 0; k < n_kv; ++k) {
        const std::string key_ctx = fmt::format("metadata kv {} key", k);
        std::string key = r.read_string(key_ctx, kMaxKeyBytes);
        if (key.empty()) fail("{}: {}: empty key", source, key_ctx);
        const std::string ctx = fmt::format("metadata key '{}'", key);
        if (g.metadata_index_.count(key)) fail("{}: {}: duplicate key (kv {})", source, ctx, k);
        const uint32_t type = r.read<uint32_t>(ctx, " (value type)");
        GgufValue v = p.read_value(type, ctx, 0);
        g.metadata_index_.emplace(key, g.metadata_.size());
        g.metadata_.emplace_back(std::move(key), std::move(v));
    }

    // general.alignment: u32, a nonzero power of two (ggml's rule; the spec also wants a multiple of 8).
    if (const GgufValue* a = g.find("general.alignment")) {
        if (a->type != GgufValueType::UINT32)
            fail("{}: metadata key 'general.alignment': expected uint32, found {}", source, describe(*a));
        if (!is_power_of_two(a->u))
            fail("{}: metadata key 'general.alignment': {} is not a nonzero power of two", source, a->u);
        g.alignment_ = a->u;
    }

    // --- tensor infos
    g.tensors_.reserve(size_t(n_tensors));
    for (uint64_t t = 0; t < n_tensors; ++t) {
        GgufTensorInfo info;
        std::string ctx = fmt::format("tensor info {}", t);
        info.name = r.read_string(ctx + " name", kMaxTensorNameBytes);
        if (info.name.empty()) fail("{}: {}: empty tensor name", source, ctx);
        ctx = fmt::format("tensor info {} ('{}')", t, info.name);
        if (g.tensor_index_.count(info.name)) fail("{}: {}: duplicate tensor name", source, ctx);
        const uint32_t n_dims = r.read<uint32_t>(ctx);
        if (n_dims < 1 || n_dims > uint32_t(kMaxDims))
            fail("{}: {}: n_dims is {}, expected 1..{}", source, ctx, n_dims, kMaxDims);
        int64_t numel = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t dim = r.read<uint64_t>(ctx);
            if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()))
                fail("{}: {}: dimension {} is {}, expected a positive int64", source, ctx, d, int64_t(dim));
            if (__builtin_mul_overflow(numel, int64_t(dim), &numel))
                fail("{}: {}: the element count overflows int64", source, ctx);
            info.dims.push_back(int64_t(dim));
        }
        info.numel = numel;
        const uint32_t type_id = r.read<uint32_t>(ctx);
        const GgmlTypeInfo* ti = ggml_type_info(type_id);
        if (ti == nullptr)
            fail("{}: {}: unknown or retired ggml type id {} ({})", source, ctx, type_id,
                 ggml_type_name(type_id));
        info.type = GgmlType(type_id);
        if (info.dims[0] % ti->block_elems != 0)
            fail("{}: {}: dims[0] = {} is not a multiple of {}'s block size {}", source, ctx, info.dims[0],
                 ti->name, ti->block_elems);
        const uint64_t blocks = uint64_t(numel / ti->block_elems);
        if (__builtin_mul_overflow(blocks, uint64_t(ti->block_bytes), &info.nbytes))
            fail("{}: {}: the byte size overflows", source, ctx);
        info.offset = r.read<uint64_t>(ctx);
        if (info.offset % g.alignment_ != 0)
            fail("{}: {}: data offset {} is not a multiple of the alignment {}", source, ctx, info.offset,
                 g.alignment_);
        g.tensor_index_.emplace(info.name, g.tensors_.size());
        g.tensors_.push_back(std::move(info));
    }

    // --- data section: header end padded to the alignment, counted from the file start.
    const uint64_t header_end = r.pos();
    const uint64_t pad = (g.alignment_ - header_end % g.alignment_) % g.alignment_;
    g.data_offset_ = header_end + pad;
    // A file without tensors (e.g. vocabulary-only) may end right after its header, unpadded.
    if (g.data_offset_ > size && n_tensors == 0) return g;
    if (g.data_offset_ > size)
        fail(
            "{}: truncated: data section starts at offset {} (header end {} padded to alignment {}) but the "
            "file "
            "has {} bytes",
            source, g.data_offset_, header_end, g.alignment_, size);
    const uint64_t data_size = size - g.data_offset_;
    for (size_t t = 0; t < g.tensors_.size(); ++t) {
        const GgufTensorInfo& info = g.tensors_[t];
        if (info.offset > data_size || info.nbytes > data_size - info.offset)
            fail(
                "{}: tensor '{}': data [{}, {}) of the data section runs past the end of the file (data "
                "section "
                "has {} bytes; file truncated?)",
                source, info.name, info.offset, uint64_t(info.offset + info.nbytes), data_size);
    }
    return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = metadata_index_.find(key);
    return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

const GgufValue& require(const GgufFile& g, const std::string& key) {
    const GgufValue* v = g.find(key);
    if (v == nullptr) fail("{}: missing metadata key '{}'", g.source(), key);
    return *v;
}

[[noreturn]] void mismatch(const GgufFile& g, const std::string& key, const char* expected,
                           const GgufValue& v) {
    fail("{}: metadata key '{}': expected {}, found {}", g.source(), key, expected, describe(v));
}

bool is_integer_type(GgufValueType t) {
    GgufValue v;
    v.type = t;
    return v.is_integer();
}

bool is_unsigned_type(GgufValueType t) {
    return t == GgufValueType::UINT8 || t == GgufValueType::UINT16 || t == GgufValueType::UINT32 ||
           t == GgufValueType::UINT64;
}

// Integer value of an integer-typed element; u64 values above INT64_MAX do not fit.
int64_t as_int(const GgufFile& g, const std::string& key, const GgufValue& v) {
    if (is_unsigned_type(v.type) && v.u > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("{}: metadata key '{}': value {} does not fit in int64", g.source(), key, v.u);
    return v.i;
}

double as_double(const GgufValue& v) {
    if (v.is_float()) return v.f;
    if (is_unsigned_type(v.type)) return double(v.u);
    return double(v.i);
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufValueType::STRING) mismatch(*this, key, "a string", v);
    return v.s;
}

int64_t GgufFile::get_int(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (!v.is_integer()) mismatch(*this, key, "an integer", v);
    return as_int(*this, key, v);
}

double GgufFile::get_float(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (!v.is_float() && !v.is_integer()) mismatch(*this, key, "a number", v);
    return as_double(v);
}

bool GgufFile::get_bool(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufValueType::BOOL) mismatch(*this, key, "a bool", v);
    return v.b;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufValueType::ARRAY || v.elem_type != GgufValueType::STRING)
        mismatch(*this, key, "an array of string", v);
    std::vector<std::string> out;
    out.reserve(v.array.size());
    for (const GgufValue& e : v.array) out.push_back(e.s);
    return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufValueType::ARRAY || !is_integer_type(v.elem_type))
        mismatch(*this, key, "an array of integers", v);
    std::vector<int64_t> out;
    out.reserve(v.array.size());
    for (const GgufValue& e : v.array) out.push_back(as_int(*this, key, e));
    return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufValueType::ARRAY ||
        !(is_integer_type(v.elem_type) || v.elem_type == GgufValueType::FLOAT32 ||
          v.elem_type == GgufValueType::FLOAT64))
        mismatch(*this, key, "an array of numbers", v);
    std::vector<float> out;
    out.reserve(v.array.size());
    for (const GgufValue& e : v.array) out.push_back(float(as_double(e)));
    return out;
}

std::optional<int64_t> GgufFile::get_int_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_int(key);
}

std::optional<double> GgufFile::get_float_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_float(key);
}

std::optional<bool> GgufFile::get_bool_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_bool(key);
}

std::optional<std::string> GgufFile::get_string_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_string(key);
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
    const GgufTensorInfo* t = find_tensor(name);
    if (t == nullptr)
        fail("{}: missing tensor '{}' ({} tensors in the file)", source_, name, tensors_.size());
    return *t;
}

}  // namespace hydra
