// gpu/flash_attention_tc.cuh: fused causal self-attention on tensor cores (WMMA, bf16 inputs, fp32
// accumulation), forward and backward: the algorithm of gpu/flash_attention.cuh (read its header
// first: the math, lse, D, the two-kernel deterministic backward), with every product of a tile of
// queries and a tile of keys done as 16x16x16 matrix multiplies by a warp (nvcuda::wmma).
//
// Shapes: qkv (B,T,3C) = [q | k | v], out and dout (B,T,C), lse and D (B,NH,T) fp32, dqkv (B,T,3C).
// Head size HS <= 64 and a multiple of 8 (the portable path's rule); the head dimension is padded
// with zeros to HSP = 32 or 64 in shared memory, which changes no dot product. Any T: rows past T
// are zeros in shared memory, are masked, and are never stored. BF16 builds only (WMMA has no fp32
// inputs; the FP32 build uses the portable path).
//
// Tiling. A kernel's shape is compile-time (TcShape): a block is WARPS warps and owns BR = RPW *
// WARPS rows, RPW = 16 or 32 per warp (one or two 16-row A fragments): query rows in the forward
// and dq kernels, key rows in the dk/dv kernel. Its own rows' operands (q and dout, or k and v) are
// staged through shared memory once into each warp's A fragments and stay in registers; the other
// side streams through shared memory in tiles of BC rows (one buffer), fetched into registers one
// tile ahead so the global loads of tile i+1 are in flight while tile i is multiplied:
//     forward (grid ceil(T/BR) x NH x B):  per key tile
//         S = Q K^T (RPW x BC per warp) -> shared memory; 32/RPW lanes per row run the online
//         softmax (row max, p = exp(s - m), l, the rescale exp(m_old - m_new)); P -> bf16 in shared
//         memory; O = O * rescale + P V, O in fp32 accumulator fragments for the whole loop.
//     dq (over query tiles):  per key tile  S = Q K^T, dP = dout V^T, dS = P * (dP - D), dQ += dS K;
//         also D = rowsum(dout * out), written for the dk/dv kernel.
//     dk, dv (over key tiles): per query tile  S^T = K Q^T, dP^T = V dout^T, dV += P^T dout,
//         dK += dS^T Q.
// Why these shapes. A warp's rows are whole fragments, so they need no exchange with other warps;
// all warps of a block share every streamed tile (fetched once per block, read by each warp from
// shared memory). What limits a WMMA kernel here is shared memory (128 bytes per clock per SM):
// every B fragment a warp reads (512 bytes) feeds one product per 16 own rows, so 32 rows per warp
// halve those reads per FLOP; with the S and dS round trips through shared memory and the per-row
// scalar reads counted too, the forward moves ~102 against ~137 bytes per KFLOP, dq ~78 against ~115
// (dk/dv ~133). The price is registers: the dq kernel at 32 rows holds Q, dout (A) and dQ
// (accumulators) for two fragments, up to 255 registers, 2 blocks per SM; the dk/dv kernel at 32
// rows would need 192 registers for K, V, dK, dV alone, so it stays at 16. Streamed tiles of 32 rows
// keep the static shared memory under 48 KB (no opt-in) with 32 own rows per warp, and halve the
// register prefetch (16 registers instead of 32), which brings dq and dk/dv at 16 rows to 168
// registers, 3 blocks of 4 warps per SM. The variants (TcRows16, TcRows32) are checked and timed
// side by side by tests/cuda/attention.cu.
// Which variant: TcDefault = TcRows32, from an estimate (no GPU has measured it yet): for GPT-2
// 124M, B=16 T=1024, ~150 GB of shared-memory traffic per step (TcRows16 ~178 GB), ~4.8 ms (~5.7
// ms) at full shared-memory speed on an H200, more than the tensor cores need (~1.4 TFLOP executed,
// ~2 ms at mma.sync's practical rate). Replace it when tests/cuda/attention.cu on a GPU says otherwise.
// Each output element has one owner and the products run in a fixed order: no atomics, the same
// bits on every run. Causality: the query tile t sees the key tiles up to its last query; on the
// diagonal a warp skips the 16-blocks entirely in its future (uniform across the warp; a warp whose
// rows all precede a tile skips the tile), and elements above the diagonal are masked element by
// element. Blocks of the forward and dq kernels start with the last query tiles, which have the
// most work, and those of the dk/dv kernel with the first key tiles, so the short ones fill the tail.
//
// Fragments are opaque: CUDA does not say which lane holds which element. Two things get around
// that without assuming a mapping. (1) Elementwise math on accumulators needs each element's row
// and column: every warp loads a 16x16 "coordinate" matrix (element (r,c) = 16r + c) into an
// accumulator fragment once; fragments of the same kind share the mapping, so coord.x[e] names
// the position of x[e] in every accumulator. (2) An accumulator becomes a bf16 A operand (P, dS)
// or an output row through shared memory: stored as fp32 to a per-warp scratch, then each lane
// converts 8 consecutive elements of one row (one 16-byte store; tc_store_bf16). Under the CPU emulator
// (tools/emu/include/mma.h) the mapping is scrambled on purpose, so code that assumed one fails
// there; tests/cuda/attention.cu checks every output element against a double-precision reference.
//
// Rounding (bf16 build): S, dP and all sums are fp32; P is rounded to bf16 before P V (while the
// row sum l adds the unrounded fp32 p), and P^T, dS, dS^T are rounded to bf16 before their
// products: single elements of out and dqkv carry ~2^-9 relative error per rounded factor, as in
// every bf16 tensor-core attention. lse is fp32 throughout.
//
// Synchronization: __syncthreads only around the shared tiles (every warp done reading the old
// tile before it is overwritten; the new tile complete before anyone reads it: also when the block's
// own rows are staged through it, BC rows at a time); __syncwarp where a warp's lanes hand each
// other data through their own scratch (scores, P, dS, row factors).
// Shared memory per block (HSP = 64, TcRows16 / TcRows32): forward 46,336 / 39,424 B, dq 20,992 /
// 26,624 B, dk/dv 25,856 B: static, under the 48 KB that needs no opt-in.
// Registers (ptxas -v, sm_90, HSP = 64; no spills): forward 168 / 168, dq 168 / 255, dk/dv 168
// (which therefore reads lse and D as two 4-byte loads: the dq kernel's paired 8-byte read spilled
// there).
// Not done, for speed on sm_90: the S, P and dS round trips through fp32 shared memory and the
// per-element reads of lse and D (needed because WMMA's fragment layout is unspecified; with
// mma.sync's documented layout they would stay in registers: the largest remaining share of the
// shared-memory traffic, most of all in dk/dv, now the slowest kernel); a second tile buffer filled
// by cp.async or TMA; Hopper's wgmma instead of WMMA (which compiles to mma.sync).
#pragma once
#include "common.cuh"
#include "flash_attention.cuh"

