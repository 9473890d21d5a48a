/*
cpu/kernels_bf16.h: GPT-2's linear layer with bf16 weights and fp32 accumulation (header only), for
mixed-precision training on the CPU. Same conventions as cpu/kernels.h (row-major; a weight is
(OC, C); every backward ACCUMULATES into its outputs).

What is bf16 and what is fp32, per product of a linear layer:

    product                    A (M,K)          B (K,N)        out           K
    forward   out = inp W^T+b  inp    fp32->bf16  W^T   bf16     out   fp32    C
    backward  dinp += dout W   dout   fp32->bf16  W     bf16     dinp  fp32    OC
    backward  dW   += dout^T inp  dout fp32->bf16 inp fp32->bf16 dW   bf16    B*T
    backward  db   += sum dout    (no product: fp32 sums of fp32 dout)   db   bf16    B*T

and the embedding beside them (encoder_forward_bf16 / encoder_backward_bf16, at the end): bf16 wte
and wpe widened into fp32 activations; dwte and dwpe rows summed in fp32, rounded once per call.

- weights, biases and their gradients are bf16: they are the working parameters and gradients of
  mixed precision (2 + 2 bytes a parameter), gathered and reduced as bf16 by the engine;
- activations and activation gradients stay fp32 in memory, so every other kernel (layernorm, gelu,
  attention, softmax) is cpu/kernels.h's unchanged; the matmul rounds them to bf16 as it packs them
  (the bf16 dot product needs both operands in bf16). That is PyTorch autocast's rounding too: it
  casts a linear layer's input to bf16, so a reference built on it sees the same inputs;
- every sum is fp32. A bf16 output (dW, db) is rounded ONCE per call: out = bf16(old + the fp32 sum
  over all K), never after a partial sum, so a gradient accumulated over micro-steps and over the
  tied wte's two uses is rounded once per use, as cuBLAS does with a bf16 C and beta = 1.

Two paths compute the same products from the same packed bf16 operands, and differ only in the
instruction that multiplies and adds (BF16_PATH_ below; bf16_path_best() picks by CPUID, so the
file builds for any x86-64 and for other CPUs, which get the portable path):
- BF16_PATH_AVX512: VDPBF16PS (_mm512_dpbf16_ps), 16 fp32 lanes each += a0*b0 + a1*b1 for a pair of
  consecutive k; compiled with a target attribute, called only when the CPU has AVX512_BF16.
- BF16_PATH_PORTABLE: plain C (GCC vector types, as cpu/kernels.h): widen the bf16 to fp32 by a
  shift and add the two products of a pair in the order Intel documents for VDPBF16PS (k+1, then k).

Tolerance (bf16_sum_bound below; tests/unit/test_bf16_kernels.c applies it). Let u = 2^-24 (fp32's
unit roundoff) and u_b = 2^-8 (bf16's). The operands a_k, b_k are bf16, so each product a_k b_k
(8 x 8 significant bits) is exact in fp32 (barring underflow, below): the only error of an fp32
output is the accumulation.
An output is init + sum of K products, K + 1 terms summed in SOME order (tiles, depth blocks, pairs
and each path's instruction each fix one); any order of recursive fp32 summation of n terms obeys
    |fl(s) - s| <= gamma_n * S,   gamma_n = n u / (1 - n u),   S = |init| + sum_k |a_k b_k|
(Higham, Accuracy and Stability of Numerical Algorithms, 4.2). So with n = K + 1, against the exact
sum s of the bf16-rounded operands (a float64 sum is exact to 2^-53 relative, negligible):
    fp32 out:  |out - s| <= gamma_{K+1} S
    bf16 out:  |out - s| <= u_b |s| + (1 + u_b) gamma_{K+1} S       (one more rounding, of the sum)
and two paths, each within that of the same s, agree within twice it. Underflow: VDPBF16PS treats
denormal inputs and results as zero, and a product or partial sum below 2^-126 may be inexact or
flushed; each of the K + 1 steps then loses under 2^-126 max(1, |a|, |b|). bf16_sum_bound adds
(K + 1) 2^-120, which covers operands up to 2^6 in magnitude (the test's are below 1; a training
run's products are far from 2^-126, where the term is nothing beside gamma S). Against the fp32 operands before their
rounding, each product is off by up to (2 u_b + u_b^2) |a_k b_k|: that, not the accumulation, is
the 2^-8-sized error mixed precision accepts.

Blocking, as cpu/kernels.h's mm_gemm (and the same bytes per level): a register tile of 8 rows x 32
columns (16 zmm accumulators) runs over packed panels; one step of the tile is a PAIR of k, so a
B panel is BK_DEPTH_BLOCK/2 pairs x 32 columns of 32-bit words (32 KiB, L1) and an A block is 512 rows
x BK_DEPTH_BLOCK bf16 (512 KiB, L2). A task is 512 rows x 128 columns: at B*T = 512 tokens every
panel of the weight is packed once a matmul (two row blocks would pack each twice), and the 768-wide
layers still make 6 tasks for the threads. Each output is summed by one thread in an order fixed by
the shapes (the blocks never split a sum), so results are bitwise the same for any number of OpenMP
threads and any block sizes. Stack per thread: about 570 KiB, and 256 KiB more for a task with a
bf16 output (its fp32 sums until the one rounding).
*/
#ifndef CPU_KERNELS_BF16_H
#define CPU_KERNELS_BF16_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../proc/bf16.h"
#include "kernels.h"   // ck_vec, MM_STORE/MM_BIAS/MM_ADD
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BK_HAVE_X86 1
#else
#define BK_HAVE_X86 0
#endif

