// Tests for the GGUF reader (io/gguf.h) and writer (io/gguf_writer.h): write/read round trips of every
// value type, nested arrays, alignments and tensor types; hostile inputs (every one must throw a
// hydra::Error whose message names the file and the field, never crash); and, when present, the real
// SmolLM2 file checked against values computed independently with gguf-py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "io/ggml_types.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/quantize_ref.h"

using namespace hydra;

namespace {

using Bytes = std::vector<uint8_t>;

GgufFile parse(const Bytes& b, const std::string& name = "test.gguf") {
    return GgufFile::parse(b.data(), b.size(), name);
}

// Asserts that parsing `b` throws hydra::Error whose message contains every one of `parts`.
void expect_error(const Bytes& b, std::initializer_list<std::string> parts,
                  const std::string& name = "bad.gguf") {
    try {
        GgufFile::parse(b.data(), b.size(), name);
        ADD_FAILURE() << "no error; expected one mentioning '" << *parts.begin() << "'";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind(name + ": ", 0), 0u) << "message does not start with the file name: " << msg;
        for (const std::string& p : parts)
            EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    }
}

template <typename F>
void expect_getter_error(F&& f, std::initializer_list<std::string> parts) {
    try {
        f();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const std::string& p : parts)
            EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    }
}

// Raw little-endian byte builder for hand-crafted (often invalid) files.
struct Raw {
    Bytes b;
    template <typename T>
    Raw& put(T v) {
        const size_t at = b.size();
        b.resize(at + sizeof(T));
        std::memcpy(b.data() + at, &v, sizeof(T));
        return *this;
    }
    Raw& u32(uint32_t v) { return put(v); }
    Raw& u64(uint64_t v) { return put(v); }
    Raw& str(const std::string& s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
    }
    Raw& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
    Raw& tensor(const std::string& name, std::initializer_list<uint64_t> dims, uint32_t type,
                uint64_t offset) {
        str(name).u32(uint32_t(dims.size()));
        for (uint64_t d : dims) u64(d);
        return u32(type).u64(offset);
    }
    Raw& pad(size_t a) {
        while (b.size() % a) b.push_back(0);
        return *this;
    }
    Raw& zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
};

std::vector<float> iota_floats(size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * float(int(i % 97) - 48) + 0.001f * float(i);
    return v;
}

