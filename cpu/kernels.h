/*
cpu/kernels.h: GPT-2's forward and backward kernels in fp32 C with OpenMP (header only).

Used by the CPU compute (cpu/gpt2_cpu.c). Conventions, as in llm.c:
- every tensor is row-major; B batch, T time, C channels, NH heads, hs = C/NH head size,
  OC output channels, V vocabulary, Vp vocabulary padded (columns V..Vp-1 are padding);
- a weight is (OC, C), as nn.Linear stores it, so out = inp @ weight^T + bias;
- every backward ACCUMULATES (+=) into its parameter-gradient outputs and never overwrites them:
  gradients are summed over micro-steps, and the tied wte gets gradient both from the LM head and
  from the encoder. The caller zeroes a gradient when it wants a fresh one.
- an input gradient is accumulated too, unless the caller says it is the buffer's only contribution
  (GradInto below): the kernels whose input gradient has one producer in GPT-2 (the linear layer's
  dinp, attention's, gelu's, the logits') can then write it, and the caller need not zero it first, a pass over
  memory saved. Written or added into zero, the values are the same bits (0 + y is y, and the sign
  of a zero y never reaches a sum: every accumulator starts at +0).

Performance and determinism:
- matmul is >90% of the time. It is one blocked matrix product (mm_gemm below) used for all three
  products of a linear layer and, per head, for attention. Each output element is summed by one
  thread in a fixed order that depends only on the shapes, so results are bit-identical for any
  number of OpenMP threads; the same holds for every other kernel (reductions over rows, e.g.
  dweight or dbias, are parallelized over columns and run sequentially over rows).
- nothing allocates: the only buffers are fixed-size arrays on the stack (under 300 KiB per thread,
  in mm_gemm), so a kernel can be called from any thread with the usual multi-MiB stack.
- SIMD: the matmul micro-kernel and a few reductions use GCC/Clang vector types (ck_vec), so the
  register tile is pinned no matter how the auto-vectorizer feels; everything else is plain loops
  that -O3 vectorizes. The vector width follows the target (16 floats with AVX-512, 8 with AVX,
  4 otherwise), so build with -march=native.
*/
#ifndef CPU_KERNELS_H
#define CPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

// How a backward puts an input gradient into its buffer: added to what is there (other
// contributions are summed in it, as the residual stream's), or written (the only contribution:
// what was in the buffer does not matter).
typedef enum { GRAD_ADD, GRAD_WRITE } GradInto;

// ------------------------------------------------------------------------------------------------
// SIMD vocabulary

#if defined(__AVX512F__)
#define CK_VEC 16
#elif defined(__AVX__)
#define CK_VEC 8
#else
#define CK_VEC 4   // SSE2, NEON
#endif
// a vector of CK_VEC floats; arithmetic on it is elementwise, and `scalar * vector` broadcasts.
// Comparisons (a < b) give a ck_ivec of lanes -1 (true) or 0 (false).
typedef float ck_vec __attribute__((vector_size(CK_VEC * sizeof(float))));
typedef int ck_ivec __attribute__((vector_size(CK_VEC * sizeof(int))));

// load/store CK_VEC floats from any address (memcpy is how C says "unaligned"; it compiles to one move)
static inline ck_vec ck_load(const float *p) { ck_vec v; memcpy(&v, p, sizeof(v)); return v; }
static inline void ck_store(float *p, ck_vec v) { memcpy(p, &v, sizeof(v)); }
// the first n (< CK_VEC) lanes only, for the ragged end of an array; the other lanes load as 0
static inline ck_vec ck_load_part(const float *p, int n) {
    ck_vec v = {0};
    memcpy(&v, p, n * sizeof(float));
    return v;
}
static inline void ck_store_part(float *p, ck_vec v, int n) { memcpy(p, &v, n * sizeof(float)); }
static inline ck_vec ck_splat(float x) { return (ck_vec){0} + x; }

// lane by lane: mask ? a : b (C has no ?: on vectors, so it is done on the bits)
static inline ck_vec ck_select(ck_ivec mask, ck_vec a, ck_vec b) {
    return (ck_vec)((mask & (ck_ivec)a) | (~mask & (ck_ivec)b));
}
static inline ck_vec ck_max(ck_vec a, ck_vec b) { return ck_select(a > b, a, b); }
static inline ck_vec ck_clamp(ck_vec x, float lo, float hi) {
    x = ck_select(x < lo, ck_splat(lo), x);
    return ck_select(x > hi, ck_splat(hi), x);
}

// the lanes of v combined in a fixed order
static inline float ck_hsum(ck_vec v) {
    float s = 0.0f;
    for (int i = 0; i < CK_VEC; i++) s += v[i];
    return s;
}
static inline float ck_hmax(ck_vec v) {
    float m = v[0];
    for (int i = 1; i < CK_VEC; i++) m = v[i] > m ? v[i] : m;
    return m;
}

// sum of x[0..n): CK_VEC independent partial sums, so that it runs in SIMD without -ffast-math (a
// single running sum cannot be reordered by the compiler); the order is fixed, hence deterministic
static inline float ck_sum(const float *x, int n) {
    ck_vec acc = {0};
    int i = 0;
    for (; i + CK_VEC <= n; i += CK_VEC) acc += ck_load(x + i);
    float s = ck_hsum(acc);
    for (; i < n; i++) s += x[i];
    return s;
}

