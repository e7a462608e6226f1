// Tests of the safetensors reader/writer and HF shard directories. References are independent of the
// code under test: hand-built byte images (header text + little-endian data written out here) and
// hand-computed bf16/f16 bit patterns.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "io/safetensors.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

const std::string kSource = "test.safetensors";

// A safetensors image: u64 LE header length, header text, data.
Bytes image(const std::string& header, const Bytes& data = {}) {
    // Sized up front: GCC 12 warns falsely (-Warray-bounds) about insert() into a small vector.
    Bytes out(8 + header.size() + data.size());
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
    std::copy(header.begin(), header.end(), out.begin() + 8);
    std::copy(data.begin(), data.end(), out.begin() + 8 + long(header.size()));
    return out;
}

Bytes f32_bytes(std::initializer_list<float> values) {
    Bytes out;
    for (float v : values) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        for (int i = 0; i < 4; ++i) out.push_back(uint8_t(bits >> (8 * i)));
    }
    return out;
}

SafetensorsFile parse_bytes(const Bytes& b) {
    // An exact-size heap copy, so a sanitizer sees any read past the end.
    auto copy = std::make_unique<uint8_t[]>(b.size() + (b.empty() ? 1 : 0));
    if (!b.empty()) std::memcpy(copy.get(), b.data(), b.size());
    SafetensorsFile f = SafetensorsFile::parse(copy.get(), b.size(), kSource);
    return f;  // infos only are used after this; the data pointer is not
}

// Asserts that `fn` throws hydra::Error whose message names `name` and contains `what`.
void expect_error(const std::function<void()>& fn, const std::string& what,
                  const std::string& name = kSource) {
    try {
        fn();
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(name), std::string::npos) << "message does not name " << name << ": " << msg;
        EXPECT_NE(msg.find(what), std::string::npos) << "message lacks '" << what << "': " << msg;
        return;
    }
    ADD_FAILURE() << "no hydra::Error (expected one about '" << what << "')";
}

void expect_bad(const Bytes& b, const std::string& what) {
    expect_error([&] { parse_bytes(b); }, what);
}

Bytes read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary);
    out << text;
}

Tensor f32_tensor(const Shape& shape, const std::vector<float>& values) {
    Tensor t = Tensor::zeros(shape, DType::F32);
    EXPECT_EQ(size_t(t.numel()), values.size());
    std::copy(values.begin(), values.end(), t.f32());
    return t;
}

class SafetensorsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() / fmt::format("hydra_st_{}_{}", ::getpid(), info->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    fs::path dir_;
};

// ----------------------------------------------------------------------------------------------
// Independent byte-level references

TEST_F(SafetensorsTest, WriterMatchesHandBuiltBytes) {
    const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    std::string header = json;
    header.resize(56, ' ');  // 8 + 56 = 64: data starts at byte 64
    const Bytes expected = image(header, {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0});  // 1.0f, -2.0f

    const std::string p = path("a.safetensors");
    write_safetensors(p, {{"a", f32_tensor({2}, {1.0f, -2.0f})}});
    EXPECT_EQ(read_file(p), expected);
    EXPECT_EQ(serialize_safetensors({{"a", f32_tensor({2}, {1.0f, -2.0f})}}), expected);
}

TEST_F(SafetensorsTest, WriterMetadataAndConversionMatchHandBuiltBytes) {
    // bf16 of 1.0 is 0x3f80; of -2.0 is 0xc000; 1 + 2^-8 is a tie and rounds to even (0x3f80);
    // 1 + 3 * 2^-8 rounds up to 0x3f82.
    const std::string json =
        R"({"__metadata__":{"format":"pt","step":"7"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})";
    std::string header = json;
    header.resize(120, ' ');  // 8 + 120 = 128
    ASSERT_LT(json.size(), 120u);
    ASSERT_GT(json.size(), 56u);
    const Bytes expected = image(header, {0x80, 0x3f, 0x00, 0xc0, 0x80, 0x3f, 0x82, 0x3f});
    const Bytes got =
        serialize_safetensors({{"w", f32_tensor({2, 2}, {1.0f, -2.0f, 1.00390625f, 1.01171875f})}},
                              {{"step", "7"}, {"format", "pt"}}, DType::BF16);
    EXPECT_EQ(got, expected);
}

