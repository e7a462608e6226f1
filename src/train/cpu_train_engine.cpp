// CPU training engine (see cpu_train_engine.h).
#include "train/cpu_train_engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "train/align_step.h"
#include "train/model_step.h"

namespace hydra {

namespace {

class CpuTrainEngine final : public TrainEngine {
  public:
    CpuTrainEngine(const TrainConfig& cfg, LlamaModel& model, const LlamaModel* teacher,
                   const std::vector<ParamSpan>& spans, AdamW& optimizer)
        : cfg_(cfg),
          model_(model),
          teacher_(teacher),
          spans_(spans),
          optimizer_(optimizer),
          grads_(static_cast<size_t>(model.params().numel())) {
        for (const ParamSpan& sp : spans) trainable_.push_back(sp.trainable);
        HYDRA_CHECK(teacher_ || (cfg.stage != "align" && !(cfg.stage != "pretrain" && cfg.kl_weight > 0)),
                    "stage {}: the objective needs stage.teacher", cfg.stage);
    }

    EngineStepResult step(const TrainBatch& batch, float lr, double grad_clip) override {
        std::fill(grads_.begin(), grads_.end(), 0.0f);
        EngineStepResult r;
        forward_backward(batch, r);
        r.finite = std::isfinite(r.loss) && all_finite(grads_.data(), spans_);
        if (!r.finite) return r;
        r.grad_norm = grad_norm(grads_.data(), spans_);
        if (grad_clip > 0) clip_grads(grads_.data(), spans_, grad_clip, r.grad_norm);
        optimizer_.set_lr(lr);
        optimizer_.step(model_.params().data(), grads_.data(), model_.params().numel(), spans_);
        return r;
    }

    std::pair<double, int64_t> eval_ce(const TrainBatch& batch) override {
        // Held-out loss is the student's next-token CE in every stage (comparable across stages).
        const ModelStepResult r =
            model_train_step<float>(model_.config(), model_.plan(), model_.params(), model_.params().data(),
                                    nullptr, batch, StageObjective{}, {}, {cfg_.recompute});
        return {r.ce * double(r.scored), r.scored};
    }

    void sync_to_host(LlamaModel& model, AdamW& optimizer) override {
        HYDRA_ASSERT(&model == &model_ && &optimizer == &optimizer_,
                     "the CPU engine trains the loop's own model");
    }

    std::string summary() const override { return "cpu"; }

  private:
    // Loss and gradients of the configured stage into grads_.
    void forward_backward(const TrainBatch& batch, EngineStepResult& out) {
        const ModelConfig& mc = model_.config();
        const TrainStepOptions options{cfg_.recompute};
        if (cfg_.stage == "align") {
            const std::vector<float> states =
                layer_boundary_states(teacher_->config(), teacher_->plan(), teacher_->params(),
                                      teacher_->params().data(), batch.inputs, batch.batch, batch.seq_len);
            const AlignResult a =
                align_step(mc, model_.plan(), model_.params(), model_.params().data(), grads_.data(),
                           trainable_, states.data(), batch.batch, batch.seq_len);
            out.loss = a.loss;
            out.ce = out.kl = NAN;
            return;
        }
        StageObjective obj;
        obj.ce_weight = cfg_.stage == "pretrain" ? 1.0 : cfg_.ce_weight;
        obj.kl_weight = cfg_.stage == "pretrain" ? 0.0 : cfg_.kl_weight;
        obj.temperature = float(cfg_.temperature);
        std::vector<float> teacher_hidden;
        std::vector<uint8_t> mask;
        if (obj.kl_weight > 0) {
            teacher_hidden =
                final_hidden_states(teacher_->config(), teacher_->plan(), teacher_->params(),
                                    teacher_->params().data(), batch.inputs, batch.batch, batch.seq_len);
            obj.teacher_hidden = teacher_hidden.data();
            obj.teacher_head = teacher_->lm_head().f32();
            obj.teacher_hidden_size = teacher_->config().hidden_size;
            if (cfg_.kl_max_position > 0) {
                mask.resize(static_cast<size_t>(batch.batch * batch.seq_len));
                for (int64_t i = 0; i < int64_t(mask.size()); ++i)
                    mask[size_t(i)] = i % batch.seq_len < cfg_.kl_max_position;
                obj.kl_mask = mask.data();
            }
        }
        const ModelStepResult r =
            model_train_step<float>(mc, model_.plan(), model_.params(), model_.params().data(), grads_.data(),
                                    batch, obj, trainable_, options);
        out.loss = r.loss;
        out.ce = r.ce;
        out.kl = r.kl;
    }

    const TrainConfig& cfg_;
    LlamaModel& model_;
    const LlamaModel* teacher_;
    const std::vector<ParamSpan>& spans_;
    AdamW& optimizer_;
    std::vector<char> trainable_;
    std::vector<float> grads_;
};

}  // namespace

std::unique_ptr<TrainEngine> make_cpu_train_engine(const TrainConfig& config, LlamaModel& model,
                                                   const LlamaModel* teacher,
                                                   const std::vector<ParamSpan>& spans, AdamW& optimizer) {
    return std::make_unique<CpuTrainEngine>(config, model, teacher, spans, optimizer);
}

}  // namespace hydra