// dot product of x[0..n) and y[0..n), partial sums as in ck_sum
static inline float ck_dot(const float *x, const float *y, int n) {
    ck_vec acc = {0};
    int i = 0;
    for (; i + CK_VEC <= n; i += CK_VEC) acc += ck_load(x + i) * ck_load(y + i);
    float s = ck_hsum(acc);
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

// e^x for each lane, to 1.3 ulp (libm's expf is scalar, and exp is the cost of every softmax).
// x = n*ln2 + r with n = round(x/ln2) and |r| <= ln2/2; then e^x = 2^n * e^r, e^r by its Taylor
// series to r^8 (the next term is < 6e-9 relative), and 2^n built directly as float exponent bits.
// Inputs are clamped to [-87, 88]: below, e^-87 = 1.6e-38 is the smallest normal float, so a result
// is never 0 or denormal (denormals are slow, and a probability of 0 would make -log(p) infinite).
static inline ck_vec ck_exp(ck_vec x) {
    x = ck_clamp(x, -87.0f, 88.0f);
    const float round_shift = 12582912.0f;   // 1.5 * 2^23: adding it rounds to an integer
    ck_vec n = (x * 1.44269504088896341f + round_shift) - round_shift;
    // ln2 split in two, the first with few mantissa bits so that n * ln2_hi is exact
    ck_vec r = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f;
    ck_vec p = 1.0f / 5040 + r * (1.0f / 40320);
    p = 1.0f / 720 + r * p;
    p = 1.0f / 120 + r * p;
    p = 1.0f / 24 + r * p;
    p = 1.0f / 6 + r * p;
    p = 0.5f + r * p;
    p = 1.0f + r * p;
    p = 1.0f + r * p;
    ck_ivec two_to_n = (__builtin_convertvector(n, ck_ivec) + 127) << 23;   // n in [-126, 127]
    return p * (ck_vec)two_to_n;
}

// out[i] = e^(x[i] - m) / sum_j e^(x[j] - m) for i < n, m = max(x) (subtracting it keeps e^ from
// overflowing). out may be x itself.
static inline void ck_softmax(float *out, const float *x, int n) {
    ck_vec vmax = ck_splat(-INFINITY);
    int i = 0;
    for (; i + CK_VEC <= n; i += CK_VEC) vmax = ck_max(vmax, ck_load(x + i));
    float maxval = ck_hmax(vmax);
    for (; i < n; i++) maxval = x[i] > maxval ? x[i] : maxval;
    ck_vec vsum = {0};
    for (i = 0; i + CK_VEC <= n; i += CK_VEC) {
        ck_vec e = ck_exp(ck_load(x + i) - maxval);
        ck_store(out + i, e);
        vsum += e;
    }
    float sum = ck_hsum(vsum);
    if (i < n) {   // the ragged end: the same exp, on a part of a vector
        ck_vec e = ck_exp(ck_load_part(x + i, n - i) - maxval);
        ck_store_part(out + i, e, n - i);
        for (int j = 0; j < n - i; j++) sum += e[j];
    }
    float inv_sum = 1.0f / sum;
    for (i = 0; i < n; i++) out[i] *= inv_sum;
}


// ------------------------------------------------------------------------------------------------
// The matrix product. Everything that multiplies matrices comes here:
//     out (M,N)  =  init + A (M,K) @ B (K,N)
// where A[r][k] = a[r*a_rs + k*a_ks] and B[k][n] = b[k*b_ks + n*b_ns]: the strides let one routine
// read a weight as W or W^T and an activation as X or X^T without copying the whole thing first.
// One stride of each operand must be 1 (a_ks or a_rs, b_ks or b_ns), as in every product of GPT-2.
// init is 0, or bias[n] (bias != NULL), or the old out (accumulate = 1, for gradients).
//
// Blocking, innermost first (numbers for AVX-512; see the macros):
// - a register tile of MM_TILE_ROWS x MM_TILE_COLS = 8 x 32 outputs is 16 vector accumulators. For each
//   k it loads 2 vectors of B and broadcasts 8 scalars of A: 16 FMAs per 10 loads, and the
//   accumulators never leave registers while k runs.
// - both operands are first copied ("packed") into the order the tile reads them: a B panel of
//   MM_DEPTH_BLOCK x 32 (32 KiB, stays in L1) and an A block of MM_ROW_BLOCK x MM_DEPTH_BLOCK
//   (256 KiB, stays in L2) cut into 8-row panels. Packing also turns any stride into unit stride
//   and pads ragged edges with zeros, so the tile code has no edge cases inside its loop.
// - the depth K is cut into blocks of MM_DEPTH_BLOCK; each block adds its partial sum to out.
// Summation order for one output element: init + (sum over depth block 0) + (block 1) + ..., each
// block summed sequentially in k. This depends on K only, not on M, N, tiles or threads.

#if CK_VEC == 16
#define MM_TILE_ROWS 8      // 8 rows x 2 vectors = 16 of the 32 vector registers
#else
#define MM_TILE_ROWS 6      // 6 rows x 2 vectors = 12 of the 16 vector registers (AVX2, SSE)
#endif
#define MM_TILE_VECS 2
#define MM_TILE_COLS (MM_TILE_VECS * CK_VEC)
#ifndef MM_DEPTH_BLOCK      // (block sizes can be set with -D to experiment)
#define MM_DEPTH_BLOCK 256
#endif
#ifndef MM_ROW_BLOCK
#define MM_ROW_BLOCK (32 * MM_TILE_ROWS)
#endif
#ifndef MM_COL_BLOCK
#define MM_COL_BLOCK 256    // width of one parallel task (a multiple of MM_TILE_COLS)
#endif

enum { MM_STORE, MM_BIAS, MM_ADD };   // what a tile does with its sum: out = / bias + / out +=

// One register tile. a_panel[k*MM_TILE_ROWS + r] and b_panel[k*MM_TILE_COLS + n] for k < depth;
// writes rows x cols (<= the tile) of out, row stride ldo.
static inline void mm_tile(float *out, size_t ldo, const float *a_panel, const float *b_panel, int depth,
                           int rows, int cols, const float *bias, int mode) {
    ck_vec acc[MM_TILE_ROWS][MM_TILE_VECS];
    for (int r = 0; r < MM_TILE_ROWS; r++)
        for (int v = 0; v < MM_TILE_VECS; v++) acc[r][v] = (ck_vec){0};
    for (int k = 0; k < depth; k++) {
        const ck_vec *b_row = (const ck_vec *)(b_panel + (size_t)k * MM_TILE_COLS);   // aligned: see mm_gemm
        for (int r = 0; r < MM_TILE_ROWS; r++) {
            float a_rk = a_panel[(size_t)k * MM_TILE_ROWS + r];
            for (int v = 0; v < MM_TILE_VECS; v++) acc[r][v] += a_rk * b_row[v];
        }
    }
    if (rows == MM_TILE_ROWS && cols == MM_TILE_COLS) {   // full tile: whole vectors
        for (int r = 0; r < MM_TILE_ROWS; r++)
            for (int v = 0; v < MM_TILE_VECS; v++) {
                float *o = out + r * ldo + v * CK_VEC;
                ck_vec init = mode == MM_ADD ? ck_load(o) : mode == MM_BIAS ? ck_load(bias + v * CK_VEC) : (ck_vec){0};
                ck_store(o, init + acc[r][v]);
            }
    } else {                                              // ragged edge: element by element
        for (int r = 0; r < rows; r++)
            for (int n = 0; n < cols; n++) {
                float *o = out + r * ldo + n;
                float init = mode == MM_ADD ? *o : mode == MM_BIAS ? bias[n] : 0.0f;
                *o = init + acc[r][n / CK_VEC][n % CK_VEC];
            }
    }
}

// dst[k*dst_w + i] = src[i*ld + k] for i < n, k < depth: n rows of src, each contiguous in k, laid
// down k-major (a panel of A from A's rows, of B from W's rows). With AVX, 8 x 8 blocks are turned
// in registers (8 loads, 24 shuffles, 8 stores; one float at a time was 12% of mm_gemm's samples
// at d12 B=8, perf record); the ragged rows and depths go one float at a time. Values only move: the same bits.
static inline void mm_pack_transposed(float *dst, int dst_w, const float *src, size_t ld, int n, int depth) {
    int i0 = 0;
#if defined(__AVX__)
    for (; i0 + 8 <= n; i0 += 8) {
        const float *rows = src + (size_t)i0 * ld;
        int k0 = 0;
        for (; k0 + 8 <= depth; k0 += 8) {
            __m256 r0 = _mm256_loadu_ps(rows + 0 * ld + k0), r1 = _mm256_loadu_ps(rows + 1 * ld + k0);
            __m256 r2 = _mm256_loadu_ps(rows + 2 * ld + k0), r3 = _mm256_loadu_ps(rows + 3 * ld + k0);
            __m256 r4 = _mm256_loadu_ps(rows + 4 * ld + k0), r5 = _mm256_loadu_ps(rows + 5 * ld + k0);
            __m256 r6 = _mm256_loadu_ps(rows + 6 * ld + k0), r7 = _mm256_loadu_ps(rows + 7 * ld + k0);
            // pairs of rows interleaved, then quads, then the 128-bit halves swapped into place
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *out = dst + (size_t)k0 * dst_w + i0;
            _mm256_storeu_ps(out + 0 * (size_t)dst_w, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(out + 1 * (size_t)dst_w, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(out + 2 * (size_t)dst_w, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(out + 3 * (size_t)dst_w, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(out + 4 * (size_t)dst_w, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(out + 5 * (size_t)dst_w, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(out + 6 * (size_t)dst_w, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(out + 7 * (size_t)dst_w, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (; k0 < depth; k0++)
            for (int i = 0; i < 8; i++) dst[(size_t)k0 * dst_w + i0 + i] = rows[(size_t)i * ld + k0];
    }
#endif
    for (int k = 0; k < depth; k++)
        for (int i = i0; i < n; i++) dst[(size_t)k * dst_w + i] = src[(size_t)i * ld + k];
}

// Packs A rows [0,rows) x depth [0,depth) into row panels of MM_TILE_ROWS, panel p at
// dst + p*depth*MM_TILE_ROWS, k-major inside. Rows past `rows` are computed but never stored; they
// are zeroed anyway so the tile never runs on stale stack bytes (denormals there would be slow).
static inline void mm_pack_a(float *dst, const float *a, size_t a_rs, size_t a_ks, int rows, int depth) {
    int full_panels = rows / MM_TILE_ROWS, tail_rows = rows % MM_TILE_ROWS;
    if (a_ks == 1) {
        // rows of A are contiguous (inp, dout, att): each panel is its rows transposed
        for (int p = 0; p * MM_TILE_ROWS < rows; p++) {
            int n_rows = p < full_panels ? MM_TILE_ROWS : tail_rows;
            mm_pack_transposed(dst + (size_t)p * depth * MM_TILE_ROWS, MM_TILE_ROWS, a + (size_t)p * MM_TILE_ROWS * a_rs,
                               a_rs, n_rows, depth);
        }
    } else {
        // A is read as a transpose (a_rs == 1: dout^T, dscore^T, att^T): each k is one contiguous run
        // of `rows` floats, cut into the panels. A panel at a time, so that the writes run in one
        // stream: k at a time across the panels wrote 32 streams a panel apart (8 KiB, the same L1
        // sets), 8.2% of mm_gemm's samples at d12 B=8 (perf record, 2 threads), 3.5% this way. Each k's
        // run is read 8 floats at a time, the next panel's the other half of the same cache line. A copy of
        // constant size compiles to vector moves, a variable one to a call: hence the separate tail.
        for (int p = 0; p < full_panels; p++) {
            float *panel = dst + (size_t)p * depth * MM_TILE_ROWS;
            const float *src = a + p * MM_TILE_ROWS;
            for (int k = 0; k < depth; k++)
                memcpy(panel + (size_t)k * MM_TILE_ROWS, src + (size_t)k * a_ks, MM_TILE_ROWS * sizeof(float));
        }
        if (tail_rows) {
            float *panel = dst + (size_t)full_panels * depth * MM_TILE_ROWS;
            const float *src = a + full_panels * MM_TILE_ROWS;
            for (int k = 0; k < depth; k++)
                memcpy(panel + (size_t)k * MM_TILE_ROWS, src + (size_t)k * a_ks, tail_rows * sizeof(float));
        }
    }
    if (tail_rows) {
        float *panel = dst + (size_t)full_panels * depth * MM_TILE_ROWS;
        for (int k = 0; k < depth; k++)
            for (int r = tail_rows; r < MM_TILE_ROWS; r++) panel[(size_t)k * MM_TILE_ROWS + r] = 0.0f;
    }
}

// Packs B depth [0,depth) x cols [0,cols) (cols <= MM_TILE_COLS) into panel[k*MM_TILE_COLS + n],
// columns past `cols` zero (as for A: never stored, but never stale).
static inline void mm_pack_b(float *panel, const float *b, size_t b_ks, size_t b_ns, int depth, int cols) {
    if (b_ks == 1) {
        // B is read as a transpose (a weight as W^T, keys as K^T): its columns are contiguous rows
        mm_pack_transposed(panel, MM_TILE_COLS, b, b_ns, cols, depth);
    } else {
        // rows of B are contiguous (b_ns == 1): copy them, constant size when full as in mm_pack_a
        for (int k = 0; k < depth; k++) {
            const float *src = b + (size_t)k * b_ks;
            if (cols == MM_TILE_COLS) memcpy(panel + (size_t)k * MM_TILE_COLS, src, MM_TILE_COLS * sizeof(float));
            else memcpy(panel + (size_t)k * MM_TILE_COLS, src, cols * sizeof(float));
        }
    }
    for (int k = 0; k < depth; k++)
        for (int n = cols; n < MM_TILE_COLS; n++) panel[(size_t)k * MM_TILE_COLS + n] = 0.0f;
}

// out (M,N) = init + A (M,K) @ B (K,N), single-threaded (callers parallelize over blocks of out).
// K >= 1. Strides and init as described above.
static inline void mm_gemm(float *out, size_t ldo, const float *a, size_t a_rs, size_t a_ks,
                           const float *b, size_t b_ks, size_t b_ns, const float *bias, int accumulate,
                           int M, int N, int K) {
    // the packed operands; 64-byte alignment makes every vector read of the B panel aligned
    float a_block[MM_ROW_BLOCK * MM_DEPTH_BLOCK] __attribute__((aligned(64)));
    float b_panel[MM_DEPTH_BLOCK * MM_TILE_COLS] __attribute__((aligned(64)));
    for (int r0 = 0; r0 < M; r0 += MM_ROW_BLOCK) {
        int rows = M - r0 < MM_ROW_BLOCK ? M - r0 : MM_ROW_BLOCK;
        for (int k0 = 0; k0 < K; k0 += MM_DEPTH_BLOCK) {
            int depth = K - k0 < MM_DEPTH_BLOCK ? K - k0 : MM_DEPTH_BLOCK;
            int mode = (accumulate || k0 > 0) ? MM_ADD : bias ? MM_BIAS : MM_STORE;
            mm_pack_a(a_block, a + (size_t)r0 * a_rs + (size_t)k0 * a_ks, a_rs, a_ks, rows, depth);
            for (int n0 = 0; n0 < N; n0 += MM_TILE_COLS) {
                int cols = N - n0 < MM_TILE_COLS ? N - n0 : MM_TILE_COLS;
                mm_pack_b(b_panel, b + (size_t)k0 * b_ks + (size_t)n0 * b_ns, b_ks, b_ns, depth, cols);
                // the B panel stays in L1 while every row panel of the A block streams past it
                for (int r = 0; r < rows; r += MM_TILE_ROWS) {
                    int tile_rows = rows - r < MM_TILE_ROWS ? rows - r : MM_TILE_ROWS;
                    mm_tile(out + (size_t)(r0 + r) * ldo + n0, ldo,
                            a_block + (size_t)(r / MM_TILE_ROWS) * depth * MM_TILE_ROWS, b_panel, depth,
                            tile_rows, cols, bias ? bias + n0 : NULL, mode);
                }
            }
        }
    }
}

// mm_gemm over all threads: out is cut into MM_ROW_BLOCK x MM_COL_BLOCK blocks, one task each.
// Tasks are independent (each owns its block of out), so there are no races and no reductions
// across threads. Columns are the outer loop so that consecutive tasks share a slab of B: for the
// LM head, where B is the 154 MB wte, each slab is then read from memory once and reused from cache.
static inline void mm_gemm_parallel(float *out, size_t ldo, const float *a, size_t a_rs, size_t a_ks,
                                    const float *b, size_t b_ks, size_t b_ns, const float *bias, int accumulate,
                                    int M, int N, int K) {
    int row_blocks = (M + MM_ROW_BLOCK - 1) / MM_ROW_BLOCK;
    int col_blocks = (N + MM_COL_BLOCK - 1) / MM_COL_BLOCK;
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int cb = 0; cb < col_blocks; cb++) {
        for (int rb = 0; rb < row_blocks; rb++) {
            int r0 = rb * MM_ROW_BLOCK, n0 = cb * MM_COL_BLOCK;
            int rows = M - r0 < MM_ROW_BLOCK ? M - r0 : MM_ROW_BLOCK;
            int cols = N - n0 < MM_COL_BLOCK ? N - n0 : MM_COL_BLOCK;
            mm_gemm(out + (size_t)r0 * ldo + n0, ldo, a + (size_t)r0 * a_rs, a_rs, a_ks,
                    b + (size_t)n0 * b_ns, b_ks, b_ns, bias ? bias + n0 : NULL, accumulate, rows, cols, K);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Linear layer

// out (B,T,OC) = inp (B,T,C) @ weight (OC,C)^T + bias (OC). bias may be NULL (the LM head has none).
static inline void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                                  int B, int T, int C, int OC) {
    // A = inp (row r = token, contiguous in c); B[c][o] = weight[o][c], read as a transpose
    mm_gemm_parallel(out, OC, inp, C, 1, weight, 1, C, bias, 0, B * T, OC, C);
}

// Given dout (B,T,OC) = dL/dout of matmul_forward:
//   dinp (B,T,C)  += dout @ weight            (the weight as stored, (OC,C); = with GRAD_WRITE)
//   dweight (OC,C) += dout^T @ inp            (sum over all B*T tokens)
//   dbias (OC)     += dout summed over tokens (dbias may be NULL)
static inline void matmul_backward(float *dinp, GradInto dinp_into, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, int B, int T, int C, int OC) {
    int BT = B * T;
    mm_gemm_parallel(dinp, C, dout, OC, 1, weight, C, 1, NULL, dinp_into == GRAD_ADD, BT, C, OC);
    // rows of dweight are output channels: A[o][bt] = dout[bt][o] is dout read as a transpose
    mm_gemm_parallel(dweight, C, dout, 1, OC, inp, C, 1, NULL, 1, OC, C, BT);
    if (dbias) {
        // parallel over chunks of channels, sequential over tokens: a fixed order for any thread count
        int chunks = (OC + 255) / 256;
        #pragma omp parallel for schedule(static)
        for (int ch = 0; ch < chunks; ch++) {
            int o0 = ch * 256, o1 = o0 + 256 < OC ? o0 + 256 : OC;
            for (int bt = 0; bt < BT; bt++) {
                const float *dout_bt = dout + (size_t)bt * OC;
                for (int o = o0; o < o1; o++) dbias[o] += dout_bt[o];
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Embedding

// out (B,T,C) = wte (V,C)[inp (B,T)] + wpe (maxT,C)[t]
static inline void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                                   int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *out_bt = out + ((size_t)b * T + t) * C;
            const float *wte_ix = wte + (size_t)inp[b * T + t] * C;
            const float *wpe_t = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) out_bt[i] = wte_ix[i] + wpe_t[i];
        }
    }
}

// dwte (V,C) += dout rows scattered to their tokens' rows; dwpe (maxT,C) += dout summed over b.
// The same token can occur many times, so threads must not split the tokens: they split the
// channels instead, and each walks all B*T positions in order (deterministic, race-free).
static inline void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    int chunks = (C + 63) / 64;
    #pragma omp parallel for schedule(static)
    for (int ch = 0; ch < chunks; ch++) {
        int c0 = ch * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float *dout_bt = dout + ((size_t)b * T + t) * C;
                float *dwte_ix = dwte + (size_t)inp[b * T + t] * C;
                float *dwpe_t = dwpe + (size_t)t * C;
                for (int i = c0; i < c1; i++) {
                    dwte_ix[i] += dout_bt[i];
                    dwpe_t[i] += dout_bt[i];
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// LayerNorm

// For each of the B*T rows x of inp (B,T,C):
//   mean = sum(x)/C, rstd = 1/sqrt(sum((x-mean)^2)/C + 1e-5), out = (x-mean)*rstd*weight + bias.
// mean and rstd (B,T) are kept for the backward.
static inline void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                     const float *bias, int B, int T, int C) {
    const float eps = 1e-5f;
    int BT = B * T;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        const float *x = inp + (size_t)bt * C;
        float m = ck_sum(x, C) / C;
        // variance from a second pass over (x - mean): no cancellation, unlike E[x^2] - mean^2
        ck_vec acc = {0};
        int i = 0;
        for (; i + CK_VEC <= C; i += CK_VEC) { ck_vec d = ck_load(x + i) - m; acc += d * d; }
        float var = ck_hsum(acc);
        for (; i < C; i++) { float d = x[i] - m; var += d * d; }
        var /= C;
        float s = 1.0f / sqrtf(var + eps);
        float *out_bt = out + (size_t)bt * C;
        for (i = 0; i < C; i++) out_bt[i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[bt] = m;
        rstd[bt] = s;
    }
}

// With norm = (x-mean)*rstd and out = norm*weight + bias, given dout (B,T,C):
//   dbias += sum over rows of dout;  dweight += sum over rows of dout*norm;
//   dinp  += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm*norm)),  dnorm = dout*weight
// (the last line is the gradient through the mean and the variance, simplified).
static inline void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                      const float *weight, const float *mean, const float *rstd, int B, int T, int C) {
    int BT = B * T;
    // dinp: rows are independent
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        const float *x = inp + (size_t)bt * C, *dy = dout + (size_t)bt * C;
        float m = mean[bt], s = rstd[bt];
        ck_vec acc_dnorm = {0}, acc_dnorm_norm = {0};
        int i = 0;
        for (; i + CK_VEC <= C; i += CK_VEC) {
            ck_vec norm = (ck_load(x + i) - m) * s;
            ck_vec dnorm = ck_load(dy + i) * ck_load(weight + i);
            acc_dnorm += dnorm;
            acc_dnorm_norm += dnorm * norm;
        }
        float sum_dnorm = ck_hsum(acc_dnorm), sum_dnorm_norm = ck_hsum(acc_dnorm_norm);
        for (; i < C; i++) {
            float norm = (x[i] - m) * s, dnorm = dy[i] * weight[i];
            sum_dnorm += dnorm;
            sum_dnorm_norm += dnorm * norm;
        }
        float mean_dnorm = sum_dnorm / C, mean_dnorm_norm = sum_dnorm_norm / C;
        float *dx = dinp + (size_t)bt * C;
        for (i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            dx[i] += s * (dy[i] * weight[i] - mean_dnorm - norm * mean_dnorm_norm);
        }
    }
    // dweight, dbias: sums over rows, so threads split the channels and each sums rows in order
    int chunks = (C + 63) / 64;
    #pragma omp parallel for schedule(static)
    for (int ch = 0; ch < chunks; ch++) {
        int c0 = ch * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int bt = 0; bt < BT; bt++) {
            const float *x = inp + (size_t)bt * C, *dy = dout + (size_t)bt * C;
            float m = mean[bt], s = rstd[bt];
            for (int i = c0; i < c1; i++) {
                dbias[i] += dy[i];
                dweight[i] += dy[i] * ((x[i] - m) * s);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Causal self-attention
//
// inp is qkv (B,T,3C): for token (b,t), q = [0,C), k = [C,2C), v = [2C,3C), each split into NH heads
// of hs = C/NH channels. For head h, with Q, K, V the (T,hs) slices of that head:
//   preatt = Q K^T / sqrt(hs)      (T,T), only t2 <= t is used (causal)
//   att    = softmax over t2 <= t of preatt; att[t][t2] = 0 for t2 > t
//   out    = att V                 (T,hs) -> channels [h*hs, (h+1)*hs) of out (B,T,C)
// The three products are done with mm_gemm, a block of query rows at a time: rows [t0,t1) only need
// keys [0,t1), so blocks above the diagonal are never computed (about half the work).

#ifndef ATT_ROW_BLOCK
#define ATT_ROW_BLOCK 32   // query rows per task: rows [t0,t1) need keys [0,t1), so at T=64 two blocks skip a quarter of the square
#endif

// One query row t of a head, both paths: p (the raw scores Q[t] K^T, T wide) scaled in place into
// preatt, a = its softmax over keys t2 <= t, and both written 0 for the masked keys t2 > t.
static inline void att_causal_softmax_row(float *p, float *a, int t, int T, float scale) {
    for (int t2 = 0; t2 <= t; t2++) p[t2] *= scale;
    ck_softmax(a, p, t + 1);
    for (int t2 = t + 1; t2 < T; t2++) { p[t2] = 0.0f; a[t2] = 0.0f; }
}

// out (B,T,C), preatt (B,NH,T,T), att (B,NH,T,T), inp (B,T,3C).
// Masked entries (t2 > t) of preatt and att are written as 0.
static inline void attention_forward_rows(float *out, float *preatt, float *att, const float *inp,
                                     int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    int row_blocks = (T + ATT_ROW_BLOCK - 1) / ATT_ROW_BLOCK;
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int rb = 0; rb < row_blocks; rb++) {
                int t0 = rb * ATT_ROW_BLOCK, t1 = t0 + ATT_ROW_BLOCK < T ? t0 + ATT_ROW_BLOCK : T;
                const float *q = inp + (size_t)b * T * C3 + h * hs;   // Q[t][i] = q[t*C3 + i]
                const float *k = q + C, *v = q + 2 * C;
                float *preatt_bh = preatt + ((size_t)b * NH + h) * T * T;
                float *att_bh = att + ((size_t)b * NH + h) * T * T;
                // raw scores Q[t0:t1] K[0:t1]^T; B[i][t2] = K[t2][i] is K read as a transpose
                mm_gemm(preatt_bh + (size_t)t0 * T, T, q + (size_t)t0 * C3, C3, 1, k, 1, C3, NULL, 0, t1 - t0, t1, hs);
                // scale, causal softmax over t2 <= t, zero the masked part
                for (int t = t0; t < t1; t++)
                    att_causal_softmax_row(preatt_bh + (size_t)t * T, att_bh + (size_t)t * T, t, T, scale);
                // out[t0:t1] = att[t0:t1, 0:t1] @ V[0:t1]
                mm_gemm(out + ((size_t)b * T + t0) * C + h * hs, C, att_bh + (size_t)t0 * T, T, 1,
                        v, C3, 1, NULL, 0, t1 - t0, hs, t1);
            }
        }
    }
}

// Given dout (B,T,C), inp = qkv (B,T,3C) and att (B,NH,T,T) from the forward, per head:
//   datt    = dout V^T                                   (T,T), t2 <= t
//   dscore  = att * (datt - sum_t2(att * datt)) / sqrt(hs)   (softmax backward, and the 1/sqrt(hs))
//   dQ += dscore K,   dK += dscore^T Q,   dV += att^T dout    -> into dinp (B,T,3C): added, or
//                                                                 written (GRAD_WRITE: each once)
// dpreatt and datt (B,NH,T,T) are scratch: their contents on entry do not matter (the kernel writes
// every entry before it reads it, so one scratch buffer can be reused by every layer without
// zeroing). On return datt[t][t2] holds dL/datt and dpreatt[t][t2] holds dL/d(q.k) = dL/dpreatt / sqrt(hs)
// for t2 <= t; other entries are unspecified. att must be 0 above the diagonal (as the forward writes it).
// Two phases, each parallel over (b, h, block of rows): the first owns query rows t (datt, dscore,
// dQ); the second owns key rows t2 (dK, dV), which sum over all t >= t2. No two tasks write the same
// element, so no atomics and no thread-count dependence.
static inline void attention_backward_rows(float *dinp, GradInto into, float *dpreatt, float *datt, const float *dout,
                                      const float *inp, const float *att, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C, add = into == GRAD_ADD;
    float scale = 1.0f / sqrtf((float)hs);
    int row_blocks = (T + ATT_ROW_BLOCK - 1) / ATT_ROW_BLOCK;
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int rb = 0; rb < row_blocks; rb++) {
                int t0 = rb * ATT_ROW_BLOCK, t1 = t0 + ATT_ROW_BLOCK < T ? t0 + ATT_ROW_BLOCK : T;
                const float *q = inp + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
                const float *dout_h = dout + (size_t)b * T * C + h * hs;
                const float *att_bh = att + ((size_t)b * NH + h) * T * T;
                float *datt_bh = datt + ((size_t)b * NH + h) * T * T;
                float *dscore_bh = dpreatt + ((size_t)b * NH + h) * T * T;
                // datt[t0:t1, 0:t1] = dout[t0:t1] V[0:t1]^T
                mm_gemm(datt_bh + (size_t)t0 * T, T, dout_h + (size_t)t0 * C, C, 1, v, 1, C3, NULL, 0, t1 - t0, t1, hs);
                // softmax backward: d preatt[t2] = att[t2] * (datt[t2] - sum_j att[j] datt[j])
                for (int t = t0; t < t1; t++) {
                    const float *a = att_bh + (size_t)t * T, *da = datt_bh + (size_t)t * T;
                    float *ds = dscore_bh + (size_t)t * T;
                    float dot = ck_dot(a, da, t + 1);
                    for (int t2 = 0; t2 <= t; t2++) ds[t2] = a[t2] * (da[t2] - dot) * scale;
                    // the products below read this block's rows up to column t1 and (phase 2) its
                    // columns from row t0: the masked part inside the block must be a true 0
                    for (int t2 = t + 1; t2 < t1; t2++) ds[t2] = 0.0f;
                }
                // dQ[t0:t1] += dscore[t0:t1, 0:t1] @ K[0:t1]
                mm_gemm(dinp + ((size_t)b * T + t0) * C3 + h * hs, C3, dscore_bh + (size_t)t0 * T, T, 1,
                        k, C3, 1, NULL, add, t1 - t0, hs, t1);
            }
        }
    }
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int rb = 0; rb < row_blocks; rb++) {
                int r0 = rb * ATT_ROW_BLOCK, r1 = r0 + ATT_ROW_BLOCK < T ? r0 + ATT_ROW_BLOCK : T;
                const float *q = inp + (size_t)b * T * C3 + h * hs;
                const float *dout_h = dout + (size_t)b * T * C + h * hs;
                const float *att_bh = att + ((size_t)b * NH + h) * T * T;
                const float *dscore_bh = dpreatt + ((size_t)b * NH + h) * T * T;
                float *dk = dinp + (size_t)b * T * C3 + C + h * hs, *dv = dk + C;
                // key rows t2 in [r0,r1) get contributions from query rows t in [r0,T): A[t2][t] = X[t][t2]
                // dK[r0:r1] += dscore[r0:T, r0:r1]^T @ Q[r0:T]
                mm_gemm(dk + (size_t)r0 * C3, C3, dscore_bh + (size_t)r0 * T + r0, 1, T,
                        q + (size_t)r0 * C3, C3, 1, NULL, add, r1 - r0, hs, T - r0);
                // dV[r0:r1] += att[r0:T, r0:r1]^T @ dout[r0:T]
                mm_gemm(dv + (size_t)r0 * C3, C3, att_bh + (size_t)r0 * T + r0, 1, T,
                        dout_h + (size_t)r0 * C, C, 1, NULL, add, r1 - r0, hs, T - r0);
            }
        }
    }
}


// ------------------------------------------------------------------------------------------------
// The same attention a head at a time, for heads whose operands fit on the stack (T=64, hs=64 in
// d12 at the sequence lengths this trainer runs most; att_head_fits says which): each operand is
// packed into mm_tile's panels ONCE per head, where the row blocks above pack K^T and V again for
// every block and every call. Each product is then mm_tile over those panels, in the depth blocks
// mm_gemm uses, and the panels hold the same values, so every sum has the same terms in the same
// order: the results are bitwise those of the _rows functions (tests/unit/test_cpu_kernels.c checks
// it). Where a row tile's product runs over fewer keys than the 32-row block's (t0 + 8 instead of
// t1), the terms left out are the zeros of the causal mask, which add nothing to a sum that starts
// at +0; where it runs over more (a key panel of 32), the extra scores are masked after.

#define ATT_HEAD_FLOATS 16384   // one packed operand of a head: 64 KiB; three of them per thread
static inline int att_round_up(int x, int to) { return (x + to - 1) / to * to; }
static inline int att_head_fits(int T, int hs) {
    return (size_t)att_round_up(T, MM_TILE_COLS) * att_round_up(hs, MM_TILE_COLS) <= ATT_HEAD_FLOATS;
}
static inline int att_cols(int total, int at) { return total - at < MM_TILE_COLS ? total - at : MM_TILE_COLS; }

// out (rows x cols of a tile) = init + A panel @ B panel over `depth`, in MM_DEPTH_BLOCK blocks as
// mm_gemm sums them (a sub-block of a panel is the panel from its k0-th row on)
static inline void mm_tile_depth(float *out, size_t ldo, const float *a_panel, const float *b_panel, int depth,
                                 int rows, int cols, int accumulate) {
    for (int k0 = 0; k0 < depth; k0 += MM_DEPTH_BLOCK) {
        int d = depth - k0 < MM_DEPTH_BLOCK ? depth - k0 : MM_DEPTH_BLOCK;
        mm_tile(out, ldo, a_panel + (size_t)k0 * MM_TILE_ROWS, b_panel + (size_t)k0 * MM_TILE_COLS, d, rows, cols,
                NULL, (accumulate || k0 > 0) ? MM_ADD : MM_STORE);
    }
}

// X (T rows, row stride ld) as B panels of 32 columns over depth T: panel c at dst + c*T*32
static inline void att_pack_rows_as_b(float *dst, const float *x, size_t ld, int T, int hs) {
    for (int c = 0; c * MM_TILE_COLS < hs; c++)
        mm_pack_b(dst + (size_t)c * T * MM_TILE_COLS, x + c * MM_TILE_COLS, ld, 1, T, att_cols(hs, c * MM_TILE_COLS));
}
// X^T (X: T rows of hs, row stride ld) as B panels of 32 of X's rows over depth hs: panel j at dst + j*hs*32
static inline void att_pack_transposed_as_b(float *dst, const float *x, size_t ld, int T, int hs) {
    for (int j = 0; j * MM_TILE_COLS < T; j++)
        mm_pack_b(dst + (size_t)j * hs * MM_TILE_COLS, x + (size_t)j * MM_TILE_COLS * ld, 1, ld, hs,
                  att_cols(T, j * MM_TILE_COLS));
}

// One head: q points at its Q (row stride 3C; K at q + C, V at q + 2C), out_h at its output channels
static inline void attention_forward_head(float *out_h, float *preatt_bh, float *att_bh, const float *q,
                                          int T, int C, int hs, float scale) {
    const int C3 = 3 * C;
    float q_panels[ATT_HEAD_FLOATS] __attribute__((aligned(64)));
    float kt_panels[ATT_HEAD_FLOATS] __attribute__((aligned(64)));
    float v_panels[ATT_HEAD_FLOATS] __attribute__((aligned(64)));
    float att_rows[MM_TILE_ROWS * (ATT_HEAD_FLOATS / MM_TILE_COLS)] __attribute__((aligned(64)));
    mm_pack_a(q_panels, q, C3, 1, T, hs);
    att_pack_transposed_as_b(kt_panels, q + C, C3, T, hs);   // K^T: B[i][t2] = K[t2][i]
    att_pack_rows_as_b(v_panels, q + 2 * C, C3, T, hs);
    for (int t0 = 0; t0 < T; t0 += MM_TILE_ROWS) {
        int rows = T - t0 < MM_TILE_ROWS ? T - t0 : MM_TILE_ROWS, keys = t0 + rows;   // rows see keys [0, keys)
        for (int n0 = 0; n0 < keys; n0 += MM_TILE_COLS)
            mm_tile_depth(preatt_bh + (size_t)t0 * T + n0, T, q_panels + (size_t)t0 * hs, kt_panels + (size_t)n0 * hs,
                          hs, rows, att_cols(T, n0), 0);
        for (int t = t0; t < keys; t++)
            att_causal_softmax_row(preatt_bh + (size_t)t * T, att_bh + (size_t)t * T, t, T, scale);
        mm_pack_a(att_rows, att_bh + (size_t)t0 * T, T, 1, rows, keys);
        for (int c0 = 0; c0 < hs; c0 += MM_TILE_COLS)
            mm_tile_depth(out_h + (size_t)t0 * C + c0, C, att_rows, v_panels + (size_t)c0 * T, keys, rows,
                          att_cols(hs, c0), 0);
    }
}

// One head's backward (the pointers as attention_forward_head's; dq_h at its dQ, dK at dq_h + C,
// dV at dq_h + 2C): the query rows first (datt, dscore, dQ), then the key rows (dK, dV), which
// need every query row's dscore.
static inline void attention_backward_head(float *dq_h, int add, float *dscore_bh, float *datt_bh,
                                           const float *dout_h, const float *q, const float *att_bh,
                                           int T, int C, int hs, float scale) {
    const int C3 = 3 * C;
    float a_panels[ATT_HEAD_FLOATS] __attribute__((aligned(64)));   // dout, as A
    float b_panels[2][ATT_HEAD_FLOATS] __attribute__((aligned(64)));
    float a_rows[MM_TILE_ROWS * (ATT_HEAD_FLOATS / MM_TILE_COLS)] __attribute__((aligned(64)));
    float *vt_panels = b_panels[0], *k_panels = b_panels[1];
    mm_pack_a(a_panels, dout_h, C, 1, T, hs);
    att_pack_transposed_as_b(vt_panels, q + 2 * C, C3, T, hs);   // V^T
    att_pack_rows_as_b(k_panels, q + C, C3, T, hs);
    for (int t0 = 0; t0 < T; t0 += MM_TILE_ROWS) {
        int rows = T - t0 < MM_TILE_ROWS ? T - t0 : MM_TILE_ROWS, keys = t0 + rows;
        for (int n0 = 0; n0 < keys; n0 += MM_TILE_COLS)   // datt = dout V^T
            mm_tile_depth(datt_bh + (size_t)t0 * T + n0, T, a_panels + (size_t)t0 * hs, vt_panels + (size_t)n0 * hs,
                          hs, rows, att_cols(T, n0), 0);
        for (int t = t0; t < keys; t++) {   // softmax backward; the masked part a true 0 (read below)
            const float *a = att_bh + (size_t)t * T, *da = datt_bh + (size_t)t * T;
            float *ds = dscore_bh + (size_t)t * T;
            float dot = ck_dot(a, da, t + 1);
            for (int t2 = 0; t2 <= t; t2++) ds[t2] = a[t2] * (da[t2] - dot) * scale;
            for (int t2 = t + 1; t2 < T; t2++) ds[t2] = 0.0f;
        }
        mm_pack_a(a_rows, dscore_bh + (size_t)t0 * T, T, 1, rows, keys);   // dQ = dscore K
        for (int c0 = 0; c0 < hs; c0 += MM_TILE_COLS)
            mm_tile_depth(dq_h + (size_t)t0 * C3 + c0, C3, a_rows, k_panels + (size_t)c0 * T, keys, rows,
                          att_cols(hs, c0), add);
    }
    float *q_panels = b_panels[0], *dout_panels = b_panels[1];
    att_pack_rows_as_b(q_panels, q, C3, T, hs);
    att_pack_rows_as_b(dout_panels, dout_h, C, T, hs);
    // key rows [s0, s0+rows) get contributions from query rows t >= s0; the sums start at the first
    // row r0 of their block of ATT_ROW_BLOCK, as attention_backward_rows' do (its depth blocks, so its
    // bits), and a tile of rows stays inside one block (MM_TILE_ROWS is 6 on AVX2: 32 is no multiple)
    for (int r0 = 0; r0 < T; r0 += ATT_ROW_BLOCK)
    for (int s0 = r0, r1 = T - r0 < ATT_ROW_BLOCK ? T : r0 + ATT_ROW_BLOCK; s0 < r1; s0 += MM_TILE_ROWS) {
        int rows = r1 - s0 < MM_TILE_ROWS ? r1 - s0 : MM_TILE_ROWS, depth = T - r0;
        mm_pack_a(a_rows, dscore_bh + (size_t)r0 * T + s0, 1, T, rows, depth);   // dK = dscore^T Q
        for (int c0 = 0; c0 < hs; c0 += MM_TILE_COLS)
            mm_tile_depth(dq_h + C + (size_t)s0 * C3 + c0, C3, a_rows, q_panels + (size_t)c0 * T + (size_t)r0 * MM_TILE_COLS,
                          depth, rows, att_cols(hs, c0), add);
        mm_pack_a(a_rows, att_bh + (size_t)r0 * T + s0, 1, T, rows, depth);   // dV = att^T dout
        for (int c0 = 0; c0 < hs; c0 += MM_TILE_COLS)
            mm_tile_depth(dq_h + 2 * C + (size_t)s0 * C3 + c0, C3, a_rows,
                          dout_panels + (size_t)c0 * T + (size_t)r0 * MM_TILE_COLS, depth, rows, att_cols(hs, c0), add);
    }
}

// out (B,T,C), preatt and att (B,NH,T,T), inp = qkv (B,T,3C): a head at a time where it fits, else by rows
static inline void attention_forward(float *out, float *preatt, float *att, const float *inp, int B, int T, int C, int NH) {
    int hs = C / NH;
    if (!att_head_fits(T, hs)) { attention_forward_rows(out, preatt, att, inp, B, T, C, NH); return; }
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t bh = (size_t)b * NH + h;
            attention_forward_head(out + (size_t)b * T * C + h * hs, preatt + bh * T * T, att + bh * T * T,
                                   inp + (size_t)b * T * 3 * C + h * hs, T, C, hs, scale);
        }
}

// as attention_backward_rows (its contract, and its bits), a head at a time where it fits
static inline void attention_backward(float *dinp, GradInto into, float *dpreatt, float *datt, const float *dout,
                                      const float *inp, const float *att, int B, int T, int C, int NH) {
    int hs = C / NH;
    if (!att_head_fits(T, hs)) { attention_backward_rows(dinp, into, dpreatt, datt, dout, inp, att, B, T, C, NH); return; }
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t bh = (size_t)b * NH + h, qkv = (size_t)b * T * 3 * C + h * hs;
            attention_backward_head(dinp + qkv, into == GRAD_ADD, dpreatt + bh * T * T, datt + bh * T * T,
                                    dout + (size_t)b * T * C + h * hs, inp + qkv, att + bh * T * T, T, C, hs, scale);
        }
}

// ------------------------------------------------------------------------------------------------
// GELU, tanh approximation (as GPT-2):  gelu(x) = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)

#define GELU_SCALE 0.7978845608028654f   // sqrt(2/pi)

// tanh(u) and its derivative 1 - tanh^2(u) = sech^2(u) for a vector, from e = e^(2u):
// tanh = 1 - 2/(e+1), sech^2 = 4e/(e+1)^2 (no cancellation where tanh is near +-1). tanh is +-1 to
// float precision beyond |u| = 9, so u is clamped to +-20: e stays a normal float.
static inline void ck_tanh_sech2(ck_vec u, ck_vec *tanh_u, ck_vec *sech2_u) {
    ck_vec e = ck_exp(2.0f * ck_clamp(u, -20.0f, 20.0f));
    ck_vec inv = 1.0f / (e + 1.0f);
    *tanh_u = 1.0f - 2.0f * inv;
    if (sech2_u) *sech2_u = 4.0f * e * inv * inv;
}

static inline ck_vec ck_gelu(ck_vec x) {
    ck_vec th;
    ck_tanh_sech2(GELU_SCALE * (x + 0.044715f * x * x * x), &th, NULL);
    return 0.5f * x * (1.0f + th);
}

// gelu'(x) = (1 + tanh u)/2 + x/2 * sech^2(u) * du/dx,  du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2)
static inline ck_vec ck_gelu_grad(ck_vec x) {
    ck_vec th, sech2;
    ck_tanh_sech2(GELU_SCALE * (x + 0.044715f * x * x * x), &th, &sech2);
    ck_vec du_dx = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
}

// out (N) = gelu(inp (N)), a vector at a time (the last one partial)
static inline void gelu_forward(float *out, const float *inp, int N) {
    int n_vecs = (N + CK_VEC - 1) / CK_VEC;
    #pragma omp parallel for schedule(static)
    for (int iv = 0; iv < n_vecs; iv++) {
        int i = iv * CK_VEC, n = N - i < CK_VEC ? N - i : CK_VEC;
        if (n == CK_VEC) ck_store(out + i, ck_gelu(ck_load(inp + i)));
        else ck_store_part(out + i, ck_gelu(ck_load_part(inp + i, n)), n);
    }
}

// dinp (N) += gelu'(inp) * dout   (= with GRAD_WRITE)
static inline void gelu_backward(float *dinp, GradInto into, const float *inp, const float *dout, int N) {
    int n_vecs = (N + CK_VEC - 1) / CK_VEC;
    #pragma omp parallel for schedule(static)
    for (int iv = 0; iv < n_vecs; iv++) {
        int i = iv * CK_VEC, n = N - i < CK_VEC ? N - i : CK_VEC;
        if (n == CK_VEC) {
            ck_vec d = ck_gelu_grad(ck_load(inp + i)) * ck_load(dout + i);
            ck_store(dinp + i, into == GRAD_ADD ? ck_load(dinp + i) + d : d);
        } else {
            ck_vec d = ck_gelu_grad(ck_load_part(inp + i, n)) * ck_load_part(dout + i, n);
            ck_store_part(dinp + i, into == GRAD_ADD ? ck_load_part(dinp + i, n) + d : d, n);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Residual

// out (N) = inp1 + inp2
static inline void residual_forward(float *out, const float *inp1, const float *inp2, int N) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

// the sum passes its gradient unchanged to both inputs: dinp1 += dout, dinp2 += dout
static inline void residual_backward(float *dinp1, float *dinp2, const float *dout, int N) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

// ------------------------------------------------------------------------------------------------
// Softmax and cross-entropy at the LM head

// probs (B,T,Vp) = softmax of logits (B,T,Vp) over the first V columns; padded columns get 0
// (their logits, multiplied by wte's zero padding rows, are never looked at).
static inline void softmax_forward(float *probs, const float *logits, int B, int T, int V, int Vp) {
    int BT = B * T;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        float *p = probs + (size_t)bt * Vp;
        ck_softmax(p, logits + (size_t)bt * Vp, V);
        for (int i = V; i < Vp; i++) p[i] = 0.0f;
    }
}

// losses (B,T) = -log(probs[b][t][targets[b][t]]); finite, as softmax_forward's probabilities are
// at least 1.6e-38 (see ck_exp)
static inline void crossentropy_forward(float *losses, const float *probs, const int *targets, int B, int T, int Vp) {
    int BT = B * T;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) losses[bt] = -logf(probs[(size_t)bt * Vp + targets[bt]]);
}

// d loss / d logit = (probability - [the logit is the target]) * the loss's gradient
static inline float ce_dlogit(float p, int is_target, float dloss) {
    float indicator = is_target ? 1.0f : 0.0f;
    return (p - indicator) * dloss;
}

// The softmax and the cross-entropy backward in one step: d loss / d logit[i] = probs[i] - [i == target].
// dlogits (B,T,Vp) += (probs - onehot(target)) * dlosses (B,T), first V columns only (the padding
// has no gradient: left untouched by GRAD_ADD, written 0 by GRAD_WRITE, which writes every column).
static inline void crossentropy_softmax_backward(float *dlogits, GradInto into, const float *dlosses,
                                                 const float *probs, const int *targets, int B, int T, int V, int Vp) {
    int BT = B * T;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        float *dz = dlogits + (size_t)bt * Vp;
        const float *p = probs + (size_t)bt * Vp;
        float dloss = dlosses[bt];
        int target = targets[bt];
        if (into == GRAD_ADD)
            for (int i = 0; i < V; i++) dz[i] += ce_dlogit(p[i], i == target, dloss);
        else {
            for (int i = 0; i < V; i++) dz[i] = ce_dlogit(p[i], i == target, dloss);
            for (int i = V; i < Vp; i++) dz[i] = 0.0f;
        }
    }
}

#endif // CPU_KERNELS_H
