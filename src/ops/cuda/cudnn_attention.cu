// cuDNN fused attention through the backend (graph) API: the SDPA forward and backward operation
// graphs of cudnn_attention.h, built node by node, one execution plan per shape, cuDNN loaded with dlopen.
// Host code only (.cu so that the CUDA build's glob picks it up with the CUDA include paths).
#include "ops/cuda/cudnn_attention.h"

#include <dlfcn.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/shared_library.h"
#include "ops/cuda/cuda_check.h"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define HYDRA_HAVE_CUDNN_HEADERS 1
#else
#define HYDRA_HAVE_CUDNN_HEADERS 0
#endif

namespace hydra::cuda {

#if HYDRA_HAVE_CUDNN_HEADERS

namespace {

// The few cuDNN entry points used, resolved from the library loaded at run time.
struct CudnnApi {
    CudnnLibrary lib;
    size_t (*get_version)() = nullptr;
    const char* (*error_string)(cudnnStatus_t) = nullptr;
    void (*last_error)(char*, size_t) = nullptr;
    cudnnStatus_t (*create)(cudnnHandle_t*) = nullptr;
    cudnnStatus_t (*destroy)(cudnnHandle_t) = nullptr;
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t) = nullptr;
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
    cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t) = nullptr;
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t) = nullptr;
    cudnnStatus_t (*set_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, const void*) = nullptr;
    cudnnStatus_t (*get_attr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, int64_t*, void*) = nullptr;
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;
};

const CudnnApi& api() {
    static const CudnnApi a = [] {
        CudnnApi r;
        const OpenedLibrary lib =
            open_first_library("HYDRA_CUDNN_LIB", {"libcudnn_graph.so.9", "libcudnn.so.9"});
        void* h = lib.handle;
        if (!h) {
            r.lib.why =
                "cuDNN not found (" + lib.errors +
                "); put its lib directory on LD_LIBRARY_PATH or set HYDRA_CUDNN_LIB to libcudnn_graph.so.9";
            return r;
        }
        bool ok = true;
        auto sym = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
            if (!fn) {
                ok = false;
                r.lib.why += std::string(r.lib.why.empty() ? "" : ", ") + name;
            }
        };
        sym(r.get_version, "cudnnGetVersion");
        sym(r.error_string, "cudnnGetErrorString");
        sym(r.last_error, "cudnnGetLastErrorString");
        sym(r.create, "cudnnCreate");
        sym(r.destroy, "cudnnDestroy");
        sym(r.set_stream, "cudnnSetStream");
        sym(r.create_desc, "cudnnBackendCreateDescriptor");
        sym(r.destroy_desc, "cudnnBackendDestroyDescriptor");
        sym(r.finalize, "cudnnBackendFinalize");
        sym(r.set_attr, "cudnnBackendSetAttribute");
        sym(r.get_attr, "cudnnBackendGetAttribute");
        sym(r.execute, "cudnnBackendExecute");
        if (!ok) {
            r.lib.why = "cuDNN library lacks " + r.lib.why;
            return r;
        }
        r.lib.version = long(r.get_version());
        if (r.lib.version < 90000) {
            r.lib.why = "cuDNN " + std::to_string(r.lib.version) + " is older than 9.0";
            return r;
        }
        r.lib.loaded = true;
        return r;
    }();
    return a;
}

[[noreturn]] void cudnn_fail(cudnnStatus_t st, const char* what) {
    char msg[1024] = {0};
    api().last_error(msg, sizeof(msg));
    throw Error(std::string("cuDNN: ") + what + " failed: " + api().error_string(st) +
                (msg[0] ? std::string(" (") + msg + ")" : ""));
}

#define CUDNN_CALL(call, what)                                  \
    do {                                                        \
        cudnnStatus_t st_ = (call);                             \
        if (st_ != CUDNN_STATUS_SUCCESS) cudnn_fail(st_, what); \
    } while (0)

// One backend descriptor, destroyed with its owner.
class Desc {
  public:
    Desc() = default;
    explicit Desc(cudnnBackendDescriptorType_t type) {
        CUDNN_CALL(api().create_desc(type, &d_), "create descriptor");
    }
    ~Desc() {
        if (d_) api().destroy_desc(d_);
    }
    Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
    Desc& operator=(Desc&& o) noexcept {
        std::swap(d_, o.d_);
        return *this;
    }
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;
    cudnnBackendDescriptor_t get() const { return d_; }
    template <class T>
    Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const T* v) {
        CUDNN_CALL(api().set_attr(d_, name, type, n, v), "set attribute");
        return *this;
    }
    Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
        cudnnBackendDescriptor_t o = other.get();
        return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
    }
    Desc& finalize(const char* what) {
        CUDNN_CALL(api().finalize(d_), what);
        return *this;
    }

  private:
    cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// Unique ids of the tensors the caller binds (the rest are virtual, numbered from kFirstVirtual).
enum Uid : int64_t {
    kQ = 1,
    kK,
    kV,
    kO,
    kStats,
    kScale,
    kNegInf,
    kOne,
    kDO,
    kDQ,
    kDK,
    kDV,
    kDQAccum,
    kSoftmaxSum,
    kSeqKv,  // inference: the key count S and query count T of the bottom-right causal mask (int32 by value)
    kSeqQ,
    kFirstVirtual = 100
};

// The operation graph of one direction: its tensors and operations, kept alive together.
class GraphBuilder {
  public:
    explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

