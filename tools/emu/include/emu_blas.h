// cuBLAS and cuBLASLt for the CPU emulator (tools/emu): column-major GEMMs with fp32
// accumulation, inputs and outputs in fp32 or bf16 (rounded on store), and the cuBLASLt epilogues
// this project uses (BIAS, GELU_AUX[_BIAS], DGELU, with GELU in its tanh form, and BGRADB), with C
// either D itself or another matrix of D's layout. The argument checks a real library would make
// (matrix shapes that do not agree, too-small leading dimensions, aux layout, C's layout against
// D's, pointers less aligned than declared) abort with a message instead of computing garbage.
// The checks run when a call is made; the GEMM itself is queued on the call's stream (the handle's
// stream for cuBLAS, the argument for cuBLASLt) with copies of alpha, beta and the descriptors, as
// the real libraries read them at call time.
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"

typedef enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef cudaDataType cudaDataType_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;

namespace emu {

inline float load_elem(const void* p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float*)p)[i];
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    die("emulated BLAS: unsupported data type %d", (int)t);
}
inline void store_elem(void* p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float*)p)[i] = v;
    else if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn(v);
    else die("emulated BLAS: unsupported data type %d", (int)t);
}
inline float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
inline float gelu_tanh_grad(float x) {
    const float th = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

// C(m x n, ldc) = alpha op(A) op(B) + beta C, column-major, one matrix; returns the fp32 results
// through `emit(i, j, value)` instead of storing them, so callers can apply epilogues. The operands
// are first unpacked to fp32 rows (op(A) row i, op(B) column j, both contiguous over k) so the
// inner products run at CPU speed; each sums in fp32, like the tensor cores' accumulators.
template <typename Emit>
inline void gemm_core(bool ta, bool tb, int m, int n, int k, float alpha, const void* A, cudaDataType at, long lda,
                      const void* B, cudaDataType bt, long ldb, float beta, const void* C, cudaDataType ct, long ldc,
                      Emit emit) {
    std::vector<float> a((size_t)m * k), b((size_t)n * k);
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++)
            a[(size_t)i * k + p] = load_elem(A, at, ta ? (size_t)p + (size_t)i * lda : (size_t)i + (size_t)p * lda);
    for (int j = 0; j < n; j++)
        for (int p = 0; p < k; p++)
            b[(size_t)j * k + p] = load_elem(B, bt, tb ? (size_t)j + (size_t)p * ldb : (size_t)p + (size_t)j * ldb);
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        const float* bj = &b[(size_t)j * k];
        for (int i = 0; i < m; i++) {
            const float* ai = &a[(size_t)i * k];
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int p = 0;
            for (; p + 8 <= k; p += 8)
                for (int q = 0; q < 8; q++) acc[q] += ai[p + q] * bj[p + q];
            float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; p < k; p++) sum += ai[p] * bj[p];
            float v = alpha * sum;
            if (beta != 0.0f) v += beta * load_elem(C, ct, (size_t)i + (size_t)j * ldc);
            emit(i, j, v);
        }
    }
}

inline void check_gemm_dims(const char* who, bool ta, bool tb, int m, int n, int k, long lda, long ldb, long ldc) {
    const long a_rows = ta ? k : m, b_rows = tb ? n : k;
    if (m < 0 || n < 0 || k < 0) die("%s: negative dimension m=%d n=%d k=%d", who, m, n, k);
    if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
        die("%s: leading dimension too small (m=%d n=%d k=%d lda=%ld ldb=%ld ldc=%ld ta=%d tb=%d)", who, m, n, k, lda,
            ldb, ldc, (int)ta, (int)tb);
}

}  // namespace emu

// ------------------------------------------------------------------------------------------------
// cuBLAS

struct EmuBlas { int math; cudaStream_t stream; };
typedef EmuBlas* cublasHandle_t;
inline cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = new EmuBlas{0, nullptr}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = (int)m; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
inline const char* cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "error"; }

inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType at,
                                                 int lda, long long sA, const void* B, cudaDataType bt, int ldb,
                                                 long long sB, const void* beta, void* C, cudaDataType ct, int ldc,
                                                 long long sC, int batch, cublasComputeType_t compute,
                                                 cublasGemmAlgo_t) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    emu::check_gemm_dims("cublasGemmStridedBatchedEx", ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, lda, ldb, ldc);
    const float a = *(const float*)alpha, b = *(const float*)beta;
    const size_t ea = at == CUDA_R_32F ? 4 : 2, eb = bt == CUDA_R_32F ? 4 : 2, ec = ct == CUDA_R_32F ? 4 : 2;
    emu::enqueue(h->stream, [=]() {
        for (int i = 0; i < batch; i++) {
            const char* Ai = (const char*)A + (size_t)i * sA * ea;
            const char* Bi = (const char*)B + (size_t)i * sB * eb;
            char* Ci = (char*)C + (size_t)i * sC * ec;
            emu::gemm_core(ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, a, Ai, at, lda, Bi, bt, ldb, b, Ci, ct, ldc,
                           [&](int r, int c, float v) { emu::store_elem(Ci, ct, (size_t)r + (size_t)c * ldc, v); });
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

// one GEMM: the batched one with a batch of one
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                                   cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                                      compute, algo);
}

// ------------------------------------------------------------------------------------------------
// cuBLASLt

typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
    CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,
    CUBLASLT_EPILOGUE_BGRADA = 256,
    CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

struct EmuLtDesc {
    int compute, scale, transa, transb;
    uint32_t epilogue;
    const void* bias;
    void* aux;
    int64_t aux_ld;
    int bias_type, aux_type;
};
struct EmuLtLayout { cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct EmuLtPref { size_t workspace; uint32_t align[4]; };
struct EmuLt { int dummy; };
typedef EmuLt* cublasLtHandle_t;
typedef EmuLtDesc* cublasLtMatmulDesc_t;
typedef EmuLtLayout* cublasLtMatrixLayout_t;
typedef EmuLtPref* cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new EmuLt{0}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType scale) {
    *d = new EmuLtDesc{(int)compute, (int)scale, 0, 0, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, -1, -1};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                     const void* buf, size_t size) {
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: if (size != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->transa, buf, 4); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: if (size != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->transb, buf, 4); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: if (size != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->epilogue, buf, 4); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->bias, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: if (size != 8) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux_ld, buf, 8); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: if (size != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->bias_type, buf, 4); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: if (size != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux_type, buf, 4); break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) emu::die("cublasLtMatrixLayoutCreate: ld %ld smaller than rows %lu", (long)ld, (unsigned long)rows);
    *l = new EmuLtLayout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = new EmuLtPref{0, {256, 256, 256, 256}};  // the library assumes 256-byte alignment unless told
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a, const void* buf, size_t size) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (size != 8) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->workspace, buf, 8);
    } else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        if (size != 4) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
    } else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

