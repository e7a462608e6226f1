// cuBLAS bf16 GEMMs (fp32 compute) through cuBLASLt with per-shape tuned algorithms, and the HF-layout
// linear layer on them (see gemm.h for the row-major <-> column-major mapping and the tuning).
#include "ops/cuda/gemm.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/row_gemv.h"

namespace hydra::cuda {

namespace {

bool env_flag(const char* name, bool fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    return std::strcmp(v, "0") != 0;
}

// Largest power of two (<= 256) dividing the address: cuBLASLt's algorithms need their operands'
// alignment declared, and an algorithm found for 256-byte aligned pointers may not run on 2-byte ones.
uint32_t alignment_of(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al >>= 1;
    return al;
}

}  // namespace

// One cuBLASLt plan: descriptors (owned) and the chosen algorithm.
struct GemmPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // a = our B, b = our A (column-major view)
    cublasLtMatmulAlgo_t algo{};
    bool lt_ok = false;  // false: cuBLASLt has no algorithm, use cublasGemmEx
    bool tuned = false;  // false: the heuristic's first choice (set while capturing a graph or untuned)
    GemmPlan() = default;
    GemmPlan(const GemmPlan&) = delete;
    GemmPlan& operator=(const GemmPlan&) = delete;
    ~GemmPlan() {
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

struct BlasContext::Plans {
    // ta, tb, M, N, K, lda, ldb, ldc, stride a/b/c, batch, C dtype, beta != 0, C is D, alignments A/B/C/D
    using Key = std::array<int64_t, 19>;
    std::map<Key, std::unique_ptr<GemmPlan>> by_key;
    bool tune = env_flag("HYDRA_GEMM_TUNE", true);
    bool log = env_flag("HYDRA_GEMM_LOG", false);
};

BlasContext::BlasContext(cudaStream_t stream, size_t workspace_bytes)
    : stream_(stream), workspace_bytes_(workspace_bytes), plans_(std::make_unique<Plans>()) {
    CUBLAS_CHECK(cublasCreate(&handle_));
    CUBLAS_CHECK(cublasLtCreate(&lt_));
    CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    // Pointer mode host (alpha/beta from the host), default math (bf16 inputs go to tensor cores).
    CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    if (workspace_bytes_ > 0) {
        CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
        CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes_));
    }
}

BlasContext::~BlasContext() {
    plans_.reset();  // descriptors before the handles
    if (lt_) cublasLtDestroy(lt_);
    if (handle_) cublasDestroy(handle_);
    if (workspace_) cudaFree(workspace_);
}

void BlasContext::set_stream(cudaStream_t stream) {
    stream_ = stream;
    CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    // setting the stream resets cuBLAS's workspace to its default one: install ours again
    if (workspace_) CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes_));
}

namespace {

void check_dims(const char* what, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                int64_t ldc, int64_t batch) {
    HYDRA_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0,
                "{}: negative dimension (M={}, N={}, K={}, batch={})", what, M, N, K, batch);
    HYDRA_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && batch <= INT_MAX && lda <= INT_MAX &&
                    ldb <= INT_MAX && ldc <= INT_MAX,
                "{}: dimension beyond cuBLAS's int range (M={}, N={}, K={}, lda={}, ldb={}, ldc={})", what, M,
                N, K, lda, ldb, ldc);
    // row-major: A is (M, K) or, transposed, stored (K, M); B is (K, N) or stored (N, K)
    const int64_t a_row = ta ? M : K, b_row = tb ? K : N;
    HYDRA_CHECK(lda >= std::max<int64_t>(a_row, 1) && ldb >= std::max<int64_t>(b_row, 1) &&
                    ldc >= std::max<int64_t>(N, 1),
                "{}: leading dimension too small (lda={} < {}, ldb={} < {} or ldc={} < {})", what, lda, a_row,
                ldb, b_row, ldc, N);
}

struct GemmArgs {
    bool ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const bf16 *A, *B;
    int64_t lda, ldb, sa, sb;
    const void* C;
    void* D;
    cudaDataType_t ctype;
    int64_t ldc, sc, batch;
};

