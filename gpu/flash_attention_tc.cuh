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
// Tiling. A block is 4 warps (128 threads) and owns a tile of 64 rows, 16 per warp: query rows in
// the forward and dq kernels, key rows in the dk/dv kernel. Its own rows' operands (q and dout, or
// k and v) are loaded once into each warp's A fragments and stay in registers; the other side
// streams through shared memory in tiles of 64 rows (one buffer), fetched into registers one tile
// ahead so the global loads of tile i+1 are in flight while tile i is multiplied:
//     forward (grid ceil(T/64) x NH x B):  per key tile
//         S = Q K^T (16 x 64 per warp) -> shared memory; two lanes per row run the online softmax
//         (row max, p = exp(s - m), l, the rescale exp(m_old - m_new)); P -> bf16 in shared memory;
//         O = O * rescale + P V, O in fp32 accumulator fragments for the whole loop.
//     dq (over query tiles):  per key tile  S = Q K^T, dP = dout V^T, dS = P * (dP - D), dQ += dS K;
//         also D = rowsum(dout * out), written for the dk/dv kernel.
//     dk, dv (over key tiles): per query tile  S^T = K Q^T, dP^T = V dout^T, dV += P^T dout,
//         dK += dS^T Q.
// Why this shape: 16 rows are one fragment's height, so a warp's rows need no exchange with other
// warps; four warps share every streamed tile (loaded once per block, read by each warp from shared
// memory); 128 threads, <= 240 registers and < 48 KB of shared memory let 2-3 blocks share an SM.
// Each output element has one owner and the products run in a fixed order: no atomics, the same
// bits on every run. Causality: the query tile t sees key tiles 0..t; on the diagonal tile a warp
// skips the 16-blocks entirely in its future (uniform across the warp), and elements above the
// diagonal are masked element by element. Blocks of the forward and dq kernels start with the last
// query tiles, which have the most work, so the short ones fill the tail.
//
// Fragments are opaque: CUDA does not say which lane holds which element. Two things get around
// that without assuming a mapping. (1) Elementwise math on accumulators needs each element's row
// and column: every warp loads a 16x16 "coordinate" matrix (element (r,c) = 16r + c) into an
// accumulator fragment once; fragments of the same kind share the mapping, so coord.x[e] names
// the position of x[e] in every accumulator. (2) An accumulator becomes a bf16 A operand (P, dS)
// or an output row through shared memory: stored as fp32 to a 16x16 scratch, then each lane
// converts 8 consecutive elements of one row (one 16-byte store). Under the CPU emulator
// (dev/cuda/emu/include/mma.h) the mapping is scrambled on purpose, so code that assumed one fails
// there; dev/cuda/attention.cu checks every output element against a double-precision reference.
//
// Rounding (bf16 build): S, dP and all sums are fp32; P is rounded to bf16 before P V (while the
// row sum l adds the unrounded fp32 p), and P^T, dS, dS^T are rounded to bf16 before their
// products: single elements of out and dqkv carry ~2^-9 relative error per rounded factor, as in
// every bf16 tensor-core attention. lse is fp32 throughout.
//
// Synchronization: __syncthreads only around the shared tiles (every warp done reading the old
// tile before it is overwritten; the new tile complete before anyone reads it); __syncwarp where a
// warp's lanes hand each other data through their own scratch (scores, P, dS, row factors).
// Shared memory per block (HSP = 64): forward 46,336 B, dq 33,280 B, dk/dv 42,496 B: static, under
// the 48 KB that needs no opt-in.
// Not done, for speed on sm_90: 32 rows per warp (halves the shared-memory reads of the streamed
// tile per FLOP, the likely limit here), a second tile buffer filled by cp.async or TMA, and
// Hopper's wgmma instead of WMMA (which compiles to mma.sync).
#pragma once
#include "common.cuh"
#include "flash_attention.cuh"

#if defined(ENABLE_BF16)
#include <mma.h>

#define TC_TILE 64                  // rows of every tile: a block's own rows and each streamed tile
#define TC_WARPS (TC_TILE / 16)     // one warp per 16 own rows
#define TC_THREADS (TC_WARPS * WARP_SIZE)
#define TC_PAD 8                    // bf16 padding per shared row: rows shift by 16 bytes, fewer bank conflicts

typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> TcFragA;
// B operand from a row-major tile X: TcFragB reads B = X (element (k,n) at x[k*ld + n]); TcFragBT
// reads B = X^T (element (k,n) at x[n*ld + k]), for products with a tile's rows as columns (Q K^T)
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> TcFragB;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major> TcFragBT;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> TcFragC;

// ------------------------------------------------------------------------------------------------
// Building blocks

// A 64 x HSP tile of a head in registers, 16-byte vectors spread over the block's threads
template <int HSP>
struct TcTileRegs {
    xvec v[TC_TILE * HSP / 8 / TC_THREADS];
};
// rows [row0, row0 + 64) of src (row stride `stride`, HS columns); rows past T and columns past HS are zeros
template <int HSP>
__device__ inline void tc_tile_fetch(TcTileRegs<HSP>& regs, const floatX* src, size_t stride, int row0, int T,
                                     int HS) {
#pragma unroll
    for (int i = 0; i < TC_TILE * HSP / 8 / TC_THREADS; i++) {
        const int e = threadIdx.x + i * TC_THREADS, r = e / (HSP / 8), c = e % (HSP / 8) * 8;
        if (row0 + r < T && c < HS) {
            regs.v[i] = load16(src + (size_t)(row0 + r) * stride + c);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) regs.v[i][k] = from_float<floatX>(0.0f);
        }
    }
}
template <int HSP>
__device__ inline void tc_tile_put(floatX (*tile)[HSP + TC_PAD], const TcTileRegs<HSP>& regs) {
#pragma unroll
    for (int i = 0; i < TC_TILE * HSP / 8 / TC_THREADS; i++) {
        const int e = threadIdx.x + i * TC_THREADS;
        store16(&tile[e / (HSP / 8)][e % (HSP / 8) * 8], regs.v[i]);
    }
}

// the 16x16 coordinate matrix, element (r,c) = 16r + c (exact in fp32); a fragment loaded from it
// tells each lane where its accumulator elements sit: row tc_row(coord, e), column tc_col(coord, e)
__device__ inline void tc_fill_coord(float (*coord)[16]) {
    for (int i = threadIdx.x; i < 256; i += TC_THREADS) coord[i / 16][i % 16] = (float)i;
}
__device__ inline int tc_row(const TcFragC& coord, int e) { return (int)coord.x[e] >> 4; }
__device__ inline int tc_col(const TcFragC& coord, int e) { return (int)coord.x[e] & 15; }

// this warp's 16 rows of a tile (HSP columns) as A fragments, one per 16 columns
template <int HSP>
__device__ inline void tc_load_rows(TcFragA (&a)[HSP / 16], const floatX (*tile)[HSP + TC_PAD], int warp) {
#pragma unroll
    for (int kk = 0; kk < HSP / 16; kk++) nvcuda::wmma::load_matrix_sync(a[kk], &tile[16 * warp][16 * kk], HSP + TC_PAD);
}

// acc = A X^T for one 16 x 16 block: A = the warp's 16 x HSP rows (fragments), X = 16 rows of a tile
// starting at x (HSP columns): dot products of the warp's rows with 16 of the tile's rows
template <int HSP>
__device__ inline void tc_mma_abt(TcFragC& acc, const TcFragA (&a)[HSP / 16], const floatX* x) {
    nvcuda::wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < HSP / 16; kk++) {
        TcFragBT xt;
        nvcuda::wmma::load_matrix_sync(xt, x + 16 * kk, HSP + TC_PAD);
        nvcuda::wmma::mma_sync(acc, a[kk], xt, acc);
    }
}

// acc += P X over the 16-blocks n_begin..n_end-1: P = the warp's 16 x 64 bf16 matrix at p (row
// stride TC_TILE + TC_PAD), X = a 64 x HSP tile; acc[d] holds columns 16d..16d+15 of the result
template <int HSP>
__device__ inline void tc_mma_ab(TcFragC (&acc)[HSP / 16], const floatX* p, const floatX (*x)[HSP + TC_PAD],
                                 int n_begin, int n_end) {
    for (int n = n_begin; n < n_end; n++) {
        TcFragA pa;
        nvcuda::wmma::load_matrix_sync(pa, p + 16 * n, TC_TILE + TC_PAD);
#pragma unroll
        for (int d = 0; d < HSP / 16; d++) {
            TcFragB xb;
            nvcuda::wmma::load_matrix_sync(xb, &x[16 * n][16 * d], HSP + TC_PAD);
            nvcuda::wmma::mma_sync(acc[d], pa, xb, acc[d]);
        }
    }
}