    const Desc& tensor(int64_t uid, cudnnDataType_t dt, Dims dim, Dims stride, bool is_virtual,
                       bool by_value = false) {
        Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        const int64_t align = 16;
        t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt)
            .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim.data())
            .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride.data())
            .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
            .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align)
            .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
        if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
        t.finalize("tensor descriptor");
        tensors_.push_back(std::make_unique<Desc>(std::move(t)));
        return *tensors_.back();
    }
    const Desc& virt(cudnnDataType_t dt, Dims dim, Dims stride) {
        return tensor(next_++, dt, dim, stride, true);
    }
    const Desc& scalar(int64_t uid) {
        return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
    }
    const Desc& scalar_i32(int64_t uid) {
        return tensor(uid, CUDNN_DATA_INT32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
    }

    void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, const Desc& x, const Desc& y,
                   const Desc* b = nullptr, const Desc* t = nullptr, int64_t axis = -1) {
        Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
            .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
        if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
        pw.finalize("pointwise descriptor");
        Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
            .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
            .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
        if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
        if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
        const float one = 1.f;
        op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
            .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one)
            .finalize("pointwise operation");
        keep(std::move(pw));
        ops_.push_back(std::move(op));
    }
    void matmul(const Desc& a, const Desc& b, const Desc& c) {
        Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32).finalize("matmul descriptor");
        Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
            .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
            .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
            .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)
            .finalize("matmul operation");
        keep(std::move(mm));
        ops_.push_back(std::move(op));
    }
    void reduction(cudnnReduceTensorOp_t mode, const Desc& x, const Desc& y) {
        Desc rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
            .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32)
            .finalize("reduction descriptor");
        Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
            .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
            .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd)
            .finalize("reduction operation");
        keep(std::move(rd));
        ops_.push_back(std::move(op));
    }
    void reshape(const Desc& x, const Desc& y) {
        Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
            .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
            .finalize("reshape operation");
        ops_.push_back(std::move(op));
    }

    // Operation graph -> heuristics (mode A) -> the engine configurations that finalize as plans, in the
    // heuristic's order (at most `max_plans`), with their workspace sizes. deterministic: engines that cuDNN
    // notes as nondeterministic (CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) are passed over.
    std::vector<std::pair<Desc, int64_t>> plans(const char* name, size_t max_plans,
                                                bool deterministic = false) {
        std::vector<cudnnBackendDescriptor_t> raw;
        for (const auto& o : ops_) raw.push_back(o.get());
        Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
            .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()),
                 raw.data())
            .finalize(name);
        Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
        heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
            .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
            .finalize("engine heuristics");
        int64_t count = 0;
        CUDNN_CALL(api().get_attr(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                  &count, nullptr),
                   "engine heuristics count");
        if (count <= 0) throw Error(std::string("cuDNN has no engine for the ") + name);
        std::vector<Desc> cfgs;
        std::vector<cudnnBackendDescriptor_t> cfg_raw;
        for (int64_t i = 0; i < count; ++i) {
            cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
            cfg_raw.push_back(cfgs.back().get());
        }
        int64_t got = 0;
        CUDNN_CALL(api().get_attr(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  count, &got, cfg_raw.data()),
                   "engine heuristics results");
        std::string errors;
        std::vector<std::pair<Desc, int64_t>> out;
        for (int64_t i = 0; i < got && out.size() < max_plans; ++i) {
            if (deterministic && noted_nondeterministic(cfg_raw[size_t(i)])) {
                errors += "; config " + std::to_string(i) + ": nondeterministic";
                continue;
            }
            Desc p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
                .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                     &cfg_raw[size_t(i)]);
            const cudnnStatus_t st = api().finalize(p.get());
            if (st != CUDNN_STATUS_SUCCESS) {
                char msg[512] = {0};
                api().last_error(msg, sizeof(msg));
                errors +=
                    std::string("; config ") + std::to_string(i) + ": " + api().error_string(st) + " " + msg;
                continue;
            }
            int64_t n = 0, workspace = 0;
            CUDNN_CALL(api().get_attr(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                      &n, &workspace),
                       "plan workspace size");
            out.emplace_back(std::move(p), workspace);
        }
        if (out.empty())
            throw Error(std::string("cuDNN: no engine configuration of the ") + name + " finalizes" + errors);
        // the plans refer to their engine configurations and graph: keep them as long as the builder
        keep(std::move(graph));
        keep(std::move(heur));
        for (auto& c : cfgs) keep(std::move(c));
        return out;
    }

  private:
    // Whether the engine of an engine configuration carries cuDNN's nondeterministic numerical note.
    static bool noted_nondeterministic(cudnnBackendDescriptor_t cfg) {
        Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        cudnnBackendDescriptor_t e = engine.get();
        int64_t n = 0;
        CUDNN_CALL(api().get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
                   "engine of a configuration");
        cudnnBackendNumericalNote_t notes[32];  // room for notes a newer library may add
        int64_t count = 0;
        CUDNN_CALL(
            api().get_attr(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 32, &count, notes),
            "engine numerical notes");
        for (int64_t i = 0; i < count; ++i)
            if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
        return false;
    }
    void keep(Desc&& d) { kept_.push_back(std::make_unique<Desc>(std::move(d))); }
    cudnnHandle_t handle_;
    int64_t next_ = kFirstVirtual;
    std::vector<std::unique_ptr<Desc>> tensors_, kept_;
    std::vector<Desc> ops_;
};

