// hydra analyze: linear CKA against numpy's Gram-matrix reference (tests/data/cka_reference.json, from
// tools/make_cka_reference.py) and its invariances, a hand case, the head-score spread and similarity
// blocks on known tables, the layer similarity of a tiny model through the forward's taps, and the
// whole command on tiny models (JSON fields, files) with its validation errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "interp/analysis.h"
#include "interp/analysis_report.h"
#include "interp/head_spread.h"
#include "interp/layer_similarity.h"
#include "interp/linear_cka.h"
#include "model/hybrid_conversion.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_directory.h"
#include "model/plan_builders.h"
#include "tiny_model.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;

std::vector<float> normal_matrix(int64_t rows, int64_t cols, uint64_t seed, float offset = 0) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> m(size_t(rows * cols));
    for (float& v : m) v = d(g) + offset;
    return m;
}

// y (n, d) = x (n, d) @ q (d, d)
std::vector<float> matmul(const std::vector<float>& x, const std::vector<double>& q, int64_t n, int64_t d) {
    std::vector<float> y(size_t(n * d));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < d; ++j) {
            double s = 0;
            for (int64_t k = 0; k < d; ++k) s += double(x[size_t(t * d + k)]) * q[size_t(k * d + j)];
            y[size_t(t * d + j)] = float(s);
        }
    return y;
}

// A random orthogonal (d, d) matrix: Gram-Schmidt on Gaussian columns.
std::vector<double> random_orthogonal(int64_t d, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<double> n(0.0, 1.0);
    std::vector<std::vector<double>> cols(static_cast<size_t>(d),
                                          std::vector<double>(static_cast<size_t>(d)));
    for (auto& c : cols) {
        for (double& v : c) v = n(g);
    }
    for (int64_t j = 0; j < d; ++j) {
        for (int64_t k = 0; k < j; ++k) {
            double dot = 0;
            for (int64_t i = 0; i < d; ++i) dot += cols[size_t(j)][size_t(i)] * cols[size_t(k)][size_t(i)];
            for (int64_t i = 0; i < d; ++i) cols[size_t(j)][size_t(i)] -= dot * cols[size_t(k)][size_t(i)];
        }
        double norm = 0;
        for (double v : cols[size_t(j)]) norm += v * v;
        for (double& v : cols[size_t(j)]) v /= std::sqrt(norm);
    }
    std::vector<double> q(size_t(d * d));
    for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) q[size_t(i * d + j)] = cols[size_t(j)][size_t(i)];
    return q;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// ---- linear CKA ----

TEST(LinearCka, MatchesNumpyGramReference) {
    std::ifstream in(std::string(HYDRA_SOURCE_DIR) + "/tests/data/cka_reference.json");
    ASSERT_TRUE(in.good()) << "tests/data/cka_reference.json missing (tools/make_cka_reference.py)";
    const nlohmann::json ref = nlohmann::json::parse(in);
    ASSERT_EQ(ref["cases"].size(), 3u);
    for (const auto& c : ref["cases"]) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const int64_t n = c["n"], dx = c["dx"], dy = c["dy"];
        const std::vector<float> x = c["x"].get<std::vector<float>>(), y = c["y"].get<std::vector<float>>();
        ASSERT_EQ(int64_t(x.size()), n * dx);
        const double biased = c["cka_biased"], debiased = c["cka_debiased"];
        EXPECT_NEAR(linear_cka(x.data(), dx, y.data(), dy, n, CkaEstimator::Biased), biased, 2e-5);
        EXPECT_NEAR(linear_cka(x.data(), dx, y.data(), dy, n, CkaEstimator::Debiased), debiased, 2e-5);
        // The same examples in uneven batches (the first one sets the shift) give the same values.
        CkaAccumulator acc({dx, dy}, {{1, 0}});
        for (int64_t start = 0, size = 5; start < n; start += size, size += 3) {
            const int64_t rows = std::min(size, n - start);
            const float* reps[2] = {x.data() + start * dx, y.data() + start * dy};
            acc.add(reps, rows);
        }
        EXPECT_EQ(acc.rows(), n);
        EXPECT_NEAR(acc.cka(0, 1, CkaEstimator::Biased), biased, 2e-5);
        EXPECT_NEAR(acc.cka(1, 0, CkaEstimator::Debiased), debiased, 2e-5);
    }
}

