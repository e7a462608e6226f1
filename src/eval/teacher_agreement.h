// How close a student (a converted or trained hybrid) is to its teacher on the same tokens: the mean
// KL(teacher || student) per token, top-1 agreement of the two argmaxes and the student's perplexity,
// both models run over the tokens in windows of `window` positions (each window a fresh cache). Used by
// the pipeline's evaluation and by `hydra demo`'s before/after recovery check, so both report the same
// numbers for the same tokens.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/llama_model.h"

namespace hydra {

struct TeacherAgreement {
    int64_t tokens = 0;  // positions scored (each window's last token has no next token to predict)
    double top1 = 0;     // fraction of positions where both argmaxes agree (NaN when tokens == 0)
    double kl = 0;       // mean KL(teacher || student) in nats per token
    double ppl = 0;      // the student's perplexity of the next token
};

// tokens: the text's ids (the teacher's tokenizer); window >= 2. Both models share the vocabulary.
TeacherAgreement teacher_agreement(const LlamaModel& teacher, const LlamaModel& student,
                                   const std::vector<int32_t>& tokens, int64_t window);

// {"tokens", "top1_agreement", "kl", "ppl"}: the keys of the pipeline's eval/agreement.json.
nlohmann::json to_json(const TeacherAgreement& a);

}  // namespace hydra