// ZERO3_GPU_ATTENTION=portable: the trainer's tensor-core entry points run the portable kernels
// (read where they are called: the environment is the only state). Defined in every build, so the
// trainer's description can name the path that ran (attention_path_name).
static inline int attention_forced_portable(void) {
    const char* env = getenv("ZERO3_GPU_ATTENTION");
    return env != NULL && strcmp(env, "portable") == 0;
}
// the attention a build with this name runs: the portable kernels when forced on a tensor-core build
static inline const char* attention_path_name(int tensor_cores, const char* built) {
    return tensor_cores && attention_forced_portable() ? "flash attention (portable: ZERO3_GPU_ATTENTION=portable)" : built;
}

#if defined(ENABLE_BF16)
#include <mma.h>

#define TC_PAD 8  // bf16 padding per shared row: rows shift by 16 bytes, fewer bank conflicts

// A kernel's shape, all compile-time: HSP the padded head dimension (32 or 64); RPW rows per warp
// (16 or 32: one or two 16-row A fragments); WARPS warps per block, which owns BR = RPW * WARPS
// rows; BC rows per streamed tile (a multiple of RPW, so a warp's rows sit in one tile when the
// block stages its own rows through it); MINB the blocks per SM the kernel is compiled for
// (__launch_bounds__: ptxas keeps registers <= 65536 / (MINB * THREADS), 168 for 3 blocks of 128)
template <int HSP_, int RPW_, int WARPS_, int BC_, int MINB_>
struct TcShape {
    static constexpr int HSP = HSP_, RPW = RPW_, WARPS = WARPS_, BC = BC_, MINB = MINB_;
    static constexpr int MF = RPW / 16;              // 16-row fragments per warp
    static constexpr int LPR = WARP_SIZE / RPW;      // lanes per row in the row-wise loops (softmax, D)
    static constexpr int THREADS = WARPS * WARP_SIZE;
    static constexpr int BR = RPW * WARPS;           // own rows per block
    static constexpr int NB = BC / 16;               // 16-row blocks of a streamed tile
    static constexpr int DB = HSP / 16;              // 16-column blocks of the head dimension
    static constexpr int LD = HSP + TC_PAD;          // row stride of a head tile in shared memory
    static constexpr int LDP = BC + TC_PAD;          // row stride of a warp's P / dS (its rows x a tile)
    static_assert(RPW == 16 || RPW == 32, "one or two fragments of rows per warp");
    static_assert(BC % RPW == 0 && BC % 16 == 0, "a warp's rows lie in one tile");
    static_assert(BC * HSP / 8 % THREADS == 0, "a tile is a whole number of 16-byte vectors per thread");
    static_assert(THREADS >= 2 * BC, "the dk/dv kernel's threads carry one lse or D each");
};
// The variants: the shapes of the three kernels. tests/cuda/attention.cu checks and times both; the
// trainer uses TcDefault (the header's "Which variant" says why).
//   TcRows16: 16 rows per warp in every kernel (the first version's forward; dq and dk/dv stream
//     32-row tiles, whose smaller register prefetch keeps them at 168 registers without spills).
//   TcRows32: 32 rows per warp in the forward and dq kernels: every B fragment read from shared
//     memory feeds two products, half the shared-memory reads per FLOP; the streamed tile is 32 rows
//     (static shared memory under 48 KB). dq needs up to 255 registers: 2 blocks per SM. The dk/dv
//     kernel stays at 16 rows: 32 would hold 192 registers of fragments (K, V, dK, dV) alone.
template <int HSP> struct TcRows16 {
    typedef TcShape<HSP, 16, 4, 64, 3> Forward;
    typedef TcShape<HSP, 16, 4, 32, 3> Dq;
    typedef TcShape<HSP, 16, 4, 32, 3> Dkdv;
};
template <int HSP> struct TcRows32 {
    typedef TcShape<HSP, 32, 4, 32, 3> Forward;
    typedef TcShape<HSP, 32, 4, 32, 2> Dq;
    typedef TcShape<HSP, 16, 4, 32, 3> Dkdv;
};
template <int HSP> using TcDefault = TcRows32<HSP>;

typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> TcFragA;
// B operand from a row-major tile X: TcFragB reads B = X (element (k,n) at x[k*ld + n]); TcFragBT
// reads B = X^T (element (k,n) at x[n*ld + k]), for products with a tile's rows as columns (Q K^T)
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> TcFragB;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major> TcFragBT;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> TcFragC;

// ------------------------------------------------------------------------------------------------
// Building blocks

// A BC x HSP tile of a head in registers, 16-byte vectors spread over the block's threads
template <class S>
struct TcTileRegs {
    xvec v[S::BC * S::HSP / 8 / S::THREADS];
};
// rows [row0, row0 + BC) of src (row stride `stride`, HS columns); rows past T and columns past HS are zeros
template <class S>
__device__ inline void tc_tile_fetch(TcTileRegs<S>& regs, const floatX* src, size_t stride, int row0, int T, int HS) {
#pragma unroll
    for (int i = 0; i < S::BC * S::HSP / 8 / S::THREADS; i++) {
        const int e = threadIdx.x + i * S::THREADS, r = e / (S::HSP / 8), c = e % (S::HSP / 8) * 8;
        if (row0 + r < T && c < HS) {
            regs.v[i] = load16(src + (size_t)(row0 + r) * stride + c);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) regs.v[i][k] = from_float<floatX>(0.0f);
        }
    }
}
template <class S>
__device__ inline void tc_tile_put(floatX (*tile)[S::LD], const TcTileRegs<S>& regs) {
#pragma unroll
    for (int i = 0; i < S::BC * S::HSP / 8 / S::THREADS; i++) {
        const int e = threadIdx.x + i * S::THREADS;
        store16(&tile[e / (S::HSP / 8)][e % (S::HSP / 8) * 8], regs.v[i]);
    }
}

// the 16x16 coordinate matrix, element (r,c) = 16r + c (exact in fp32); a fragment loaded from it
// tells each lane where its accumulator elements sit: row tc_row(coord, e), column tc_col(coord, e)
template <class S>
__device__ inline void tc_fill_coord(float (*coord)[16]) {
    for (int i = threadIdx.x; i < 256; i += S::THREADS) coord[i / 16][i % 16] = (float)i;
}
__device__ inline int tc_row(const TcFragC& coord, int e) { return (int)coord.x[e] >> 4; }
__device__ inline int tc_col(const TcFragC& coord, int e) { return (int)coord.x[e] & 15; }

// The block's own rows [row0, row0 + BR) of src (zeros past T and HS) as each warp's A fragments:
// a[i][kk] = rows RPW*warp + 16i.. of the block, columns 16kk... Staged through `tile`, BC rows at
// a time; the warps whose rows are in the staged rows load them. Block-collective; on return the
// tile may be overwritten only after a __syncthreads (the warps' last loads read it).
template <class S>
__device__ inline void tc_own_fragments(TcFragA (&a)[S::MF][S::DB], floatX (*tile)[S::LD], const floatX* src,
                                        size_t stride, int row0, int T, int HS, int warp) {
    for (int c0 = 0; c0 < S::BR; c0 += S::BC) {
        TcTileRegs<S> regs;
        tc_tile_fetch<S>(regs, src, stride, row0 + c0, T, HS);
        __syncthreads();  // every warp is done with the tile (the previous rows, or what the kernel did before)
        tc_tile_put<S>(tile, regs);
        __syncthreads();  // the rows are complete
        const int first = S::RPW * warp - c0;  // this warp's first row within the staged rows
        if (first >= 0 && first < S::BC) {     // uniform across the warp
#pragma unroll
            for (int i = 0; i < S::MF; i++)
#pragma unroll
                for (int kk = 0; kk < S::DB; kk++)
                    nvcuda::wmma::load_matrix_sync(a[i][kk], &tile[first + 16 * i][16 * kk], S::LD);
        }
    }
}

// acc[i] = A_i X^T for one 16 x 16 block per fragment: A_i = the warp's rows 16i..16i+15 (HSP
// columns, fragments), X = 16 rows of a tile starting at x: dot products of the warp's rows with 16
// of the tile's rows. Each B fragment is loaded once from shared memory and feeds all MF products.
template <class S>
__device__ inline void tc_mma_abt(TcFragC (&acc)[S::MF], const TcFragA (&a)[S::MF][S::DB], const floatX* x) {
#pragma unroll
    for (int i = 0; i < S::MF; i++) nvcuda::wmma::fill_fragment(acc[i], 0.0f);
#pragma unroll
    for (int kk = 0; kk < S::DB; kk++) {
        TcFragBT xt;
        nvcuda::wmma::load_matrix_sync(xt, x + 16 * kk, S::LD);
#pragma unroll
        for (int i = 0; i < S::MF; i++) nvcuda::wmma::mma_sync(acc[i], a[i][kk], xt, acc[i]);
    }
}