// A small valid file with a bit of everything, used by the truncation sweep and the fuzz seeds.
GgufWriter small_file(uint32_t alignment = 32) {
    GgufWriter w(alignment);
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 2);
    w.add("tokenizer.ggml.tokens", gguf_string_array({"a", "bc", "", "\xe2\x96\x81the"}));
    w.add("tokenizer.ggml.scores",
          gguf_array(GgufValueType::FLOAT32,
                     {gguf_float(GgufValueType::FLOAT32, 0.5), gguf_float(GgufValueType::FLOAT32, -1)}));
    w.add_bool("tokenizer.ggml.add_bos_token", true);
    const auto x = iota_floats(64, 0.01f);
    w.add_tensor_f32("norm.weight", {8}, std::vector<float>(x.begin(), x.begin() + 8));
    const auto q = quantize_ref(GgmlType::Q4_1, x.data(), 64);
    w.add_tensor("w.weight", {32, 2}, GgmlType::Q4_1, q.data(), q.size());
    return w;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(GgufWriteRead, AllValueTypes) {
    GgufWriter w;
    w.add("u8", gguf_uint(GgufValueType::UINT8, 200));
    w.add("i8", gguf_int(GgufValueType::INT8, -100));
    w.add("u16", gguf_uint(GgufValueType::UINT16, 60000));
    w.add("i16", gguf_int(GgufValueType::INT16, -30000));
    w.add("u32", gguf_uint(GgufValueType::UINT32, 4000000000u));
    w.add("i32", gguf_int(GgufValueType::INT32, -2000000000));
    w.add("f32", gguf_float(GgufValueType::FLOAT32, 1.5));
    w.add("t", gguf_bool(true));
    w.add("f", gguf_bool(false));
    w.add("s", gguf_string("h\xc3\xa9llo"));
    w.add("empty_s", gguf_string(""));
    w.add("u64_big", gguf_uint(GgufValueType::UINT64, (uint64_t(1) << 63) + 5));
    w.add("u64", gguf_uint(GgufValueType::UINT64, 123456789012345ull));
    w.add("i64", gguf_int(GgufValueType::INT64, -(int64_t(1) << 62)));
    w.add("f64", gguf_float(GgufValueType::FLOAT64, 3.141592653589793));
    w.add("ints", gguf_array(GgufValueType::INT32,
                             {gguf_int(GgufValueType::INT32, -1), gguf_int(GgufValueType::INT32, 7)}));
    w.add("u8s", gguf_array(GgufValueType::UINT8, {gguf_uint(GgufValueType::UINT8, 255)}));
    w.add("strs", gguf_string_array({"x", "", "yz"}));
    w.add("empty_arr", gguf_array(GgufValueType::FLOAT64, {}));
    w.add(
        "nested",
        gguf_array(GgufValueType::ARRAY,
                   {gguf_array(GgufValueType::UINT8, {gguf_uint(GgufValueType::UINT8, 1)}),
                    gguf_array(GgufValueType::STRING, {gguf_string("deep")}),
                    gguf_array(GgufValueType::ARRAY, {gguf_array(GgufValueType::BOOL, {gguf_bool(true)})})}));
    const Bytes b = w.to_bytes();
    const GgufFile g = parse(b);
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.alignment(), 32u);
    EXPECT_EQ(g.metadata().size(), 20u);
    EXPECT_EQ(g.metadata()[0].first, "u8");  // file order kept
    EXPECT_EQ(g.get_int("u8"), 200);
    EXPECT_EQ(g.get_int("i8"), -100);
    EXPECT_EQ(g.get_int("u16"), 60000);
    EXPECT_EQ(g.get_int("i16"), -30000);
    EXPECT_EQ(g.get_int("u32"), 4000000000ll);
    EXPECT_EQ(g.get_int("i32"), -2000000000);
    EXPECT_EQ(g.get_float("f32"), 1.5);
    EXPECT_EQ(g.get_float("u32"), 4e9);  // integers are accepted as floats
    EXPECT_TRUE(g.get_bool("t"));
    EXPECT_FALSE(g.get_bool("f"));
    EXPECT_EQ(g.get_string("s"), "h\xc3\xa9llo");
    EXPECT_EQ(g.get_string("empty_s"), "");
    EXPECT_EQ(g.find("u64_big")->u, (uint64_t(1) << 63) + 5);
    expect_getter_error([&] { g.get_int("u64_big"); }, {"test.gguf", "u64_big", "int64"});
    EXPECT_EQ(g.get_int("u64"), 123456789012345ll);
    EXPECT_EQ(g.get_int("i64"), -(int64_t(1) << 62));
    EXPECT_EQ(g.get_float("f64"), 3.141592653589793);
    EXPECT_EQ(g.get_int_array("ints"), (std::vector<int64_t>{-1, 7}));
    EXPECT_EQ(g.get_float_array("ints"), (std::vector<float>{-1, 7}));
    EXPECT_EQ(g.get_int_array("u8s"), (std::vector<int64_t>{255}));
    EXPECT_EQ(g.get_string_array("strs"), (std::vector<std::string>{"x", "", "yz"}));
    EXPECT_TRUE(g.get_float_array("empty_arr").empty());
    EXPECT_TRUE(g.find("u8")->is_integer());
    EXPECT_FALSE(g.find("f32")->is_integer());
    EXPECT_TRUE(g.find("f64")->is_float());
    const GgufValue* n = g.find("nested");
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->type, GgufValueType::ARRAY);
    ASSERT_EQ(n->elem_type, GgufValueType::ARRAY);
    ASSERT_EQ(n->array.size(), 3u);
    EXPECT_EQ(n->array[0].elem_type, GgufValueType::UINT8);
    EXPECT_EQ(n->array[0].array.at(0).u, 1u);
    EXPECT_EQ(n->array[1].array.at(0).s, "deep");
    EXPECT_TRUE(n->array[2].array.at(0).array.at(0).b);
    // Optional getters.
    EXPECT_EQ(g.get_int_opt("u8"), 200);
    EXPECT_FALSE(g.get_int_opt("nope").has_value());
    EXPECT_FALSE(g.get_float_opt("nope").has_value());
    EXPECT_FALSE(g.get_bool_opt("nope").has_value());
    EXPECT_FALSE(g.get_string_opt("nope").has_value());
    EXPECT_EQ(g.get_string_opt("s"), "h\xc3\xa9llo");
    EXPECT_THROW(g.get_int_opt("s"), Error);  // present but the wrong type is still an error
    // Re-writing what was read gives the same bytes.
    GgufWriter w2;
    for (const auto& [k, v] : g.metadata()) w2.add(k, v);
    EXPECT_EQ(w2.to_bytes(), b);
}

