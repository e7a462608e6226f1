// CPU batch backend (see cpu_batch_backend.h). Rows run one after another on the scheduler thread;
// the forward itself is multi-threaded inside, so batching rows would add no parallelism on the CPU.
#include "serve/cpu_batch_backend.h"

#include <cstring>

#include "core/error.h"
#include "model/llama_forward.h"

namespace hydra::serve {
namespace {

// A snapshot holds a KVCache of exactly pos positions (KV rows [0, pos) + the GDN state after pos).
struct CpuSnapshot : PrefixSnapshot {
    std::unique_ptr<KVCache> cache;
};

// Copies positions [0, n) of src's KV rows and src's GDN states into dst (empty, capacity >= n), and
// moves dst to position n. The GDN state must be the one after exactly n tokens, so n == src.pos().
void copy_cache(const ModelConfig& cfg, KVCache& src, KVCache& dst, int64_t n) {
    HYDRA_ASSERT(dst.pos() == 0 && dst.capacity() >= n && src.pos() == n, "cache copy of {} positions", n);
    const int64_t Dh = cfg.head_dim;
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
        const int64_t h = src.kv_heads(l);
        if (h > 0 && n > 0) {
            std::memcpy(dst.k(l), src.k(l), size_t(n * h * Dh) * sizeof(float));
            std::memcpy(dst.v(l), src.v(l), size_t(n * h * Dh) * sizeof(float));
        }
        GdnLayerState& s = src.gdn(l);
        GdnLayerState& d = dst.gdn(l);
        const Tensor* from[] = {&s.conv_q, &s.conv_k, &s.conv_v, &s.recurrent};
        Tensor* to[] = {&d.conv_q, &d.conv_k, &d.conv_v, &d.recurrent};
        for (int i = 0; i < 4; ++i)
            if (!from[i]->empty()) std::memcpy(to[i]->f32(), from[i]->f32(), from[i]->nbytes());
    }
    dst.advance(n);
}

}  // namespace

CpuBatchBackend::CpuBatchBackend(const LlamaModel& model, int64_t max_slots, int64_t context,
                                 size_t cache_bytes)
    : model_(model), context_(context), cache_bytes_(cache_bytes) {
    HYDRA_CHECK(max_slots > 0, "the number of sequences must be positive (got {})", max_slots);
    HYDRA_CHECK(context > 0, "the context must be positive (got {})", context);
    const int64_t max_pos = model.config().max_position_embeddings;
    HYDRA_CHECK(max_pos <= 0 || context <= max_pos, "the context {} exceeds the model's {} positions",
                context, max_pos);
    const KVCache probe(model, 1);
    bytes_per_token_ = probe.bytes_per_token();
    state_bytes_ = probe.state_bytes();
    HYDRA_CHECK(bytes_for(1) <= cache_bytes,
                "the cache budget of {} bytes cannot hold even one position of one sequence ({} bytes)",
                cache_bytes, bytes_for(1));
    slots_.resize(size_t(max_slots));
}

int64_t CpuBatchBackend::vocab_size() const {
    return model_.config().vocab_size;
}

CpuBatchBackend::Slot& CpuBatchBackend::slot_at(int32_t slot) {
    HYDRA_ASSERT(slot >= 0 && slot < int32_t(slots_.size()) && slots_[size_t(slot)].used,
                 "slot {} not in use", slot);
    return slots_[size_t(slot)];
}

const CpuBatchBackend::Slot& CpuBatchBackend::slot_at(int32_t slot) const {
    HYDRA_ASSERT(slot >= 0 && slot < int32_t(slots_.size()) && slots_[size_t(slot)].used,
                 "slot {} not in use", slot);
    return slots_[size_t(slot)];
}

int32_t CpuBatchBackend::acquire() {
    for (size_t i = 0; i < slots_.size(); ++i)
        if (!slots_[i].used) {
            slots_[i].used = true;
            return int32_t(i);
        }
    return -1;
}

void CpuBatchBackend::release(int32_t slot) {
    Slot& s = slot_at(slot);
    s = Slot{};
}

int64_t CpuBatchBackend::pos(int32_t slot) const {
    const Slot& s = slot_at(slot);
    return s.cache ? s.cache->pos() : 0;
}