TEST_F(SafetensorsTest, ParsesHandBuiltFile) {
    // Written the way the Rust writer does it (header padded to 8, keys in any order), three dtypes.
    std::string header =
        R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[12,18]},"__metadata__":{"k":"v"},)"
        R"("f":{"dtype":"F32","shape":[1,3],"data_offsets":[0,12]},"b":{"dtype":"BF16","shape":[],"data_offsets":[18,20]}})";
    while ((8 + header.size()) % 8) header += ' ';
    Bytes data = f32_bytes({0.5f, -1.5f, 3.0f});
    for (uint8_t x : {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b}) data.push_back(x);  // f16: 1, -2, 65504
    for (uint8_t x : {0x40, 0x40}) data.push_back(x);                          // bf16: 3.0
    const Bytes b = image(header, data);
    const SafetensorsFile f = SafetensorsFile::parse(b.data(), b.size(), kSource);

    ASSERT_EQ(f.tensors().size(), 3u);
    EXPECT_EQ(f.tensors()[0].name, "h");  // file order
    EXPECT_EQ(f.tensors()[1].name, "f");
    EXPECT_EQ(f.tensors()[2].name, "b");
    EXPECT_EQ(f.metadata().at("k"), "v");
    EXPECT_EQ(f.data_offset(), 8 + header.size());

    const auto& h = f.tensor("h");
    EXPECT_EQ(h.dtype, StDType::F16);
    EXPECT_EQ(h.shape, Shape({3}));
    EXPECT_EQ(h.begin, 12u);
    EXPECT_EQ(h.end, 18u);
    EXPECT_EQ(f.raw(h), b.data() + 8 + header.size() + 12);

    Tensor tf = f.to_f32("f");
    EXPECT_EQ(tf.shape(), Shape({1, 3}));
    EXPECT_EQ(tf.f32()[0], 0.5f);
    EXPECT_EQ(tf.f32()[1], -1.5f);
    EXPECT_EQ(tf.f32()[2], 3.0f);
    Tensor th = f.to_f32("h");
    EXPECT_EQ(th.f32()[0], 1.0f);
    EXPECT_EQ(th.f32()[1], -2.0f);
    EXPECT_EQ(th.f32()[2], 65504.0f);
    Tensor tb = f.to_f32("b");
    EXPECT_EQ(tb.rank(), 0);
    EXPECT_EQ(tb.numel(), 1);
    EXPECT_EQ(tb.f32()[0], 3.0f);

    EXPECT_EQ(f.find("nope"), nullptr);
    expect_error([&] { f.tensor("nope"); }, "nope");
    expect_error([&] { f.to_f32("nope"); }, "no tensor named 'nope'");
}

TEST_F(SafetensorsTest, RecognisesEveryDtype) {
    // name, bits per element (from the format spec, not from the code under test)
    const std::vector<std::pair<std::string, int>> dtypes = {
        {"BOOL", 8},        {"U8", 8},   {"I8", 8},      {"I16", 16},    {"U16", 16},    {"F16", 16},
        {"BF16", 16},       {"I32", 32}, {"U32", 32},    {"F32", 32},    {"F64", 64},    {"I64", 64},
        {"U64", 64},        {"C64", 64}, {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
        {"F8_E5M2FNUZ", 8}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6},
    };
    std::string header = "{";
    uint64_t offset = 0;
    for (const auto& [name, bits] : dtypes) {
        const uint64_t bytes = 8 * uint64_t(bits) / 8;  // 8 elements: whole bytes for every dtype
        header += fmt::format(R"({}"t_{}":{{"dtype":"{}","shape":[2,4],"data_offsets":[{},{}]}})",
                              offset ? "," : "", name, name, offset, offset + bytes);
        offset += bytes;
    }
    header += "}";
    const SafetensorsFile f = parse_bytes(image(header, Bytes(offset, 0)));
    ASSERT_EQ(f.tensors().size(), dtypes.size());
    for (size_t i = 0; i < dtypes.size(); ++i) {
        EXPECT_EQ(st_dtype_name(f.tensors()[i].dtype), dtypes[i].first);
        EXPECT_EQ(st_dtype_bits(f.tensors()[i].dtype), size_t(dtypes[i].second));
        EXPECT_EQ(f.tensors()[i].numel, 8);
    }
    // Sub-byte types: 3 F4 elements are 12 bits, not whole bytes.
    expect_bad(image(R"({"x":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", Bytes(1, 0)), "whole bytes");
}

