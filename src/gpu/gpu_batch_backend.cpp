// The GPU serving backend (see gpu_batch_backend.h): slots over the paged KV pool and the GDN state slots,
// batched decode through the one GPU layer's batched mode, eager or as CUDA graphs by batch bucket.
#include "gpu/gpu_batch_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "core/error.h"
#include "gpu/decode_attention.h"
#include "gpu/decode_graph_policy.h"
#include "gpu/gpu_rope.h"
#include "gpu/paged_decode_attention.h"
#include "gpu/paged_kv_write.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/rmsnorm.h"

namespace hydra::gpu {

namespace {

// The smallest power of two >= n (the batch-size buckets 1, 2, 4, ..., kMaxBucket).
int64_t bucket_of(int64_t n) {
    int64_t b = 1;
    while (b < n) b *= 2;
    return b;
}

// A slot's cache at a block boundary: its first pos / block_size blocks (one reference each, dropped with
// the snapshot) and a copy of its GDN slot.
struct GpuPrefixSnapshot final : serve::PrefixSnapshot {
    const void* owner = nullptr;
    std::shared_ptr<BlockRefs> refs;
    std::vector<int32_t> blocks;
    cuda::DeviceBuffer<float> state;
    ~GpuPrefixSnapshot() override {
        try {
            if (refs) refs->drop(blocks);
        } catch (const std::exception& e) {  // a bookkeeping bug: reported, never thrown out of a destructor
            fmt::print(stderr, "error: dropping a prefix snapshot: {}\n", e.what());
        }
    }
};

}  // namespace

cuda::AttnWorkspace& GpuBatchBackend::NoResources::attn_workspace(int64_t, int64_t, const GpuLayerShape&) {
    fail("GPU batch backend: no attention backward");
}

cuda::GdnWorkspace& GpuBatchBackend::NoResources::gdn_workspace(int64_t, int64_t, const GpuLayerShape&,
                                                                bool) {
    fail("GPU batch backend: the batched decode runs no GDN chunked forward");
}

GpuBatchBackend::GpuBatchBackend(const GpuTrainModel& model, const GpuBatchOptions& options) : model_(model) {
    init(options);
}

GpuBatchBackend::GpuBatchBackend(std::unique_ptr<GpuTrainModel> model, const GpuBatchOptions& options)
    : owned_(std::move(model)), model_(*owned_) {
    init(options);
}

void GpuBatchBackend::init(const GpuBatchOptions& o) {
    const ModelConfig& c = model_.config();
    HYDRA_CHECK(o.max_slots > 0 && o.max_slots < (int64_t(1) << 20),
                "GPU batch backend: max_slots {} (1..2^20)", o.max_slots);
    HYDRA_CHECK(o.context > 0 && o.context < (int64_t(1) << 30), "GPU batch backend: context {}", o.context);
    HYDRA_CHECK(o.block_size > 0 && o.block_size <= 4096, "GPU batch backend: block size {}", o.block_size);
    HYDRA_CHECK(c.head_dim == 64 || c.head_dim == 128, "GPU batch backend: head dim {} (64 or 128)",
                c.head_dim);
    max_slots_ = o.max_slots, context_ = o.context;
    max_bucket_ = bucket_of(std::min(max_slots_, kMaxBucket));
    ctx_splits_ = decode_max_splits(context_);
    rope_freqs_ = gpu_rope_freqs(c);
    for (int64_t l = 0; l < c.num_layers; ++l) weights_.push_back(inference_weights(model_, l));
    slots_.resize(size_t(max_slots_));
    graphs_on_ = cuda_graphs_from_env(std::getenv("HYDRA_CUDA_GRAPHS"));

    fwd_ = std::make_unique<GpuForward>(model_);
    fwd_->set_cuda_graphs(graphs_on_);
    scratch_ = std::make_unique<GpuCache>(model_, context_);
    blas_ = std::make_unique<cuda::BlasContext>(stream());

    // decode buffers for max_bucket_ rows
    const int64_t Bm = max_bucket_, C = c.hidden_size, H = c.num_heads, HD = H * c.head_dim,
                  F = c.intermediate_size, V = c.vocab_size;
    in_.resize(3 * Bm);
    x_.resize(Bm * C), xn_.resize(Bm * C), proj_.resize(Bm * model_.layout().max_proj_cols());
    la_qkv_.resize(3 * Bm * HD), gates_.resize(2 * Bm * H), la_o_.resize(Bm * HD);
    heads_.resize(Bm * HD), gu_.resize(Bm * 2 * F), act_.resize(Bm * F), logits_.resize(Bm * V);
    ensure_decode_attention_workspace(
        partials_, int64_t(paged_decode_attention_workspace_floats(Bm, H, c.head_dim, ctx_splits_)),
        stream());

    // the cache: GDN slots first (fixed per sequence), the rest in KV blocks
    const size_t slot_bytes = size_t(GdnStateSlots::slot_floats_for(model_)) * sizeof(float);
    const size_t block_bytes = PagedKvPool::block_bytes(model_, o.block_size);
    size_t budget = o.cache_bytes;
    if (budget == 0) {
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        // leave room for cuBLAS, the prefill path's grow-only buffers and the CUDA graphs
        const size_t keep = std::max<size_t>(total_b / 20, size_t(2) << 30);
        HYDRA_CHECK(free_b > keep, "GPU batch backend: only {} MiB of device memory free", free_b >> 20);
        budget = free_b - keep;
    }
    const size_t states_bytes = size_t(max_slots_ + 1) * slot_bytes;
    HYDRA_CHECK(budget > states_bytes,
                "GPU batch backend: cache_bytes {} MiB do not hold the GDN state of {} slots "
                "({} MiB)",
                budget >> 20, max_slots_, states_bytes >> 20);
    const int64_t per_seq = (context_ + o.block_size - 1) / o.block_size;
    // a model without FA heads has blocks of no bytes: bookkeeping for every slot's whole context
    const int64_t n_blocks =
        block_bytes > 0 ? int64_t((budget - states_bytes) / block_bytes) : max_slots_ * per_seq + 1;
    HYDRA_CHECK(
        n_blocks >= per_seq + 1,
        "GPU batch backend: cache_bytes {} MiB hold {} KV blocks of {} positions; one sequence of context "
        "{} needs {} (+1 scratch)",
        budget >> 20, n_blocks, o.block_size, context_, per_seq);
    states_ = std::make_unique<GdnStateSlots>(model_, max_slots_);
    pool_ = std::make_unique<PagedKvPool>(model_, max_slots_, context_, o.block_size, n_blocks);
    for (int i = 0; i < 2; ++i) {
        CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_in_[i]), size_t(3 * Bm) * sizeof(int32_t)));
        CUDA_CHECK(cudaEventCreateWithFlags(&in_done_[i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_logits_), size_t(Bm * V) * sizeof(float)));
    CUDA_CHECK(cudaDeviceSynchronize());
}