// Strides of the (b, h, s, d) views of our row-major (B, T, heads, D) activations, `ld` elements from one
// token to the next (heads * D when packed; the fused QKV row width otherwise).
Dims bshd_strides(const AttnShape& s, int64_t ld) {
    return {int64_t(s.T) * ld, s.D, ld, 1};
}
int64_t q_ld(const AttnShape& s) {
    return s.ld_qkv ? s.ld_qkv : int64_t(s.H) * s.D;
}
int64_t kv_ld(const AttnShape& s) {
    return s.ld_qkv ? s.ld_qkv : int64_t(s.Hkv) * s.D;
}
int64_t o_ld(const AttnShape& s) {
    return int64_t(s.H) * s.D;
}
Dims transposed(Dims d) {  // swap the last two axes (K -> K^T as a view)
    std::swap(d[2], d[3]);
    return d;
}

// Causal mask on scores (b, h, t, s): keep row >= col, -inf elsewhere (cuDNN's diagonal band pattern).
// bottom_right: keep row + S - T >= col (the T queries are the last T of the S key positions), S and T
// bound by value at execution (kSeqKv, kSeqQ), composed in the order of NVIDIA's frontend (row + s_kv - s_q,
// INT32) so that the fused engine recognises the pattern.
const Desc& causal_mask(GraphBuilder& g, const Desc& scores, Dims sdim, Dims sstr,
                        bool bottom_right = false) {
    const Desc& row = g.virt(CUDNN_DATA_INT32, sdim, sstr);
    const Desc& col = g.virt(CUDNN_DATA_INT32, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, row, nullptr, nullptr, 2);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, col, nullptr, nullptr, 3);
    const Desc* shifted = &row;
    if (bottom_right) {
        const Desc& skv = g.scalar_i32(kSeqKv);
        const Desc& plus = g.virt(CUDNN_DATA_INT32, sdim, sstr);
        g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, row, plus, &skv, nullptr, 3);
        const Desc& sq = g.scalar_i32(kSeqQ);
        const Desc& minus = g.virt(CUDNN_DATA_INT32, sdim, sstr);
        g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, plus, minus, &sq, nullptr, 3);
        shifted = &minus;
    }
    const Desc& keep = g.virt(CUDNN_DATA_BOOLEAN, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, *shifted, keep, &col);
    const Desc& neg_inf = g.scalar(kNegInf);
    const Desc& out = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scores, out, &neg_inf, &keep);
    return out;
}

// A finalized plan with the descriptors it was built from (destroyed plan first).
struct BuiltPlan {
    std::unique_ptr<GraphBuilder> graph;
    Desc plan;
    int64_t workspace = 0;
    std::vector<std::pair<Desc, int64_t>> others;  // further finalized engines, timed by CudnnAttention::Impl
};

// Up to this many engine configurations per direction of a training graph are finalized (and, when more than
// one, timed on the first use of a shape; HYDRA_CUDNN_TUNE=0 keeps the heuristic's first).
size_t max_plans() {
    static const size_t n = [] {
        const char* e = std::getenv("HYDRA_CUDNN_TUNE");
        return e && std::string(e) == "0" ? size_t(1) : size_t(4);
    }();
    return n;
}

void take_plans(BuiltPlan& r, std::vector<std::pair<Desc, int64_t>> all) {
    r.plan = std::move(all[0].first);
    r.workspace = all[0].second;
    for (size_t i = 1; i < all.size(); ++i) r.others.push_back(std::move(all[i]));
}

// What a forward graph computes: Tq queries over S keys (S == Tq: training and the prefill from 0, top-left
// causal mask; S > Tq: the queries are the last Tq positions, bottom-right mask), the (b, h, s, d) strides
// of q, k, v, o, and whether it writes the softmax statistics (training) or not (inference).
struct ForwardSpec {
    int64_t B = 0, Tq = 0, S = 0, H = 0, Hk = 0, D = 0;
    Dims qstr{}, kstr{}, ostr{};
    bool stats = true;
    size_t max_plans = 1;
    bool deterministic = false;  // only engines cuDNN does not note as nondeterministic
};

// Forward: S = Q K^T * scale, causal mask, softmax [with stats = max + log(sum exp)], O = P V.
BuiltPlan build_forward(cudnnHandle_t handle, const ForwardSpec& f) {
    BuiltPlan r{std::make_unique<GraphBuilder>(handle), Desc(), 0};
    GraphBuilder& g = *r.graph;
    const int64_t B = f.B, T = f.Tq, S = f.S, H = f.H, Hk = f.Hk, D = f.D;
    const Dims sdim{B, H, T, S}, sstr{H * T * S, T * S, S, 1};
    const Dims rdim{B, H, T, 1}, rstr{H * T, T, 1, 1};
    const Desc& q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, {B, H, T, D}, f.qstr, false);
    const Desc& kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, {B, Hk, D, S}, transposed(f.kstr), false);
    const Desc& v = g.tensor(kV, CUDNN_DATA_BFLOAT16, {B, Hk, S, D}, f.kstr, false);
    const Desc& o = g.tensor(kO, CUDNN_DATA_BFLOAT16, {B, H, T, D}, f.ostr, false);

    const Desc& s0 = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.matmul(q, kt, s0);
    const Desc& scale = g.scalar(kScale);
    const Desc& s1 = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s0, s1, &scale);
    const Desc& s2 = causal_mask(g, s1, sdim, sstr, S != T);

    const Desc& mx = g.virt(CUDNN_DATA_FLOAT, rdim, rstr);
    g.reduction(CUDNN_REDUCE_TENSOR_MAX, s2, mx);
    const Desc& sub = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s2, sub, &mx);
    const Desc& ex = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sub, ex);
    const Desc& sum = g.virt(CUDNN_DATA_FLOAT, rdim, rstr);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    if (f.stats) {
        const Desc& stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rdim, rstr, false);
        const Desc& lg = g.virt(CUDNN_DATA_FLOAT, rdim, rstr);
        g.pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, lg);
        g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, stats, &lg);
    }
    // the probabilities enter the second matmul as bf16 (the backend wants its A operand in the I/O type)
    const Desc& p = g.virt(CUDNN_DATA_BFLOAT16, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, ex, p, &sum);
    g.matmul(p, v, o);
    take_plans(r, g.plans(f.stats ? "attention forward graph" : "attention inference graph", f.max_plans,
                          f.deterministic));
    return r;
}