TEST(LinearCka, IdenticalRepresentationsGiveOne) {
    const int64_t n = 200, d = 16;
    const std::vector<float> x = normal_matrix(n, d, 1, 25.0f);  // a large mean, as a residual stream has
    for (CkaEstimator e : {CkaEstimator::Biased, CkaEstimator::Debiased})
        EXPECT_NEAR(linear_cka(x.data(), d, x.data(), d, n, e), 1.0, 1e-6);
}

TEST(LinearCka, InvariantToOrthogonalTransformAndIsotropicScaling) {
    const int64_t n = 300, d = 12;
    const std::vector<float> x = normal_matrix(n, d, 2);
    std::vector<float> z = normal_matrix(n, d, 3);
    for (int64_t i = 0; i < n * d; ++i)
        z[size_t(i)] = x[size_t(i)] + 0.3f * x[size_t(i)] * x[size_t(i)] + 0.8f * z[size_t(i)];
    const std::vector<float> xq = matmul(x, random_orthogonal(d, 4), n, d);
    std::vector<float> scaled_up(x), scaled_down(x), one_column(x);
    for (float& v : scaled_up) v *= 7.5f;
    for (float& v : scaled_down) v *= 1e-3f;
    for (int64_t t = 0; t < n; ++t) one_column[size_t(t * d)] *= 10.0f;
    for (CkaEstimator e : {CkaEstimator::Biased, CkaEstimator::Debiased}) {
        const double base = linear_cka(x.data(), d, z.data(), d, n, e);
        EXPECT_GT(base, 0.05);
        EXPECT_NEAR(linear_cka(xq.data(), d, z.data(), d, n, e), base, 1e-5);
        EXPECT_NEAR(linear_cka(x.data(), d, xq.data(), d, n, e), 1.0, 1e-5);
        EXPECT_NEAR(linear_cka(scaled_up.data(), d, z.data(), d, n, e), base, 1e-5);
        EXPECT_NEAR(linear_cka(scaled_down.data(), d, z.data(), d, n, e), base, 1e-5);
        // Not invariant to an anisotropic scaling: the checks above can tell transforms apart.
        EXPECT_GT(std::abs(linear_cka(one_column.data(), d, z.data(), d, n, e) - base), 1e-2);
    }
}

// One feature each: biased linear CKA is the squared Pearson correlation. x = 1..5, y = (2, 1, 4, 3, 5):
// centered dx = (-2, -1, 0, 1, 2), dy = (-1, -2, 1, 0, 2); sum dx dy = 8, sum dx^2 = sum dy^2 = 10, so
// r = 0.8 and CKA = 0.64. Debiased (n = 5): HSIC(x, y) = 8^2 - 5/3 sum dx^2 dy^2 + 10 * 10 / (4 * 3)
// = 64 - 5/3 * 24 + 25/3 = 97/3; HSIC(x, x) = 100 - 5/3 * 34 + 25/3 = 155/3 = HSIC(y, y); CKA = 97/155.
TEST(LinearCka, HandCase) {
    const float x[5] = {1, 2, 3, 4, 5}, y[5] = {2, 1, 4, 3, 5};
    EXPECT_NEAR(linear_cka(x, 1, y, 1, 5, CkaEstimator::Biased), 0.64, 1e-6);
    EXPECT_NEAR(linear_cka(x, 1, y, 1, 5, CkaEstimator::Debiased), 97.0 / 155.0, 1e-6);
}

TEST(LinearCka, RefusesBadUse) {
    EXPECT_NE(error_of([] { CkaAccumulator({4, 4}, {{0, 0}}); }).find("pair (0, 0)"), std::string::npos);
    EXPECT_NE(error_of([] { CkaAccumulator({4, 4}, {{0, 2}}); }).find("pair (0, 2)"), std::string::npos);
    const float x[3] = {1, 2, 3};
    EXPECT_NE(error_of([&] { linear_cka(x, 1, x, 1, 3, CkaEstimator::Biased); }).find("at least 4"),
              std::string::npos);
    const float bad[4] = {1, NAN, 3, 4};
    EXPECT_NE(error_of([&] { linear_cka(bad, 1, bad, 1, 4, CkaEstimator::Biased); }).find("non-finite"),
              std::string::npos);
    // A constant representation has no variance: CKA with it is undefined.
    const float c[4] = {2, 2, 2, 2}, v[4] = {1, 3, 2, 5};
    EXPECT_TRUE(std::isnan(linear_cka(c, 1, v, 1, 4, CkaEstimator::Debiased)));
}