GpuBatchBackend::~GpuBatchBackend() {
    if (fwd_) (void)cudaStreamSynchronize(stream());
    graphs_.clear();
    for (int i = 0; i < 2; ++i) {
        if (host_in_[i]) (void)cudaFreeHost(host_in_[i]);
        if (in_done_[i]) (void)cudaEventDestroy(in_done_[i]);
    }
    if (host_logits_) (void)cudaFreeHost(host_logits_);
    blas_.reset();
}

int64_t GpuBatchBackend::vocab_size() const {
    return model_.config().vocab_size;
}

const GpuBatchBackend::Slot& GpuBatchBackend::slot_checked(int32_t slot) const {
    HYDRA_CHECK(slot >= 0 && slot < max_slots_, "GPU batch backend: slot {} outside 0..{}", slot,
                max_slots_ - 1);
    const Slot& s = slots_[size_t(slot)];
    HYDRA_CHECK(s.used, "GPU batch backend: slot {} is not acquired", slot);
    return s;
}

int32_t GpuBatchBackend::acquire() {
    for (int64_t i = 0; i < max_slots_; ++i) {
        Slot& s = slots_[size_t(i)];
        if (s.used) continue;
        s = Slot{true, 0, 0};
        states_->reset(int32_t(i), stream());
        return int32_t(i);
    }
    return -1;
}