size_t elem_bytes(cudaDataType_t t) {
    return t == CUDA_R_32F ? 4 : 2;
}

// The elements of D one call touches (last batch's last row end).
int64_t d_span(const GemmArgs& g) {
    return (g.batch - 1) * g.sc + (g.M - 1) * g.ldc + g.N;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld));
    if (batch > 1) {
        const int32_t n = int32_t(batch);
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof(n)));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                      sizeof(stride)));
    }
    return l;
}

cublasStatus_t run_lt(BlasContext& ctx, const GemmPlan& p, const GemmArgs& g, void* D,
                      const cublasLtMatmulAlgo_t& algo) {
    // column-major: D^T (N, M) = op(B)^T @ op(A)^T (+ beta C^T)
    return cublasLtMatmul(ctx.lt(), p.op, &g.alpha, g.B, p.a, g.A, p.b, &g.beta, g.C, p.c, D, p.c, &algo,
                          ctx.workspace(), ctx.workspace_bytes(), ctx.stream());
}

void run_legacy(BlasContext& ctx, const GemmArgs& g) {
    const cublasOperation_t opB = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opA = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (g.C != g.D && g.beta != 0.0f) {  // cublasGemmEx updates in place: D = C first
        const size_t eb = elem_bytes(g.ctype);
        for (int64_t b = 0; b < g.batch; ++b)
            CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(g.D) + size_t(b * g.sc) * eb, size_t(g.ldc) * eb,
                                         static_cast<const char*>(g.C) + size_t(b * g.sc) * eb,
                                         size_t(g.ldc) * eb, size_t(g.N) * eb, size_t(g.M),
                                         cudaMemcpyDeviceToDevice, ctx.stream()));
    }
    if (g.batch == 1) {
        CUBLAS_CHECK(cublasGemmEx(ctx.handle(), opB, opA, int(g.N), int(g.M), int(g.K), &g.alpha, g.B,
                                  CUDA_R_16BF, int(g.ldb), g.A, CUDA_R_16BF, int(g.lda), &g.beta, g.D,
                                  g.ctype, int(g.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            ctx.handle(), opB, opA, int(g.N), int(g.M), int(g.K), &g.alpha, g.B, CUDA_R_16BF, int(g.ldb),
            g.sb, g.A, CUDA_R_16BF, int(g.lda), g.sa, &g.beta, g.D, g.ctype, int(g.ldc), g.sc, int(g.batch),
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

bool capturing(cudaStream_t s) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(s, &st));
    return st != cudaStreamCaptureStatusNone;
}

// Times each heuristic candidate (1 warm-up + 3 runs) writing D or a scratch copy; returns the fastest.
// Candidates that fail to launch are skipped; falls back to the first one.
int tune(BlasContext& ctx, const GemmPlan& p, const GemmArgs& g,
         const std::vector<cublasLtMatmulHeuristicResult_t>& r, std::vector<float>& ms) {
    void* out = g.D;
    void* scratch = nullptr;
    if (g.beta != 0.0f) {  // the real D must not see the timing runs' accumulations: time into a scratch D
        const size_t bytes = size_t(d_span(g)) * elem_bytes(g.ctype);
        if (cudaMalloc(&scratch, bytes) != cudaSuccess) {
            (void)cudaGetLastError();  // out of memory: keep the heuristic's choice
            return 0;
        }
        out = scratch;
    }
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    ms.assign(r.size(), -1.0f);
    int best = -1;
    for (size_t i = 0; i < r.size(); ++i) {
        if (run_lt(ctx, p, g, out, r[i].algo) != CUBLAS_STATUS_SUCCESS) continue;
        CUDA_CHECK(cudaEventRecord(e0, ctx.stream()));
        bool ok = true;
        for (int k = 0; k < 3 && ok; ++k) ok = run_lt(ctx, p, g, out, r[i].algo) == CUBLAS_STATUS_SUCCESS;
        CUDA_CHECK(cudaEventRecord(e1, ctx.stream()));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (!ok) continue;
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms[i] = t / 3;
        if (best < 0 || ms[i] < ms[size_t(best)]) best = int(i);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    if (scratch) CUDA_CHECK(cudaFree(scratch));
    return best < 0 ? 0 : best;
}

GemmPlan& plan_for(BlasContext& ctx, const GemmArgs& g) {
    BlasContext::Plans& plans = ctx.plans();
    const BlasContext::Plans::Key key{g.ta,
                                      g.tb,
                                      g.M,
                                      g.N,
                                      g.K,
                                      g.lda,
                                      g.ldb,
                                      g.ldc,
                                      g.sa,
                                      g.sb,
                                      g.sc,
                                      g.batch,
                                      int64_t(g.ctype),
                                      g.beta != 0.0f,
                                      g.C == g.D,
                                      alignment_of(g.A),
                                      alignment_of(g.B),
                                      alignment_of(g.C),
                                      alignment_of(g.D)};
    auto& slot = plans.by_key[key];
    if (!slot) {
        slot = std::make_unique<GemmPlan>();
        GemmPlan& p = *slot;
        const cublasOperation_t opB = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t opA = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
        // stored column-major shapes: op(B)^T is (N, K), stored (N, K) or (K, N); op(A)^T (K, M) likewise
        p.a = g.tb ? make_layout(CUDA_R_16BF, g.K, g.N, g.ldb, g.batch, g.sb)
                   : make_layout(CUDA_R_16BF, g.N, g.K, g.ldb, g.batch, g.sb);
        p.b = g.ta ? make_layout(CUDA_R_16BF, g.M, g.K, g.lda, g.batch, g.sa)
                   : make_layout(CUDA_R_16BF, g.K, g.M, g.lda, g.batch, g.sa);
        p.c = make_layout(g.ctype, g.N, g.M, g.ldc, g.batch, g.sc);
    }
    GemmPlan& p = *slot;
    if (p.tuned) return p;  // the common case: no stream query on the hot path
    const bool can_tune = plans.tune && !capturing(ctx.stream());
    if (p.lt_ok && !can_tune) return p;
    // ask the heuristic (again, when an untuned plan made while capturing may now be timed)
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ctx.workspace_bytes();
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                      sizeof(ws)));
    const uint32_t al[4] = {alignment_of(g.B), alignment_of(g.A), alignment_of(g.C), alignment_of(g.D)};
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof(al[i])));
    std::vector<cublasLtMatmulHeuristicResult_t> res(8);
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), p.op, p.a, p.b, p.c, p.c, pref,
                                                             int(res.size()), res.data(), &found);
    cublasLtMatmulPreferenceDestroy(pref);
    res.resize(size_t(hs == CUBLAS_STATUS_SUCCESS ? std::max(found, 0) : 0));
    res.erase(std::remove_if(
                  res.begin(), res.end(),
                  [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; }),
              res.end());
    if (res.empty()) {  // no cuBLASLt algorithm: cublasGemmEx from now on
        p.lt_ok = false;
        p.tuned = true;
        return p;
    }
    int pick = 0;
    std::vector<float> ms;
    if (can_tune && res.size() > 1) pick = tune(ctx, p, g, res, ms);
    p.algo = res[size_t(pick)].algo;
    p.lt_ok = true;
    p.tuned = can_tune;
    if (plans.log && can_tune) {
        std::string t;
        for (float v : ms) t += " " + (v < 0 ? std::string("-") : std::to_string(v * 1000.0f).substr(0, 6));
        std::fprintf(stderr,
                     "[hydra gemm] %c%c M=%ld N=%ld K=%ld batch=%ld %s beta=%g: algo %d of %zu, us:%s\n",
                     g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', long(g.M), long(g.N), long(g.K), long(g.batch),
                     g.ctype == CUDA_R_32F ? "f32" : "bf16", double(g.beta), pick, res.size(), t.c_str());
    }
    return p;
}