TEST(GgufWriteRead, TensorsAndAlignment) {
    for (uint32_t alignment : {32u, 64u, 1u}) {
        SCOPED_TRACE(alignment);
        GgufWriter w(alignment);
        w.add_string("general.name", "t");
        std::map<std::string, std::pair<GgmlType, Bytes>> expect;
        const auto x = iota_floats(512, 0.02f);
        struct Spec {
            const char* name;
            GgmlType type;
            std::vector<int64_t> dims;
        };
        const Spec specs[] = {{"a.f32", GgmlType::F32, {3}},        {"b.f16", GgmlType::F16, {5, 3}},
                              {"c.q8_0", GgmlType::Q8_0, {64, 2}},  {"d.q4_1", GgmlType::Q4_1, {32, 1, 3}},
                              {"e.q6_k", GgmlType::Q6_K, {256, 2}}, {"f.bf16", GgmlType::BF16, {7, 1, 1, 2}},
                              {"g.q4_k", GgmlType::Q4_K, {256}},    {"h.q5_0", GgmlType::Q5_0, {32, 4}}};
        for (const Spec& s : specs) {
            int64_t n = 1;
            for (int64_t d : s.dims) n *= d;
            const Bytes q = quantize_ref(s.type, x.data(), n);
            w.add_tensor(s.name, s.dims, s.type, q.data(), q.size());
            expect[s.name] = {s.type, q};
        }
        const Bytes b = w.to_bytes();
        const GgufFile g = parse(b);
        EXPECT_EQ(g.alignment(), alignment);
        EXPECT_EQ(g.data_offset() % alignment, 0u);
        if (alignment != 32) {
            EXPECT_EQ(g.get_int("general.alignment"), alignment);
        }
        ASSERT_EQ(g.tensors().size(), std::size(specs));
        for (size_t i = 0; i < std::size(specs); ++i) {
            const GgufTensorInfo& t = g.tensors()[i];
            EXPECT_EQ(t.name, specs[i].name);  // file order kept
            EXPECT_EQ(t.dims, specs[i].dims);
            EXPECT_EQ(t.type, specs[i].type);
            EXPECT_EQ(t.offset % alignment, 0u);
            const Bytes& q = expect[t.name].second;
            EXPECT_EQ(t.nbytes, q.size());
            int64_t n = 1;
            for (int64_t d : t.dims) n *= d;
            EXPECT_EQ(t.numel, n);
            EXPECT_EQ(std::memcmp(g.tensor_data(t), q.data(), q.size()), 0) << t.name;
            EXPECT_EQ(&g.tensor(t.name), &t);
        }
        EXPECT_EQ(g.find_tensor("nope"), nullptr);
        expect_getter_error([&] { g.tensor("nope"); }, {"test.gguf", "nope"});
    }
}

TEST(GgufWriteRead, Version2AndFileOnDisk) {
    GgufWriter w(32, 2);
    w.add_u32("k", 7);
    const auto x = iota_floats(32, 0.1f);
    w.add_tensor_f32("t", {32}, x);
    const Bytes b = w.to_bytes();
    EXPECT_EQ(parse(b).version(), 2u);

    const std::string dir = ::testing::TempDir() + "/hydra_gguf_test_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/v2.gguf";
    w.write(path);
    for (const auto& e : std::filesystem::directory_iterator(dir))
        EXPECT_EQ(e.path().filename().string(), "v2.gguf");  // no temporary left behind
    const GgufFile g = GgufFile::open(path);
    EXPECT_EQ(g.source(), path);
    EXPECT_EQ(g.get_int("k"), 7);
    std::vector<float> y(32);
    dequantize_row(GgmlType::F32, g.tensor_data(g.tensor("t")), y.data(), 32);
    EXPECT_EQ(y, x);
    std::filesystem::remove_all(dir);
    expect_getter_error([&] { GgufFile::open(path); }, {path});
}