// The training forward: T queries over the same T keys, q|k|v maybe columns of one fused row, stats kept.
// deterministic: the heuristic's first engine (of those not noted nondeterministic), never a timing's pick,
// which may differ from run to run and with it the order of the sums.
BuiltPlan build_forward(cudnnHandle_t handle, const AttnShape& s, bool deterministic) {
    ForwardSpec f;
    f.B = s.B, f.Tq = s.T, f.S = s.T, f.H = s.H, f.Hk = s.Hkv, f.D = s.D;
    f.qstr = bshd_strides(s, q_ld(s)), f.kstr = bshd_strides(s, kv_ld(s)), f.ostr = bshd_strides(s, o_ld(s));
    f.stats = true;
    f.max_plans = deterministic ? 1 : max_plans();
    f.deterministic = deterministic;
    return build_forward(handle, f);
}

// The inference forward of cudnn_attention.h's AttnInferShape. It keeps the statistics output (into a scratch
// buffer nobody reads): cuDNN 9.19 finalizes no engine for the same graph without it. One plan, the
// heuristic's first: it was the fastest of the four finalized at every inference shape timed, and each
// further plan costs a new prompt length tens of milliseconds of kernel compilation.
BuiltPlan build_forward(cudnnHandle_t handle, const AttnInferShape& s) {
    ForwardSpec f;
    f.B = s.B, f.Tq = s.T, f.S = s.S, f.H = s.H, f.Hk = s.Hkv, f.D = s.D;
    const int64_t ldq = s.ld_q ? s.ld_q : int64_t(s.H) * s.D, ldkv = s.ld_kv ? s.ld_kv : int64_t(s.Hkv) * s.D;
    f.qstr = {int64_t(s.T) * ldq, s.D, ldq, 1};
    f.kstr = {int64_t(s.S) * ldkv, s.D, ldkv, 1};
    f.ostr = {int64_t(s.T) * s.H * s.D, s.D, int64_t(s.H) * s.D, 1};
    f.stats = true;
    f.max_plans = 1;
    return build_forward(handle, f);
}