size_t CpuBatchBackend::used_bytes() const {
    size_t n = 0;
    for (const Slot& s : slots_)
        if (s.used && s.reserved > 0) n += bytes_for(s.reserved);
    return n;
}

bool CpuBatchBackend::reserve(int32_t slot, int64_t positions) {
    Slot& s = slot_at(slot);
    HYDRA_CHECK(positions > 0 && positions <= context_, "cannot reserve {} positions: the context holds {}",
                positions, context_);
    if (positions <= s.reserved) return true;
    const size_t others = used_bytes() - (s.reserved > 0 ? bytes_for(s.reserved) : 0);
    if (others + bytes_for(positions) > cache_bytes_) return false;
    auto grown = std::make_unique<KVCache>(model_, positions);
    if (s.cache) copy_cache(model_.config(), *s.cache, *grown, s.cache->pos());
    s.cache = std::move(grown);
    s.reserved = positions;
    return true;
}

void CpuBatchBackend::step(std::span<const StepRow> rows, std::vector<float>& logits) {
    const int64_t V = model_.config().vocab_size;
    int64_t total = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        const StepRow& r = rows[i];
        Slot& s = slot_at(r.slot);
        const int64_t T = int64_t(r.tokens.size());
        HYDRA_ASSERT(T > 0 && r.n_logits >= 0 && r.n_logits <= T, "row of {} tokens asks {} logits", T,
                     r.n_logits);
        HYDRA_ASSERT(s.cache && s.cache->pos() + T <= s.reserved, "slot {} reserved {} positions, needs {}",
                     r.slot, s.reserved, pos(r.slot) + T);
        for (size_t j = 0; j < i; ++j)
            HYDRA_ASSERT(rows[j].slot != r.slot, "slot {} twice in one step", r.slot);
        total += r.n_logits;
    }
    logits.resize(size_t(total * V));
    float* out = logits.data();
    for (const StepRow& r : rows) {
        KVCache& cache = *slot_at(r.slot).cache;
        const int64_t T = int64_t(r.tokens.size());
        // Same options and the same lm_head choice as forward_last_logits(), which generate() calls.
        const ForwardOptions options;
        const Tensor hidden = forward_hidden(model_, r.tokens, cache, options);
        if (r.n_logits == 0) continue;
        const Tensor l =
            compute_logits(model_, hidden.rows(T - r.n_logits, T), options.quantized_decode && T == 1,
                           options.q8_activations);
        std::memcpy(out, l.f32(), l.nbytes());
        out += r.n_logits * V;
    }
}

std::shared_ptr<const PrefixSnapshot> CpuBatchBackend::snapshot(int32_t slot) {
    Slot& s = slot_at(slot);
    HYDRA_CHECK(s.cache && s.cache->pos() > 0, "slot {} holds no positions to snapshot", slot);
    const int64_t n = s.cache->pos();
    auto snap = std::make_shared<CpuSnapshot>();
    snap->cache = std::make_unique<KVCache>(model_, n);
    copy_cache(model_.config(), *s.cache, *snap->cache, n);
    snap->pos = n;
    snap->bytes = bytes_for(n);
    return snap;
}

void CpuBatchBackend::restore(int32_t slot, const PrefixSnapshot& snapshot) {
    Slot& s = slot_at(slot);
    const auto* snap = dynamic_cast<const CpuSnapshot*>(&snapshot);
    HYDRA_CHECK(snap != nullptr, "restore: the snapshot was not made by the CPU backend");
    HYDRA_CHECK(pos(slot) == 0, "restore: slot {} is not empty (position {})", slot, pos(slot));
    const int64_t n = snap->pos;
    if (s.reserved < n) HYDRA_CHECK(reserve(slot, n), "restore: no cache memory for {} positions", n);
    // A fresh cache of the reserved size (its GDN state zero), then the snapshot's rows and state.
    s.cache = std::make_unique<KVCache>(model_, s.reserved);
    copy_cache(model_.config(), *snap->cache, *s.cache, n);
}

CacheUsage CpuBatchBackend::usage() const {
    CacheUsage u;
    u.used_bytes = used_bytes();
    u.total_bytes = cache_bytes_;
    u.total_slots = int64_t(slots_.size());
    for (const Slot& s : slots_) u.used_slots += s.used ? 1 : 0;
    return u;
}

}  // namespace hydra::serve