TEST(GgufWriter, RejectsBadInput) {
    GgufWriter w;
    w.add_u32("a", 1);
    EXPECT_THROW(w.add_u32("a", 2), Error);
    float data[32] = {};
    EXPECT_THROW(w.add_tensor("t", {31}, GgmlType::Q8_0, data, 34), Error);  // not a block multiple
    EXPECT_THROW(w.add_tensor("t", {32}, GgmlType::F32, data, 64), Error);   // wrong byte count
    w.add_tensor("t", {32}, GgmlType::F32, data, 128);
    EXPECT_THROW(w.add_tensor("t", {32}, GgmlType::F32, data, 128), Error);  // duplicate
    EXPECT_THROW(GgufWriter(24), Error);
    EXPECT_THROW(GgufWriter(32, 1), Error);
}

// ---------------------------------------------------------------------------------------------
// Hostile input

TEST(GgufBadInput, EveryTruncationThrows) {
    const Bytes full = small_file().to_bytes();
    const GgufFile g = parse(full);
    uint64_t end = 0;  // end of the last tensor's data (the writer pads after it; that part is optional)
    for (const auto& t : g.tensors()) end = std::max(end, g.data_offset() + t.offset + t.nbytes);
    ASSERT_LE(end, full.size());
    for (size_t len = 0; len < end; ++len) {
        const Bytes cut(full.begin(),
                        full.begin() + long(len));  // exact-size buffer: overreads are caught by ASan
        try {
            GgufFile::parse(cut.data(), cut.size(), "cut.gguf");
            ADD_FAILURE() << "prefix of " << len << " bytes parsed";
        } catch (const Error& e) {
            ASSERT_EQ(std::string(e.what()).rfind("cut.gguf: ", 0), 0u) << e.what();
        }
    }
    // A cut inside a tensor info names it: cut in the dims of "w.weight" (after its name and n_dims).
    const std::string needle = "w.weight";
    const auto at = std::search(full.begin(), full.end(), needle.begin(), needle.end());
    ASSERT_NE(at, full.end());
    expect_error(Bytes(full.begin(), at + long(needle.size()) + 4 + 3),
                 {"truncated", "tensor info 1 ('w.weight')"});
    expect_error(Bytes(full.begin(), full.begin() + 30), {"metadata kv count", "cannot fit", "truncated"});
    expect_error(Bytes(full.begin(), full.begin() + 200),
                 {"truncated", "metadata kv 3 key", "string of 21 bytes"});
}

TEST(GgufBadInput, Header) {
    expect_error({}, {"not a GGUF file"});
    expect_error({'G', 'G', 'U', 'X', 3, 0, 0, 0},
                 {"not a GGUF file", "magic", "0x58554747", "expected 'GGUF'"});
    expect_error(Raw().header(0, 0, 1).b, {"version", "v1"});
    expect_error(Raw().header(0, 0, 0x03000000).b, {"version", "big-endian"});
    expect_error(Raw().header(0, 0, 4).b, {"version", "unsupported", "4"});
    expect_error(Raw().header(uint64_t(1) << 60, 0).b, {"tensor count", "cannot fit"});
    expect_error(Raw().header(uint64_t(-1), 0).b, {"tensor count", "negative"});
    expect_error(Raw().header(0, uint64_t(1) << 60).b, {"kv count", "cannot fit"});
    // No tensors: the file may end right after the header (vocabulary-only files); with tensors the
    // padded data section must exist.
    EXPECT_NO_THROW(parse(Raw().header(0, 0).b));
    expect_error(Raw().header(1, 0).tensor("t", {8}, 0, 0).b, {"truncated", "data section"});
}