// ------------------------------------------------------------------------------------------------
// Which instruction multiplies

typedef enum { BF16_PATH_PORTABLE, BF16_PATH_AVX512 } Bf16Path;

// the fastest path this CPU can run (CPUID, with the OS's consent to use zmm registers)
static inline Bf16Path bf16_path_best(void) {
#if BK_HAVE_X86
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) return BF16_PATH_AVX512;
#endif
    return BF16_PATH_PORTABLE;
}
static inline int bf16_path_available(Bf16Path path) {
    return path == BF16_PATH_PORTABLE || bf16_path_best() == BF16_PATH_AVX512;
}
static inline const char *bf16_path_name(Bf16Path path) {
    return path == BF16_PATH_AVX512 ? "avx512bf16 (VDPBF16PS)" : "portable C";
}

// The matmuls' state, owned by whoever calls them (the CPU compute, a test, a benchmark): the path,
// and the buffers of the operands packed ahead (bk_pack_buffer), one for A and one for B, grown as
// a call needs and kept, since the shapes repeat every step; freed by bf16_matmul_free. Used by one
// thread at a time (the one that calls the matmuls; their OpenMP threads only fill the buffers).
typedef struct {
    Bf16Path path;
    uint32_t *pack[2];
    size_t pack_words[2];
} Bf16Matmul;

static inline Bf16Matmul bf16_matmul_new(Bf16Path path) { Bf16Matmul mm = {path, {NULL, NULL}, {0, 0}}; return mm; }
static inline void bf16_matmul_free(Bf16Matmul *mm) {
    for (int i = 0; i < 2; i++) { free(mm->pack[i]); mm->pack[i] = NULL; mm->pack_words[i] = 0; }
}

// Tolerance of one output, derived at the top of the file: n = K + 1 terms summed in fp32 whose
// magnitudes add up to S (= |init| + sum |a_k b_k| of the bf16 operands); bf16_out: the result was
// then rounded to bf16 once, and `exact` is the exact sum it approximates.
static inline double bf16_sum_bound(int n, double S, double exact, int bf16_out) {
    const double u = 1.0 / 16777216.0, u_b = 1.0 / 256.0;
    double gamma = n * u / (1.0 - n * u);
    double flushed = n * 0x1p-120;
    double acc = gamma * S + flushed;
    return bf16_out ? u_b * (exact < 0 ? -exact : exact) + (1.0 + u_b) * acc : acc;
}

// ------------------------------------------------------------------------------------------------
// Arrays (for the engine: the bf16 working copy from the fp32 master, and back)