// Writes an accumulator as bf16: element (r,c) to dst[r * ld + c], for r < rows and c < cols (cols a
// multiple of 8). Through the warp's fp32 scratch (16x16): lane l converts row l/2, columns
// 8(l%2)..+7, one 16-byte store. Warp-collective; the scratch is free again on return.
__device__ inline void tc_store_bf16(floatX* dst, size_t ld, const TcFragC& acc, float* scratch, int rows, int cols) {
    nvcuda::wmma::store_matrix_sync(scratch, acc, 16, nvcuda::wmma::mem_row_major);
    __syncwarp();  // the whole 16x16 is in the scratch
    const int lane = threadIdx.x % WARP_SIZE, r = lane / 2, c = lane % 2 * 8;
    if (r < rows && c < cols) {
        xvec v;
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = from_float<floatX>(scratch[r * 16 + c + k]);
        store16(dst + r * ld + c, v);
    }
    __syncwarp();  // every lane has read the scratch (and its row of dst is written, for the warp's loads)
}

// acc *= factor[row] for each element's row (factor: 16 floats in shared memory)
__device__ inline void tc_scale_rows(TcFragC& acc, const TcFragC& coord, const float* factor) {
#pragma unroll
    for (int e = 0; e < acc.num_elements; e++) acc.x[e] *= factor[tc_row(coord, e)];
}

// ------------------------------------------------------------------------------------------------
// Forward

template <int HSP>
struct TcForwardSmem {
    alignas(32) floatX k[TC_TILE][HSP + TC_PAD];       // the key tile (first, once: this block's queries)
    alignas(32) floatX v[TC_TILE][HSP + TC_PAD];       // the value tile
    alignas(32) float s[TC_WARPS][16][TC_TILE + 4];    // each warp's scores; at the end its output scratch
    alignas(32) floatX p[TC_WARPS][16][TC_TILE + TC_PAD];  // each warp's probabilities, the A operand of P V
    alignas(32) float coord[16][16];
    float row_factor[TC_WARPS][16];                    // per row: the rescale exp(m_old - m_new); at the end 1/l
};