TEST(GgufBadInput, Metadata) {
    // Absurd key length.
    expect_error(Raw().header(0, 1).u64(uint64_t(1) << 62).zeros(16).b,
                 {"metadata kv 0 key", "string length"});
    // Key longer than the remaining file.
    expect_error(Raw().header(0, 1).u64(1000).zeros(16).b,
                 {"truncated", "metadata kv 0 key", "string of 1000 bytes"});
    // Absurd string value length.
    expect_error(Raw().header(0, 1).str("name").u32(8).u64(uint64_t(1) << 61).zeros(16).b,
                 {"truncated", "metadata key 'name'", "string of 2305843009213693952 bytes"});
    // Absurd array count.
    expect_error(Raw().header(0, 1).str("arr").u32(9).u32(4).u64(uint64_t(1) << 58).zeros(16).b,
                 {"metadata key 'arr'", "array of", "cannot fit"});
    // Array of strings whose count fits 1-byte elements but not 8-byte string lengths.
    expect_error(Raw().header(0, 1).str("arr").u32(9).u32(8).u64(4).zeros(16).b, {"metadata key 'arr'"});
    // Invalid value types (top level and element).
    expect_error(Raw().header(0, 1).str("x").u32(13).zeros(16).b,
                 {"metadata key 'x'", "invalid value type 13"});
    expect_error(Raw().header(0, 1).str("x").u32(9).u32(99).u64(0).zeros(16).b,
                 {"metadata key 'x'", "invalid array element type 99"});
    // Bool other than 0/1.
    expect_error(Raw().header(0, 1).str("b").u32(7).put<uint8_t>(2).zeros(16).b,
                 {"metadata key 'b'", "bool", "2"});
    // Duplicate key.
    expect_error(Raw().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).zeros(16).b,
                 {"metadata key 'k'", "duplicate"});
    // Empty key.
    expect_error(Raw().header(0, 1).kv_u32("", 1).zeros(16).b, {"metadata kv 0 key", "empty"});
    // More array elements than HydraHead keeps in memory (fails before allocating them).
    Raw many;
    many.header(0, 1).str("many").u32(9).u32(0).u64((uint64_t(1) << 23) + 1).zeros((size_t(1) << 23) + 32);
    expect_error(many.b, {"metadata key 'many'", "in total"});
    // Arrays nested 9 deep.
    Raw deep;
    deep.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
    deep.u32(0).u64(0).zeros(64);
    expect_error(deep.b, {"metadata key 'deep'", "nested"});
    // ... while 8 levels are fine.
    Raw ok;
    ok.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 7; ++i) ok.u32(9).u64(1);
    ok.u32(0).u64(0).pad(32);
    EXPECT_NO_THROW(parse(ok.b));
}

TEST(GgufBadInput, Alignment) {
    expect_error(Raw().header(0, 1).kv_u32("general.alignment", 0).pad(32).b,
                 {"general.alignment", "power of two"});
    expect_error(Raw().header(0, 1).kv_u32("general.alignment", 3).pad(32).b,
                 {"general.alignment", "power of two"});
    expect_error(Raw().header(0, 1).str("general.alignment").u32(10).u64(32).pad(32).b,
                 {"general.alignment", "expected uint32", "uint64"});
    EXPECT_EQ(parse(Raw().header(0, 1).kv_u32("general.alignment", 16).pad(16).b).alignment(), 16u);
}