// ----------------------------------------------------------------------------------------------
// Round trips through the writer

// The sample values; the product is stored first so -march=native FMA contraction cannot make
// two evaluations of the same expression round differently.
float sample_value(size_t i) {
    volatile float product = float(i) * 0.37f;
    return product - 2.5f;
}

std::vector<SafetensorsEntry> sample_entries() {
    std::vector<float> big(3 * 5);
    for (size_t i = 0; i < big.size(); ++i) big[i] = sample_value(i);
    Tensor ids = Tensor::zeros({4}, DType::I32);
    for (int i = 0; i < 4; ++i) ids.data<int32_t>()[i] = -7 + 1000000 * i;
    Tensor bf = Tensor::zeros({3}, DType::BF16);
    for (int i = 0; i < 3; ++i) bf.data<uint16_t>()[i] = uint16_t(0x3f80 + i);
    Tensor hf = Tensor::zeros({2, 1}, DType::F16);
    hf.data<uint16_t>()[0] = 0x3c00;  // 1.0
    hf.data<uint16_t>()[1] = 0x0001;  // smallest subnormal, 2^-24
    return {
        {"model.layers.0.w", f32_tensor({3, 5}, big)}, {"ids", ids}, {"scalar", f32_tensor({}, {3.5f})},
        {"empty", Tensor::zeros({0, 7}, DType::F32)},  {"bf", bf},   {"hf", hf},
    };
}