// acc += P X over the 16-blocks n_begin..n_end-1: P = the warp's RPW x BC bf16 matrix at p (row
// stride LDP), X = a BC x HSP tile; acc[i][d] holds rows 16i.., columns 16d.. of the result. Each
// B fragment (X) is loaded once and feeds all MF products.
template <class S>
__device__ inline void tc_mma_ab(TcFragC (&acc)[S::MF][S::DB], const floatX* p, const floatX (*x)[S::LD],
                                 int n_begin, int n_end) {
    for (int n = n_begin; n < n_end; n++) {
        TcFragA pa[S::MF];
#pragma unroll
        for (int i = 0; i < S::MF; i++) nvcuda::wmma::load_matrix_sync(pa[i], p + 16 * i * S::LDP + 16 * n, S::LDP);
#pragma unroll
        for (int d = 0; d < S::DB; d++) {
            TcFragB xb;
            nvcuda::wmma::load_matrix_sync(xb, &x[16 * n][16 * d], S::LD);
#pragma unroll
            for (int i = 0; i < S::MF; i++) nvcuda::wmma::mma_sync(acc[i][d], pa[i], xb, acc[i][d]);
        }
    }
}

// Writes an accumulator as bf16: element (r,c) to dst[r * ld + c], for r < rows and c < cols (cols a
// multiple of 8). Through the warp's fp32 scratch (16 rows of TC_SCRATCH_LD floats): lane l converts
// row l%16, columns 8(l/16)..+7: two 16-byte shared loads, one 16-byte store. Rows 20 floats apart
// put the 16-byte pieces that 8 lanes (rows r..r+7) read at once into 8 different groups of 4
// banks: no bank conflicts (at 16 floats apart, scalar reads of rows l/2 hit 4 banks, 8-way).
// Warp-collective; the scratch is free again on return.
#define TC_SCRATCH_LD 20
__device__ inline void tc_store_bf16(floatX* dst, size_t ld, const TcFragC& acc, float* scratch, int rows, int cols) {
    nvcuda::wmma::store_matrix_sync(scratch, acc, TC_SCRATCH_LD, nvcuda::wmma::mem_row_major);
    __syncwarp();  // the whole 16x16 is in the scratch
    const int lane = threadIdx.x % WARP_SIZE, r = lane % 16, c = lane / 16 * 8;
    if (r < rows && c < cols) {
        const Vec16<float> lo = load16(scratch + r * TC_SCRATCH_LD + c), hi = load16(scratch + r * TC_SCRATCH_LD + c + 4);
        xvec v;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[k] = from_float<floatX>(lo[k]);
            v[4 + k] = from_float<floatX>(hi[k]);
        }
        store16(dst + r * ld + c, v);
    }
    __syncwarp();  // every lane has read the scratch (and its row of dst is written, for the warp's loads)
}

// the warp's RPW x HSP result (fragments acc[i][d]), times `scale`, as bf16 rows row0.. of dst (row
// stride ld): rows at or past T and columns at or past HS are not written
template <class S>
__device__ inline void tc_store_rows(floatX* dst, size_t ld, TcFragC (&acc)[S::MF][S::DB], float scale,
                                     float* scratch, int row0, int T, int HS) {
#pragma unroll
    for (int i = 0; i < S::MF; i++)
#pragma unroll
        for (int d = 0; d < S::DB; d++) {
#pragma unroll
            for (int e = 0; e < acc[i][d].num_elements; e++) acc[i][d].x[e] *= scale;
            tc_store_bf16(dst + (size_t)16 * i * ld + 16 * d, ld, acc[i][d], scratch, T - row0 - 16 * i, HS - 16 * d);
        }
}

// acc[d] *= factor[row] for each element's row, d = 0..N-1: fragments of the same 16 rows (factor:
// 16 floats in shared memory, read once per element slot)
template <int N>
__device__ inline void tc_scale_rows(TcFragC (&acc)[N], const TcFragC& coord, const float* factor) {
#pragma unroll
    for (int e = 0; e < TcFragC::num_elements; e++) {
        const float f = factor[tc_row(coord, e)];
#pragma unroll
        for (int d = 0; d < N; d++) acc[d].x[e] *= f;
    }
}

// 16-row blocks 0..n-1 of a streamed tile starting at row t0 hold a row at or before `last` (the
// warp's last own row): what a warp of the forward or dq kernel multiplies (0: the tile is entirely
// in its future)
template <class S>
__device__ inline int tc_blocks_up_to(int t0, int last) {
    return last < t0 ? 0 : min(S::NB, (last - t0) / 16 + 1);
}

// ------------------------------------------------------------------------------------------------
// Forward

template <class S>
struct TcForwardSmem {
    alignas(32) floatX k[S::BC][S::LD];                   // the key tile (first: the block's queries, staged)
    alignas(32) floatX v[S::BC][S::LD];                   // the value tile
    alignas(32) float s[S::WARPS][S::RPW][S::BC + 4];     // each warp's scores; at the end its output scratch
    static_assert(S::RPW * (S::BC + 4) >= 16 * TC_SCRATCH_LD, "a warp's scores hold an output scratch");
    alignas(32) floatX p[S::WARPS][S::RPW][S::LDP];       // each warp's probabilities, the A operand of P V
    alignas(32) float coord[16][16];
    float row_factor[S::WARPS][S::RPW];                   // per row: the rescale exp(m_old - m_new); at the end 1/l
};