static inline void bf16_from_f32_array(uint16_t *dst, const float *src, size_t n) {
    #pragma omp parallel for schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}
static inline void f32_from_bf16_array(float *dst, const uint16_t *src, size_t n) {
    #pragma omp parallel for schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

// ------------------------------------------------------------------------------------------------
// Packing: a pair of consecutive k of one row (A) or column (B) in one 32-bit word, k in the low
// half, k+1 in the high half: the layout VDPBF16PS reads. An odd depth's last word has k+1 = 0.

#define BK_TILE_ROWS 8
#define BK_TILE_COLS 32     // 2 zmm of 16 fp32 lanes; the same for both paths, so the panels are too
#ifndef BK_DEPTH_BLOCK
#define BK_DEPTH_BLOCK 512  // bf16 elements of k (256 pairs) per block: the fp32 kernel's bytes
#endif
#ifndef BK_ROW_BLOCK        // (block sizes can be set with -D to experiment)
#define BK_ROW_BLOCK (64 * BK_TILE_ROWS)   // rows of one parallel task: 512, all of B*T = 8*64
#endif
#ifndef BK_COL_BLOCK
#define BK_COL_BLOCK 128    // width of one parallel task (a multiple of BK_TILE_COLS)
#endif

static inline uint32_t bk_pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }
// element idx of an fp32 or a bf16 matrix, as bf16 (an fp32 one rounded)
static inline uint16_t bk_elem(const void *m, int is_bf16, size_t idx) {
    return is_bf16 ? ((const uint16_t *)m)[idx] : f32_to_bf16(((const float *)m)[idx]);
}

// the pair words of one contiguous run x[0..depth) (the last word's high half 0 if depth is odd).
// In memory, bf16 in order ARE the words (little-endian: k low, k+1 high); the loop vectorizes.
static inline void bk_pairs_of_run(uint32_t *words, const float *x, int depth) {
    int full = depth / 2;
    for (int kp = 0; kp < full; kp++) words[kp] = bk_pair(f32_to_bf16(x[2 * kp]), f32_to_bf16(x[2 * kp + 1]));
    if (depth % 2) words[full] = bk_pair(f32_to_bf16(x[depth - 1]), 0);
}

// Words from one A panel to the next: a panel's pairs plus one cache line, so that panels do not sit
// a power of two apart (writing a pair of every panel, as the transposed packing does, would then hit
// a single set of the L1 cache again and again)
static inline size_t bk_a_panel_stride(int pairs) { return (size_t)pairs * BK_TILE_ROWS + 16; }
#define BK_A_BLOCK_WORDS (BK_ROW_BLOCK / BK_TILE_ROWS * (BK_DEPTH_BLOCK / 2 * BK_TILE_ROWS + 16))

// A rows [0,rows) x depth [0,depth) (fp32, rounded here) into panels of BK_TILE_ROWS rows, panel p
// at dst + p*bk_a_panel_stride(pairs), pair-major inside; rows past `rows` are zero.
static inline void bk_pack_a(uint32_t *dst, const float *a, size_t a_rs, size_t a_ks, int rows, int depth) {
    int pairs = (depth + 1) / 2, panels = (rows + BK_TILE_ROWS - 1) / BK_TILE_ROWS;
    size_t stride = bk_a_panel_stride(pairs);
    if (a_ks == 1) {
        // rows of A are contiguous (inp, dout): a panel's rows made into words run by run (the
        // conversion vectorizes), then transposed into the panel 8 x 8 words at a time
        uint32_t words[BK_TILE_ROWS][BK_DEPTH_BLOCK / 2 + 8];
        for (int p = 0; p < panels; p++) {
            int n_rows = rows - p * BK_TILE_ROWS < BK_TILE_ROWS ? rows - p * BK_TILE_ROWS : BK_TILE_ROWS;
            for (int r = 0; r < n_rows; r++) bk_pairs_of_run(words[r], a + (size_t)(p * BK_TILE_ROWS + r) * a_rs, depth);
            for (int r = n_rows; r < BK_TILE_ROWS; r++) memset(words[r], 0, pairs * sizeof(uint32_t));
            uint32_t *panel = dst + (size_t)p * stride;
            for (int kp = 0; kp < pairs; kp++)
                for (int r = 0; r < BK_TILE_ROWS; r++) panel[(size_t)kp * BK_TILE_ROWS + r] = words[r][kp];
        }
    } else {
        // A is read as a transpose (a_rs == 1: dout^T): k and k+1 are two contiguous runs of rows,
        // made into words in one loop over all rows (it vectorizes), then dealt out 8 to a panel
        uint32_t words[BK_ROW_BLOCK];
        for (int kp = 0; kp < pairs; kp++) {
            const float *lo = a + (size_t)(2 * kp) * a_ks, *hi = lo + a_ks;
            if (2 * kp + 1 < depth)
                for (int r = 0; r < rows; r++) words[r] = bk_pair(f32_to_bf16(lo[r]), f32_to_bf16(hi[r]));
            else
                for (int r = 0; r < rows; r++) words[r] = bk_pair(f32_to_bf16(lo[r]), 0);
            for (int p = 0; p < panels; p++) {
                int n_rows = rows - p * BK_TILE_ROWS < BK_TILE_ROWS ? rows - p * BK_TILE_ROWS : BK_TILE_ROWS;
                uint32_t *w = dst + (size_t)p * stride + (size_t)kp * BK_TILE_ROWS;
                if (n_rows == BK_TILE_ROWS) memcpy(w, words + p * BK_TILE_ROWS, BK_TILE_ROWS * sizeof(uint32_t));
                else memcpy(w, words + p * BK_TILE_ROWS, n_rows * sizeof(uint32_t));
            }
        }
    }
    int tail_rows = rows % BK_TILE_ROWS;   // the last panel's missing rows
    if (tail_rows)
        for (int kp = 0; kp < pairs; kp++)
            for (int r = tail_rows; r < BK_TILE_ROWS; r++) dst[(size_t)(panels - 1) * stride + (size_t)kp * BK_TILE_ROWS + r] = 0;
}

// dst[j*ld_dst + i] = word j of src row i (src rows of bf16, ld_src bf16 apart), for i, j < 16: the
// transpose of a 16 x 16 block of words in four rounds of two-vector shuffles (round d swaps the
// off-diagonal d x d blocks of every 2d x 2d block)
typedef uint32_t bk_words16 __attribute__((vector_size(64)));
static inline void bk_transpose_16x16(uint32_t *dst, size_t ld_dst, const uint16_t *src, size_t ld_src) {
    bk_words16 r[16];
    for (int i = 0; i < 16; i++) memcpy(&r[i], src + i * ld_src, sizeof(bk_words16));
    const bk_words16 lo[4] = {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                              {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                              {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                              {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}};
    const bk_words16 hi[4] = {{1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31},
                              {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
                              {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
                              {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}};
    // unrolled whole, so the 16 rows stay in registers (a loop keeps them on the stack: each round
    // a store and a load of every row, a third of the time of packing W^T)
    #pragma GCC unroll 4
    for (int round = 0; round < 4; round++) {
        int d = 1 << round;
        #pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (i & d) continue;
            bk_words16 a = r[i], b = r[i + d];
            r[i] = __builtin_shuffle(a, b, lo[round]);
            r[i + d] = __builtin_shuffle(a, b, hi[round]);
        }
    }
    for (int j = 0; j < 16; j++) memcpy(dst + j * ld_dst, &r[j], sizeof(bk_words16));
}

// B depth [0,depth) x cols [0,cols) (cols <= BK_TILE_COLS; fp32 or bf16) into
// panel[kp*BK_TILE_COLS + n]; columns past `cols` are zero.
static inline void bk_pack_b(uint32_t *panel, const void *b, int b_bf16, size_t b_ks, size_t b_ns, int depth,
                             int cols) {
    int pairs = (depth + 1) / 2;
    if (b_bf16 && b_ks == 1 && depth % 2 == 0) {
        // W^T: the pair (W[n][k], W[n][k+1]) is already one word of W's row n (little-endian)
        const uint16_t *w = b;
        int kp = 0;
        if (cols == BK_TILE_COLS)   // 16 x 16 blocks of words, transposed in registers
            for (; kp + 16 <= pairs; kp += 16)
                for (int n0 = 0; n0 < BK_TILE_COLS; n0 += 16)
                    bk_transpose_16x16(panel + (size_t)kp * BK_TILE_COLS + n0, BK_TILE_COLS, w + n0 * b_ns + 2 * kp, b_ns);
        for (int n = 0; n < cols; n++)   // the rest word by word
            for (int k = kp; k < pairs; k++) memcpy(panel + (size_t)k * BK_TILE_COLS + n, w + n * b_ns + 2 * (size_t)k, 4);
    } else if (b_ns == 1) {
        // rows of B are contiguous (W for dinp, inp for dweight): interleave rows k and k+1
        for (int kp = 0; kp < pairs; kp++) {
            size_t k = 2 * (size_t)kp;
            int has_hi = (int)k + 1 < depth;
            uint32_t *row = panel + (size_t)kp * BK_TILE_COLS;
            if (b_bf16) {
                const uint16_t *lo = (const uint16_t *)b + k * b_ks, *hi = lo + b_ks;
                for (int n = 0; n < cols; n++) row[n] = bk_pair(lo[n], has_hi ? hi[n] : 0);
            } else {
                const float *lo = (const float *)b + k * b_ks, *hi = lo + b_ks;
                if (has_hi)
                    for (int n = 0; n < cols; n++) row[n] = bk_pair(f32_to_bf16(lo[n]), f32_to_bf16(hi[n]));
                else
                    for (int n = 0; n < cols; n++) row[n] = bk_pair(f32_to_bf16(lo[n]), 0);
            }
        }
    } else {
        // any other stride (an odd depth of W^T): element by element
        for (int kp = 0; kp < pairs; kp++) {
            size_t k = 2 * (size_t)kp;
            int has_hi = (int)k + 1 < depth;
            uint32_t *row = panel + (size_t)kp * BK_TILE_COLS;
            for (int n = 0; n < cols; n++) {
                size_t idx = k * b_ks + n * b_ns;
                row[n] = bk_pair(bk_elem(b, b_bf16, idx), has_hi ? bk_elem(b, b_bf16, idx + b_ks) : 0);
            }
        }
    }
    for (int kp = 0; kp < pairs; kp++)
        for (int n = cols; n < BK_TILE_COLS; n++) panel[(size_t)kp * BK_TILE_COLS + n] = 0;
}

// ------------------------------------------------------------------------------------------------
// The register tile, one per path: out (rows x cols of a BK_TILE_ROWS x BK_TILE_COLS tile, row
// stride ldo) = init + sum over `pairs` of the packed panels; mode and bias as mm_tile's.
// next_a: an A panel the AVX-512 tile prefetches while it runs (bk_gemm says why).

// sums[r][n] -> out, with the init the mode says (the ragged-edge store of both tiles)
static inline void bk_store_sums(float *out, size_t ldo, const float sums[BK_TILE_ROWS][BK_TILE_COLS], int rows,
                                 int cols, const float *bias, int mode) {
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < cols; n++) {
            float *o = out + r * ldo + n;
            float init = mode == MM_ADD ? *o : mode == MM_BIAS ? bias[n] : 0.0f;
            *o = init + sums[r][n];
        }
}

typedef uint32_t bk_uvec __attribute__((vector_size(CK_VEC * sizeof(uint32_t))));   // words of pairs
static inline float bk_lo_f32(uint32_t w) { return bf16_to_f32((uint16_t)w); }
static inline float bk_hi_f32(uint32_t w) { return bf16_to_f32((uint16_t)(w >> 16)); }

static inline void bk_tile_portable(float *out, size_t ldo, const uint32_t *a_panel, const uint32_t *b_panel,
                                    int pairs, int rows, int cols, const float *bias, int mode) {
    enum { VECS = BK_TILE_COLS / CK_VEC };
    ck_vec acc[BK_TILE_ROWS][VECS];
    for (int r = 0; r < BK_TILE_ROWS; r++)
        for (int v = 0; v < VECS; v++) acc[r][v] = (ck_vec){0};
    for (int kp = 0; kp < pairs; kp++) {
        ck_vec b_lo[VECS], b_hi[VECS];   // the panel's row of pairs, widened: k and k+1
        for (int v = 0; v < VECS; v++) {
            bk_uvec w;
            memcpy(&w, b_panel + (size_t)kp * BK_TILE_COLS + v * CK_VEC, sizeof(w));
            b_lo[v] = (ck_vec)(w << 16);
            b_hi[v] = (ck_vec)(w & 0xffff0000u);
        }
        for (int r = 0; r < BK_TILE_ROWS; r++) {
            uint32_t a = a_panel[(size_t)kp * BK_TILE_ROWS + r];
            float a_lo = bk_lo_f32(a), a_hi = bk_hi_f32(a);
            for (int v = 0; v < VECS; v++) {
                acc[r][v] += a_hi * b_hi[v];
                acc[r][v] += a_lo * b_lo[v];
            }
        }
    }
    float sums[BK_TILE_ROWS][BK_TILE_COLS];
    for (int r = 0; r < BK_TILE_ROWS; r++)
        for (int v = 0; v < VECS; v++) memcpy(&sums[r][v * CK_VEC], &acc[r][v], sizeof(ck_vec));
    bk_store_sums(out, ldo, (const float(*)[BK_TILE_COLS])sums, rows, cols, bias, mode);
}

#if BK_HAVE_X86
__attribute__((target("avx512f,avx512bf16"), noinline))
static void bk_tile_avx512(float *out, size_t ldo, const uint32_t *a_panel, const uint32_t *b_panel, int pairs,
                           int rows, int cols, const float *bias, int mode, const uint32_t *next_a) {
    __m512 acc[BK_TILE_ROWS][2];
    for (int r = 0; r < BK_TILE_ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int kp = 0; kp < pairs; kp++) {
        const uint32_t *b_row = b_panel + (size_t)kp * BK_TILE_COLS;   // 64-byte aligned: see bk_gemm
        _mm_prefetch((const char *)(next_a + (size_t)kp * BK_TILE_ROWS), _MM_HINT_T0);   // see bk_gemm
        __m512bh b0 = (__m512bh)_mm512_load_si512(b_row), b1 = (__m512bh)_mm512_load_si512(b_row + 16);
        for (int r = 0; r < BK_TILE_ROWS; r++) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)a_panel[(size_t)kp * BK_TILE_ROWS + r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], b0, a);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], b1, a);
        }
    }
    if (rows == BK_TILE_ROWS && cols == BK_TILE_COLS) {   // full tile: whole vectors
        for (int r = 0; r < BK_TILE_ROWS; r++)
            for (int v = 0; v < 2; v++) {
                float *o = out + r * ldo + 16 * v;
                __m512 init = mode == MM_ADD ? _mm512_loadu_ps(o)
                            : mode == MM_BIAS ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
                _mm512_storeu_ps(o, _mm512_add_ps(init, acc[r][v]));
            }
    } else {
        float sums[BK_TILE_ROWS][BK_TILE_COLS];
        for (int r = 0; r < BK_TILE_ROWS; r++)
            for (int v = 0; v < 2; v++) _mm512_storeu_ps(&sums[r][16 * v], acc[r][v]);
        bk_store_sums(out, ldo, (const float(*)[BK_TILE_COLS])sums, rows, cols, bias, mode);
    }
}
#endif

