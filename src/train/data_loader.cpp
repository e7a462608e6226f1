// DataLoader, DataCursor and HeldoutIterator (see data_loader.h).
#include "train/data_loader.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash_mix.h"

namespace hydra {

using json = nlohmann::json;

namespace {

// Seed of the shuffling Rng of one epoch, and of the mixer Rng (a stream no epoch can reach).
uint64_t epoch_seed(uint64_t seed, uint64_t epoch) {
    return splitmix64(seed ^ splitmix64(epoch));
}
uint64_t mixer_seed(uint64_t seed) {
    return splitmix64(seed ^ 0x6d69786572ull /* "mixer" */) ^ 0xa5a5a5a5ull;
}

// Uniform integer in [0, n), n >= 1, without modulo bias (rejection of the short top range).
uint64_t below(Rng& rng, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng.next_u64();
    while (x >= limit);
    return x % n;
}

std::vector<uint32_t> permutation(uint64_t seed, uint64_t epoch, uint64_t n) {
    std::vector<uint32_t> order(n);
    for (uint64_t i = 0; i < n; ++i) order[i] = uint32_t(i);
    Rng rng(epoch_seed(seed, epoch));
    for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[below(rng, i)]);  // Fisher-Yates
    return order;
}

uint64_t window_count(const TokenSplit& split, int64_t seq_len, const char* who) {
    HYDRA_CHECK(seq_len >= 1, "{}: seq_len must be >= 1 (got {})", who, seq_len);
    HYDRA_CHECK(
        split.size() >= seq_len + 1,
        "{}: the split holds {} tokens, fewer than one window of seq_len + 1 = {}; use more text or a "
        "shorter seq_len",
        who, split.size(), seq_len + 1);
    return uint64_t((split.size() - 1) / seq_len);
}

bool all_zero(const std::array<uint64_t, 4>& s) {
    return (s[0] | s[1] | s[2] | s[3]) == 0;
}

uint64_t u64_field(const json& j, const char* key, const std::string& source) {
    HYDRA_CHECK(j.is_object(), "{}: must be a JSON object", source);
    auto it = j.find(key);
    HYDRA_CHECK(it != j.end(), "{}: missing field {}", source, key);
    HYDRA_CHECK(it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0),
                "{}: field {} must be a non-negative integer", source, key);
    return it->get<uint64_t>();
}

}  // namespace

json DataCursor::to_json() const {
    json j = {{"seed", seed}, {"epoch", epoch},     {"position", position},
              {"rng", rng},   {"seq_len", seq_len}, {"windows", windows}};
    if (!sources.empty()) j["sources"] = sources;
    return j;
}

DataCursor DataCursor::from_json(const json& j, const std::string& source) {
    DataCursor c;
    c.seed = u64_field(j, "seed", source);
    c.epoch = u64_field(j, "epoch", source);
    c.position = u64_field(j, "position", source);
    c.seq_len = int64_t(u64_field(j, "seq_len", source));
    c.windows = u64_field(j, "windows", source);
    auto it = j.find("rng");
    HYDRA_CHECK(it != j.end() && it->is_array() && it->size() == 4,
                "{}: field rng must be an array of 4 unsigned integers", source);
    for (size_t i = 0; i < 4; ++i) {
        HYDRA_CHECK(
            (*it)[i].is_number_unsigned() || ((*it)[i].is_number_integer() && (*it)[i].get<int64_t>() >= 0),
            "{}: field rng[{}] must be an unsigned integer", source, i);
        c.rng[i] = (*it)[i].get<uint64_t>();
    }
    HYDRA_CHECK(!all_zero(c.rng), "{}: field rng is all zero, not a valid generator state", source);
    if (auto st = j.find("sources"); st != j.end()) {
        HYDRA_CHECK(st->is_array(), "{}: field sources must be an array of [epoch, position]", source);
        for (size_t i = 0; i < st->size(); ++i) {
            const json& e = (*st)[i];
            HYDRA_CHECK(
                e.is_array() && e.size() == 2 && e[0].is_number_unsigned() && e[1].is_number_unsigned(),
                "{}: field sources[{}] must be [epoch, position] (unsigned integers)", source, i);
            c.sources.push_back({e[0].get<uint64_t>(), e[1].get<uint64_t>()});
        }
    }
    return c;
}