// ---- head spread and blocks ----

TEST(HeadSpread, KnownTable) {
    const std::vector<std::vector<double>> s = {{1, 1, 1, 1}, {0, 0, 0, 4}, {0, 1, 2, 5}, {0, 0, 0, 0}};
    const HeadSpread h = head_spread(s);
    ASSERT_EQ(h.layers.size(), 4u);
    EXPECT_DOUBLE_EQ(h.layers[0].cv, 0.0);
    EXPECT_DOUBLE_EQ(h.layers[0].top_share, 0.25);
    EXPECT_DOUBLE_EQ(h.layers[0].median, 1.0);
    EXPECT_DOUBLE_EQ(h.layers[1].top_share, 1.0);
    EXPECT_EQ(h.layers[1].top_head, 3);
    EXPECT_NEAR(h.layers[1].cv, std::sqrt(3.0), 1e-12);  // mean 1, variance (3*1 + 9)/4 = 3
    EXPECT_DOUBLE_EQ(h.layers[2].min, 0.0);
    EXPECT_DOUBLE_EQ(h.layers[2].median, 1.5);
    EXPECT_DOUBLE_EQ(h.layers[2].max, 5.0);
    EXPECT_DOUBLE_EQ(h.layers[2].top_share, 0.625);
    EXPECT_TRUE(std::isnan(h.layers[3].cv));
    EXPECT_TRUE(std::isnan(h.layers[3].top_share));
    // Grand mean 1; total SS = 0 + (1+1+1+9) + (1+0+1+16) + 4 = 34; layer means 1, 1, 2, 0 -> between
    // SS = 4 * (0 + 0 + 1 + 1) = 8; within share = 1 - 8/34.
    EXPECT_NEAR(h.within_layer_share, 1.0 - 8.0 / 34.0, 1e-12);
    EXPECT_NE(error_of([] { head_spread({{1, -0.5}}); }).find("layer 0 head 1"), std::string::npos);
    EXPECT_NE(error_of([] { head_spread({{1, 2}, {1}}); }).find("layer 1 has 1 heads"), std::string::npos);
}

TEST(SimilarityBlocks, GroupsConsecutiveLayersAboveTheThreshold) {
    const std::vector<std::vector<double>> cka = {{1.0, 0.95, 0.92, 0.5, 0.4},
                                                  {0.95, 1.0, 0.96, 0.6, 0.5},
                                                  {0.92, 0.96, 1.0, 0.7, 0.6},
                                                  {0.5, 0.6, 0.7, 1.0, 0.85},
                                                  {0.4, 0.5, 0.6, 0.85, 1.0}};
    using B = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(similarity_blocks(cka, 0.9), (B{{0, 2}, {3, 3}, {4, 4}}));
    EXPECT_EQ(similarity_blocks(cka, 0.8), (B{{0, 2}, {3, 4}}));
    EXPECT_EQ(similarity_blocks(cka, 0.93), (B{{0, 1}, {2, 2}, {3, 3}, {4, 4}}));  // 0.92 (0, 2) breaks it
}

// ---- layer similarity through the taps ----

test::TinyShape tiny_shape(int64_t layers = 4) {
    test::TinyShape s;
    s.vocab = 260;  // the byte tokenizer's
    s.layers = layers;
    s.heads = 4;
    s.kv_heads = 2;
    return s;
}

std::vector<int32_t> some_tokens(int64_t n, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& v : t) v = int32_t(32 + g() % 90);
    return t;
}