void GpuBatchBackend::release(int32_t slot) {
    slot_checked(slot);
    // no step in flight may still write the blocks another slot gets next
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    pool_->release(slot);
    slots_[size_t(slot)] = Slot{};
}

int64_t GpuBatchBackend::pos(int32_t slot) const {
    return slot_checked(slot).pos;
}

bool GpuBatchBackend::reserve(int32_t slot, int64_t positions) {
    slot_checked(slot);
    HYDRA_CHECK(positions <= context_, "GPU batch backend: {} positions exceed the context of {}", positions,
                context_);
    if (!pool_->reserve(slot, positions, stream())) return false;
    Slot& s = slots_[size_t(slot)];
    s.reserved = std::max(s.reserved, positions);
    return true;
}

void GpuBatchBackend::assume_filled(int32_t slot, int64_t pos) {
    Slot& s = slots_[size_t(slot)];
    slot_checked(slot);
    HYDRA_CHECK(pos >= 0 && pos < s.reserved, "assume_filled: position {} of a slot reserved for {}", pos,
                s.reserved);
    s.pos = pos;
}

serve::CacheUsage GpuBatchBackend::usage() const {
    serve::CacheUsage u;
    const int64_t nb = pool_->num_blocks() - 1;  // block 0 is the scratch slot's
    u.total_bytes = size_t(nb) * pool_->bytes_per_block() + size_t(max_slots_) * states_->slot_bytes();
    int64_t used = 0;
    for (const Slot& s : slots_) used += s.used;
    u.used_bytes = size_t(pool_->num_blocks() - pool_->free_blocks() - 1) * pool_->bytes_per_block() +
                   size_t(used) * states_->slot_bytes();
    u.used_slots = used, u.total_slots = max_slots_;
    return u;
}

std::shared_ptr<const serve::PrefixSnapshot> GpuBatchBackend::snapshot(int32_t slot) {
    const Slot& s = slot_checked(slot);
    const int64_t bs = pool_->block_size();
    HYDRA_CHECK(s.pos % bs == 0, "GPU batch backend: snapshot at position {} (only at multiples of {})",
                s.pos, bs);
    auto snap = std::make_shared<GpuPrefixSnapshot>();
    snap->owner = this;
    snap->pos = s.pos;
    snap->blocks = pool_->share(slot, s.pos / bs);
    snap->refs = pool_->refs();
    if (states_->slot_floats() > 0) {
        snap->state.resize(states_->slot_floats());
        states_->save(slot, snap->state.data(), stream());
    }
    snap->bytes = snap->state.bytes() + snap->blocks.size() * pool_->bytes_per_block();
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    return snap;
}

void GpuBatchBackend::restore(int32_t slot, const serve::PrefixSnapshot& snapshot) {
    const Slot s = slot_checked(slot);
    const auto* snap = dynamic_cast<const GpuPrefixSnapshot*>(&snapshot);
    HYDRA_CHECK(snap != nullptr && snap->owner == this, "GPU batch backend: a snapshot from another backend");
    HYDRA_CHECK(s.pos == 0, "GPU batch backend: restore into slot {} at position {} (must be fresh)", slot,
                s.pos);
    // blocks reserved before the restore give way to the shared ones, then the reservation is taken again
    // (it fits: at least as many blocks were just freed as the shared ones do not cover)
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    pool_->release(slot);
    pool_->adopt(slot, snap->blocks, stream());
    if (states_->slot_floats() > 0) states_->load(slot, snap->state.data(), stream());
    Slot& d = slots_[size_t(slot)];
    d.pos = snap->pos;
    d.reserved = std::max(s.reserved, snap->pos);
    HYDRA_CHECK(pool_->reserve(slot, d.reserved, stream()),
                "GPU batch backend: the reservation did not fit again");
}