// grid (ceil(T/BR), NH, B), block THREADS
template <class S>
__global__ void __launch_bounds__(S::THREADS, S::MINB) flash_attention_tc_forward_kernel(floatX* out, float* lse,
                                                                                const floatX* qkv, int T, int C,
                                                                                int NH, float scale) {
    __shared__ TcForwardSmem<S> sm;
    constexpr int MF = S::MF, DB = S::DB, LPR = S::LPR;
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int qt = gridDim.x - 1 - blockIdx.x;  // this block's query tile: the longest first
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row0 = qt * S::BR + S::RPW * warp;  // this warp's first query
    const int r = lane / LPR, part = lane % LPR;    // the softmax: LPR lanes per row
    const int query = row0 + r;
    const size_t stride = (size_t)3 * C;
    const floatX* qhead = qkv + (size_t)b * T * stride + (size_t)h * HS;

    tc_fill_coord<S>(sm.coord);
    TcFragA qf[MF][DB];
    tc_own_fragments<S>(qf, sm.k, qhead, stride, qt * S::BR, T, HS, warp);  // (its barriers publish coord)
    TcFragC coord, o[MF][DB];
    nvcuda::wmma::load_matrix_sync(coord, &sm.coord[0][0], 16, nvcuda::wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int d = 0; d < DB; d++) nvcuda::wmma::fill_fragment(o[i][d], 0.0f);
    float m = -INFINITY, l = 0.0f;  // this lane's row: running max and sum (the LPR lanes of a row agree)

    // key tiles holding a key at or before the block's last query (and before T)
    const int ntiles = min(CEIL_DIV(qt * S::BR + S::BR, S::BC), CEIL_DIV(T, S::BC));
    TcTileRegs<S> kregs, vregs;
    tc_tile_fetch<S>(kregs, qhead + C, stride, 0, T, HS);
    tc_tile_fetch<S>(vregs, qhead + 2 * C, stride, 0, T, HS);
    for (int kt = 0; kt < ntiles; kt++) {
        __syncthreads();  // every warp is done with the previous tile (the first time: with its queries)
        tc_tile_put<S>(sm.k, kregs);
        tc_tile_put<S>(sm.v, vregs);
        __syncthreads();  // key tile kt complete
        if (kt + 1 < ntiles) {  // the next tile's loads fly while this one is multiplied
            tc_tile_fetch<S>(kregs, qhead + C, stride, (kt + 1) * S::BC, T, HS);
            tc_tile_fetch<S>(vregs, qhead + 2 * C, stride, (kt + 1) * S::BC, T, HS);
        }
        const int k0 = kt * S::BC;
        const int nblk = tc_blocks_up_to<S>(k0, row0 + S::RPW - 1);
        if (nblk == 0) continue;  // every key of the tile is in this warp's future (uniform across the warp)
        for (int n = 0; n < nblk; n++) {  // S = Q K^T
            TcFragC s[MF];
            tc_mma_abt<S>(s, qf, &sm.k[16 * n][0]);
#pragma unroll
            for (int i = 0; i < MF; i++)
                nvcuda::wmma::store_matrix_sync(&sm.s[warp][16 * i][16 * n], s[i], S::BC + 4, nvcuda::wmma::mem_row_major);
        }
        __syncwarp();  // the warp's scores are in its scratch
        // online softmax of row r: lane `part` takes the columns part, part + LPR, ..., starting at
        // column (part + LPR r) mod width and wrapping around. Rows are BC + 4 floats apart (a
        // multiple of 4 banks), so lanes reading the same column of their rows would hit 8 banks
        // only; staggered, the warp's reads spread over the banks. Every row sees key k0 (k0 <= row0:
        // both are multiples of RPW), so the new max is finite.
        const float* srow = sm.s[warp][r];
        floatX* prow = sm.p[warp][r];
        const int width = 16 * nblk, start = (part + LPR * r) % width;
        auto next = [&](int c) { return c + LPR < width ? c + LPR : c + LPR - width; };
        float mx = -INFINITY;
        for (int j = 0, c = start; j < width / LPR; j++, c = next(c))
            if (k0 + c <= query) mx = fmaxf(mx, srow[c] * scale);
        if (LPR == 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m, mx);
        float sum = 0.0f;
        for (int j = 0, c = start; j < width / LPR; j++, c = next(c)) {
            const float p = k0 + c <= query ? expf(srow[c] * scale - m_new) : 0.0f;
            sum += p;
            prow[c] = from_float<floatX>(p);
        }
        if (LPR == 2) sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        const float rescale = expf(m - m_new);  // 0 on the first tile (m = -inf)
        l = l * rescale + sum;
        m = m_new;
        if (part == 0) sm.row_factor[warp][r] = rescale;
        __syncwarp();  // P and the rescale factors are written
#pragma unroll
        for (int i = 0; i < MF; i++) tc_scale_rows(o[i], coord, &sm.row_factor[warp][16 * i]);
        tc_mma_ab<S>(o, &sm.p[warp][0][0], sm.v, 0, nblk);  // O += P V
    }
    __syncwarp();  // every lane is done with the last tile's factors and scores
    if (part == 0) sm.row_factor[warp][r] = 1.0f / l;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < MF; i++) tc_scale_rows(o[i], coord, &sm.row_factor[warp][16 * i]);
    tc_store_rows<S>(out + ((size_t)b * T + row0) * C + (size_t)h * HS, C, o, 1.0f, &sm.s[warp][0][0], row0, T, HS);
    if (part == 0 && query < T) lse[((size_t)b * NH + h) * T + query] = m + logf(l);
}

// ------------------------------------------------------------------------------------------------
// Backward: dq (and D) over query tiles