static inline void bk_tile(Bf16Path path, float *out, size_t ldo, const uint32_t *a_panel, const uint32_t *b_panel,
                           int pairs, int rows, int cols, const float *bias, int mode, const uint32_t *next_a) {
#if BK_HAVE_X86
    if (path == BF16_PATH_AVX512) { bk_tile_avx512(out, ldo, a_panel, b_panel, pairs, rows, cols, bias, mode, next_a); return; }
#endif
    bk_tile_portable(out, ldo, a_panel, b_panel, pairs, rows, cols, bias, mode);
}

// ------------------------------------------------------------------------------------------------
// The matrix product: out (M,N) fp32 = init + A (M,K) @ B (K,N), strides and init as mm_gemm's
// (A fp32; B fp32 or bf16, b_bf16 says which; bias fp32). Single-threaded; N <= BK_COL_BLOCK (a task).
//
// Packed once (bk_gemm_parallel): an operand that several tasks read is packed before them, and the
// tasks read its panels (a_pre, b_pre) instead of packing their own copies; the panels are the same
// words either way, so the results are too.
//   operand   packed ahead when           layout
//   A         3 or more column blocks     block (row block rb, depth block kb) at (rb*KB + kb) * BK_A_BLOCK_WORDS
//   B         3 or more row blocks        panel (depth block kb, column tile ct) at (kb*CT + ct) * BK_B_PANEL_WORDS
// (the lm head's forward packs its 512 x 768 input once instead of 197 times, its dweight the same
// input as B once instead of 197 times). a_pre, b_pre point at this task's first block and panel;
// b_kstride is the words from one depth block's panels to the next (CT * BK_B_PANEL_WORDS).
#define BK_B_PANEL_WORDS (BK_DEPTH_BLOCK / 2 * BK_TILE_COLS)
typedef struct { const uint32_t *a_pre, *b_pre; size_t b_kstride; } BkPacked;