// ---- the batched decode pass ----

void GpuBatchBackend::layer(int64_t l, int64_t Bp, int64_t splits) {
    const ModelConfig& c = model_.config();
    const TrainLayerOffsets& g = model_.layer(l);
    const DeviceProjBlock& pb = model_.layout().proj(l);
    const int64_t Dla = g.n_la * c.head_dim, P = pb.proj_cols;
    bf16* proj = proj_.data();
    GpuLayerActs a;
    a.xn1 = xn_.data();
    a.proj = proj, a.ld_proj = P;
    a.q = proj + pb.q, a.k = proj + pb.k, a.v = proj + pb.v, a.ld_qkv = P;
    a.o = heads_.data();  // the paged attention writes each row's FA heads into its heads row
    a.lqkv = proj + pb.la_q, a.ld_lqkv = P;
    a.lz = proj + pb.la_g, a.ld_lz = P;
    a.lab = proj + pb.la_a, a.ld_lab = P;
    a.lq = la_qkv_.data(), a.lk = la_qkv_.data() + Bp * Dla, a.lv = la_qkv_.data() + 2 * Bp * Dla;
    a.g = gates_.data(), a.beta = gates_.data() + Bp * g.n_la;
    a.lo = la_o_.data();
    a.gn_out = g.n_fa == 0 ? heads_.data() : la_o_.data();
    a.heads = heads_.data(), a.mixed = heads_.data();
    a.x_mid = x_.data(), a.xn2 = xn_.data(), a.gu = gu_.data(), a.act = act_.data();

    GpuLayerBatch kb;
    kb.pos = in_.data() + max_bucket_, kb.slots = in_.data() + 2 * max_bucket_;
    kb.k_pool = pool_->k(l), kb.v_pool = pool_->v(l);
    kb.block_table = pool_->block_table(), kb.max_blocks = pool_->max_blocks_per_seq();
    kb.block_size = pool_->block_size();
    kb.max_splits = splits, kb.partials = partials_.data();
    kb.conv_q = states_->conv_q(l), kb.conv_k = states_->conv_k(l), kb.conv_v = states_->conv_v(l);
    kb.state = states_->state(l), kb.slot_stride = states_->slot_floats();
    kb.rope = &rope_freqs_;
    GpuLayerEnv env;
    env.stream = stream(), env.blas = blas_.get(), env.prof = &prof_, env.res = &res_, env.batch = &kb;
    GpuLayerShape s;
    s.B = Bp, s.T = 1;
    gpu_layer_forward(c, model_.plan(), weights_[size_t(l)], l, s, x_.data(), x_.data(), a, false, env);
}

void GpuBatchBackend::decode_pass(int64_t Bp, int64_t splits) {
    const ModelConfig& c = model_.config();
    const int64_t C = c.hidden_size, V = c.vocab_size;
    cudaStream_t st = stream();
    cuda::embedding_forward(x_.data(), in_.data(), model_.p32(model_.embed_offset()), Bp, V, C, st);
    for (int64_t l = 0; l < c.num_layers; ++l) layer(l, Bp, splits);
    cuda::rmsnorm_forward(xn_.data(), nullptr, x_.data(), model_.p32(model_.final_norm_offset()), Bp, C,
                          c.rms_norm_eps, st);
    cuda::linear_forward(*blas_, xn_.data(), model_.p16(model_.lm_head_offset()), Bp, C, V, logits_.data(),
                         0.f);
}