template <class S>
struct TcDqSmem {
    alignas(32) floatX k[S::BC][S::LD];                   // the key tile (first: the block's queries and dout, staged)
    alignas(32) floatX v[S::BC][S::LD];                   // the value tile
    alignas(32) floatX ds[S::WARPS][S::RPW][S::LDP];      // each warp's dS, the A operand of dS K
    alignas(32) float scratch[S::WARPS][16][TC_SCRATCH_LD];
    alignas(32) float coord[16][16];
    struct alignas(8) {                                   // lse and D of each warp's rows, side by side: the
        float lse, D;                                     // elementwise step reads both with one 8-byte load
    } stat[S::WARPS][S::RPW];
};

// D_t = dout_t . out_t for this lane's row (zero if the row is past T): with LPR = 2 lanes per row,
// lane `part` takes one half of the columns and both get the sum. Called by every lane (the
// shuffle needs the warp).
template <class S>
__device__ inline float tc_row_dot(const floatX* a, const floatX* b, bool valid, int HS, int part) {
    constexpr int W = S::HSP / S::LPR;  // columns per lane
    float dot = 0.0f;
#pragma unroll
    for (int c = part * W; c < (part + 1) * W; c += 8) {
        if (!valid || c >= HS) break;
        const xvec x = load16(a + c), y = load16(b + c);
#pragma unroll
        for (int k = 0; k < 8; k++) dot += to_float(x[k]) * to_float(y[k]);
    }
    if (S::LPR == 2) dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    return dot;
}

// grid (ceil(T/BR), NH, B), block THREADS. dq into dqkv's q part, D into Dbuf (B,NH,T).
template <class S>
__global__ void __launch_bounds__(S::THREADS, S::MINB) flash_attention_tc_backward_dq_kernel(
    floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* out, const floatX* qkv, const float* lse, int T,
    int C, int NH, float scale) {
    __shared__ TcDqSmem<S> sm;
    constexpr int MF = S::MF, DB = S::DB;
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row0 = qt * S::BR + S::RPW * warp;
    const size_t stride = (size_t)3 * C;
    const floatX* qhead = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const floatX* dohead = dout + (size_t)b * T * C + (size_t)h * HS;
    const size_t bh = (size_t)b * NH + h;

    tc_fill_coord<S>(sm.coord);
    {  // lse and D of the warp's rows, LPR lanes per row (read by this warp only, after the barriers below)
        const int r = lane / S::LPR, query = row0 + r;
        const float D = tc_row_dot<S>(dohead + (size_t)query * C, out + ((size_t)b * T + query) * C + (size_t)h * HS,
                                      query < T, HS, lane % S::LPR);
        if (lane % S::LPR == 0) {
            sm.stat[warp][r].lse = query < T ? lse[bh * T + query] : 0.0f;
            sm.stat[warp][r].D = D;
            if (query < T) Dbuf[bh * T + query] = D;
        }
    }
    TcFragA qf[MF][DB], dof[MF][DB];
    tc_own_fragments<S>(qf, sm.k, qhead, stride, qt * S::BR, T, HS, warp);
    tc_own_fragments<S>(dof, sm.k, dohead, C, qt * S::BR, T, HS, warp);
    TcFragC coord, dq[MF][DB];
    nvcuda::wmma::load_matrix_sync(coord, &sm.coord[0][0], 16, nvcuda::wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int d = 0; d < DB; d++) nvcuda::wmma::fill_fragment(dq[i][d], 0.0f);

    const int ntiles = min(CEIL_DIV(qt * S::BR + S::BR, S::BC), CEIL_DIV(T, S::BC));
    TcTileRegs<S> kregs, vregs;
    tc_tile_fetch<S>(kregs, qhead + C, stride, 0, T, HS);
    tc_tile_fetch<S>(vregs, qhead + 2 * C, stride, 0, T, HS);
    for (int kt = 0; kt < ntiles; kt++) {
        __syncthreads();  // every warp is done with the previous tile (the first time: with q and dout)
        tc_tile_put<S>(sm.k, kregs);
        tc_tile_put<S>(sm.v, vregs);
        __syncthreads();  // key and value tile kt complete
        if (kt + 1 < ntiles) {
            tc_tile_fetch<S>(kregs, qhead + C, stride, (kt + 1) * S::BC, T, HS);
            tc_tile_fetch<S>(vregs, qhead + 2 * C, stride, (kt + 1) * S::BC, T, HS);
        }
        const int k0 = kt * S::BC;
        const int nblk = tc_blocks_up_to<S>(k0, row0 + S::RPW - 1);
        for (int n = 0; n < nblk; n++) {
            TcFragC s[MF], dp[MF];
            tc_mma_abt<S>(s, qf, &sm.k[16 * n][0]);    // S = Q K^T
            tc_mma_abt<S>(dp, dof, &sm.v[16 * n][0]);  // dP = dout V^T
#pragma unroll
            for (int i = 0; i < MF; i++) {
#pragma unroll
                for (int e = 0; e < s[i].num_elements; e++) {  // dS = P * (dP - D), into s
                    const int r = 16 * i + tc_row(coord, e), key = k0 + 16 * n + tc_col(coord, e);
                    const auto st = sm.stat[warp][r];
                    const float p = key <= row0 + r ? expf(s[i].x[e] * scale - st.lse) : 0.0f;
                    s[i].x[e] = p * (dp[i].x[e] - st.D);
                }
                tc_store_bf16(&sm.ds[warp][16 * i][16 * n], S::LDP, s[i], &sm.scratch[warp][0][0], 16, 16);
            }
        }
        tc_mma_ab<S>(dq, &sm.ds[warp][0][0], sm.k, 0, nblk);  // dQ += dS K
    }
    tc_store_rows<S>(dqkv + ((size_t)b * T + row0) * stride + (size_t)h * HS, stride, dq, scale,
                     &sm.scratch[warp][0][0], row0, T, HS);
}