// the length of the block that starts at `at` of `total` (a full `block`, or the ragged last one)
static inline int bk_block_len(int total, int at, int block) { return total - at < block ? total - at : block; }

static inline void bk_gemm(Bf16Path path, float *out, size_t ldo, const float *a, size_t a_rs, size_t a_ks,
                           const void *b, int b_bf16, size_t b_ks, size_t b_ns, const float *bias, int accumulate,
                           int M, int N, int K, BkPacked pre) {
    uint32_t a_block[BK_A_BLOCK_WORDS] __attribute__((aligned(64)));
    uint32_t b_panels[BK_COL_BLOCK / BK_TILE_COLS * BK_B_PANEL_WORDS] __attribute__((aligned(64)));
    size_t b_elem = b_bf16 ? sizeof(uint16_t) : sizeof(float);
    const int tiles = (N + BK_TILE_COLS - 1) / BK_TILE_COLS;   // N <= BK_COL_BLOCK: one task
    // Per depth block: the task's B panels (4 x 32 KiB, L2), then each A panel (8 KiB, L1) meets all
    // of them. A panel's first tile also prefetches the next A panel (next_a): a packed A that
    // lives in memory (the lm head's backward: dlogits, 51 MB) otherwise stalls the tile at each
    // 4 KiB page, where the hardware's prefetchers stop (lm head backward 264-301 -> 329-343
    // GFLOP/s on one thread, tools/bench/bench_bf16_kernels.c). The same sums in the same order.
    for (int r0 = 0; r0 < M; r0 += BK_ROW_BLOCK) {   // with pre.a_pre, M is one row block
        int rows = bk_block_len(M, r0, BK_ROW_BLOCK);
        for (int k0 = 0, kb = 0; k0 < K; k0 += BK_DEPTH_BLOCK, kb++) {
            int depth = bk_block_len(K, k0, BK_DEPTH_BLOCK), pairs = (depth + 1) / 2;
            int mode = (accumulate || k0 > 0) ? MM_ADD : bias ? MM_BIAS : MM_STORE;
            const uint32_t *a_panels = pre.a_pre ? pre.a_pre + (size_t)kb * BK_A_BLOCK_WORDS : a_block;
            if (!pre.a_pre) bk_pack_a(a_block, a + (size_t)r0 * a_rs + (size_t)k0 * a_ks, a_rs, a_ks, rows, depth);
            const uint32_t *b_at = pre.b_pre ? pre.b_pre + (size_t)kb * pre.b_kstride : b_panels;
            for (int t = 0; !pre.b_pre && t < tiles; t++) {
                int n0 = t * BK_TILE_COLS, cols = bk_block_len(N, n0, BK_TILE_COLS);
                bk_pack_b(b_panels + (size_t)t * BK_B_PANEL_WORDS, (const char *)b + ((size_t)k0 * b_ks + (size_t)n0 * b_ns) * b_elem,
                          b_bf16, b_ks, b_ns, depth, cols);
            }
            for (int r = 0; r < rows; r += BK_TILE_ROWS) {
                int tile_rows = bk_block_len(rows, r, BK_TILE_ROWS);
                const uint32_t *a_panel = a_panels + (size_t)(r / BK_TILE_ROWS) * bk_a_panel_stride(pairs);
                const uint32_t *next_a = r + BK_TILE_ROWS < rows ? a_panel + bk_a_panel_stride(pairs) : a_panel;
                for (int t = 0; t < tiles; t++) {
                    int n0 = t * BK_TILE_COLS, cols = bk_block_len(N, n0, BK_TILE_COLS);
                    bk_tile(path, out + (size_t)(r0 + r) * ldo + n0, ldo, a_panel, b_at + (size_t)t * BK_B_PANEL_WORDS,
                            pairs, tile_rows, cols, bias ? bias + n0 : NULL, mode, t == 0 ? next_a : a_panel);
                }
            }
        }
    }
}