TEST(LayerSimilarity, MatchesCkaOfStoredLayerOutputs) {
    const ModelConfig c = test::tiny_llama_config(tiny_shape());
    LlamaModel m(c);
    test::randomize_params(m, 11, 0.2f);
    const std::vector<int32_t> tokens = some_tokens(70, 1);
    LayerSimilarityOptions o;
    o.window = 32;
    o.skip_first = 2;
    const LayerSimilarity s = layer_similarity(m, nullptr, tokens, o);
    // Windows of 32, 32, 6 tokens, 2 skipped each: 30 + 30 + 4 positions.
    EXPECT_EQ(s.windows, 3);
    EXPECT_EQ(s.tokens, 70);
    EXPECT_EQ(s.rows, 64);
    EXPECT_EQ(counted_rows(70, o), 64);
    // The reference: every layer's output of the same windows kept whole, CKA over them in one batch.
    const int64_t L = c.num_layers, C = c.hidden_size;
    std::vector<std::vector<float>> layers(static_cast<size_t>(L));
    for (int64_t start = 0; start < 70; start += 32) {
        const int64_t T = std::min<int64_t>(32, 70 - start);
        Taps taps;
        taps.on("blk.*.resid_out", [&](std::string_view, int l, Tensor& v) {
            layers[size_t(l)].insert(layers[size_t(l)].end(), v.f32() + 2 * C, v.f32() + T * C);
        });
        ForwardOptions fo;
        fo.taps = &taps;
        KVCache cache(m, 32);
        forward_hidden(m, std::span(tokens).subspan(size_t(start), size_t(T)), cache, fo);
    }
    for (int64_t i = 0; i < L; ++i) {
        EXPECT_DOUBLE_EQ(s.cka[size_t(i)][size_t(i)], 1.0);
        for (int64_t j = 0; j < L; ++j) {
            EXPECT_DOUBLE_EQ(s.cka[size_t(i)][size_t(j)], s.cka[size_t(j)][size_t(i)]);
            const double ref = linear_cka(layers[size_t(i)].data(), C, layers[size_t(j)].data(), C, 64,
                                          CkaEstimator::Debiased);
            EXPECT_NEAR(s.cka[size_t(i)][size_t(j)], ref, 1e-5) << i << "," << j;
        }
    }
    // Against itself as the teacher: every layer identical. The gram and the cross product come out of one
    // float GEMM at different column offsets, which BLAS kernels may sum in different orders (AMD Zen 5's
    // OpenBLAS path does): 1 to float rounding.
    const LayerSimilarity self = layer_similarity(m, &m, tokens, o);
    ASSERT_TRUE(self.has_teacher);
    for (int64_t l = 0; l < L; ++l) {
        EXPECT_NEAR(self.teacher.cka[size_t(l)], 1.0, 1e-6);
        EXPECT_EQ(self.teacher.rel_mse[size_t(l)], 0.0);
    }
}

// ---- hydra analyze end to end ----

class Analyze : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        root_ = fs::temp_directory_path() / ("hydra_analyze_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        fs::create_directories(root_);
        const ModelConfig c = test::tiny_llama_config(tiny_shape());
        LlamaModel teacher(c);
        test::randomize_params(teacher, 5, 0.2f);
        save_model_directory((root_ / "teacher").string(), teacher, {{"tokenizer", "byte-v1"}});
        PlanRequest r;
        r.select = "random";
        r.granularity = "head";
        r.ratio = parse_ratio("1:1", "test");
        r.gdn.chunk_size = 16;
        auto hybrid = convert_to_hybrid(teacher, build_plan(c, r), {});
        save_model_directory((root_ / "hybrid").string(), *hybrid, {{"tokenizer", "byte-v1"}});
        LlamaModel other(test::tiny_llama_config(tiny_shape(3)));
        test::randomize_params(other, 6, 0.2f);
        save_model_directory((root_ / "other").string(), other, {{"tokenizer", "byte-v1"}});
        std::ofstream text(root_ / "text.txt");
        for (int i = 0; i < 40; ++i) text << "The quick brown fox " << i << " jumps over the lazy dog.\n";
        nlohmann::json scores;
        scores["model"] = {{"num_layers", 4}, {"num_heads", 4}, {"num_kv_heads", 2}, {"hidden_size", 32}};
        scores["aggregate"]["heads"] = {
            {0.1, 0.2, 0.3, 0.4}, {1, 0, 0, 0}, {0.5, 0.5, 0.5, 0.5}, {0, 0.2, 0.9, 0.1}};
        std::ofstream(root_ / "scores.json") << scores.dump();
        scores["model"]["num_layers"] = 5;
        std::ofstream(root_ / "scores_other.json") << scores.dump();
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    static AnalyzeRequest request(const std::string& out) {
        AnalyzeRequest r;
        r.model = (root_ / "hybrid").string();
        r.teacher = (root_ / "teacher").string();
        r.text = (root_ / "text.txt").string();
        r.scores = (root_ / "scores.json").string();
        r.out = (root_ / out).string();
        r.tokens = 300;
        r.window = 64;
        return r;
    }
    static fs::path root_;
};
fs::path Analyze::root_;