DataLoader::DataLoader(const TokenSplit& split, int64_t seq_len, uint64_t seed)
    : split_(split),
      seq_len_(seq_len),
      seed_(seed),
      windows_(window_count(split, seq_len, "DataLoader")),
      rng_(mixer_seed(seed)) {
    HYDRA_CHECK(windows_ <= UINT32_MAX, "DataLoader: {} windows per epoch; at most 2^32 - 1 are supported",
                windows_);
    make_permutation();
}

DataLoader::DataLoader(const TokenSplit& split, const std::vector<WeightedSpan>& spans, int64_t seq_len,
                       uint64_t seed)
    : split_(split), seq_len_(seq_len), seed_(seed), windows_(0), rng_(mixer_seed(seed)) {
    HYDRA_CHECK(seq_len >= 1, "DataLoader: seq_len must be >= 1 (got {})", seq_len);
    HYDRA_CHECK(!spans.empty(), "DataLoader: no source spans");
    double cum = 0;
    int64_t prev_end = 0;
    for (size_t s = 0; s < spans.size(); ++s) {
        const WeightedSpan& sp = spans[s];
        HYDRA_CHECK(sp.begin >= prev_end && sp.begin <= sp.end && sp.end <= split.size(),
                    "DataLoader: source span {} = [{}, {}) is out of order or outside the split's {} tokens",
                    s, sp.begin, sp.end, split.size());
        HYDRA_CHECK(sp.weight >= 0 && std::isfinite(sp.weight), "DataLoader: source {} has weight {}", s,
                    sp.weight);
        prev_end = sp.end;
        Stream st;
        st.begin = sp.begin;
        st.windows = sp.end - sp.begin >= seq_len + 1 ? uint64_t((sp.end - sp.begin - 1) / seq_len) : 0;
        HYDRA_CHECK(st.windows <= UINT32_MAX, "DataLoader: source {} has {} windows; at most 2^32 - 1", s,
                    st.windows);
        if (st.windows > 0) cum += sp.weight;
        st.cum_weight = cum;
        windows_ += st.windows;
        streams_.push_back(std::move(st));
    }
    HYDRA_CHECK(
        cum > 0,
        "DataLoader: no source with a window of seq_len + 1 = {} tokens has a weight above 0 (use more text, "
        "a shorter seq_len or other weights)",
        seq_len + 1);
    for (size_t s = 0; s < streams_.size(); ++s)
        streams_[s].order = permutation(stream_seed(s), 0, streams_[s].windows);
    rows_source_.assign(streams_.size(), 0);
}

uint64_t DataLoader::stream_seed(size_t s) const {
    return splitmix64(seed_ ^ splitmix64(0x736f75726365ull + s));  // "source"
}

void DataLoader::mixed_row(int32_t* row) {
    const double total = streams_.back().cum_weight;
    const double x = rng_.uniform() * total;
    size_t s = 0;
    while (s + 1 < streams_.size() && (streams_[s].windows == 0 || x >= streams_[s].cum_weight)) ++s;
    while (streams_[s].windows == 0) --s;  // x rounded up to the total: the last source with windows
    Stream& st = streams_[s];
    if (st.position == st.windows) {
        ++st.epoch;
        st.position = 0;
        st.order = permutation(stream_seed(s), st.epoch, st.windows);
    }
    const uint64_t w = st.order[st.position++];
    split_.read(st.begin + int64_t(w) * seq_len_, seq_len_ + 1, row);
    ++rows_prose_;
    ++rows_source_[s];
}