void gemm_impl(BlasContext& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, int64_t sa, const bf16* B, int64_t ldb, int64_t sb, float beta,
               const void* C, void* D, cudaDataType_t ctype, int64_t ldc, int64_t sc, int64_t batch,
               const char* what) {
    check_dims(what, ta, tb, M, N, K, lda, ldb, ldc, batch);
    if (M == 0 || N == 0 || batch == 0) return;
    const GemmArgs g{ta, tb, M, N, K, alpha, beta, A, B, lda, ldb, sa, sb, C, D, ctype, ldc, sc, batch};
    if (K == 0) {  // D = beta * C: cublasGemmEx handles K == 0, cuBLASLt need not
        run_legacy(ctx, g);
        return;
    }
    if (row_gemv_applies(ta, tb, M, K, batch, A, lda, B, ldb)) {  // decode's few rows (row_gemv.h)
        row_gemv(ctx.stream(), M, N, K, alpha, A, lda, B, ldb, beta, C, D, ldc, ctype);
        return;
    }
    const GemmPlan& p = plan_for(ctx, g);
    if (!p.lt_ok) {
        run_legacy(ctx, g);
        return;
    }
    CUBLAS_CHECK(run_lt(ctx, p, g, D, p.algo));
}

}  // namespace

void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, C, CUDA_R_32F, ldc, 0, 1,
              "gemm_bf16");
}

