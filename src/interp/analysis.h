// `hydra analyze` end to end: the analysis the HydraHead method rests on (the paper's observation that
// layers show block-wise functional similarity while heads within a layer specialise).
//   1. layer-to-layer similarity of MODEL: linear CKA between every pair of layer outputs (the residual
//      stream after each layer) on held-out tokens (interp/layer_similarity.h), and the blocks it forms;
//   2. with --scores: the spread of head scores within each layer (interp/head_spread.h);
//   3. with --teacher (MODEL a hybrid of it): per layer CKA and relative MSE between the hybrid's and the
//      teacher's layer outputs on the same tokens: which layers the recovery left furthest away.
// Tokens: a text file (tokenized whole with MODEL's tokenizer) or the held-out split of token shards
// (train/token_shards.h, built with MODEL's tokenizer); the first --tokens of them, cut into windows that
// each start a fresh cache (with the model's BOS when its vocabulary adds one).
//
// Position 0 of every window is left out of the statistics by default (skip_first = 1): whatever token
// sits there becomes the attention sink, whose residual stream has a norm far above every other
// position's, and a single such row per window would otherwise dominate the covariances CKA is built
// from (the measured ratio on SmolLM2 is in docs/results/smollm2_analysis/).
//
// Validation happens before any forward: --device cuda is refused (the GPU forward exposes no per-layer
// hidden states; see the report), exactly one token source, --tokens >= 1 and no more than the source
// holds, enough counted positions for CKA, a readable scores file made for MODEL's shape, a teacher with
// MODEL's layers, width, vocabulary and tokenizer, and an output path that is a directory or absent.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hydra {

struct AnalyzeRequest {
    std::string model;
    std::string teacher;  // "" = none
    std::string text;     // exactly one of text / shards
    std::string shards;
    std::string scores;  // "" = none
    std::string out = "analysis";
    std::string device = "cpu";
    int64_t tokens = 4096;
    int64_t window = 512;
    int64_t skip_first = 1;
    double block_threshold = 0.9;
};

struct AnalyzeResult {
    nlohmann::json report;           // what analysis.json holds
    std::vector<std::string> files;  // written, analysis.json first
};

// Runs the analysis and writes analysis.json and the figures into request.out (created when missing).
// progress(windows done, windows total). Throws hydra::Error with a message naming the bad input.
AnalyzeResult run_analysis(const AnalyzeRequest& request,
                           const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace hydra