// grid (ceil(T/64), NH, B), block 128
template <int HSP>
__global__ void __launch_bounds__(TC_THREADS) flash_attention_tc_forward_kernel(floatX* out, float* lse,
                                                                                const floatX* qkv, int T, int C,
                                                                                int NH, float scale) {
    __shared__ TcForwardSmem<HSP> sm;
    constexpr int DB = HSP / 16;  // 16-column blocks of the head dimension
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int qt = gridDim.x - 1 - blockIdx.x;  // this block's query tile: the longest first
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row0 = qt * TC_TILE + 16 * warp;  // this warp's first query
    const int r = lane / 2, half = lane % 2;     // the softmax's two lanes per row
    const int query = row0 + r;
    const size_t stride = (size_t)3 * C;
    const floatX* qhead = qkv + (size_t)b * T * stride + (size_t)h * HS;

    TcTileRegs<HSP> kregs, vregs;
    tc_fill_coord(sm.coord);
    tc_tile_fetch<HSP>(kregs, qhead, stride, qt * TC_TILE, T, HS);
    tc_tile_put<HSP>(sm.k, kregs);
    __syncthreads();  // queries and coordinates in shared memory
    TcFragA qf[DB];
    tc_load_rows<HSP>(qf, sm.k, warp);
    TcFragC coord, o[DB];
    nvcuda::wmma::load_matrix_sync(coord, &sm.coord[0][0], 16, nvcuda::wmma::mem_row_major);
#pragma unroll
    for (int d = 0; d < DB; d++) nvcuda::wmma::fill_fragment(o[d], 0.0f);
    float m = -INFINITY, l = 0.0f;  // this lane's row: running max and sum (both lanes of a row agree)

    tc_tile_fetch<HSP>(kregs, qhead + C, stride, 0, T, HS);
    tc_tile_fetch<HSP>(vregs, qhead + 2 * C, stride, 0, T, HS);
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();  // every warp is done with the previous tile (the first time: with its queries)
        tc_tile_put<HSP>(sm.k, kregs);
        tc_tile_put<HSP>(sm.v, vregs);
        __syncthreads();  // key tile kt complete
        if (kt < qt) {    // the next tile's loads fly while this one is multiplied
            tc_tile_fetch<HSP>(kregs, qhead + C, stride, (kt + 1) * TC_TILE, T, HS);
            tc_tile_fetch<HSP>(vregs, qhead + 2 * C, stride, (kt + 1) * TC_TILE, T, HS);
        }
        const int k0 = kt * TC_TILE;
        const int nblk = kt == qt ? warp + 1 : TC_WARPS;  // 16-key blocks not entirely in this warp's future
        for (int n = 0; n < nblk; n++) {  // S = Q K^T
            TcFragC s;
            tc_mma_abt<HSP>(s, qf, &sm.k[16 * n][0]);
            nvcuda::wmma::store_matrix_sync(&sm.s[warp][0][16 * n], s, TC_TILE + 4, nvcuda::wmma::mem_row_major);
        }
        __syncwarp();  // the warp's scores are in its scratch
        // online softmax of row r: lane `half` takes columns half, half + 2, ...
        const float* srow = sm.s[warp][r];
        floatX* prow = sm.p[warp][r];
        float mx = -INFINITY;
        for (int c = half; c < 16 * nblk; c += 2)
            if (k0 + c <= query) mx = fmaxf(mx, srow[c] * scale);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m, mx);  // finite: key k0 <= query is always visible
        float sum = 0.0f;
        for (int c = half; c < 16 * nblk; c += 2) {
            const float p = k0 + c <= query ? expf(srow[c] * scale - m_new) : 0.0f;
            sum += p;
            prow[c] = from_float<floatX>(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        const float rescale = expf(m - m_new);  // 0 on the first tile (m = -inf)
        l = l * rescale + sum;
        m = m_new;
        if (half == 0) sm.row_factor[warp][r] = rescale;
        __syncwarp();  // P and the rescale factors are written
#pragma unroll
        for (int d = 0; d < DB; d++) tc_scale_rows(o[d], coord, sm.row_factor[warp]);
        tc_mma_ab<HSP>(o, &sm.p[warp][0][0], sm.v, 0, nblk);  // O += P V
    }
    __syncwarp();  // every lane is done with the last tile's factors and scores
    if (half == 0) sm.row_factor[warp][r] = 1.0f / l;
    __syncwarp();
    floatX* orow = out + ((size_t)b * T + row0) * C + (size_t)h * HS;
#pragma unroll
    for (int d = 0; d < DB; d++) {
        tc_scale_rows(o[d], coord, sm.row_factor[warp]);
        tc_store_bf16(orow + 16 * d, C, o[d], &sm.s[warp][0][0], T - row0, HS - 16 * d);
    }
    if (half == 0 && query < T) lse[((size_t)b * NH + h) * T + query] = m + logf(l);
}

// ------------------------------------------------------------------------------------------------
// Backward: dq (and D) over query tiles

template <int HSP>
struct TcDqSmem {
    alignas(32) floatX k[TC_TILE][HSP + TC_PAD];         // the key tile (first, once: this block's queries)
    alignas(32) floatX v[TC_TILE][HSP + TC_PAD];         // the value tile (first, once: this block's dout)
    alignas(32) floatX ds[TC_WARPS][16][TC_TILE + TC_PAD];  // each warp's dS, the A operand of dS K
    alignas(32) float scratch[TC_WARPS][16][16];
    alignas(32) float coord[16][16];
    float lse[TC_WARPS][16], D[TC_WARPS][16];            // of each warp's rows
};

// D_t = dout_t . out_t for this lane's row (zero if the row is past T): lane `half` takes one half of
// the columns; both lanes of the row get the sum. Called by every lane (the shuffle needs the warp).
template <int HSP>
__device__ inline float tc_row_dot(const floatX* a, const floatX* b, bool valid, int HS, int half) {
    float dot = 0.0f;
#pragma unroll
    for (int c = half * HSP / 2; c < (half + 1) * HSP / 2; c += 8) {
        if (!valid || c >= HS) break;
        const xvec x = load16(a + c), y = load16(b + c);
#pragma unroll
        for (int k = 0; k < 8; k++) dot += to_float(x[k]) * to_float(y[k]);
    }
    return dot + __shfl_xor_sync(0xffffffffu, dot, 1);
}