// ------------------------------------------------------------------------------------------------
// Backward: dk, dv over key tiles

template <class S>
struct TcDkdvSmem {
    alignas(32) floatX q[S::BC][S::LD];                   // the query tile (first: the block's keys, staged)
    alignas(32) floatX dout[S::BC][S::LD];                // the dout tile
    alignas(32) floatX p[S::WARPS][S::RPW][S::LDP];       // each warp's P^T (its keys x the tile's queries)
    alignas(32) floatX ds[S::WARPS][S::RPW][S::LDP];      // each warp's dS^T
    alignas(32) float scratch[S::WARPS][16][TC_SCRATCH_LD];
    alignas(32) float coord[16][16];
    float lse[S::BC], D[S::BC];                           // of the query tile
};

// grid (ceil(T/BR), NH, B), block THREADS; needs D from the dq kernel. dk, dv into dqkv's k and v parts.
template <class S>
__global__ void __launch_bounds__(S::THREADS, S::MINB) flash_attention_tc_backward_dkdv_kernel(
    floatX* dqkv, const float* Dbuf, const floatX* dout, const floatX* qkv, const float* lse, int T, int C, int NH,
    float scale) {
    __shared__ TcDkdvSmem<S> sm;
    constexpr int MF = S::MF, DB = S::DB;
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int kt = blockIdx.x;  // this block's key tile (the longest first): query tiles from its first key on see it
    const int warp = threadIdx.x / WARP_SIZE;
    const int row0 = kt * S::BR + S::RPW * warp;  // this warp's first key
    const size_t stride = (size_t)3 * C;
    const floatX* qhead = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const floatX* dohead = dout + (size_t)b * T * C + (size_t)h * HS;
    const size_t bh = (size_t)b * NH + h;
    // threads 0..BC-1 carry the query tile's lse, BC..2BC-1 its D, the others nothing
    const bool carries = threadIdx.x < 2 * S::BC;
    const float* stat_src = threadIdx.x < S::BC ? lse + bh * T : Dbuf + bh * T;
    float* stat_dst = threadIdx.x < S::BC ? &sm.lse[threadIdx.x] : &sm.D[(threadIdx.x - S::BC) % S::BC];
    const int stat_i = threadIdx.x % S::BC;

    tc_fill_coord<S>(sm.coord);
    TcFragA kf[MF][DB], vf[MF][DB];
    tc_own_fragments<S>(kf, sm.q, qhead + C, stride, kt * S::BR, T, HS, warp);
    tc_own_fragments<S>(vf, sm.q, qhead + 2 * C, stride, kt * S::BR, T, HS, warp);
    TcFragC coord, dk[MF][DB], dv[MF][DB];
    nvcuda::wmma::load_matrix_sync(coord, &sm.coord[0][0], 16, nvcuda::wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int d = 0; d < DB; d++) {
            nvcuda::wmma::fill_fragment(dk[i][d], 0.0f);
            nvcuda::wmma::fill_fragment(dv[i][d], 0.0f);
        }

    const int first = kt * S::BR / S::BC, ntiles = CEIL_DIV(T, S::BC);  // the query tiles that see a key here
    TcTileRegs<S> qregs, doregs;
    tc_tile_fetch<S>(qregs, qhead, stride, first * S::BC, T, HS);
    tc_tile_fetch<S>(doregs, dohead, C, first * S::BC, T, HS);
    float stat = carries && first * S::BC + stat_i < T ? stat_src[first * S::BC + stat_i] : 0.0f;
    for (int qt = first; qt < ntiles; qt++) {
        __syncthreads();  // every warp is done with the previous tile (the first time: with k and v)
        tc_tile_put<S>(sm.q, qregs);
        tc_tile_put<S>(sm.dout, doregs);
        if (carries) *stat_dst = stat;
        __syncthreads();  // query tile qt, its dout, lse and D complete
        if (qt + 1 < ntiles) {
            const int next = (qt + 1) * S::BC;
            tc_tile_fetch<S>(qregs, qhead, stride, next, T, HS);
            tc_tile_fetch<S>(doregs, dohead, C, next, T, HS);
            stat = carries && next + stat_i < T ? stat_src[next + stat_i] : 0.0f;
        }
        const int i0 = qt * S::BC;
        // 16-query blocks not entirely before this warp's first key (row0 - i0 is a multiple of 16)
        const int nfirst = min(S::NB, max(0, (row0 - i0) / 16));
        for (int n = nfirst; n < S::NB; n++) {
            TcFragC st[MF], dpt[MF];
            tc_mma_abt<S>(st, kf, &sm.q[16 * n][0]);      // S^T = K Q^T
            tc_mma_abt<S>(dpt, vf, &sm.dout[16 * n][0]);  // dP^T = V dout^T
#pragma unroll
            for (int i = 0; i < MF; i++) {
#pragma unroll
                for (int e = 0; e < st[i].num_elements; e++) {  // P^T into st, dS^T into dpt
                    const int c = 16 * n + tc_col(coord, e), query = i0 + c, key = row0 + 16 * i + tc_row(coord, e);
                    const float p = key <= query && query < T ? expf(st[i].x[e] * scale - sm.lse[c]) : 0.0f;
                    st[i].x[e] = p;
                    dpt[i].x[e] = p * (dpt[i].x[e] - sm.D[c]);
                }
                tc_store_bf16(&sm.p[warp][16 * i][16 * n], S::LDP, st[i], &sm.scratch[warp][0][0], 16, 16);
                tc_store_bf16(&sm.ds[warp][16 * i][16 * n], S::LDP, dpt[i], &sm.scratch[warp][0][0], 16, 16);
            }
        }
        tc_mma_ab<S>(dv, &sm.p[warp][0][0], sm.dout, nfirst, S::NB);  // dV += P^T dout
        tc_mma_ab<S>(dk, &sm.ds[warp][0][0], sm.q, nfirst, S::NB);    // dK += dS^T Q
    }
    floatX* krow = dqkv + ((size_t)b * T + row0) * stride + (size_t)h * HS;
    tc_store_rows<S>(krow + C, stride, dk, scale, &sm.scratch[warp][0][0], row0, T, HS);
    tc_store_rows<S>(krow + 2 * C, stride, dv, 1.0f, &sm.scratch[warp][0][0], row0, T, HS);
}

