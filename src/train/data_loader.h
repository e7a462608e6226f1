// Training batches from a token split: the split's token stream is cut into fixed windows of T+1
// consecutive tokens (window w = tokens [w*T, w*T + T + 1), so consecutive windows share one token and
// every token is a target once), visited in a fresh seeded permutation each epoch. A DataCursor holds
// the whole state, so a run resumed from a saved cursor sees exactly the batches it would have seen.
// Optionally a fraction of the rows comes from a synthetic-task generator instead of the prose.
// With source spans (a corpus built by `hydra corpus`, train/corpus_manifest.h) each prose row first
// picks a source with probability proportional to its weight (one rng.uniform() draw), then takes that
// source's next window; every source has its own windows (inside its span) and its own seeded
// permutation, so a small source repeats while a large one is still in its first epoch.
// HeldoutIterator walks a split's windows in order, unshuffled, for evaluation.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "train/token_shards.h"

namespace hydra {

// Everything that determines the batches still to come (besides the split and the mixer function).
struct DataCursor {
    uint64_t seed = 0;
    uint64_t epoch = 0;             // epochs completed
    uint64_t position = 0;          // index, in this epoch's permutation, of the next prose window
    std::array<uint64_t, 4> rng{};  // mixer Rng state (row source decisions and generator draws)
    // Checked on restore so a cursor is never applied to a different split or window length.
    int64_t seq_len = 0;
    uint64_t windows = 0;
    // Per source of a mixed loader: (epoch, position); empty for a single-stream loader.
    std::vector<std::array<uint64_t, 2>> sources;

    // {"seed", "epoch", "position", "rng": [4 x u64], "seq_len", "windows"} (+ "sources": [[epoch,
    // position], ...] for a mixed loader).
    nlohmann::json to_json() const;
    // Throws hydra::Error naming `source` and the field for a missing or mistyped field.
    static DataCursor from_json(const nlohmann::json& j, const std::string& source = "data cursor");
};

// One source of a mixed split: the token range [begin, end) it occupies and its mix weight (>= 0).
struct WeightedSpan {
    int64_t begin = 0, end = 0;
    double weight = 0;
};

class DataLoader {
  public:
    // Fills `sample` with exactly T+1 ids in [0, vocab) and returns true, or returns false to let the
    // row fall back to prose. It must draw randomness only from the Rng it is given.
    using Generator = std::function<bool(Rng& rng, std::vector<int32_t>& sample)>;

    // `split` must outlive the loader. Throws hydra::Error when seq_len < 1 or the split holds fewer
    // than seq_len + 1 tokens.
    DataLoader(const TokenSplit& split, int64_t seq_len, uint64_t seed);
    // Mixed: windows lie inside one span each (a span shorter than seq_len + 1 has none). Throws
    // hydra::Error for a span outside the split, overlapping spans, a negative weight, or when no span
    // with windows has a weight above 0.
    DataLoader(const TokenSplit& split, const std::vector<WeightedSpan>& spans, int64_t seq_len,
               uint64_t seed);

    // rows: (B, T+1), row-major.
    void next_rows(int64_t batch, std::vector<int32_t>& rows);
    // inputs, targets: (B, T) each; targets[b][t] = inputs[b][t+1] within a row's window.
    void next_batch(int64_t batch, std::vector<int32_t>& inputs, std::vector<int32_t>& targets);
    // Data parallel: this rank's share of the global batch of `global_batch` rows: rows rank, rank + world,
    // ... (B_r = rows_of_rank(global_batch, rank, world) rows). Every rank draws the whole global batch, so
    // the cursor, the sample order and the union over the ranks equal next_batch(global_batch)'s, with no
    // row on two ranks. Throws when rank is outside [0, world).
    void next_batch_shard(int64_t global_batch, int rank, int world, std::vector<int32_t>& inputs,
                          std::vector<int32_t>& targets);
    static int64_t rows_of_rank(int64_t global_batch, int rank, int world);

    // From now on each row comes from `generator` with probability `fraction` in [0, 1] (one
    // rng.uniform() draw per row while a generator is set). An empty generator or fraction 0 turns
    // mixing off. The generator is not saved in the cursor: set the same one again after restore().
    void set_mixer(Generator generator, double fraction);

    DataCursor cursor() const;
    // Throws hydra::Error if the cursor's seq_len/windows differ from this loader's or position is past
    // the end of the epoch.
    void restore(const DataCursor& cursor);

    int64_t seq_len() const { return seq_len_; }
    uint64_t windows_per_epoch() const { return windows_; }
    uint64_t epoch() const { return epoch_; }
    uint64_t position() const { return position_; }
    // Window index (start token / T) of the k-th window of epoch e; for tests and logging.
    uint64_t window_at(uint64_t epoch, uint64_t k) const;
    // Rows served since construction (not part of the cursor).
    int64_t rows_from_prose() const { return rows_prose_; }
    int64_t rows_from_mixer() const { return rows_mixer_; }
    // Mixed loader: prose rows served from each span since construction (empty otherwise).
    const std::vector<int64_t>& rows_per_source() const { return rows_source_; }

  private:
    struct Stream {  // one source of a mixed loader
        int64_t begin = 0;
        uint64_t windows = 0;
        double cum_weight = 0;  // cumulative weight up to and including this source
        uint64_t epoch = 0, position = 0;
        std::vector<uint32_t> order;
    };
    void make_permutation();
    void split_rows(const std::vector<int32_t>& rows, int64_t batch, int first, int stride,
                    std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const;
    void prose_row(int32_t* row);
    void mixed_row(int32_t* row);
    uint64_t stream_seed(size_t s) const;

    const TokenSplit& split_;
    int64_t seq_len_;
    uint64_t seed_;
    uint64_t windows_;
    uint64_t epoch_ = 0, position_ = 0;
    std::vector<uint32_t> order_;  // permutation of [0, windows_) for epoch_
    Rng rng_;
    Generator generator_;
    double fraction_ = 0;
    std::vector<int32_t> sample_;
    int64_t rows_prose_ = 0, rows_mixer_ = 0;
    std::vector<Stream> streams_;  // empty: single stream over the whole split
    std::vector<int64_t> rows_source_;
};

// In-order walk over all windows of a split (or the first max_windows), for evaluation.
class HeldoutIterator {
  public:
    // `split` must outlive the iterator. max_windows < 0: all. A split shorter than seq_len + 1 tokens
    // (e.g. built with heldout_fraction 0) has no windows. Throws hydra::Error when seq_len < 1.
    HeldoutIterator(const TokenSplit& split, int64_t seq_len, int64_t max_windows = -1);
    // Fills up to `batch` rows (B', T+1) and returns B' (0 once every window was served).
    int64_t next_rows(int64_t batch, std::vector<int32_t>& rows);
    // inputs, targets: (B', T); returns B'.
    int64_t next_batch(int64_t batch, std::vector<int32_t>& inputs, std::vector<int32_t>& targets);
    void reset() { next_ = 0; }
    int64_t windows() const { return windows_; }
    int64_t position() const { return next_; }

  private:
    const TokenSplit& split_;
    int64_t seq_len_;
    int64_t windows_;
    int64_t next_ = 0;
};

}  // namespace hydra