// grid (ceil(T/64), NH, B), block 128. dq into dqkv's q part, D into Dbuf (B,NH,T).
template <int HSP>
__global__ void __launch_bounds__(TC_THREADS) flash_attention_tc_backward_dq_kernel(
    floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* out, const floatX* qkv, const float* lse, int T,
    int C, int NH, float scale) {
    __shared__ TcDqSmem<HSP> sm;
    constexpr int DB = HSP / 16;
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row0 = qt * TC_TILE + 16 * warp;
    const size_t stride = (size_t)3 * C;
    const floatX* qhead = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const floatX* dohead = dout + (size_t)b * T * C + (size_t)h * HS;
    const size_t bh = (size_t)b * NH + h;

    TcTileRegs<HSP> kregs, vregs;
    tc_fill_coord(sm.coord);
    tc_tile_fetch<HSP>(kregs, qhead, stride, qt * TC_TILE, T, HS);
    tc_tile_fetch<HSP>(vregs, dohead, C, qt * TC_TILE, T, HS);
    tc_tile_put<HSP>(sm.k, kregs);
    tc_tile_put<HSP>(sm.v, vregs);
    {  // lse and D of the warp's rows, two lanes per row
        const int r = lane / 2, query = row0 + r;
        const float D = tc_row_dot<HSP>(dohead + (size_t)query * C, out + ((size_t)b * T + query) * C + (size_t)h * HS,
                                        query < T, HS, lane % 2);
        if (lane % 2 == 0) {
            sm.D[warp][r] = D;
            sm.lse[warp][r] = query < T ? lse[bh * T + query] : 0.0f;
            if (query < T) Dbuf[bh * T + query] = D;
        }
    }
    __syncthreads();  // queries, dout rows, coordinates, lse and D in shared memory
    TcFragA qf[DB], dof[DB];
    tc_load_rows<HSP>(qf, sm.k, warp);
    tc_load_rows<HSP>(dof, sm.v, warp);
    TcFragC coord, dq[DB];
    nvcuda::wmma::load_matrix_sync(coord, &sm.coord[0][0], 16, nvcuda::wmma::mem_row_major);
#pragma unroll
    for (int d = 0; d < DB; d++) nvcuda::wmma::fill_fragment(dq[d], 0.0f);

    tc_tile_fetch<HSP>(kregs, qhead + C, stride, 0, T, HS);
    tc_tile_fetch<HSP>(vregs, qhead + 2 * C, stride, 0, T, HS);
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();  // every warp is done with the previous tile (the first time: with q and dout)
        tc_tile_put<HSP>(sm.k, kregs);
        tc_tile_put<HSP>(sm.v, vregs);
        __syncthreads();  // key and value tile kt complete
        if (kt < qt) {
            tc_tile_fetch<HSP>(kregs, qhead + C, stride, (kt + 1) * TC_TILE, T, HS);
            tc_tile_fetch<HSP>(vregs, qhead + 2 * C, stride, (kt + 1) * TC_TILE, T, HS);
        }
        const int k0 = kt * TC_TILE;
        const int nblk = kt == qt ? warp + 1 : TC_WARPS;
        for (int n = 0; n < nblk; n++) {
            TcFragC s, dp;
            tc_mma_abt<HSP>(s, qf, &sm.k[16 * n][0]);   // S = Q K^T
            tc_mma_abt<HSP>(dp, dof, &sm.v[16 * n][0]); // dP = dout V^T
#pragma unroll
            for (int e = 0; e < s.num_elements; e++) {   // dS = P * (dP - D), into s
                const int r = tc_row(coord, e), key = k0 + 16 * n + tc_col(coord, e);
                const float p = key <= row0 + r ? expf(s.x[e] * scale - sm.lse[warp][r]) : 0.0f;
                s.x[e] = p * (dp.x[e] - sm.D[warp][r]);
            }
            tc_store_bf16(&sm.ds[warp][0][16 * n], TC_TILE + TC_PAD, s, &sm.scratch[warp][0][0], 16, 16);
        }
        tc_mma_ab<HSP>(dq, &sm.ds[warp][0][0], sm.k, 0, nblk);  // dQ += dS K
    }
    floatX* dqrow = dqkv + ((size_t)b * T + row0) * stride + (size_t)h * HS;
#pragma unroll
    for (int d = 0; d < DB; d++) {
#pragma unroll
        for (int e = 0; e < dq[d].num_elements; e++) dq[d].x[e] *= scale;
        tc_store_bf16(dqrow + 16 * d, stride, dq[d], &sm.scratch[warp][0][0], T - row0, HS - 16 * d);
    }
}