// ------------------------------------------------------------------------------------------------
// Host side: the same interface and shape rule as the portable path (flash_attention.cuh), whose
// lse and scratch sizes apply unchanged. Variant: TcRows16 or TcRows32, instantiated for the
// padded head dimension HS needs.

// the forward kernel of one padded head dimension, with shape S
template <class S>
static void flash_attention_tc_forward_launch(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                              float scale, cudaStream_t stream) {
    flash_attention_tc_forward_kernel<S><<<dim3(CEIL_DIV(T, S::BR), NH, B), S::THREADS, 0, stream>>>(out, lse, qkv, T, C, NH, scale);
    cudaCheckLaunch();
}

// out(B,T,C) from qkv(B,T,3C); lse(B,NH,T) for the backward
template <template <int> class Variant>
static void flash_attention_tc_forward_with(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                            cudaStream_t stream) {
    flash_attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    if (HS <= 32) flash_attention_tc_forward_launch<typename Variant<32>::Forward>(out, lse, qkv, B, T, C, NH, scale, stream);
    else flash_attention_tc_forward_launch<typename Variant<64>::Forward>(out, lse, qkv, B, T, C, NH, scale, stream);
}

// the two backward kernels of one padded head dimension: dq (and D) with shape SQ, then dk, dv with shape SK
template <class SQ, class SK>
static void flash_attention_tc_backward_launch(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv,
                                               const floatX* out, const float* lse, int B, int T, int C, int NH,
                                               float scale, cudaStream_t stream) {
    flash_attention_tc_backward_dq_kernel<SQ><<<dim3(CEIL_DIV(T, SQ::BR), NH, B), SQ::THREADS, 0, stream>>>(
        dqkv, Dbuf, dout, out, qkv, lse, T, C, NH, scale);
    cudaCheckLaunch();
    flash_attention_tc_backward_dkdv_kernel<SK><<<dim3(CEIL_DIV(T, SK::BR), NH, B), SK::THREADS, 0, stream>>>(
        dqkv, Dbuf, dout, qkv, lse, T, C, NH, scale);
    cudaCheckLaunch();
}

// dqkv(B,T,3C) (overwritten) from dout(B,T,C), and the forward's qkv, out and lse. Dbuf: scratch.
template <template <int> class Variant>
static void flash_attention_tc_backward_with(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv,
                                             const floatX* out, const float* lse, int B, int T, int C, int NH,
                                             cudaStream_t stream) {
    flash_attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    if (HS <= 32) flash_attention_tc_backward_launch<typename Variant<32>::Dq, typename Variant<32>::Dkdv>(dqkv, Dbuf, dout, qkv, out, lse, B, T, C, NH, scale, stream);
    else flash_attention_tc_backward_launch<typename Variant<64>::Dq, typename Variant<64>::Dkdv>(dqkv, Dbuf, dout, qkv, out, lse, B, T, C, NH, scale, stream);
}

// The trainer's entry points: the default variant, or, with ZERO3_GPU_ATTENTION=portable in the
// environment, the portable kernels (gpu/flash_attention.cuh: the same lse and scratch), so that a
// rerun can tell a tensor-core bug from rounding without a rebuild. tests/cuda/attention.cu calls the
// variants directly and always checks the tensor-core kernels.
static void flash_attention_tc_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                       cudaStream_t stream) {
    if (attention_forced_portable()) flash_attention_forward(out, lse, qkv, B, T, C, NH, stream);
    else flash_attention_tc_forward_with<TcDefault>(out, lse, qkv, B, T, C, NH, stream);
}
static void flash_attention_tc_backward(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv,
                                        const floatX* out, const float* lse, int B, int T, int C, int NH,
                                        cudaStream_t stream) {
    if (attention_forced_portable()) flash_attention_backward(dqkv, Dbuf, dout, qkv, out, lse, B, T, C, NH, stream);
    else flash_attention_tc_backward_with<TcDefault>(dqkv, Dbuf, dout, qkv, out, lse, B, T, C, NH, stream);
}

#endif  // ENABLE_BF16