// out (b, Hkv, s, d) = a (b, H, s, s) @ x (b, H, s, d); with Hkv < H the per-query-head products are summed
// over each KV head's group by a reduction (the dK and dV of grouped-query attention).
void grouped_matmul(GraphBuilder& g, const AttnShape& s, const Desc& a, const Desc& x, const Desc& out) {
    if (s.H == s.Hkv) {
        g.matmul(a, x, out);
        return;
    }
    const int64_t B = s.B, T = s.T, H = s.H, D = s.D;
    const Desc& full = g.virt(CUDNN_DATA_BFLOAT16, {B, H, T, D}, {H * T * D, T * D, D, 1});
    g.matmul(a, x, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// Backward (flash style, P recomputed from the stats):
//   Dsum = rowsum(dO * O); P = exp(mask(Q K^T * scale - stats)); dV = P^T dO;
//   dS = P * (dO V^T - Dsum) * scale; dK = dS^T Q; dQ = dS K (fp32 accumulator, then bf16).
// With Hkv < H, dK and dV come per query head and are summed over each KV head's group by a reduction.
// deterministic: dQ = dS K written straight to dq, without the fp32 accumulator: the graph of NVIDIA's
// frontend for set_deterministic_algorithm(true) on Hopper, whose engine stages the scores' gradients in its
// workspace (B x H x T x T bf16) and forms dQ from them instead of adding each key block's terms into the
// accumulator with atomics in their order of arrival. One plan (the heuristic's first, as build_forward).
BuiltPlan build_backward(cudnnHandle_t handle, const AttnShape& s, bool deterministic) {
    BuiltPlan r{std::make_unique<GraphBuilder>(handle), Desc(), 0};
    GraphBuilder& g = *r.graph;
    const int64_t B = s.B, T = s.T, H = s.H, Hk = s.Hkv, D = s.D;
    const Dims sdim{B, H, T, T}, sstr{H * T * T, T * T, T, 1};
    const Dims tstr{H * T * T, T * T, 1, T};  // strides of the transposed view of the scores
    const Dims rdim{B, H, T, 1}, rstr{H * T, T, 1, 1};
    // q, k, v and their gradients may be columns of a fused QKV row (ld_qkv); o and d_o are packed
    const Dims qstr = bshd_strides(s, q_ld(s)), kstr = bshd_strides(s, kv_ld(s)),
               ostr = bshd_strides(s, o_ld(s));
    const Desc& q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, {B, H, T, D}, qstr, false);
    const Desc& kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, {B, Hk, D, T}, transposed(kstr), false);
    const Desc& vt = g.tensor(kV, CUDNN_DATA_BFLOAT16, {B, Hk, D, T}, transposed(kstr), false);
    const Desc& o = g.tensor(kO, CUDNN_DATA_BFLOAT16, {B, H, T, D}, ostr, false);
    const Desc& d_o = g.tensor(kDO, CUDNN_DATA_BFLOAT16, {B, H, T, D}, ostr, false);
    const Desc& stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rdim, rstr, false);
    const Desc& dq = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, {B, H, T, D}, qstr, false);
    const Desc& dk = g.tensor(kDK, CUDNN_DATA_BFLOAT16, {B, Hk, T, D}, kstr, false);
    const Desc& dv = g.tensor(kDV, CUDNN_DATA_BFLOAT16, {B, Hk, T, D}, kstr, false);
    const Desc& scale = g.scalar(kScale);
    const Desc& one = g.scalar(kOne);

    // Dsum (b, h, s, 1), kept in ws.dvec
    const Desc& dOo = g.virt(CUDNN_DATA_FLOAT, {B, H, T, D}, {H * T * D, T * D, H * D, 1});
    g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, d_o, dOo, &o);
    const Desc& dsum0 = g.virt(CUDNN_DATA_FLOAT, rdim, rstr);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOo, dsum0);
    const Desc& dsum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, rdim, rstr, false);
    g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dsum0, dsum, &one);

    // P recomputed
    const Desc& s0 = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.matmul(q, kt, s0);
    const Desc& s1 = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s0, s1, &scale);
    const Desc& s2 = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s1, s2, &stats);
    const Desc& s3 = causal_mask(g, s2, sdim, sstr);
    const Desc& p = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, s3, p);

    // dV = P^T dO
    const Desc& pt = g.virt(CUDNN_DATA_BFLOAT16, {B, H, T, T}, tstr);
    g.reshape(p, pt);
    grouped_matmul(g, s, pt, d_o, dv);

    // dS = P * (dO V^T - Dsum) * scale
    const Desc& dp = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.matmul(d_o, vt, dp);
    const Desc& dp1 = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, dp1, &dsum);
    const Desc& dp2 = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp1, dp2, &p);
    const Desc& ds = g.virt(CUDNN_DATA_FLOAT, sdim, sstr);
    g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp2, ds, &scale);

    // dK = dS^T Q
    const Desc& dst = g.virt(CUDNN_DATA_BFLOAT16, {B, H, T, T}, tstr);
    g.reshape(ds, dst);
    grouped_matmul(g, s, dst, q, dk);

    // dQ = dS K through the fp32 accumulator (ws.dq_acc, (b, h, s, d) contiguous), or straight to dq
    const Desc& k = g.virt(CUDNN_DATA_BFLOAT16, {B, Hk, T, D}, kstr);
    g.reshape(kt, k);
    if (deterministic) {
        g.matmul(ds, k, dq);
    } else {
        const Desc& dq_acc =
            g.tensor(kDQAccum, CUDNN_DATA_FLOAT, {B, H, T, D}, {H * T * D, T * D, D, 1}, false);
        g.matmul(ds, k, dq_acc);
        g.pointwise(CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, dq_acc, dq);
    }
    take_plans(r, g.plans("attention backward graph", deterministic ? 1 : max_plans(), deterministic));
    return r;
}

// The value of masked scores: -inf from cuDNN 9.10 on, the lowest finite float before (as NVIDIA's frontend).
float masked_score() {
    return api().lib.version >= 91000 ? -std::numeric_limits<float>::infinity()
                                      : std::numeric_limits<float>::lowest();
}

// The tensors each direction binds, in the order of the pointer lists given to execute().
const std::vector<int64_t> kForwardUids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
const std::vector<int64_t> kInferUids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};  // S == T
const std::vector<int64_t> kInferShiftedUids = {kQ,     kK,      kV,     kO,   kStats,
                                                kScale, kNegInf, kSeqKv, kSeqQ};  // S > T
const std::vector<int64_t> kBackwardUids = {kQ,  kK,  kV,     kO,   kDO,     kStats,      kDQ,
                                            kDK, kDV, kScale, kOne, kNegInf, kSoftmaxSum, kDQAccum};
// the deterministic graph binds no dQ accumulator (the same list less its last entry)
const std::vector<int64_t> kBackwardDetUids(kBackwardUids.begin(), kBackwardUids.end() - 1);

void execute(cudnnHandle_t handle, const Desc& plan, const std::vector<int64_t>& uids,
             std::vector<void*> ptrs, void* workspace, const char* what) {
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
        .finalize("variant pack");
    CUDNN_CALL(api().execute(handle, plan.get(), pack.get()), what);
}

}  // namespace

const CudnnLibrary& cudnn_library() {
    return api().lib;
}

struct CudnnAttention::Impl {
    struct Plans {
        bool ok = false;
        std::string why;
        BuiltPlan fwd, bwd;
    };
    struct InferPlan {
        bool ok = false;
        std::string why;
        BuiltPlan fwd;
    };
    bool deterministic = false;  // CudnnAttention's constructor
    cudnnHandle_t handle = nullptr;
    std::map<std::tuple<int, int, int, int, int, int>, Plans> plans;
    std::map<std::array<int, 8>, InferPlan> infer_plans;
    std::string reason;
    void* workspace = nullptr;
    size_t workspace_size = 0;
    float* infer_stats = nullptr;  // (B, H, T) statistics of the inference graph, written and never read
    size_t infer_stats_count = 0;