TEST(GgufBadInput, TensorInfos) {
    auto one = [](std::initializer_list<uint64_t> dims, uint32_t type, uint64_t offset, size_t data = 64) {
        return Raw().header(1, 0).tensor("blk.0.w", dims, type, offset).pad(32).zeros(data).b;
    };
    EXPECT_NO_THROW(parse(one({8}, 0, 0)));
    expect_error(one({}, 0, 0), {"tensor info 0 ('blk.0.w')", "n_dims is 0"});
    expect_error(Raw().header(1, 0).str("t").u32(5).zeros(80).b, {"tensor info 0 ('t')", "n_dims is 5"});
    expect_error(one({8, 0}, 0, 0), {"tensor info 0 ('blk.0.w')", "dimension 1"});
    expect_error(one({uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0),
                 {"tensor info 0 ('blk.0.w')", "overflow"});
    expect_error(one({uint64_t(1) << 62}, 0, 0), {"tensor info 0 ('blk.0.w')", "overflow"});  // bytes
    expect_error(one({8}, 99, 0), {"tensor info 0 ('blk.0.w')", "ggml type id 99", "unknown"});
    expect_error(one({8}, 4, 0), {"tensor info 0 ('blk.0.w')", "retired"});
    expect_error(one({33}, 8, 0), {"tensor info 0 ('blk.0.w')", "block size 32"});
    expect_error(one({8}, 0, 16), {"tensor info 0 ('blk.0.w')", "not a multiple of the alignment 32"});
    expect_error(one({32}, 0, 0), {"tensor 'blk.0.w'", "runs past the end"});  // 128 bytes, 64 present
    expect_error(one({8}, 0, 64), {"tensor 'blk.0.w'", "runs past the end"});  // starts at the end
    expect_error(one({8}, 0, uint64_t(-32)), {"tensor 'blk.0.w'", "runs past the end"});  // offset wraps
    expect_error(Raw().header(2, 0).tensor("x", {8}, 0, 0).tensor("x", {8}, 0, 32).pad(32).zeros(64).b,
                 {"tensor info 1 ('x')", "duplicate"});
    expect_error(Raw().header(1, 0).str(std::string(300, 'n')).zeros(40).b, {"tensor info 0 name", "limit"});
    expect_error(Raw().header(1, 0).str("").zeros(40).b, {"tensor info 0", "empty"});
}

TEST(GgufBadInput, Getters) {
    const Bytes b = small_file().to_bytes();
    const GgufFile g = parse(b, "model.gguf");
    expect_getter_error([&] { g.get_int("llama.context_length"); },
                        {"model.gguf", "missing metadata key 'llama.context_length'"});
    expect_getter_error(
        [&] { g.get_string("llama.block_count"); },
        {"model.gguf", "metadata key 'llama.block_count'", "expected a string", "found uint32"});
    expect_getter_error(
        [&] { g.get_int("general.architecture"); },
        {"model.gguf", "metadata key 'general.architecture'", "expected an integer", "found string"});
    expect_getter_error([&] { g.get_bool("llama.block_count"); }, {"expected a bool"});
    expect_getter_error([&] { g.get_float("general.architecture"); }, {"expected a number"});
    expect_getter_error([&] { g.get_int_array("tokenizer.ggml.tokens"); }, {"found array of string"});
    expect_getter_error([&] { g.get_string_array("tokenizer.ggml.scores"); }, {"found array of float32"});
    EXPECT_EQ(g.get_float_array("tokenizer.ggml.scores"), (std::vector<float>{0.5f, -1.0f}));
    EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens")[3], "\xe2\x96\x81the");
}

// Writes the small valid seed files for the fuzzer when HYDRA_WRITE_FUZZ_SEEDS names a directory.
TEST(GgufFuzzSeeds, WriteWhenAsked) {
    const char* dir = std::getenv("HYDRA_WRITE_FUZZ_SEEDS");
    if (dir == nullptr) GTEST_SKIP() << "set HYDRA_WRITE_FUZZ_SEEDS=<dir> to write fuzz seeds";
    small_file().write(std::string(dir) + "/small.gguf");
    small_file(64).write(std::string(dir) + "/small_align64.gguf");
    {
        GgufWriter w(8, 2);
        w.add("nested", gguf_array(GgufValueType::ARRAY,
                                   {gguf_array(GgufValueType::INT16, {gguf_int(GgufValueType::INT16, -3)})}));
        w.add("u64", gguf_uint(GgufValueType::UINT64, 1));
        w.add("f64", gguf_float(GgufValueType::FLOAT64, 2.5));
        w.add("i8", gguf_int(GgufValueType::INT8, -1));
        const auto x = iota_floats(256, 0.03f);
        for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_1}) {
            const Bytes q = quantize_ref(t, x.data(), 64);
            w.add_tensor(std::string("t.") + std::string(ggml_type_info(uint32_t(t))->name), {32, 2}, t,
                         q.data(), q.size());
        }
        w.write(std::string(dir) + "/types_v2.gguf");
    }
    {
        GgufWriter w;
        w.add_string("general.architecture", "llama");
        const auto x = iota_floats(256, 0.05f);
        for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q5_0}) {
            const Bytes q = quantize_ref(t, x.data(), 256);
            w.add_tensor(std::string("k.") + std::string(ggml_type_info(uint32_t(t))->name), {256}, t,
                         q.data(), q.size());
        }
        w.write(std::string(dir) + "/ktypes.gguf");
    }
}

// ---------------------------------------------------------------------------------------------
// The real default model, when present.

