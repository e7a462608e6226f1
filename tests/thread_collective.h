// ThreadCollective: train/collective.h over host memory shared by W threads of one process, the stand-in
// for NCCL in the CPU tests (so they run the real ZeRO / bucket code). Each call is a rendezvous of the W
// threads; reductions sum in rank order (deterministic) and divide by W for a mean.
// run_ranks(W, fn) runs fn(collective) on W threads and rethrows the first exception; a rank that
// throws drops out of the barrier so the others do not hang.
#pragma once

#include <barrier>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "train/collective.h"

namespace hydra::test {

struct ThreadGroup {
    explicit ThreadGroup(int w) : world(w), bar(w), ptrs(size_t(w)), flags(size_t(w)) {}
    int world;
    std::barrier<> bar;
    std::vector<void*> ptrs;
    std::vector<char> flags;
};

class ThreadCollective final : public Collective {
  public:
    ThreadCollective(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int world_size() const override { return g_.world; }
    int64_t calls() const { return calls_; }

    void all_reduce(void* buf, CollType type, const std::vector<ElemRange>& ranges, bool mean) override {
        ++calls_;
        publish(buf);
        std::vector<std::vector<char>> out;
        const int64_t es = coll_type_bytes(type);
        for (const ElemRange& r : ranges) {
            std::vector<char> res(size_t(r.size() * es));
            for (int64_t i = r.begin; i < r.end; ++i) {
                char* dst = res.data() + (i - r.begin) * es;
                if (type == CollType::F32) {
                    float s = 0;
                    for (int k = 0; k < g_.world; ++k) s += static_cast<const float*>(g_.ptrs[size_t(k)])[i];
                    if (mean && g_.world > 1) s /= float(g_.world);
                    std::memcpy(dst, &s, 4);
                } else if (type == CollType::F64) {
                    double s = 0;
                    for (int k = 0; k < g_.world; ++k) s += static_cast<const double*>(g_.ptrs[size_t(k)])[i];
                    if (mean && g_.world > 1) s /= double(g_.world);
                    std::memcpy(dst, &s, 8);
                } else if (type == CollType::I64) {
                    int64_t s = 0;
                    for (int k = 0; k < g_.world; ++k)
                        s += static_cast<const int64_t*>(g_.ptrs[size_t(k)])[i];
                    if (mean) s /= g_.world;
                    std::memcpy(dst, &s, 8);
                } else {
                    throw std::logic_error("ThreadCollective: no bf16 reduction");
                }
            }
            out.push_back(std::move(res));
        }
        g_.bar.arrive_and_wait();  // everyone has read every buffer
        for (size_t k = 0; k < ranges.size(); ++k)
            std::memcpy(static_cast<char*>(buf) + ranges[k].begin * es, out[k].data(), out[k].size());
        g_.bar.arrive_and_wait();
    }

    void all_gather(void* buf, CollType type, const std::vector<ElemRange>& owned) override {
        ++calls_;
        publish(buf);
        const int64_t es = coll_type_bytes(type);
        for (int k = 0; k < g_.world; ++k) {
            const ElemRange r = owned[size_t(k)];
            if (k == rank_ || r.empty()) continue;
            std::memcpy(static_cast<char*>(buf) + r.begin * es,
                        static_cast<char*>(g_.ptrs[size_t(k)]) + r.begin * es, size_t(r.size() * es));
        }
        g_.bar.arrive_and_wait();
    }

    void gather_to_root(void* buf, CollType type, const std::vector<ElemRange>& owned, int root) override {
        ++calls_;
        publish(buf);
        const int64_t es = coll_type_bytes(type);
        if (rank_ == root)
            for (int k = 0; k < g_.world; ++k) {
                const ElemRange r = owned[size_t(k)];
                if (k == rank_ || r.empty()) continue;
                std::memcpy(static_cast<char*>(buf) + r.begin * es,
                            static_cast<char*>(g_.ptrs[size_t(k)]) + r.begin * es, size_t(r.size() * es));
            }
        g_.bar.arrive_and_wait();
    }

    void synchronise() override {}
    void barrier() override { g_.bar.arrive_and_wait(); }
    bool any(bool flag) override {
        g_.flags[size_t(rank_)] = flag;
        g_.bar.arrive_and_wait();
        bool r = false;
        for (char f : g_.flags) r = r || f;
        g_.bar.arrive_and_wait();
        return r;
    }

  private:
    // every rank's buffer pointer is visible to all once this returns
    void publish(void* buf) {
        g_.ptrs[size_t(rank_)] = buf;
        g_.bar.arrive_and_wait();
    }
    ThreadGroup& g_;
    int rank_;
    int64_t calls_ = 0;
};

inline void run_ranks(int world, const std::function<void(ThreadCollective&)>& fn) {
    ThreadGroup g(world);
    std::mutex mu;
    std::exception_ptr first;
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            ThreadCollective c(g, r);
            try {
                fn(c);
            } catch (...) {
                {
                    std::lock_guard<std::mutex> lock(mu);
                    if (!first) first = std::current_exception();
                }
                g.bar.arrive_and_drop();
            }
        });
    for (auto& t : threads) t.join();
    if (first) std::rethrow_exception(first);
}

}  // namespace hydra::test