    ~Impl() {
        if (workspace) cudaFree(workspace);
        if (infer_stats) cudaFree(infer_stats);
        plans.clear();  // descriptors before the handle
        infer_plans.clear();
        if (handle) api().destroy(handle);
    }
    Plans& get(const AttnShape& s) {
        auto key = std::make_tuple(s.B, s.T, s.H, s.Hkv, s.D, s.ld_qkv);
        auto it = plans.find(key);
        if (it != plans.end()) return it->second;
        Plans& p = plans[key];
        try {
            if (!api().lib.loaded) throw Error(api().lib.why);
            if (s.H % s.Hkv != 0) throw Error("H must be a multiple of Hkv");
            if (s.ld_qkv != 0 && s.ld_qkv < int64_t(s.H + 2 * s.Hkv) * s.D)
                throw Error("ld_qkv " + std::to_string(s.ld_qkv) + " is narrower than a fused q|k|v row");
            if (!handle) CUDNN_CALL(api().create(&handle), "cudnnCreate");
            p.fwd = build_forward(handle, s, deterministic);
            p.bwd = build_backward(handle, s, deterministic);
            tune(s, p);
            reserve(size_t(std::max(p.fwd.workspace, p.bwd.workspace)));
            p.ok = true;
        } catch (const std::exception& e) {
            p.ok = false;
            p.why = e.what();
        }
        return p;
    }
    // With more than one finalized engine for a direction: times each (1 + 3 runs, CUDA events) on zeroed
    // scratch tensors of the shape and keeps the fastest. cuDNN's heuristic order is not always the fastest
    // order at our shapes (d 64, fused q|k|v strides).
    void tune(const AttnShape& s, Plans& p) {
        if (p.fwd.others.empty() && p.bwd.others.empty()) return;
        const size_t B = size_t(s.B), T = size_t(s.T), H = size_t(s.H), Hk = size_t(s.Hkv), D = size_t(s.D);
        const size_t qkv = s.ld_qkv ? B * T * size_t(s.ld_qkv) : B * T * (H + 2 * Hk) * D;  // elements
        const size_t ohd = B * T * H * D, rows = B * H * T;
        // every tensor 256-byte aligned, as the caller's are (an engine may use 16-byte vector accesses)
        auto al = [](size_t b) { return (b + 255) / 256 * 256; };
        const size_t off_dq = al(qkv * 2), off_o = off_dq + al(qkv * 2), off_do = off_o + al(ohd * 2),
                     off_st = off_do + al(ohd * 2), off_dv = off_st + al(rows * 4),
                     off_acc = off_dv + al(rows * 4), bytes = off_acc + al(ohd * 4);
        int64_t ws = 0;
        for (const BuiltPlan* b : {&p.fwd, &p.bwd}) {
            ws = std::max(ws, b->workspace);
            for (const auto& o : b->others) ws = std::max(ws, o.second);
        }
        reserve(size_t(ws));
        char* base = nullptr;
        CUDA_CHECK(cudaMalloc(&base, bytes));
        CUDA_CHECK(cudaMemset(base, 0, bytes));
        auto* q = reinterpret_cast<__nv_bfloat16*>(base);
        auto* dq = reinterpret_cast<__nv_bfloat16*>(base + off_dq);
        auto* o = reinterpret_cast<__nv_bfloat16*>(base + off_o);
        auto* d_o = reinterpret_cast<__nv_bfloat16*>(base + off_do);
        auto* stats = reinterpret_cast<float*>(base + off_st);
        auto* dvec = reinterpret_cast<float*>(base + off_dv);
        auto* dq_acc = reinterpret_cast<float*>(base + off_acc);
        const size_t k_off = s.ld_qkv ? H * D : B * T * H * D,
                     v_off = k_off + (s.ld_qkv ? Hk * D : B * T * Hk * D);
        cudaStream_t st = nullptr;
        cudaEvent_t e0 = nullptr, e1 = nullptr;
        CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CUDNN_CALL(api().set_stream(handle, st), "cudnnSetStream");
        float scale = 0.125f, neg_inf = masked_score(), one = 1.f;
        auto run = [&](const Desc& plan, bool fwd) {
            if (fwd)
                execute(handle, plan, kForwardUids, {q, q + k_off, q + v_off, o, stats, &scale, &neg_inf},
                        workspace, "attention forward (tuning)");
            else  // (never deterministic: its graphs keep one plan, so no timing)
                execute(handle, plan, kBackwardUids,
                        {q, q + k_off, q + v_off, o, d_o, stats, dq, dq + k_off, dq + v_off, &scale, &one,
                         &neg_inf, dvec, dq_acc},
                        workspace, "attention backward (tuning)");
        };
        auto time = [&](const Desc& plan, bool fwd) -> float {
            try {
                run(plan, fwd);
                CUDA_CHECK(cudaEventRecord(e0, st));
                for (int i = 0; i < 3; ++i) run(plan, fwd);
                CUDA_CHECK(cudaEventRecord(e1, st));
                CUDA_CHECK(cudaEventSynchronize(e1));
                float ms = 0;
                CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
                return ms / 3;
            } catch (const std::exception&) {
                (void)cudaStreamSynchronize(st);
                (void)cudaGetLastError();
                return std::numeric_limits<float>::infinity();
            }
        };
        const bool log = log_enabled();
        for (int dir = 0; dir < 2; ++dir) {
            BuiltPlan& b = dir == 0 ? p.fwd : p.bwd;
            if (b.others.empty()) continue;
            std::string line;
            float best = time(b.plan, dir == 0);
            line += " " + std::to_string(best * 1000.0f);
            size_t pick = 0;
            for (size_t i = 0; i < b.others.size(); ++i) {
                const float t = time(b.others[i].first, dir == 0);
                line += " " + std::to_string(t * 1000.0f);
                if (t < best) best = t, pick = i + 1;
            }
            if (pick > 0) {  // swap the winner in
                std::swap(b.plan, b.others[pick - 1].first);
                std::swap(b.workspace, b.others[pick - 1].second);
            }
            if (log)
                std::fprintf(stderr, "[hydra cudnn] %s B%d T%d H%d/%d D%d ld %d: engine %zu of %zu, us:%s\n",
                             dir == 0 ? "fwd" : "bwd", s.B, s.T, s.H, s.Hkv, s.D, s.ld_qkv, pick,
                             b.others.size() + 1, line.c_str());
        }
        (void)cudaStreamSynchronize(st);
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
        CUDA_CHECK(cudaStreamDestroy(st));
        CUDA_CHECK(cudaFree(base));
    }
    // HYDRA_CUDNN_LOG=1: each shape's plan building, tuning and engine choice on stderr
    static bool log_enabled() {
        static const bool on = [] {
            const char* e = std::getenv("HYDRA_CUDNN_LOG");
            return e && std::string(e) != "0";
        }();
        return on;
    }
    static bool shifted_allowed() {
        const char* e = std::getenv("HYDRA_CUDNN_SHIFTED");
        return e && std::string(e) == "1";
    }
    void reserve_stats(size_t count) {
        if (count <= infer_stats_count) return;
        if (infer_stats) CUDA_CHECK(cudaFree(infer_stats));
        infer_stats = nullptr;
        CUDA_CHECK(cudaMalloc(&infer_stats, count * sizeof(float)));
        infer_stats_count = count;
    }
    void reserve(size_t bytes) {
        if (bytes <= workspace_size) return;
        if (workspace) CUDA_CHECK(cudaFree(workspace));
        workspace = nullptr;
        CUDA_CHECK(cudaMalloc(&workspace, bytes));
        workspace_size = bytes;
    }
    Plans& ready(const AttnShape& s) {
        Plans& p = get(s);
        if (!p.ok) throw Error("cuDNN attention unavailable for this shape: " + p.why);
        return p;
    }