void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, C, CUDA_R_16BF, ldc, 0, 1,
              "gemm_bf16");
}

void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, const float* C, float* D,
               int64_t ldc) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, D, CUDA_R_32F, ldc, 0, 1,
              "gemm_bf16");
}

void gemm_bf16_batched(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const bf16* A, int64_t lda, int64_t stride_a, const bf16* B, int64_t ldb,
                       int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, C,
              CUDA_R_32F, ldc, stride_c, batch, "gemm_bf16_batched");
}

void gemm_bf16_batched(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const bf16* A, int64_t lda, int64_t stride_a, const bf16* B, int64_t ldb,
                       int64_t stride_b, float beta, bf16* C, int64_t ldc, int64_t stride_c, int64_t batch) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, C,
              CUDA_R_16BF, ldc, stride_c, batch, "gemm_bf16_batched");
}

// ---- linear ------------------------------------------------------------------------------------------

void linear_forward(BlasContext& ctx, const bf16* X, const bf16* W, int64_t N, int64_t in, int64_t out,
                    bf16* Y) {
    // Y (N, out) = X (N, in) @ W^T, W stored (out, in)
    gemm_bf16(ctx, false, true, N, out, in, 1.0f, X, in, W, in, 0.0f, Y, out);
}

void linear_forward(BlasContext& ctx, const bf16* X, const bf16* W, int64_t N, int64_t in, int64_t out,
                    float* Y, float beta) {
    gemm_bf16(ctx, false, true, N, out, in, 1.0f, X, in, W, in, beta, Y, out);
}

void linear_backward_dx(BlasContext& ctx, const bf16* dY, const bf16* W, int64_t N, int64_t in, int64_t out,
                        bf16* dX) {
    // dX (N, in) = dY (N, out) @ W (out, in)
    gemm_bf16(ctx, false, false, N, in, out, 1.0f, dY, out, W, in, 0.0f, dX, in);
}

void linear_backward_dx(BlasContext& ctx, const bf16* dY, const bf16* W, int64_t N, int64_t in, int64_t out,
                        float* dX, float beta) {
    gemm_bf16(ctx, false, false, N, in, out, 1.0f, dY, out, W, in, beta, dX, in);
}

void linear_backward_dw(BlasContext& ctx, const bf16* dY, const bf16* X, int64_t N, int64_t in, int64_t out,
                        float* dW) {
    // dW (out, in) += dY^T (out, N) @ X (N, in); dY stored (N, out) = transposed operand
    gemm_bf16(ctx, true, false, out, in, N, 1.0f, dY, out, X, in, 1.0f, dW, in);
}

}  // namespace hydra::cuda
