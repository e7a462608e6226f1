// CUDA training engine (see gpu_train_engine.h).
#include "gpu/gpu_train_engine.h"

#include <cuda_runtime.h>

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "gpu/cuda_device.h"
#include "gpu/gpu_train_step.h"
#include "gpu/nccl_collective.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_arena.h"
#include "train/grad_buckets.h"
#include "train/gradient_sync.h"
#include "train/zero_shards.h"

namespace hydra::gpu {

namespace {

// Gradient buckets of about 25 MB of fp32 (PyTorch DDP's default): large enough that NCCL runs near its
// bandwidth, small enough that the first bucket leaves while most of the backward is still to come.
// HYDRA_DP_BUCKET_MB overrides it.
int64_t bucket_elements() {
    double mb = 25;
    if (const char* e = std::getenv("HYDRA_DP_BUCKET_MB")) {
        char* end = nullptr;
        mb = std::strtod(e, &end);
        HYDRA_CHECK(end && *end == '\0' && mb > 0, "HYDRA_DP_BUCKET_MB='{}' must be a positive number", e);
    }
    return std::max<int64_t>(1, int64_t(mb * 1e6 / 4));
}

// The backward event after which a tensor's gradient is final (GpuTrainStep's gradient hook): the final
// norm and an untied LM head first, then the layers from the last, then the embedding (also the tied LM
// head, written first by the LM head and last by the embedding backward). Anything else: the end.
int grad_event_of(const std::string& name, int64_t L) {
    const std::string layer = "model.layers.";
    if (name.rfind(layer, 0) == 0) {
        const int64_t l = std::atoll(name.c_str() + layer.size());
        if (l >= 0 && l < L) return GpuTrainStep::grad_event_layer(l, L);
    }
    if (name.rfind("lm_head.", 0) == 0 || name.rfind("model.norm.", 0) == 0)
        return GpuTrainStep::grad_event_head();
    return GpuTrainStep::grad_event_embedding(L);
}

// The ranges of `shards` inside [lo, hi) (what each rank owns of one region), one per rank.
std::vector<ElemRange> clip_ranges(const std::vector<ElemRange>& shards, int64_t lo, int64_t hi) {
    std::vector<ElemRange> out;
    for (const ElemRange& r : shards) {
        const int64_t b = std::max(r.begin, lo), e = std::min(r.end, hi);
        out.push_back(e > b ? ElemRange{b, e} : ElemRange{b, b});
    }
    return out;
}

class GpuTrainEngine final : public TrainEngine {
  public:
    explicit GpuTrainEngine(const TrainEngineSetup& s) {
        const TrainConfig& cfg = *s.config;
        if (s.dist) {
            nccl_ = dynamic_cast<NcclCollective*>(s.dist);
            HYDRA_CHECK(nccl_ != nullptr, "GPU training: data parallel needs the NCCL collective");
            CUDA_CHECK(cudaSetDevice(nccl_->env().local_rank));  // the rank's GPU for every allocation below
        }
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
        std::vector<ParamSpan> dev_spans = *s.spans;
        for (ParamSpan& sp : dev_spans) sp.offset = student_->device_offset(sp.offset);
        const int64_t n = student_->numel();
        if (nccl_) setup_data_parallel(*s.model, dev_spans);
        const ElemRange mine = nccl_ ? shards_[size_t(nccl_->rank())] : ElemRange{0, n};
        std::vector<cuda::AdamWSpan> spans;
        for (const ParamSpan& sp : nccl_ ? clip_spans(dev_spans, mine) : dev_spans) {
            cuda::AdamWSpan a;
            a.offset = sp.offset, a.size = sp.size, a.lr_scale = sp.lr_scale;
            a.wd_scale = sp.wd_scale;
            a.trainable = sp.trainable, a.mirror = true;
            spans.push_back(a);
        }
        opt_ = nccl_ ? std::make_unique<cuda::DeviceAdamW>(hy, n, spans, stream_, mine.begin, mine.end)
                     : std::make_unique<cuda::DeviceAdamW>(hy, n, spans, stream_);
        if (s.optimizer->step_count() > 0) {  // a resumed run: the checkpoint's m, v (host layout) and step
            HYDRA_CHECK(
                s.optimizer->size() == student_->host_numel(),
                "AdamW state has {} elements but the parameter arena has {}: the checkpoint belongs to a "
                "different model layout",
                s.optimizer->size(), student_->host_numel());
            if (nccl_) {
                // ZeRO-1: this rank's range of the full state in device order (a checkpoint of any world size
                // holds the full m, v: re-sharding is taking another range)
                std::vector<float> full(static_cast<size_t>(n));
                for (auto [dst, src] :
                     {std::pair{opt_->m(), s.optimizer->m()}, std::pair{opt_->v(), s.optimizer->v()}}) {
                    student_->layout().to_device(src, full.data());
                    if (mine.size() > 0)
                        CUDA_CHECK(cudaMemcpy(dst, full.data() + mine.begin,
                                              size_t(mine.size()) * sizeof(float), cudaMemcpyHostToDevice));
                }
            } else {
                student_->to_device(opt_->m(), s.optimizer->m(), stream_);
                student_->to_device(opt_->v(), s.optimizer->v(), stream_);
            }
            opt_->set_step_count(s.optimizer->step_count());
        }
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    // Data parallel: shard ranges of the device arena (balanced by trainable elements, 128-element aligned
    // as the layout's groups), gradient buckets of the trainable tensors in backward order, the gradient
    // hook that launches them on the communication stream, and the ranges each rank all-gathers after its
    // optimizer step (the bf16 mirror of the GEMM region, the fp32 values read as fp32).
    void setup_data_parallel(const LlamaModel& model, const std::vector<ParamSpan>& dev_spans) {
        const int64_t n = student_->numel(), L = model.config().num_layers;
        const int W = nccl_->world_size();
        shards_ = shard_ranges(n, W, DeviceLayout::kAlign, dev_spans);
        const DeviceLayout& lay = student_->layout();
        mirror_ranges_ = clip_ranges(shards_, 0, lay.bf16_end());
        master_ranges_ = clip_ranges(shards_, lay.f32_begin(), n);
        // items: each trainable tensor with the padding after it (up to the next tensor in device order)
        const auto& entries = model.params().entries();
        const auto& tensors = lay.tensors();
        std::vector<char> trainable(tensors.size(), 0);
        for (const ParamSpan& sp : dev_spans)
            for (size_t i = 0; i < tensors.size(); ++i)
                if (tensors[i].device == sp.offset && sp.trainable && sp.size > 0) trainable[i] = 1;
        std::vector<size_t> order(tensors.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return tensors[a].device < tensors[b].device; });
        std::vector<GradItem> items;
        for (size_t k = 0; k < order.size(); ++k) {
            const size_t i = order[k];
            if (!trainable[i]) continue;
            const int64_t end = k + 1 < order.size() ? tensors[order[k + 1]].device : n;
            items.push_back({tensors[i].device, std::max(end, tensors[i].device + tensors[i].size),
                             grad_event_of(entries[i].name, L)});
        }
        CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
        sync_ = std::make_unique<GradientSync>(*nccl_,
                                               assign_buckets(items, bucket_elements(), DeviceLayout::kAlign),
                                               GpuTrainStep::grad_event_count(L));
        // the bucket's gradients are complete once the work issued so far on the compute stream is done
        sync_->set_before_launch([this](int) {
            CUDA_CHECK(cudaEventRecord(ready_, stream_));
            CUDA_CHECK(cudaStreamWaitEvent(comm_, ready_, 0));
        });
        step_->set_grad_hook([this](int event) { sync_->event(event); });
        scalars_.resize(4);
    }