    // ---- inference (forward only, no stats, S >= T keys) ----
    static std::array<int, 8> key(const AttnInferShape& s) {
        return {s.B, s.T, s.S, s.H, s.Hkv, s.D, s.ld_q, s.ld_kv};
    }
    void run_inference(const Desc& plan, const AttnInferShape& s, const void* q, const void* k, const void* v,
                       void* o, float scale, const char* what) {
        float neg_inf = masked_score();
        int32_t skv = s.S, sq = s.T;
        HYDRA_ASSERT(infer_stats_count >= size_t(s.B) * s.H * s.T,
                     "inference statistics scratch not reserved");
        if (s.S == s.T)
            execute(handle, plan, kInferUids,
                    {(void*)q, (void*)k, (void*)v, o, infer_stats, &scale, &neg_inf}, workspace, what);
        else
            execute(handle, plan, kInferShiftedUids,
                    {(void*)q, (void*)k, (void*)v, o, infer_stats, &scale, &neg_inf, &skv, &sq}, workspace,
                    what);
    }
    InferPlan& get_inference(const AttnInferShape& s) {
        auto it = infer_plans.find(key(s));
        if (it != infer_plans.end()) return it->second;
        // a long-running server sees many (T, S) pairs (chunks of long prompts): start over rather than hoard
        // plans; a plan may be destroyed only once no launch of it is pending
        if (infer_plans.size() >= 256) {
            CUDA_CHECK(cudaDeviceSynchronize());
            infer_plans.clear();
        }
        InferPlan& p = infer_plans[key(s)];
        try {
            if (!api().lib.loaded) throw Error(api().lib.why);
            if (s.B < 1 || s.T < 1 || s.S < s.T || s.H < 1 || s.Hkv < 1)
                throw Error("attention inference shape B" + std::to_string(s.B) + " T" + std::to_string(s.T) +
                            " S" + std::to_string(s.S) + ": needs B, T >= 1 and S >= T");
            if (s.H % s.Hkv != 0) throw Error("H must be a multiple of Hkv");
            if (s.ld_q != 0 && s.ld_q < s.H * s.D) throw Error("ld_q is narrower than a q row");
            if (s.ld_kv != 0 && s.ld_kv < s.Hkv * s.D) throw Error("ld_kv is narrower than a k / v row");
            // the bottom-right mask (S > T) needs cuDNN 8.9.6 or later (NVIDIA's frontend): every 9.x has it
            // The shifted (bottom-right) mask: on cuDNN 9.19 an engine of that graph faulted with an illegal
            // address while being tuned, which poisons the CUDA context; our own kernels serve S > T unless
            // HYDRA_CUDNN_SHIFTED=1 asks for it.
            if (s.S != s.T && !shifted_allowed())
                throw Error("the shifted causal mask (S > T) is off (HYDRA_CUDNN_SHIFTED=1 turns it on)");
            if (!handle) CUDNN_CALL(api().create(&handle), "cudnnCreate");
            const auto t0 = std::chrono::steady_clock::now();
            // a new prompt length pays its plan once (the first request's time to first token)
            p.fwd = build_forward(handle, s);
            reserve_stats(size_t(s.B) * s.H * s.T);
            reserve(size_t(p.fwd.workspace));
            p.ok = true;
            if (log_enabled())
                std::fprintf(
                    stderr, "[hydra cudnn] inference B%d T%d S%d H%d/%d: plan in %.1f ms\n", s.B, s.T, s.S,
                    s.H, s.Hkv,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        } catch (const std::exception& e) {
            p.ok = false;
            p.why = e.what();
        }
        return p;
    }
};

CudnnAttention::CudnnAttention(bool deterministic) : impl_(std::make_unique<Impl>()) {
    impl_->deterministic = deterministic;
}
CudnnAttention::~CudnnAttention() = default;

bool CudnnAttention::supports(const AttnShape& s) {
    auto& p = impl_->get(s);
    impl_->reason = p.why;
    return p.ok;
}
const std::string& CudnnAttention::reason() const {
    return impl_->reason;
}
size_t CudnnAttention::workspace_bytes() const {
    return impl_->workspace_size;
}

void CudnnAttention::forward(const AttnShape& s, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, __nv_bfloat16* o, float* stats, float scale,
                             cudaStream_t stream) {
    auto& p = impl_->ready(s);
    CUDNN_CALL(api().set_stream(impl_->handle, stream), "cudnnSetStream");
    float neg_inf = masked_score();
    execute(impl_->handle, p.fwd.plan, kForwardUids,
            {(void*)q, (void*)k, (void*)v, (void*)o, (void*)stats, &scale, &neg_inf}, impl_->workspace,
            "attention forward");
}

bool CudnnAttention::supports_inference(const AttnInferShape& s) {
    auto& p = impl_->get_inference(s);
    impl_->reason = p.why;
    return p.ok;
}

void CudnnAttention::forward_inference(const AttnInferShape& s, const __nv_bfloat16* q,
                                       const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                                       float scale, cudaStream_t stream) {
    auto& p = impl_->get_inference(s);
    if (!p.ok) throw Error("cuDNN attention inference unavailable for this shape: " + p.why);
    CUDNN_CALL(api().set_stream(impl_->handle, stream), "cudnnSetStream");
    impl_->run_inference(p.fwd.plan, s, q, k, v, o, scale, "attention inference");
}

void CudnnAttention::backward(const AttnShape& s, const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const __nv_bfloat16* o, const float* stats,
                              const __nv_bfloat16* d_o, __nv_bfloat16* dq, __nv_bfloat16* dk,
                              __nv_bfloat16* dv, float scale, AttnWorkspace& ws, cudaStream_t stream) {
    auto& p = impl_->ready(s);
    HYDRA_CHECK(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.D == s.D,
                "attention workspace sized for another shape");
    CUDNN_CALL(api().set_stream(impl_->handle, stream), "cudnnSetStream");
    float neg_inf = masked_score();
    float one = 1.f;
    if (impl_->deterministic) {
        execute(impl_->handle, p.bwd.plan, kBackwardDetUids,
                {(void*)q, (void*)k, (void*)v, (void*)o, (void*)d_o, (void*)stats, (void*)dq, (void*)dk,
                 (void*)dv, &scale, &one, &neg_inf, (void*)ws.dvec},
                impl_->workspace, "attention backward");
        return;
    }
    // before cuDNN 9.6 the engine expects a zeroed dQ accumulator
    if (api().lib.version < 90600)
        CUDA_CHECK(cudaMemsetAsync(ws.dq_acc, 0, size_t(s.B) * s.T * s.H * s.D * sizeof(float), stream));
    execute(impl_->handle, p.bwd.plan, kBackwardUids,
            {(void*)q, (void*)k, (void*)v, (void*)o, (void*)d_o, (void*)stats, (void*)dq, (void*)dk,
             (void*)dv, &scale, &one, &neg_inf, (void*)ws.dvec, (void*)ws.dq_acc},
            impl_->workspace, "attention backward");
}

#else  // no cuDNN headers at build time

const CudnnLibrary& cudnn_library() {
    static const CudnnLibrary lib{false, 0, "built without the cuDNN headers"};
    return lib;
}
struct CudnnAttention::Impl {
    std::string reason = "built without the cuDNN headers";
};
CudnnAttention::CudnnAttention(bool) : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::supports(const AttnShape&) {
    return false;
}
const std::string& CudnnAttention::reason() const {
    return impl_->reason;
}
size_t CudnnAttention::workspace_bytes() const {
    return 0;
}
void CudnnAttention::forward(const AttnShape&, const __nv_bfloat16*, const __nv_bfloat16*,
                             const __nv_bfloat16*, __nv_bfloat16*, float*, float, cudaStream_t) {
    throw Error("cuDNN attention: " + impl_->reason);
}
bool CudnnAttention::supports_inference(const AttnInferShape&) {
    return false;
}
void CudnnAttention::forward_inference(const AttnInferShape&, const __nv_bfloat16*, const __nv_bfloat16*,
                                       const __nv_bfloat16*, __nv_bfloat16*, float, cudaStream_t) {
    throw Error("cuDNN attention: " + impl_->reason);
}
void CudnnAttention::backward(const AttnShape&, const __nv_bfloat16*, const __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const float*, const __nv_bfloat16*,
                              __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, float, AttnWorkspace&,
                              cudaStream_t) {
    throw Error("cuDNN attention: " + impl_->reason);
}

#endif

}  // namespace hydra::cuda