// One task's block with a bf16 output: the fp32 sums over all of K first, then out = bf16(old + sum)
// (accumulate) or bf16(sum), one rounding per element.
__attribute__((noinline))
static void bk_gemm_into_bf16(Bf16Path path, uint16_t *out, size_t ldo, const float *a, size_t a_rs, size_t a_ks,
                              const void *b, int b_bf16, size_t b_ks, size_t b_ns, int accumulate,
                              int M, int N, int K, BkPacked pre) {
    float sums[BK_ROW_BLOCK * BK_COL_BLOCK];   // M <= BK_ROW_BLOCK, N <= BK_COL_BLOCK: one task
    bk_gemm(path, sums, N, a, a_rs, a_ks, b, b_bf16, b_ks, b_ns, NULL, 0, M, N, K, pre);
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            uint16_t *o = out + (size_t)r * ldo + n;
            *o = f32_to_bf16((accumulate ? bf16_to_f32(*o) : 0.0f) + sums[(size_t)r * N + n]);
        }
}

// The buffer an operand is packed into (which: 0 for A, 1 for B), at least `words` long.
static inline uint32_t *bk_pack_buffer(Bf16Matmul *mm, int which, size_t words) {
    if (words > mm->pack_words[which]) {
        free(mm->pack[which]);
        mm->pack[which] = aligned_alloc(64, (words * sizeof(uint32_t) + 63) / 64 * 64);
        if (!mm->pack[which]) { fprintf(stderr, "error: out of memory (%zu bytes to pack a matmul's operand)\n", words * 4); exit(1); }
        mm->pack_words[which] = words;
    }
    return mm->pack[which];
}