TEST_F(SafetensorsTest, RoundTripKeepsDtypesShapesBytesAndMetadata) {
    const auto entries = sample_entries();
    const std::map<std::string, std::string> meta = {{"step", "12"}, {"config", R"({"a": [1, 2]})"}};
    const std::string p = path("rt.safetensors");
    write_safetensors(p, entries, meta);
    const SafetensorsFile f = SafetensorsFile::open(p);
    EXPECT_EQ(f.metadata(), meta);
    EXPECT_EQ(f.data_offset() % 64, 0u);
    ASSERT_EQ(f.tensors().size(), entries.size());
    for (const auto& e : entries) {
        const auto& info = f.tensor(e.name);
        EXPECT_EQ(info.shape, e.tensor.shape()) << e.name;
        EXPECT_EQ(st_to_dtype(info.dtype), e.tensor.dtype()) << e.name;
        EXPECT_EQ(info.begin % dtype_size(e.tensor.dtype()), 0u) << e.name << " is not aligned";
        Tensor back = f.copy(e.name);
        ASSERT_EQ(back.nbytes(), e.tensor.nbytes());
        EXPECT_EQ(std::memcmp(back.raw(), e.tensor.raw(), back.nbytes()), 0) << e.name;
    }
    // Every float dtype converts to f32 exactly.
    Tensor w = f.to_f32("model.layers.0.w");
    for (int i = 0; i < 15; ++i) EXPECT_EQ(w.f32()[i], sample_value(size_t(i)));
    Tensor hf = f.to_f32("hf");
    EXPECT_EQ(hf.f32()[0], 1.0f);
    EXPECT_EQ(hf.f32()[1], std::ldexp(1.0f, -24));
    Tensor bf = f.to_f32("bf");
    EXPECT_EQ(bf.f32()[1], 1.0f + 1.0f / 128);  // 0x3f81
    EXPECT_EQ(f.to_f32("scalar").f32()[0], 3.5f);
    EXPECT_EQ(f.to_f32("empty").numel(), 0);
    expect_error([&] { f.to_f32("ids"); }, "ids", p);
    // No temporary file is left behind.
    for (const auto& entry : fs::directory_iterator(dir_))
        EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

TEST_F(SafetensorsTest, ConversionToBf16AndF16OnWrite) {
    const auto entries = sample_entries();
    for (DType out : {DType::BF16, DType::F16}) {
        const std::string p = path(fmt::format("conv_{}.safetensors", dtype_name(out)));
        write_safetensors(p, entries, {}, out);
        const SafetensorsFile f = SafetensorsFile::open(p);
        const StDType want = out == DType::BF16 ? StDType::BF16 : StDType::F16;
        EXPECT_EQ(f.tensor("model.layers.0.w").dtype, want);
        EXPECT_EQ(f.tensor("scalar").dtype, want);
        EXPECT_EQ(f.tensor("empty").dtype, want);
        EXPECT_EQ(f.tensor("bf").dtype, want);
        EXPECT_EQ(f.tensor("hf").dtype, want);
        EXPECT_EQ(f.tensor("ids").dtype, StDType::I32);  // integers are never converted
        const Tensor w = f.to_f32("model.layers.0.w");
        for (int i = 0; i < 15; ++i) {
            const float x = sample_value(size_t(i));
            const float expect = out == DType::BF16 ? bf16_to_f32(f32_to_bf16(x)) : f16_to_f32(f32_to_f16(x));
            EXPECT_EQ(w.f32()[i], expect);
            EXPECT_NEAR(w.f32()[i], x, std::abs(x) * (out == DType::BF16 ? 4e-3 : 5e-4));
        }
        EXPECT_EQ(f.to_f32("scalar").f32()[0], 3.5f);  // exact in both
        EXPECT_EQ(f.to_f32("bf").f32()[2], 1.0f + 2.0f / 128);
        EXPECT_EQ(f.to_f32("hf").f32()[0], 1.0f);
        // 2^-24 is an f16 subnormal but a normal bf16.
        EXPECT_EQ(f.to_f32("hf").f32()[1], std::ldexp(1.0f, -24));
    }
    // Back to f32 from 16-bit inputs.
    const std::string p = path("to_f32.safetensors");
    write_safetensors(p, entries, {}, DType::F32);
    const SafetensorsFile f = SafetensorsFile::open(p);
    EXPECT_EQ(f.tensor("bf").dtype, StDType::F32);
    EXPECT_EQ(f.tensor("hf").dtype, StDType::F32);
    EXPECT_EQ(f.to_f32("hf").f32()[1], std::ldexp(1.0f, -24));
    expect_error([&] { write_safetensors(path("x"), entries, {}, DType::I32); },
                 "cannot write tensors as i32", path("x"));
}

TEST_F(SafetensorsTest, DoubleWritesAreByteIdenticalWhateverTheInputOrder) {
    auto entries = sample_entries();
    const std::map<std::string, std::string> meta = {{"b", "2"}, {"a", "1"}};
    write_safetensors(path("one"), entries, meta, DType::BF16);
    write_safetensors(path("two"), entries, meta, DType::BF16);
    std::reverse(entries.begin(), entries.end());
    write_safetensors(path("three"), entries, meta, DType::BF16);
    const Bytes one = read_file(dir_ / "one");
    EXPECT_FALSE(one.empty());
    EXPECT_EQ(one, read_file(dir_ / "two"));
    EXPECT_EQ(one, read_file(dir_ / "three"));
    // Overwriting an existing file replaces it.
    write_safetensors(path("one"), {{"x", f32_tensor({1}, {1.0f})}});
    EXPECT_EQ(SafetensorsFile::open(path("one")).tensors().size(), 1u);
}

TEST_F(SafetensorsTest, WriterRejectsBadEntries) {
    const Tensor t = f32_tensor({1}, {1.0f});
    expect_error(
        [&] {
            write_safetensors(path("d"), {{"a", t}, {"a", t}});
        },
        "'a' is given twice", path("d"));
    expect_error([&] { write_safetensors(path("d"), {{"", t}}); }, "empty name", path("d"));
    expect_error([&] { write_safetensors(path("d"), {{"__metadata__", t}}); }, "reserved", path("d"));
    expect_error([&] { write_safetensors(path("d"), {{"\xff\xfe", t}}); }, "UTF-8", path("d"));
    EXPECT_FALSE(fs::exists(path("d")));
    EXPECT_TRUE(fs::is_empty(dir_)) << "a failed write left a file behind";
    expect_error(
        [&] {
            write_safetensors(path("no/such/dir/x"), {{"a", t}});
        },
        "cannot create", path("no/such/dir/x"));
}

// ----------------------------------------------------------------------------------------------
// Bad input

TEST_F(SafetensorsTest, EveryTruncationThrows) {
    const Bytes full = serialize_safetensors(sample_entries(), {{"k", "v"}});
    ASSERT_NO_THROW(parse_bytes(full));
    for (size_t n = 0; n < full.size(); ++n) {
        const Bytes prefix(full.begin(), full.begin() + long(n));
        EXPECT_THROW(parse_bytes(prefix), Error) << "prefix of " << n << " bytes";
    }
    expect_bad(Bytes(full.begin(), full.begin() + 5), "too short");
    expect_bad(Bytes(full.begin(), full.begin() + 20), "runs past the end");
    expect_bad(Bytes(full.begin(), full.end() - 1), "data buffer");
}

TEST_F(SafetensorsTest, HeaderProblems) {
    Bytes absurd = image("{}");
    absurd[7] = 0x80;  // 2^63
    expect_bad(absurd, "absurd");
    expect_bad(image("{\"a\": "), "not valid JSON");
    expect_bad(image("not json"), "not valid JSON");
    expect_bad(image("[1, 2]"), "expected a JSON object");
    expect_bad(image("\"x\""), "expected a JSON object");
    expect_bad(image(std::string(200, '[') + std::string(200, ']')), "nests deeper");
    // The empty header object is a valid file with no tensors.
    EXPECT_EQ(parse_bytes(image("{}  ")).tensors().size(), 0u);
    EXPECT_EQ(parse_bytes(image(R"({"__metadata__":null})")).metadata().size(), 0u);
}

TEST_F(SafetensorsTest, TensorEntryProblems) {
    const Bytes d8(8, 0);
    expect_bad(image(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", d8), "'a' has no \"dtype\"");
    expect_bad(image(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", d8), "'a' has no \"shape\"");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[2]}})", d8), "'a' has no \"data_offsets\"");
    expect_bad(image(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", d8),
               "unknown dtype \"F17\"");
    expect_bad(image(R"({"a":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", d8), "dtype is an integer");
    expect_bad(image(R"({"a":[1]})", d8), "tensor 'a' is an array");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", d8), "shape is an integer");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), "negative");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", d8),
               "non-negative integer");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", d8),
               "too many elements");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8), "[begin, end]");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d8), "end before");
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", d8), "negative");
}