void DataLoader::make_permutation() {
    order_ = permutation(seed_, epoch_, windows_);
}

uint64_t DataLoader::window_at(uint64_t epoch, uint64_t k) const {
    HYDRA_CHECK(streams_.empty(), "DataLoader::window_at: not defined for a mixed loader");
    HYDRA_ASSERT(k < windows_, "k {} of {}", k, windows_);
    if (epoch == epoch_) return order_[k];
    return permutation(seed_, epoch, windows_)[k];
}

void DataLoader::prose_row(int32_t* row) {
    if (!streams_.empty()) return mixed_row(row);
    if (position_ == windows_) {
        ++epoch_;
        position_ = 0;
        make_permutation();
    }
    const uint64_t w = order_[position_++];
    split_.read(int64_t(w) * seq_len_, seq_len_ + 1, row);
    ++rows_prose_;
}

void DataLoader::next_rows(int64_t batch, std::vector<int32_t>& rows) {
    HYDRA_CHECK(batch >= 1, "DataLoader: batch must be >= 1 (got {})", batch);
    const size_t width = size_t(seq_len_) + 1;
    rows.resize(size_t(batch) * width);
    for (int64_t b = 0; b < batch; ++b) {
        int32_t* row = rows.data() + size_t(b) * width;
        if (generator_ && rng_.uniform() < fraction_) {
            sample_.clear();
            if (generator_(rng_, sample_)) {
                HYDRA_CHECK(sample_.size() == width,
                            "DataLoader mixer: generator returned {} tokens, need T+1 = {}", sample_.size(),
                            width);
                for (size_t i = 0; i < width; ++i) {
                    HYDRA_CHECK(sample_[i] >= 0 && sample_[i] < split_.vocab_size(),
                                "DataLoader mixer: generator token {} = {} is outside [0, vocab_size {})", i,
                                sample_[i], split_.vocab_size());
                    row[i] = sample_[i];
                }
                ++rows_mixer_;
                continue;
            }
        }
        prose_row(row);
    }
}