TEST_F(Analyze, WritesJsonAndFigures) {
    const AnalyzeRequest req = request("out");
    const AnalyzeResult r = run_analysis(req);
    const nlohmann::json& j = r.report;
    EXPECT_EQ(j["format"], "hydra-analysis");
    EXPECT_EQ(j["model"]["num_layers"], 4);
    EXPECT_EQ(j["model"]["hybrid"], true);
    EXPECT_EQ(j["data"]["kind"], "text");
    EXPECT_EQ(j["data"]["tokens"], 300);
    EXPECT_EQ(j["data"]["windows"], 5);  // 64 * 4 + 44
    EXPECT_EQ(j["data"]["rows"], 300 - 5);
    ASSERT_EQ(j["layer_cka"]["debiased"].size(), 4u);
    ASSERT_EQ(j["layer_cka"]["biased"][0].size(), 4u);
    EXPECT_EQ(j["layer_cka"]["adjacent"].size(), 3u);
    for (int l = 0; l < 4; ++l) EXPECT_NEAR(j["layer_cka"]["debiased"][l][l].get<double>(), 1.0, 1e-12);
    ASSERT_EQ(j["head_scores"]["layers"].size(), 4u);
    EXPECT_DOUBLE_EQ(j["head_scores"]["layers"][1]["top_share"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(j["head_scores"]["layers"][2]["cv"].get<double>(), 0.0);
    EXPECT_EQ(j["head_scores"]["layers"][3]["top_head"], 2);
    ASSERT_EQ(j["teacher"]["cka"].size(), 4u);
    ASSERT_EQ(j["teacher"]["rel_mse"].size(), 4u);
    EXPECT_EQ(j["teacher"]["furthest"].size(), 4u);
    for (const auto& v : j["teacher"]["rel_mse"])
        EXPECT_GT(v.get<double>(), 0.0);  // the conversion moved them
    const fs::path out = req.out;
    for (const char* f : {"analysis.json", "layer_cka.png", "heads.png", "head_spread.png",
                          "head_concentration.png", "teacher_distance.png"}) {
        EXPECT_TRUE(fs::is_regular_file(out / f)) << f;
        EXPECT_GT(fs::file_size(out / f), 100u) << f;
    }
    EXPECT_EQ(r.files.size(), 6u);
    std::ifstream in(out / "analysis.json");
    EXPECT_EQ(nlohmann::json::parse(in), j);
    // A teacher alone, without scores: only the layer similarity and its figure.
    AnalyzeRequest plain = request("plain");
    plain.model = plain.teacher;
    plain.teacher.clear();
    plain.scores.clear();
    const AnalyzeResult p = run_analysis(plain);
    EXPECT_EQ(p.report["model"]["hybrid"], false);
    EXPECT_FALSE(p.report.contains("teacher"));
    EXPECT_FALSE(p.report.contains("head_scores"));
    EXPECT_EQ(p.files.size(), 2u);
}

TEST_F(Analyze, ValidationErrors) {
    auto expect = [](AnalyzeRequest r, const std::string& needle) {
        const std::string e = error_of([&] { run_analysis(r); });
        EXPECT_NE(e.find(needle), std::string::npos) << "expected '" << needle << "' in: " << e;
    };
    AnalyzeRequest r = request("bad");
    r.tokens = 0;
    expect(r, "--tokens 0");
    r = request("bad");
    r.tokens = 100000;
    expect(r, "holds");  // more than the text has
    r = request("bad");
    r.tokens = 4;  // 4 tokens, position 0 skipped: 3 counted
    expect(r, "CKA needs at least 4");
    r = request("bad");
    r.scores = (root_ / "missing.json").string();
    expect(r, "cannot open the scores file");
    r = request("bad");
    r.scores = (root_ / "scores_other.json").string();
    expect(r, "made for another model");
    r = request("bad");
    r.teacher = (root_ / "other").string();
    expect(r, "does not match");
    r = request("bad");
    r.device = "cuda";
    expect(r, "no per-layer hidden states");
    r = request("bad");
    r.shards = root_.string();
    expect(r, "exactly one token source");
    r = request("bad");
    r.text.clear();
    expect(r, "exactly one token source");
    r = request("bad");
    r.skip_first = 64;
    expect(r, "--skip-first 64");
    r = request("bad");
    r.out = (root_ / "text.txt").string();
    expect(r, "is not a directory");
    EXPECT_FALSE(fs::exists(root_ / "bad"));  // nothing written by a refused request
}

}  // namespace
}  // namespace hydra