TEST_F(SafetensorsTest, LayoutProblems) {
    // Offsets past the buffer.
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Bytes(4, 0)),
               "run past the 4-byte data buffer");
    expect_bad(
        image(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551608,18446744073709551612]}})",
            Bytes(4, 0)),
        "run past");
    // Overlap.
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     Bytes(12, 0)),
               "overlaps");
    // Hole.
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                     Bytes(12, 0)),
               "hole");
    // Size mismatch with the shape.
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", Bytes(8, 0)), "needs 12");
    // Trailing bytes.
    expect_bad(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Bytes(9, 0)),
               "1 more bytes");
    // Zero-size tensors may share an offset with anything.
    const SafetensorsFile ok =
        parse_bytes(image(R"({"z":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
                          R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("y":{"dtype":"BF16","shape":[5,0],"data_offsets":[0,0]}})",
                          Bytes(4, 0)));
    EXPECT_EQ(ok.tensors().size(), 3u);
}

TEST_F(SafetensorsTest, DuplicateKeysAndMetadataTypes) {
    const std::string a = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
    expect_bad(image("{" + a + "," + a + "}", Bytes(4, 0)), "\"a\" twice");
    expect_bad(image(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", Bytes(4, 0)),
               "\"dtype\" twice");
    expect_bad(image(R"({"__metadata__":{"k":"v","k":"w"}})"), "\"k\" twice");
    expect_bad(image(R"({"__metadata__":{},"__metadata__":{}})"), "\"__metadata__\" twice");
    expect_bad(image(R"({"__metadata__":{"k":1}})"), "value of \"k\" is an integer, expected a string");
    expect_bad(image(R"({"__metadata__":["k"]})"), "__metadata__ is an array");
    // The same key in two different objects is fine.
    EXPECT_NO_THROW(parse_bytes(image(R"({"__metadata__":{"dtype":"x"},)" + a + "}", Bytes(4, 0))));
}

TEST_F(SafetensorsTest, OpenMissingFileNamesIt) {
    expect_error([&] { SafetensorsFile::open(path("missing.safetensors")); }, "cannot open",
                 path("missing.safetensors"));
}

// ----------------------------------------------------------------------------------------------
// HF directories

TEST_F(SafetensorsTest, ShardedDirectory) {
    write_safetensors(path("model-00001-of-00002.safetensors"),
                      {{"model.embed_tokens.weight", f32_tensor({2, 2}, {1, 2, 3, 4})},
                       {"model.norm.weight", f32_tensor({2}, {5, 6})}});
    write_safetensors(path("model-00002-of-00002.safetensors"),
                      {{"lm_head.weight", f32_tensor({1, 2}, {7, 8})}}, {}, DType::BF16);
    write_file(dir_ / "model.safetensors.index.json", R"({
  "metadata": {"total_size": 28},
  "weight_map": {
    "lm_head.weight": "model-00002-of-00002.safetensors",
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.norm.weight": "model-00001-of-00002.safetensors"
  }
})");
    const SafetensorsShards s = SafetensorsShards::open_dir(dir_.string());
    EXPECT_EQ(s.files().size(), 2u);
    EXPECT_EQ(s.names().size(), 3u);
    EXPECT_TRUE(s.has("model.norm.weight"));
    EXPECT_FALSE(s.has("nope"));
    EXPECT_EQ(s.tensor("lm_head.weight").dtype, StDType::BF16);
    EXPECT_EQ(s.to_f32("lm_head.weight").f32()[1], 8.0f);
    EXPECT_EQ(s.to_f32("model.embed_tokens.weight").f32()[3], 4.0f);
    EXPECT_NE(s.file_of("lm_head.weight").source().find("model-00002-of-00002"), std::string::npos);
    expect_error([&] { s.tensor("nope"); }, "'nope'", dir_.string());

    // A tensor in the weight_map that its shard lacks.
    write_file(dir_ / "model.safetensors.index.json",
               R"({"weight_map": {"ghost": "model-00001-of-00002.safetensors"}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "'ghost'",
                 "model.safetensors.index.json");
    // A tensor the weight_map puts in the wrong shard.
    write_file(dir_ / "model.safetensors.index.json",
               R"({"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors",)"
               R"( "model.norm.weight": "model-00002-of-00002.safetensors"}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "puts tensor 'lm_head.weight'",
                 "model.safetensors.index.json");
    // Missing shard: the error names it.
    write_file(
        dir_ / "model.safetensors.index.json",
        R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00003.safetensors"}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "model-00003.safetensors",
                 "model.safetensors.index.json");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "is missing",
                 "model.safetensors.index.json");
    // Bad JSON, wrong types, escapes from the directory.
    write_file(dir_ / "model.safetensors.index.json", R"({"weight_map": {)");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "not valid JSON",
                 "model.safetensors.index.json");
    write_file(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "expected a file name",
                 "model.safetensors.index.json");
    write_file(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": "../x.safetensors"}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "inside the directory",
                 "model.safetensors.index.json");
    write_file(dir_ / "model.safetensors.index.json", R"({"metadata": {}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "no \"weight_map\"",
                 "model.safetensors.index.json");
    write_file(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": "x", "a": "y"}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "twice",
                 "model.safetensors.index.json");

    // A single model.safetensors wins over the index.
    write_safetensors(path("model.safetensors"), {{"only", f32_tensor({1}, {9})}});
    const SafetensorsShards single = SafetensorsShards::open_dir(dir_.string());
    EXPECT_EQ(single.names(), std::vector<std::string>{"only"});
}

TEST_F(SafetensorsTest, DirectoryWithoutWeights) {
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "neither model.safetensors",
                 dir_.string());
    expect_error([&] { SafetensorsShards::open_dir(path("nope")); }, "not a directory", path("nope"));
}

TEST_F(SafetensorsTest, DuplicateTensorAcrossShards) {
    write_safetensors(path("s1.safetensors"), {{"a", f32_tensor({1}, {1})}});
    write_safetensors(path("s2.safetensors"), {{"a", f32_tensor({1}, {2})}});
    write_file(dir_ / "model.safetensors.index.json",
               R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
    expect_error([&] { SafetensorsShards::open_dir(dir_.string()); }, "tensor 'a' is in both", dir_.string());
}

}  // namespace
}  // namespace hydra