// ------------------------------------------------------------------------------------------------
// Backward: dk, dv over key tiles

template <int HSP>
struct TcDkdvSmem {
    alignas(32) floatX q[TC_TILE][HSP + TC_PAD];          // the query tile (first, once: this block's keys)
    alignas(32) floatX dout[TC_TILE][HSP + TC_PAD];       // the dout tile (first, once: this block's values)
    alignas(32) floatX p[TC_WARPS][16][TC_TILE + TC_PAD];   // each warp's P^T (its keys x the tile's queries)
    alignas(32) floatX ds[TC_WARPS][16][TC_TILE + TC_PAD];  // each warp's dS^T
    alignas(32) float scratch[TC_WARPS][16][16];
    alignas(32) float coord[16][16];
    float lse[TC_TILE], D[TC_TILE];                       // of the query tile
};

// grid (ceil(T/64), NH, B), block 128; needs D from the dq kernel. dk, dv into dqkv's k and v parts.
template <int HSP>
__global__ void __launch_bounds__(TC_THREADS) flash_attention_tc_backward_dkdv_kernel(
    floatX* dqkv, const float* Dbuf, const floatX* dout, const floatX* qkv, const float* lse, int T, int C, int NH,
    float scale) {
    __shared__ TcDkdvSmem<HSP> sm;
    constexpr int DB = HSP / 16;
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int kt = blockIdx.x, ntiles = gridDim.x;  // this block's key tile; query tiles kt..ntiles-1 see it
    const int warp = threadIdx.x / WARP_SIZE;
    const int row0 = kt * TC_TILE + 16 * warp;       // this warp's first key
    const size_t stride = (size_t)3 * C;
    const floatX* qhead = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const floatX* dohead = dout + (size_t)b * T * C + (size_t)h * HS;
    const size_t bh = (size_t)b * NH + h;
    // threads 0..63 carry the query tile's lse, 64..127 its D
    const float* stat_src = threadIdx.x < TC_TILE ? lse + bh * T : Dbuf + bh * T;
    float* stat_dst = threadIdx.x < TC_TILE ? &sm.lse[threadIdx.x] : &sm.D[threadIdx.x - TC_TILE];
    const int stat_i = threadIdx.x % TC_TILE;

    TcTileRegs<HSP> qregs, doregs;
    tc_fill_coord(sm.coord);
    tc_tile_fetch<HSP>(qregs, qhead + C, stride, kt * TC_TILE, T, HS);
    tc_tile_fetch<HSP>(doregs, qhead + 2 * C, stride, kt * TC_TILE, T, HS);
    tc_tile_put<HSP>(sm.q, qregs);
    tc_tile_put<HSP>(sm.dout, doregs);
    __syncthreads();  // keys, values and coordinates in shared memory
    TcFragA kf[DB], vf[DB];
    tc_load_rows<HSP>(kf, sm.q, warp);
    tc_load_rows<HSP>(vf, sm.dout, warp);
    TcFragC coord, dk[DB], dv[DB];
    nvcuda::wmma::load_matrix_sync(coord, &sm.coord[0][0], 16, nvcuda::wmma::mem_row_major);
#pragma unroll
    for (int d = 0; d < DB; d++) {
        nvcuda::wmma::fill_fragment(dk[d], 0.0f);
        nvcuda::wmma::fill_fragment(dv[d], 0.0f);
    }

    tc_tile_fetch<HSP>(qregs, qhead, stride, kt * TC_TILE, T, HS);
    tc_tile_fetch<HSP>(doregs, dohead, C, kt * TC_TILE, T, HS);
    float stat = kt * TC_TILE + stat_i < T ? stat_src[kt * TC_TILE + stat_i] : 0.0f;
    for (int qt = kt; qt < ntiles; qt++) {
        __syncthreads();  // every warp is done with the previous tile (the first time: with k and v)
        tc_tile_put<HSP>(sm.q, qregs);
        tc_tile_put<HSP>(sm.dout, doregs);
        *stat_dst = stat;
        __syncthreads();  // query tile qt, its dout, lse and D complete
        if (qt + 1 < ntiles) {
            const int next = (qt + 1) * TC_TILE;
            tc_tile_fetch<HSP>(qregs, qhead, stride, next, T, HS);
            tc_tile_fetch<HSP>(doregs, dohead, C, next, T, HS);
            stat = next + stat_i < T ? stat_src[next + stat_i] : 0.0f;
        }
        const int i0 = qt * TC_TILE;
        const int nfirst = qt == kt ? warp : 0;  // 16-query blocks not entirely before this warp's keys
        for (int n = nfirst; n < TC_WARPS; n++) {
            TcFragC st, dpt;
            tc_mma_abt<HSP>(st, kf, &sm.q[16 * n][0]);       // S^T = K Q^T
            tc_mma_abt<HSP>(dpt, vf, &sm.dout[16 * n][0]);   // dP^T = V dout^T
#pragma unroll
            for (int e = 0; e < st.num_elements; e++) {      // P^T into st, dS^T into dpt
                const int c = 16 * n + tc_col(coord, e), query = i0 + c, key = row0 + tc_row(coord, e);
                const float p = key <= query && query < T ? expf(st.x[e] * scale - sm.lse[c]) : 0.0f;
                st.x[e] = p;
                dpt.x[e] = p * (dpt.x[e] - sm.D[c]);
            }
            tc_store_bf16(&sm.p[warp][0][16 * n], TC_TILE + TC_PAD, st, &sm.scratch[warp][0][0], 16, 16);
            tc_store_bf16(&sm.ds[warp][0][16 * n], TC_TILE + TC_PAD, dpt, &sm.scratch[warp][0][0], 16, 16);
        }
        tc_mma_ab<HSP>(dv, &sm.p[warp][0][0], sm.dout, nfirst, TC_WARPS);  // dV += P^T dout
        tc_mma_ab<HSP>(dk, &sm.ds[warp][0][0], sm.q, nfirst, TC_WARPS);    // dK += dS^T Q
    }
    floatX* krow = dqkv + ((size_t)b * T + row0) * stride + (size_t)h * HS;
#pragma unroll
    for (int d = 0; d < DB; d++) {
#pragma unroll
        for (int e = 0; e < dk[d].num_elements; e++) dk[d].x[e] *= scale;
        tc_store_bf16(krow + C + 16 * d, stride, dk[d], &sm.scratch[warp][0][0], T - row0, HS - 16 * d);
        tc_store_bf16(krow + 2 * C + 16 * d, stride, dv[d], &sm.scratch[warp][0][0], T - row0, HS - 16 * d);
    }
}