const float* GpuBatchBackend::decode_on_device(std::span<const int32_t> slots,
                                               std::span<const int32_t> tokens) {
    const int64_t B = int64_t(slots.size()), V = model_.config().vocab_size;
    HYDRA_CHECK(B > 0 && B <= max_bucket_ && int64_t(tokens.size()) == B,
                "GPU batch backend: a decode pass of {} rows ({} tokens; 1..{})", B, tokens.size(),
                max_bucket_);
    const int64_t Bp = bucket_of(B);
    int64_t max_len = 1;
    for (int64_t i = 0; i < B; ++i) {
        const Slot& s = slot_checked(slots[size_t(i)]);
        HYDRA_CHECK(
            s.pos + 1 <= pool_->blocks_of(slots[size_t(i)]) * pool_->block_size() && s.pos + 1 <= context_,
            "GPU batch backend: slot {} at position {} is not reserved for one more", slots[size_t(i)],
            s.pos);
        HYDRA_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < V,
                    "token id {} is outside the vocabulary (0..{})", tokens[size_t(i)], V - 1);
        max_len = std::max(max_len, s.pos + 1);
    }
    const int64_t splits = decode_graph_splits(max_len, context_);
    // the step's inputs: ids | pos | slots, padding rows at position 0 of the scratch slot
    const int t = turn_;
    turn_ ^= 1;
    CUDA_CHECK(cudaEventSynchronize(in_done_[t]));  // the copy that last read this staging buffer is done
    int32_t* h = host_in_[t];
    for (int64_t i = 0; i < max_bucket_; ++i) {
        const bool real = i < B;
        h[i] = real ? tokens[size_t(i)] : 0;
        h[max_bucket_ + i] = real ? int32_t(slots_[size_t(slots[size_t(i)])].pos) : 0;
        h[2 * max_bucket_ + i] = real ? slots[size_t(i)] : pool_->scratch_slot();
    }
    CUDA_CHECK(cudaMemcpyAsync(in_.data(), h, size_t(3 * max_bucket_) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream()));
    CUDA_CHECK(cudaEventRecord(in_done_[t], stream()));

    bool done = false;
    if (graphs_on_) {
        const auto key = std::make_pair(Bp, splits);
        auto it = graphs_.find(key);
        if (it == graphs_.end()) {
            const auto t0 = std::chrono::steady_clock::now();
            try {
                CudaGraph g = CudaGraph::capture(stream(), [&] { decode_pass(Bp, splits); });
                it = graphs_.emplace(key, std::move(g)).first;
                ++stats_.captures;
                stats_.capture_seconds +=
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            } catch (const std::exception& e) {
                fmt::print(stderr,
                           "warning: CUDA graph capture failed ({}); batched decode without CUDA graphs\n",
                           e.what());
                ++stats_.fallbacks;
                graphs_on_ = false;
                CUDA_CHECK(cudaStreamSynchronize(stream()));
                graphs_.clear();
            }
        }
        if (graphs_on_) {
            it->second.launch(stream());
            ++stats_.replays;
            done = true;
        }
    }
    if (!done) {
        decode_pass(Bp, splits);
        ++stats_.eager;
    }
    for (int64_t i = 0; i < B; ++i) ++slots_[size_t(slots[size_t(i)])].pos;
    return logits_.data();
}

// ---- steps ----