    ~GpuTrainEngine() override {
        if (comm_) (void)cudaStreamSynchronize(comm_);
        sync_.reset();
        step_.reset();
        opt_.reset();
        teacher_.reset();
        student_.reset();
        if (stream_) (void)cudaStreamDestroy(stream_);
        if (comm_) (void)cudaStreamDestroy(comm_);
        if (ready_) (void)cudaEventDestroy(ready_);
    }

    EngineStepResult step(const TrainBatch& batch, float lr, double grad_clip) override {
        student_->zero_grads(stream_);
        if (nccl_) {  // the buckets go out on the communication stream as the backward completes them
            nccl_->bind(comm_);
            sync_->begin(student_->grads());
        }
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
        if (nccl_) {
            sync_->finish();
            CUDA_CHECK(cudaEventRecord(ready_, comm_));
            CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));  // averaged gradients before the norm
            nccl_->bind(stream_);
        }
        opt_->grad_norm(student_->grads(), stream_);  // over this rank's shard when data parallel
        if (nccl_) {
            // the global norm: the shards' sums of squares (and non-finite counts) summed over the ranks; the
            // loss terms averaged (each rank's are means over its rows)
            cuda::GradNormResult* rec = opt_->result();
            nccl_->all_reduce(&rec->sumsq, CollType::F64, {{0, 1}}, false);
            nccl_->all_reduce(&rec->nonfinite, CollType::I64, {{0, 1}}, false);
            const double host[4] = {r.loss, r.ce, r.kl, 0};
            CUDA_CHECK(cudaMemcpyAsync(scalars_.data(), host, sizeof(host), cudaMemcpyHostToDevice, stream_));
            nccl_->all_reduce(scalars_.data(), CollType::F64, {{0, 3}}, true);
            double out[4];
            CUDA_CHECK(cudaMemcpyAsync(out, scalars_.data(), sizeof(out), cudaMemcpyDeviceToHost, stream_));
            nccl_->synchronise();
            r.loss = out[0], r.ce = out[1], r.kl = out[2];
        }
        cuda::GradNormResult gn = opt_->read_result(stream_);
        if (nccl_) gn.norm = std::sqrt(gn.sumsq);
        r.grad_norm = gn.norm;
        r.finite = std::isfinite(r.loss) && gn.nonfinite == 0;
        if (r.finite) {
            const float factor =
                grad_clip > 0 ? float(cuda::DeviceAdamW::clip_coefficient(gn.norm, grad_clip)) : 1.0f;
            opt_->set_lr(lr);
            opt_->step(student_->master(), student_->mirror(), student_->grads(), stream_, factor);
            if (nccl_) {  // every rank's updated shard to every rank: what the next forward reads
                nccl_->all_gather(student_->mirror(), CollType::BF16, mirror_ranges_);
                nccl_->all_gather(student_->master(), CollType::F32, master_ranges_);
            }
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
        if (nccl_) {
            gather_to_root(model, optimizer);
            return;
        }
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
    // Data parallel sync_to_host: the fp32 master and the m, v shards gathered to rank 0 (the checkpoint's
    // full state); the other ranks only send.
    void gather_to_root(LlamaModel& model, AdamW& optimizer) {
        nccl_->bind(stream_);
        const bool root = nccl_->rank() == 0;
        const int64_t n = student_->numel();
        const ElemRange mine = shards_[size_t(nccl_->rank())];
        nccl_->gather_to_root(student_->master(), CollType::F32, shards_, 0);
        cuda::DeviceBuffer<float> full;
        const size_t hn = size_t(student_->host_numel());
        std::vector<float> m(root ? hn : 0, 0.f), v(root ? hn : 0, 0.f);
        if (root) full.resize(n);
        for (int k = 0; k < 2; ++k) {
            float* shard = k == 0 ? opt_->m() : opt_->v();
            // a buffer whose element mine.begin is the shard's first: the gather's ranges index the arena
            float* base = root ? full.data() : shard - mine.begin;
            if (root) {
                CUDA_CHECK(cudaMemsetAsync(full.data(), 0, size_t(n) * sizeof(float), stream_));
                if (mine.size() > 0)
                    CUDA_CHECK(cudaMemcpyAsync(full.data() + mine.begin, shard,
                                               size_t(mine.size()) * sizeof(float), cudaMemcpyDeviceToDevice,
                                               stream_));
            }
            nccl_->gather_to_root(base, CollType::F32, shards_, 0);
            nccl_->synchronise();
            if (root) student_->to_host(k == 0 ? m.data() : v.data(), full.data(), stream_);
        }
        if (!root) return;
        student_->download_params(model.params().data(), stream_);
        optimizer.load_state(m.data(), v.data(), int64_t(hn), opt_->step_count());
    }

    std::string device_;
    cudaStream_t stream_ = nullptr;
    GpuObjective obj_;
    std::unique_ptr<GpuTrainModel> student_, teacher_;
    std::unique_ptr<GpuTrainStep> step_;
    std::unique_ptr<cuda::DeviceAdamW> opt_;
    int64_t steps_ = 0;
    bool step_recompute_ = false;
    bool align_ = false;  // stage 1: GpuTrainStep::align_forward_backward instead of the CE / KL step
    // data parallel (null / empty: one process)
    NcclCollective* nccl_ = nullptr;
    cudaStream_t comm_ = nullptr;  // the gradient buckets' all-reduces
    cudaEvent_t ready_ = nullptr;
    std::unique_ptr<GradientSync> sync_;
    std::vector<ElemRange> shards_, mirror_ranges_, master_ranges_;
    cuda::DeviceBuffer<double> scalars_;
};

}  // namespace

std::unique_ptr<TrainEngine> make_gpu_train_engine(const TrainEngineSetup& setup) {
    return std::make_unique<GpuTrainEngine>(setup);
}

}  // namespace hydra::gpu