// ------------------------------------------------------------------------------------------------
// Host side: the same interface and shape rule as the portable path (flash_attention.cuh), whose
// lse and scratch sizes apply unchanged.

// out(B,T,C) from qkv(B,T,3C); lse(B,NH,T) for the backward
static void flash_attention_tc_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                       cudaStream_t stream) {
    flash_attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    dim3 grid(CEIL_DIV(T, TC_TILE), NH, B);
    if (HS <= 32) flash_attention_tc_forward_kernel<32><<<grid, TC_THREADS, 0, stream>>>(out, lse, qkv, T, C, NH, scale);
    else flash_attention_tc_forward_kernel<64><<<grid, TC_THREADS, 0, stream>>>(out, lse, qkv, T, C, NH, scale);
    cudaCheckLaunch();
}

// dqkv(B,T,3C) (overwritten) from dout(B,T,C), and the forward's qkv, out and lse. Dbuf: scratch.
static void flash_attention_tc_backward(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv,
                                        const floatX* out, const float* lse, int B, int T, int C, int NH,
                                        cudaStream_t stream) {
    flash_attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    dim3 grid(CEIL_DIV(T, TC_TILE), NH, B);
    if (HS <= 32) {
        flash_attention_tc_backward_dq_kernel<32><<<grid, TC_THREADS, 0, stream>>>(dqkv, Dbuf, dout, out, qkv, lse, T, C, NH, scale);
        cudaCheckLaunch();
        flash_attention_tc_backward_dkdv_kernel<32><<<grid, TC_THREADS, 0, stream>>>(dqkv, Dbuf, dout, qkv, lse, T, C, NH, scale);
    } else {
        flash_attention_tc_backward_dq_kernel<64><<<grid, TC_THREADS, 0, stream>>>(dqkv, Dbuf, dout, out, qkv, lse, T, C, NH, scale);
        cudaCheckLaunch();
        flash_attention_tc_backward_dkdv_kernel<64><<<grid, TC_THREADS, 0, stream>>>(dqkv, Dbuf, dout, qkv, lse, T, C, NH, scale);
    }
    cudaCheckLaunch();
}

#endif  // ENABLE_BF16