void GpuBatchBackend::prefill_row(int32_t slot, std::span<const int32_t> tokens, int64_t n_logits,
                                  float* out) {
    const int64_t T = int64_t(tokens.size()), V = model_.config().vocab_size, pos0 = slots_[size_t(slot)].pos;
    const int64_t L = model_.config().num_layers, bs = pool_->block_size();
    cudaStream_t st = stream();
    scratch_->reset(st);
    if (pos0 > 0) {  // a continued prompt: the sequence so far into the one-sequence cache
        for (int64_t l = 0; l < L; ++l)
            if (pool_->width(l) > 0)
                copy_blocks_to_rows(scratch_->k(l), scratch_->v(l), pool_->k(l), pool_->v(l), pos0,
                                    pool_->width(l), pool_->table_row(slot), bs, st);
        states_->store_to(slot, *scratch_, st);
        scratch_->advance(pos0);
    }
    if (n_logits <= 1) {
        const std::vector<float> lg = fwd_->forward_last_logits(*scratch_, tokens);
        if (n_logits == 1) std::memcpy(out, lg.data(), size_t(V) * sizeof(float));
    } else {
        const std::vector<float> lg = fwd_->forward_all_logits(*scratch_, tokens);
        std::memcpy(out, lg.data() + (T - n_logits) * V, size_t(n_logits * V) * sizeof(float));
    }
    for (int64_t l = 0; l < L; ++l)
        if (pool_->width(l) > 0)
            copy_rows_to_blocks(pool_->k(l), pool_->v(l), scratch_->k(l), scratch_->v(l), pos0, T,
                                pool_->width(l), pool_->table_row(slot), bs, st);
    states_->load_from(slot, *scratch_, st);
    slots_[size_t(slot)].pos = pos0 + T;
}

void GpuBatchBackend::step(std::span<const serve::StepRow> rows, std::vector<float>& logits) {
    const int64_t V = model_.config().vocab_size;
    // validate everything before anything runs
    std::vector<int64_t> offset(rows.size());
    std::vector<char> seen(size_t(max_slots_), 0);
    int64_t total = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
        const serve::StepRow& row = rows[r];
        const Slot& s = slot_checked(row.slot);
        HYDRA_CHECK(!seen[size_t(row.slot)], "GPU batch backend: slot {} twice in one step", row.slot);
        seen[size_t(row.slot)] = 1;
        const int64_t T = int64_t(row.tokens.size());
        HYDRA_CHECK(T > 0, "GPU batch backend: a row of slot {} without tokens", row.slot);
        HYDRA_CHECK(row.n_logits >= 0 && row.n_logits <= T, "GPU batch backend: {} logits of {} tokens",
                    row.n_logits, T);
        HYDRA_CHECK(
            s.pos + T <= pool_->blocks_of(row.slot) * pool_->block_size() && s.pos + T <= context_,
            "GPU batch backend: slot {} holds {} positions and is reserved for {}, {} more do not fit",
            row.slot, s.pos, pool_->blocks_of(row.slot) * pool_->block_size(), T);
        for (int32_t tok : row.tokens)
            HYDRA_CHECK(tok >= 0 && tok < V, "token id {} is outside the vocabulary (0..{})", tok, V - 1);
        offset[r] = total;
        total += row.n_logits;
    }
    logits.assign(size_t(total * V), 0.f);
    cudaStream_t st = stream();

    // prefill rows: one at a time through the one-sequence path
    for (size_t r = 0; r < rows.size(); ++r)
        if (rows[r].tokens.size() > 1)
            prefill_row(rows[r].slot, rows[r].tokens, rows[r].n_logits, logits.data() + offset[r] * V);
    // decode rows: batched passes of up to max_bucket_ rows
    std::vector<size_t> dec;
    for (size_t r = 0; r < rows.size(); ++r)
        if (rows[r].tokens.size() == 1) dec.push_back(r);
    for (size_t i0 = 0; i0 < dec.size(); i0 += size_t(max_bucket_)) {
        const size_t n = std::min(dec.size() - i0, size_t(max_bucket_));
        std::vector<int32_t> slots(n), toks(n);
        for (size_t i = 0; i < n; ++i)
            slots[i] = rows[dec[i0 + i]].slot, toks[i] = rows[dec[i0 + i]].tokens[0];
        const float* lg = decode_on_device(slots, toks);
        CUDA_CHECK(
            cudaMemcpyAsync(host_logits_, lg, n * size_t(V) * sizeof(float), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        for (size_t i = 0; i < n; ++i) {
            const size_t r = dec[i0 + i];
            if (rows[r].n_logits == 1)
                std::memcpy(logits.data() + offset[r] * V, host_logits_ + i * size_t(V),
                            size_t(V) * sizeof(float));
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
}

}  // namespace hydra::gpu