namespace {

std::string model_path() {
    if (const char* p = std::getenv("HYDRA_MODEL")) return p;
    return HYDRA_SOURCE_DIR "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

TEST(GgufRealModel, SmolLM2) {
    const std::string path = model_path();
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " not found: run tools/setup.sh (or set HYDRA_MODEL)";
    if (path.find("SmolLM2-135M-Instruct.Q4_1") == std::string::npos)
        GTEST_SKIP() << "HYDRA_MODEL is not the default SmolLM2-135M-Instruct.Q4_1 file; the exact checks do "
                        "not apply";
    const GgufFile g = GgufFile::open(path);
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.tensors().size(), 272u);
    EXPECT_EQ(g.metadata().size(), 33u);
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_int("llama.block_count"), 30);
    EXPECT_EQ(g.get_int("llama.embedding_length"), 576);
    EXPECT_EQ(g.get_int("llama.attention.head_count_kv"), 3);
    EXPECT_NEAR(g.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
    EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
    EXPECT_EQ(g.get_int_array("tokenizer.ggml.token_type").size(), 49152u);
    EXPECT_EQ(g.tensor("token_embd.weight").dims, (std::vector<int64_t>{576, 49152}));
    EXPECT_EQ(g.data_offset(), 1785664u);  // gguf-py's data offset for this file

    std::map<std::string, int> histogram;
    std::vector<float> row;
    for (const GgufTensorInfo& t : g.tensors()) {
        const GgmlTypeInfo* info = ggml_type_info(uint32_t(t.type));
        ASSERT_NE(info, nullptr);
        EXPECT_TRUE(info->can_dequantize) << t.name << " has type " << info->name;
        ++histogram[std::string(info->name)];
        // Every row of every tensor dequantizes to finite values.
        const int64_t ne0 = t.dims[0], rows = t.numel / ne0;
        const size_t rb = ggml_row_bytes(t.type, ne0);
        row.resize(size_t(ne0));
        for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 64)) {
            dequantize_row(t.type, g.tensor_data(t) + r * rb, row.data(), ne0);
            for (float v : row) ASSERT_TRUE(std::isfinite(v)) << t.name << " row " << r;
        }
    }
    std::string hist;
    for (const auto& [name, count] : histogram) hist += fmt::format(" {}={}", name, count);
    std::printf("[ info     ] %s tensor types:%s\n", path.c_str(), hist.c_str());
    EXPECT_EQ(histogram["Q4_1"], 210);
    EXPECT_EQ(histogram["F32"], 61);
    EXPECT_EQ(histogram["Q8_0"], 1);

    // Rows checked against gguf-py's dequantize (an independent implementation), run once:
    //   first 4 values, sum and sum of |x| of the row.
    struct Golden {
        const char* tensor;
        int64_t row;
        float first[4];
        double sum, abs_sum;
    };
    const Golden goldens[] = {
        {"token_embd.weight",
         0,
         {-0.10654449462890625f, 0.032978057861328125f, 0.048198699951171875f, -0.022830963134765625f},
         -2.2541093826293945,
         54.692320823669434},
        {"token_embd.weight",
         1000,
         {-0.1119384765625f, -0.0739593505859375f, 0.0379791259765625f, -0.0179901123046875f},
         1.9784250259399414,
         51.0777006149292},
        {"blk.0.attn_q.weight",
         5,
         {0.076171875f, -0.274658203125f, -0.040771484375f, 0.894775390625f},
         -3.731201171875,
         142.586181640625},
        {"blk.29.ffn_down.weight",
         0,
         {-0.2733154296875f, 0.186279296875f, 0.186279296875f, 0.04840087890625f},
         -10.83831787109375,
         202.345703125},
    };
    for (const Golden& gd : goldens) {
        const GgufTensorInfo& t = g.tensor(gd.tensor);
        const int64_t ne0 = t.dims[0];
        row.resize(size_t(ne0));
        dequantize_row(t.type, g.tensor_data(t) + gd.row * ggml_row_bytes(t.type, ne0), row.data(), ne0);
        double sum = 0, abs_sum = 0;
        for (float v : row) sum += v, abs_sum += std::fabs(v);
        for (int i = 0; i < 4; ++i)
            EXPECT_NEAR(row[i], gd.first[i], 1e-6f * std::fabs(gd.first[i])) << gd.tensor;
        EXPECT_NEAR(sum, gd.sum, 1e-4) << gd.tensor << " row " << gd.row;
        EXPECT_NEAR(abs_sum, gd.abs_sum, 1e-4) << gd.tensor << " row " << gd.row;
    }
}
