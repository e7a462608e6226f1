// CUDA training engine (see gpu_train_engine.h).
#include "gpu/gpu_train_engine.h"

#include <cuda_runtime.h>

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "gpu/cuda_device.h"
#include "gpu/gpu_train_step.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

class GpuTrainEngine final : public TrainEngine {
  public:
    explicit GpuTrainEngine(const TrainEngineSetup& s) {
        const TrainConfig& cfg = *s.config;
        device_ = require_cuda_device();
        CUDA_CHECK(cudaStreamCreate(&stream_));
        const bool pretrain = cfg.stage == "pretrain";
        align_ = cfg.stage == "align";
        obj_.ce_weight = pretrain ? 1.0 : cfg.ce_weight;
        obj_.kl_weight = pretrain ? 0.0 : cfg.kl_weight;
        obj_.temperature = float(cfg.temperature);
        obj_.kl_max_position = cfg.kl_max_position;
        student_ = std::make_unique<GpuTrainModel>(*s.model, true, stream_);
        std::vector<char> trainable;
        for (const ParamSpan& sp : *s.spans) trainable.push_back(sp.trainable);
        student_->set_trainable(trainable);
        // align reads the teacher's layer boundaries whatever kl_weight says (its objective has no CE / KL)
        if (align_ || obj_.kl_weight > 0) {
            HYDRA_CHECK(s.teacher != nullptr, "GPU training: {} needs stage.teacher",
                        align_ ? "stage.kind align" : "the KL objective");
            teacher_ = std::make_unique<GpuTrainModel>(*s.teacher, false, stream_);
        }
        GpuStepOptions so;
        so.recompute = cfg.recompute;
        step_recompute_ = cfg.recompute;
        step_ = std::make_unique<GpuTrainStep>(*student_, teacher_.get(), so, stream_);

        const AdamWConfig& ac = s.optimizer->config();
        cuda::AdamWHyper hy;
        hy.lr = ac.lr, hy.beta1 = ac.beta1, hy.beta2 = ac.beta2, hy.eps = ac.eps,
        hy.weight_decay = ac.weight_decay;
        // the trainer's spans (host arena offsets) at their device offsets, in the trainer's order: the same
        // chunks in the same order, so the gradient norm sums exactly as over the host layout
        std::vector<cuda::AdamWSpan> spans;
        for (const ParamSpan& sp : *s.spans) {
            cuda::AdamWSpan a;
            a.offset = student_->device_offset(sp.offset), a.size = sp.size, a.lr_scale = sp.lr_scale;
            a.wd_scale = sp.wd_scale;
            a.trainable = sp.trainable, a.mirror = true;
            spans.push_back(a);
        }
        opt_ = std::make_unique<cuda::DeviceAdamW>(hy, student_->numel(), spans, stream_);
        if (s.optimizer->step_count() > 0) {  // a resumed run: the checkpoint's m, v (host layout) and step
            HYDRA_CHECK(
                s.optimizer->size() == student_->host_numel(),
                "AdamW state has {} elements but the parameter arena has {}: the checkpoint belongs to a "
                "different model layout",
                s.optimizer->size(), student_->host_numel());
            student_->to_device(opt_->m(), s.optimizer->m(), stream_);
            student_->to_device(opt_->v(), s.optimizer->v(), stream_);
            opt_->set_step_count(s.optimizer->step_count());
        }
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    ~GpuTrainEngine() override {
        step_.reset();
        opt_.reset();
        teacher_.reset();
        student_.reset();
        if (stream_) (void)cudaStreamDestroy(stream_);
    }

    EngineStepResult step(const TrainBatch& batch, float lr, double grad_clip) override {
        student_->zero_grads(stream_);
        EngineStepResult r;
        if (align_) {
            // as the CPU loop's align step: the alignment loss, no CE / KL
            const GpuAlignResult a = step_->align_forward_backward(batch);
            r.loss = a.loss;
            r.ce = NAN, r.kl = NAN;
        } else {
            const GpuStepLosses l = step_->forward_backward(batch, obj_);
            // as model_step.cpp: a term that is not in the objective reads 0
            r.ce = obj_.ce_weight > 0 ? l.ce() : 0.0;
            r.kl = obj_.kl_weight > 0 ? l.kl() : 0.0;
            r.loss = obj_.ce_weight * r.ce + obj_.kl_weight * r.kl;
        }
        opt_->grad_norm(student_->grads(), stream_);
        const cuda::GradNormResult gn = opt_->read_result(stream_);
        r.grad_norm = gn.norm;
        r.finite = std::isfinite(r.loss) && gn.nonfinite == 0;
        if (r.finite) {
            const float factor =
                grad_clip > 0 ? float(cuda::DeviceAdamW::clip_coefficient(gn.norm, grad_clip)) : 1.0f;
            opt_->set_lr(lr);
            opt_->step(student_->master(), student_->mirror(), student_->grads(), stream_, factor);
        }
        ++steps_;
        return r;
    }

    std::pair<double, int64_t> eval_ce(const TrainBatch& batch) override {
        const GpuStepLosses l = step_->eval_ce(batch);
        return {l.ce_sum, l.ce_count};
    }

    void sync_to_host(LlamaModel& model, AdamW& optimizer) override {
        HYDRA_ASSERT(model.params().numel() == student_->host_numel(),
                     "host model has {} parameters, device {}", model.params().numel(),
                     student_->host_numel());
        student_->download_params(model.params().data(), stream_);
        // m, v back in the host layout (zero in its padding, as the optimizer keeps them)
        const size_t n = size_t(student_->host_numel());
        std::vector<float> m(n, 0.f), v(n, 0.f);
        student_->to_host(m.data(), opt_->m(), stream_);
        student_->to_host(v.data(), opt_->v(), stream_);
        optimizer.load_state(m.data(), v.data(), int64_t(n), opt_->step_count());
    }

    std::string summary() const override {
        const double gib = 1.0 / double(size_t(1) << 30);
        const size_t fixed = student_->device_bytes() + size_t(opt_->size()) * 8 +
                             (teacher_ ? teacher_->device_bytes() : 0) + step_->workspace_bytes();
        return fmt::format(
            "cuda ({}): {} {}steps{}; peak device memory {:.2f} GiB = activations {:.2f} GiB (arena peak) + "
            "weights, gradients, AdamW state{} and workspaces {:.2f} GiB",
            device_, steps_, align_ ? "align " : "",
            step_recompute_ && !align_ ? " (layer recomputation)" : "",
            double(fixed + step_->arena_peak_bytes()) * gib, double(step_->arena_peak_bytes()) * gib,
            teacher_ ? ", teacher" : "", double(fixed) * gib);
    }

  private:
    std::string device_;
    cudaStream_t stream_ = nullptr;
    GpuObjective obj_;
    std::unique_ptr<GpuTrainModel> student_, teacher_;
    std::unique_ptr<GpuTrainStep> step_;
    std::unique_ptr<cuda::DeviceAdamW> opt_;
    int64_t steps_ = 0;
    bool step_recompute_ = false;
    bool align_ = false;  // stage 1: GpuTrainStep::align_forward_backward instead of the CE / KL step
};

}  // namespace

std::unique_ptr<TrainEngine> make_gpu_train_engine(const TrainEngineSetup& setup) {
    return std::make_unique<GpuTrainEngine>(setup);
}

}  // namespace hydra::gpu