// Every block of A (row blocks x depth blocks) packed, the blocks split over the threads.
static inline uint32_t *bk_pack_a_all(Bf16Matmul *mm, const float *a, size_t a_rs, size_t a_ks, int M, int K) {
    int row_blocks = (M + BK_ROW_BLOCK - 1) / BK_ROW_BLOCK, depth_blocks = (K + BK_DEPTH_BLOCK - 1) / BK_DEPTH_BLOCK;
    uint32_t *pre = bk_pack_buffer(mm, 0, (size_t)row_blocks * depth_blocks * BK_A_BLOCK_WORDS);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int rb = 0; rb < row_blocks; rb++)
        for (int kb = 0; kb < depth_blocks; kb++) {
            const int r0 = rb * BK_ROW_BLOCK, k0 = kb * BK_DEPTH_BLOCK;
            bk_pack_a(pre + ((size_t)rb * depth_blocks + kb) * BK_A_BLOCK_WORDS, a + (size_t)r0 * a_rs + (size_t)k0 * a_ks,
                      a_rs, a_ks, bk_block_len(M, r0, BK_ROW_BLOCK), bk_block_len(K, k0, BK_DEPTH_BLOCK));
        }
    return pre;
}

// Every panel of B (depth blocks x column tiles) packed, the panels split over the threads.
static inline uint32_t *bk_pack_b_all(Bf16Matmul *mm, const void *b, int b_bf16, size_t b_ks, size_t b_ns, int N, int K) {
    int depth_blocks = (K + BK_DEPTH_BLOCK - 1) / BK_DEPTH_BLOCK, tiles = (N + BK_TILE_COLS - 1) / BK_TILE_COLS;
    size_t b_elem = b_bf16 ? sizeof(uint16_t) : sizeof(float);
    uint32_t *pre = bk_pack_buffer(mm, 1, (size_t)depth_blocks * tiles * BK_B_PANEL_WORDS);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int kb = 0; kb < depth_blocks; kb++)
        for (int ct = 0; ct < tiles; ct++) {
            const int k0 = kb * BK_DEPTH_BLOCK, n0 = ct * BK_TILE_COLS;
            bk_pack_b(pre + ((size_t)kb * tiles + ct) * BK_B_PANEL_WORDS,
                      (const char *)b + ((size_t)k0 * b_ks + (size_t)n0 * b_ns) * b_elem, b_bf16, b_ks, b_ns,
                      bk_block_len(K, k0, BK_DEPTH_BLOCK), bk_block_len(N, n0, BK_TILE_COLS));
        }
    return pre;
}