void DataLoader::split_rows(const std::vector<int32_t>& rows, int64_t batch, int first, int stride,
                            std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const {
    const size_t T = size_t(seq_len_);
    const size_t n = size_t(rows_of_rank(batch, first, stride));
    inputs.resize(n * T);
    targets.resize(n * T);
    for (size_t i = 0; i < n; ++i) {
        const size_t b = size_t(first) + i * size_t(stride);
        std::copy_n(rows.begin() + long(b * (T + 1)), T, inputs.begin() + long(i * T));
        std::copy_n(rows.begin() + long(b * (T + 1) + 1), T, targets.begin() + long(i * T));
    }
}

void DataLoader::next_batch(int64_t batch, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
    std::vector<int32_t> rows;
    next_rows(batch, rows);
    split_rows(rows, batch, 0, 1, inputs, targets);
}

int64_t DataLoader::rows_of_rank(int64_t global_batch, int rank, int world) {
    HYDRA_CHECK(world >= 1 && rank >= 0 && rank < world, "data loader: rank {} of a world of {}", rank,
                world);
    return global_batch > rank ? (global_batch - rank + world - 1) / world : 0;
}

void DataLoader::next_batch_shard(int64_t global_batch, int rank, int world, std::vector<int32_t>& inputs,
                                  std::vector<int32_t>& targets) {
    HYDRA_CHECK(world >= 1 && rank >= 0 && rank < world, "data loader: rank {} of a world of {}", rank,
                world);
    std::vector<int32_t> rows;
    next_rows(global_batch, rows);
    split_rows(rows, global_batch, rank, world, inputs, targets);
}

void DataLoader::set_mixer(Generator generator, double fraction) {
    HYDRA_CHECK(fraction >= 0 && fraction <= 1, "DataLoader mixer: fraction must be in [0, 1] (got {})",
                fraction);
    generator_ = fraction > 0 ? std::move(generator) : Generator{};
    fraction_ = generator_ ? fraction : 0;
}

DataCursor DataLoader::cursor() const {
    DataCursor c;
    c.seed = seed_;
    c.epoch = epoch_;
    c.position = position_;
    c.rng = rng_.state();
    c.seq_len = seq_len_;
    c.windows = windows_;
    for (const Stream& st : streams_) c.sources.push_back({st.epoch, st.position});
    return c;
}

void DataLoader::restore(const DataCursor& c) {
    HYDRA_CHECK(c.seq_len == seq_len_, "data cursor: seq_len {} but this loader uses {}", c.seq_len,
                seq_len_);
    HYDRA_CHECK(c.windows == windows_,
                "data cursor: saved over a split of {} windows, this split has {} (different data?)",
                c.windows, windows_);
    HYDRA_CHECK(c.position <= windows_, "data cursor: position {} is past the {} windows of an epoch",
                c.position, windows_);
    HYDRA_CHECK(!all_zero(c.rng), "data cursor: rng state is all zero");
    HYDRA_CHECK(c.sources.size() == streams_.size(),
                "data cursor: saved over {} sources, this loader has {} (different corpus or mix?)",
                c.sources.size(), streams_.size());
    for (size_t s = 0; s < streams_.size(); ++s)
        HYDRA_CHECK(c.sources[s][1] <= streams_[s].windows,
                    "data cursor: source {} position {} is past its {} windows", s, c.sources[s][1],
                    streams_[s].windows);
    if (!streams_.empty()) {
        seed_ = c.seed;
        rng_.set_state(c.rng);
        for (size_t s = 0; s < streams_.size(); ++s) {
            Stream& st = streams_[s];
            st.epoch = c.sources[s][0];
            st.position = c.sources[s][1];
            st.order = permutation(stream_seed(s), st.epoch, st.windows);
        }
        return;
    }
    const bool same_order = c.seed == seed_ && c.epoch == epoch_;
    seed_ = c.seed;
    epoch_ = c.epoch;
    position_ = c.position;
    rng_.set_state(c.rng);
    if (!same_order) make_permutation();
}

HeldoutIterator::HeldoutIterator(const TokenSplit& split, int64_t seq_len, int64_t max_windows)
    : split_(split), seq_len_(seq_len), windows_(0) {
    HYDRA_CHECK(seq_len >= 1, "HeldoutIterator: seq_len must be >= 1 (got {})", seq_len);
    // An empty or tiny held-out split (heldout_fraction 0) is legitimate: it has no windows.
    if (split.size() >= seq_len + 1) windows_ = (split.size() - 1) / seq_len;
    if (max_windows >= 0) windows_ = std::min(windows_, max_windows);
}

int64_t HeldoutIterator::next_rows(int64_t batch, std::vector<int32_t>& rows) {
    HYDRA_CHECK(batch >= 1, "HeldoutIterator: batch must be >= 1 (got {})", batch);
    const int64_t n = std::min(batch, windows_ - next_);
    const size_t width = size_t(seq_len_) + 1;
    rows.resize(size_t(n) * width);
    for (int64_t b = 0; b < n; ++b)
        split_.read((next_ + b) * seq_len_, seq_len_ + 1, rows.data() + size_t(b) * width);
    next_ += n;
    return n;
}

int64_t HeldoutIterator::next_batch(int64_t batch, std::vector<int32_t>& inputs,
                                    std::vector<int32_t>& targets) {
    std::vector<int32_t> rows;
    const int64_t n = next_rows(batch, rows);
    const size_t T = size_t(seq_len_);
    inputs.resize(size_t(n) * T);
    targets.resize(size_t(n) * T);
    for (size_t b = 0; b < size_t(n); ++b) {
        std::copy_n(rows.begin() + long(b * (T + 1)), T, inputs.begin() + long(b * T));
        std::copy_n(rows.begin() + long(b * (T + 1) + 1), T, targets.begin() + long(b * T));
    }
    return n;
}

}  // namespace hydra