namespace emu {
inline bool lt_gelu(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
inline bool lt_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
// C is read (beta != 0) as a matrix of D's shape, type and leading dimension: this project passes one
// layout for both. When C is D (in place) the real library requires exactly that; out of place it
// allows another ld, which this emulator does not (it would catch a caller that mixed them up).
inline void lt_check_c(const EmuLtLayout* C, const EmuLtLayout* D, const void* c, const void* d, size_t elem) {
    if (C->type != D->type) die("cublasLtMatmul: C type %d differs from D type %d", (int)C->type, (int)D->type);
    if (C->ld != D->ld) die("cublasLtMatmul: C ld %ld differs from D ld %ld", (long)C->ld, (long)D->ld);
    if (c == d) return;
    const char *c0 = (const char*)c, *d0 = (const char*)d;
    const size_t bytes = ((size_t)(D->cols - 1) * D->ld + D->rows) * elem;
    if (c0 < d0 + bytes && d0 < c0 + bytes) die("cublasLtMatmul: C and D overlap without being the same matrix");
}
// The shape checks a matmul call must pass; m, n, k from the layouts as cuBLASLt derives them.
inline void lt_shapes(const EmuLtDesc* d, const EmuLtLayout* A, const EmuLtLayout* B, const EmuLtLayout* C,
                      const EmuLtLayout* D, int* m, int* n, int* k) {
    *m = (int)D->rows;
    *n = (int)D->cols;
    *k = (int)(d->transa ? A->rows : A->cols);
    const uint64_t a_m = d->transa ? A->cols : A->rows;
    const uint64_t b_k = d->transb ? B->cols : B->rows, b_n = d->transb ? B->rows : B->cols;
    if (a_m != D->rows || b_n != D->cols || b_k != (uint64_t)*k || C->rows != D->rows || C->cols != D->cols)
        die("cublasLtMatmul: shapes do not agree: op(A) %lux%lu, op(B) %lux%lu, C %lux%lu, D %lux%lu",
            (unsigned long)a_m, (unsigned long)*k, (unsigned long)b_k, (unsigned long)b_n, (unsigned long)C->rows,
            (unsigned long)C->cols, (unsigned long)D->rows, (unsigned long)D->cols);
    if (A->type != B->type) die("cublasLtMatmul: A and B types differ");
}
}  // namespace emu

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                                     cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                                     cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p,
                                                     int requested, cublasLtMatmulHeuristicResult_t* results, int* returned) {
    if (!h || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    int m, n, k;
    emu::lt_shapes(d, A, B, C, D, &m, &n, &k);
    *returned = 0;
    // EMU_LT_NO_GELU=1 / EMU_LT_NO_BGRAD=1 play a library without the GELU / bias-gradient epilogues,
    // EMU_LT_NO_ALGO=1 one without an algorithm for any GEMM at all, to exercise the fallbacks
    const char* no_algo = getenv("EMU_LT_NO_ALGO");
    if (no_algo && atoi(no_algo)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const char* no_gelu = getenv("EMU_LT_NO_GELU");
    const bool gelu = emu::lt_gelu(d->epilogue) || d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (gelu && no_gelu && atoi(no_gelu)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const char* no_bgrad = getenv("EMU_LT_NO_BGRAD");
    if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB && no_bgrad && atoi(no_bgrad)) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof(results[0]));
    results[0].algo.data[0] = 0xE3u;
    memcpy(&results[0].algo.data[1], p->align, sizeof(p->align));  // remembered for the alignment check
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t Al, const void* B, cublasLtMatrixLayout_t Bl, const void* beta,
                                     const void* C, cublasLtMatrixLayout_t Cl, void* D, cublasLtMatrixLayout_t Dl,
                                     const cublasLtMatmulAlgo_t* algo, void* ws, size_t ws_bytes, cudaStream_t stream) {
    if (!h || !algo || algo->data[0] != 0xE3u) return CUBLAS_STATUS_INVALID_VALUE;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    int m, n, k;
    emu::lt_shapes(d, Al, Bl, Cl, Dl, &m, &n, &k);
    // a pointer less aligned than the heuristic was told would make a real kernel fault or misread
    uint32_t align[4];
    memcpy(align, &algo->data[1], sizeof(align));
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % align[i] != 0)
            emu::die("cublasLtMatmul: matrix %c at %p is not %u-byte aligned as declared", "ABCD"[i], ptrs[i], align[i]);
    emu::lt_check_c(Cl, Dl, C, D, Dl->type == CUDA_R_32F ? 4 : 2);
    const uint32_t e = d->epilogue;
    if (emu::lt_bias(e) && !d->bias) emu::die("cublasLtMatmul: bias epilogue without a bias pointer");
    const bool gelu = emu::lt_gelu(e), dgelu = e == CUBLASLT_EPILOGUE_DGELU, bgradb = e == CUBLASLT_EPILOGUE_BGRADB;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && !emu::lt_bias(e) && !gelu && !dgelu && !bgradb)
        emu::die("cublasLtMatmul: epilogue %u not emulated", e);
    if (bgradb && !d->bias) emu::die("cublasLtMatmul: BGRADB epilogue without a bias (gradient) pointer");
    if (gelu || dgelu) {
        if (!d->aux) emu::die("cublasLtMatmul: GELU epilogue without an aux pointer");
        if (d->aux_ld < m || d->aux_ld % 8 != 0)
            emu::die("cublasLtMatmul: aux ld %ld must be >= m = %d and a multiple of 8", (long)d->aux_ld, m);
    }
    (void)ws; (void)ws_bytes;
    const cudaDataType dt = Dl->type;
    const cudaDataType bias_t = d->bias_type >= 0 ? (cudaDataType)d->bias_type : dt;
    const cudaDataType aux_t = d->aux_type >= 0 ? (cudaDataType)d->aux_type : dt;
    const float a = *(const float*)alpha, b = *(const float*)beta;
    const long ldd = Dl->ld;
    // copies: the caller may destroy or change the descriptors once the call returns
    const EmuLtDesc desc = *d;
    const EmuLtLayout la = *Al, lb = *Bl, lc = *Cl;
    emu::enqueue(stream, [=]() {
        // computed into a temporary first: D may alias C
        std::vector<float> out((size_t)m * n);
        emu::gemm_core(desc.transa != 0, desc.transb != 0, m, n, k, a, A, la.type, la.ld, B, lb.type, lb.ld, b, C,
                       lc.type, lc.ld, [&](int r, int c, float v) { out[(size_t)r + (size_t)c * m] = v; });
        // BGRADB: bias_grad(j) = sum over p < k of op(B)(p, j), in fp32 in index order, stored in the
        // bias type (by default D's, as the library stores it), overwriting
        if (bgradb) {
            for (int j = 0; j < n; j++) {
                float sum = 0.0f;
                for (int p = 0; p < k; p++)
                    sum += emu::load_elem(B, lb.type, desc.transb ? (size_t)j + (size_t)p * lb.ld : (size_t)p + (size_t)j * lb.ld);
                emu::store_elem((void*)desc.bias, bias_t, (size_t)j, sum);
            }
        }
        for (int c = 0; c < n; c++)
            for (int r = 0; r < m; r++) {
                float v = out[(size_t)r + (size_t)c * m];
                if (emu::lt_bias(e)) v += emu::load_elem(desc.bias, bias_t, r);
                if (gelu) {
                    emu::store_elem(desc.aux, aux_t, (size_t)r + (size_t)c * desc.aux_ld, v);
                    v = emu::gelu_tanh(v);
                }
                if (dgelu) v *= emu::gelu_tanh_grad(emu::load_elem(desc.aux, aux_t, (size_t)r + (size_t)c * desc.aux_ld));
                emu::store_elem(D, dt, (size_t)r + (size_t)c * ldd, v);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}