// bk_gemm over all threads, out cut into BK_ROW_BLOCK x BK_COL_BLOCK tasks as mm_gemm_parallel's.
// Exactly one of out_f32, out_bf16 is non-NULL; bias (bf16, only with out_f32) may be NULL.
static inline void bk_gemm_parallel(Bf16Matmul *mm, float *out_f32, uint16_t *out_bf16, size_t ldo,
                                    const float *a, size_t a_rs, size_t a_ks, const void *b, int b_bf16,
                                    size_t b_ks, size_t b_ns, const uint16_t *bias, int accumulate,
                                    int M, int N, int K) {
    int row_blocks = (M + BK_ROW_BLOCK - 1) / BK_ROW_BLOCK, col_blocks = (N + BK_COL_BLOCK - 1) / BK_COL_BLOCK;
    int depth_blocks = (K + BK_DEPTH_BLOCK - 1) / BK_DEPTH_BLOCK, tiles = (N + BK_TILE_COLS - 1) / BK_TILE_COLS;
    size_t b_elem = b_bf16 ? sizeof(uint16_t) : sizeof(float);
    const Bf16Path path = mm->path;
    const uint32_t *a_pre = col_blocks >= 3 ? bk_pack_a_all(mm, a, a_rs, a_ks, M, K) : NULL;
    const uint32_t *b_pre = row_blocks >= 3 ? bk_pack_b_all(mm, b, b_bf16, b_ks, b_ns, N, K) : NULL;
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int cb = 0; cb < col_blocks; cb++) {
        for (int rb = 0; rb < row_blocks; rb++) {
            int r0 = rb * BK_ROW_BLOCK, n0 = cb * BK_COL_BLOCK;
            int rows = bk_block_len(M, r0, BK_ROW_BLOCK);
            int cols = bk_block_len(N, n0, BK_COL_BLOCK);
            const float *a_at = a + (size_t)r0 * a_rs;
            const void *b_at = (const char *)b + (size_t)n0 * b_ns * b_elem;
            BkPacked pre = {a_pre ? a_pre + (size_t)rb * depth_blocks * BK_A_BLOCK_WORDS : NULL,
                            b_pre ? b_pre + (size_t)(n0 / BK_TILE_COLS) * BK_B_PANEL_WORDS : NULL,
                            (size_t)tiles * BK_B_PANEL_WORDS};
            if (out_bf16) {
                bk_gemm_into_bf16(path, out_bf16 + (size_t)r0 * ldo + n0, ldo, a_at, a_rs, a_ks, b_at, b_bf16,
                                  b_ks, b_ns, accumulate, rows, cols, K, pre);
            } else {
                float bias_f32[BK_COL_BLOCK] __attribute__((aligned(64)));
                for (int n = 0; bias && n < cols; n++) bias_f32[n] = bf16_to_f32(bias[n0 + n]);
                bk_gemm(path, out_f32 + (size_t)r0 * ldo + n0, ldo, a_at, a_rs, a_ks, b_at, b_bf16, b_ks, b_ns,
                        bias ? bias_f32 : NULL, accumulate, rows, cols, K, pre);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Linear layer

// out (B,T,OC) fp32 = inp (B,T,C) fp32 @ weight (OC,C)^T bf16 + bias (OC) bf16; bias may be NULL.
static inline void matmul_forward_bf16(Bf16Matmul *mm, float *out, const float *inp, const uint16_t *weight,
                                       const uint16_t *bias, int B, int T, int C, int OC) {
    bk_gemm_parallel(mm, out, NULL, OC, inp, C, 1, weight, 1, 1, C, bias, 0, B * T, OC, C);
}

// Given dout (B,T,OC) fp32 = dL/dout of matmul_forward_bf16:
//   dinp (B,T,C) fp32    += dout @ weight                         (= with GRAD_WRITE)
//   dweight (OC,C) bf16   = bf16(dweight + dout^T @ inp)
//   dbias (OC) bf16       = bf16(dbias + dout summed over tokens)   (dbias may be NULL)
static inline void matmul_backward_bf16(Bf16Matmul *mm, float *dinp, GradInto dinp_into, uint16_t *dweight,
                                        uint16_t *dbias, const float *dout, const float *inp, const uint16_t *weight,
                                        int B, int T, int C, int OC) {
    int BT = B * T;
    bk_gemm_parallel(mm, dinp, NULL, C, dout, OC, 1, weight, 1, C, 1, NULL, dinp_into == GRAD_ADD, BT, C, OC);
    bk_gemm_parallel(mm, NULL, dweight, C, dout, 1, OC, inp, 0, C, 1, NULL, 1, OC, C, BT);
    if (dbias) {
        // over chunks of channels, sequential over tokens (a fixed order), rounded once at the end
        int chunks = (OC + 255) / 256;
        #pragma omp parallel for schedule(static)
        for (int ch = 0; ch < chunks; ch++) {
            int o0 = ch * 256, o1 = o0 + 256 < OC ? o0 + 256 : OC;
            float sum[256];
            for (int o = o0; o < o1; o++) sum[o - o0] = bf16_to_f32(dbias[o]);
            for (int bt = 0; bt < BT; bt++) {
                const float *dout_bt = dout + (size_t)bt * OC;
                for (int o = o0; o < o1; o++) sum[o - o0] += dout_bt[o];
            }
            for (int o = o0; o < o1; o++) dbias[o] = f32_to_bf16(sum[o - o0]);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Embedding with bf16 tables (fp32 out, as every activation)

// out (B,T,C) fp32 = wte (V,C)[inp (B,T)] + wpe (maxT,C)[t], both widened exactly: one fp32 sum
static inline void encoder_forward_bf16(float *out, const int *inp, const uint16_t *wte, const uint16_t *wpe,
                                        int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *out_bt = out + ((size_t)b * T + t) * C;
            const uint16_t *wte_ix = wte + (size_t)inp[b * T + t] * C, *wpe_t = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) out_bt[i] = bf16_to_f32(wte_ix[i]) + bf16_to_f32(wpe_t[i]);
        }
}

// dwte (V,C) bf16 = bf16(dwte + the dout rows of every position of each token), dwpe (maxT,C) bf16
// = bf16(dwpe + dout summed over b): each row's sum is fp32 in position order and rounded ONCE, as
// matmul_backward_bf16's dW. A token's row is summed by the thread that owns its first position
// (a later position of the same token is skipped), so threads never share a row.
static inline void encoder_backward_bf16(uint16_t *dwte, uint16_t *dwpe, const float *dout, const int *inp,
                                         int B, int T, int C) {
    const int BT = B * T;
    #pragma omp parallel for schedule(dynamic, 8)
    for (int p = 0; p < BT; p++) {
        int first = 1;
        for (int q = 0; q < p && first; q++) first = inp[q] != inp[p];
        if (!first) continue;
        uint16_t *row = dwte + (size_t)inp[p] * C;
        float sum[C];
        for (int i = 0; i < C; i++) sum[i] = bf16_to_f32(row[i]);
        for (int q = p; q < BT; q++)
            if (inp[q] == inp[p])
                for (int i = 0; i < C; i++) sum[i] += dout[(size_t)q * C + i];
        for (int i = 0; i < C; i++) row[i] = f32_to_bf16(sum[i]);
    }
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        uint16_t *row = dwpe + (size_t)t * C;
        float sum[C];
        for (int i = 0; i < C; i++) sum[i] = bf16_to_f32(row[i]);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < C; i++) sum[i] += dout[((size_t)b * T + t) * C + i];
        for (int i = 0; i < C; i++) row[i] = f32_to_bf16(sum[i]);
    }
}

#endif
