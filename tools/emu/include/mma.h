// Emulated WMMA (nvcuda::wmma, CUDA's warp-level tensor-core API) for the CPU emulator: the subset
// gpu/flash_attention_tc.cuh uses, executed so that the bugs WMMA code can have show up:
//   - fragment<matrix_a | matrix_b | accumulator, 16, 16, 16, __nv_bfloat16 | float, row_major |
//     col_major | void>: each lane holds num_elements = 256 / 32 = 8 elements in x[];
//   - which matrix element sits in which lane's x[e] is unspecified in CUDA, so here it is a
//     deliberately scrambled permutation of the 256 elements, a different one per fragment kind
//     (matrix_a row/col, matrix_b row/col, accumulator): code that assumes a mapping (reads x[e] as
//     "row lane/4" or so) gets wrong results. The same kind always has the same mapping, which CUDA
//     does guarantee (load_matrix_sync of an accumulator feeds mma_sync), so elementwise operations
//     between fragments of one kind are right, as on a GPU;
//   - load_matrix_sync, store_matrix_sync and mma_sync are warp-collective: every lane of the warp
//     must call them, with the same pointer, ldm and layout. Each is a rendezvous of the warp (the
//     one __shfl_xor_sync uses): a lane that has exited, a lane that calls something else (another
//     wmma call, a shuffle), or lanes that disagree on the arguments stop the program with a message;
//     a lane that never arrives is the scheduler's deadlock report;
//   - the driver's rules: the pointer 256-bit (32-byte) aligned, ldm a multiple of 16 bytes (8 for
//     16-bit types, 4 for float), and for stores at least 16 (rows must not overlap);
//   - mma_sync: D = A B + C with fp32 accumulation, k in order 0..15 (bf16 products are exact in fp32).
// fill_fragment is per-thread, as in CUDA.
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator has the 16x16x16 shape only");
    static constexpr int num_elements = 8;  // 16 x 16 elements over 32 lanes
    T x[num_elements];
};

}  // namespace wmma
}  // namespace nvcuda

namespace emu_wmma {
using namespace nvcuda::wmma;

// The fragment kinds, each with its own element-to-lane permutation.
enum Kind { A_ROW, A_COL, B_ROW, B_COL, ACC, KINDS };
template <typename Use, typename Layout> struct kind_of;
template <> struct kind_of<matrix_a, row_major> { static constexpr Kind value = A_ROW; };
template <> struct kind_of<matrix_a, col_major> { static constexpr Kind value = A_COL; };
template <> struct kind_of<matrix_b, row_major> { static constexpr Kind value = B_ROW; };
template <> struct kind_of<matrix_b, col_major> { static constexpr Kind value = B_COL; };
template <> struct kind_of<accumulator, void> { static constexpr Kind value = ACC; };

// slot lane * 8 + e of kind k holds matrix element position(k)[lane * 8 + e] = row * 16 + col (row, col
// of the matrix as the math sees it: A is M x K, B is K x N, the accumulator M x N); slot_of inverts it
struct Maps {
    uint8_t position[KINDS][256];
    uint8_t slot_of[KINDS][256];
    Maps() {
        uint64_t state = 0x5DEECE66Dull;
        for (int k = 0; k < KINDS; k++) {
            for (int i = 0; i < 256; i++) position[k][i] = (uint8_t)i;
            for (int i = 255; i > 0; i--) {  // Fisher-Yates with xorshift: fixed, and nothing like a GPU's
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                const int j = (int)(state % (uint64_t)(i + 1));
                const uint8_t t = position[k][i];
                position[k][i] = position[k][j];
                position[k][j] = t;
            }
            for (int i = 0; i < 256; i++) slot_of[k][position[k][i]] = (uint8_t)i;
        }
    }
};
inline const Maps& maps() {
    static const Maps m;
    return m;
}

inline float value(float v) { return v; }
inline float value(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> inline T stored(float v);
template <> inline float stored<float>(float v) { return v; }
template <> inline __nv_bfloat16 stored<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// What a lane is doing in the current collective: every lane of the warp must agree.
enum Op { LOAD, STORE, MMA };
struct Call {
    Op op;
    unsigned long seq; // how many wmma collectives this lane has made: lanes of a warp agree
    const void* ptr;   // the memory (load, store) or this lane's A fragment (mma)
    const void* ptr2;  // this lane's B fragment (mma)
    unsigned ldm;
    int layout;
};
inline Call* calls() {
    static Call c[emu::kMaxThreads];
    return c;
}

// Publishes this lane's call and waits for the whole warp; checks that all 32 lanes are there and
// made the same call (for mma only the operation is compared: the fragments are each lane's own).
// A lane that arrived from a shuffle has not published this call: its count is behind.
inline void arrive(Call mine, const char* what) {
    emu::Scheduler& s = emu::sched();
    const int me = emu::self()->linear, base = me - me % 32;
    mine.seq = calls()[me].seq + 1;
    calls()[me] = mine;
    emu::warp_barrier();
    for (int i = base; i < base + 32; i++) {
        if (i >= s.nthreads || s.lane_exited[i])
            emu::die("wmma::%s in warp %d of block (%u,%u,%u): lane %d has exited or does not exist (wmma needs "
                     "all 32 lanes)", what, me / 32, blockIdx.x, blockIdx.y, blockIdx.z, i - base);
        const Call& o = calls()[i];
        const bool same = o.op == mine.op && o.seq == mine.seq && (mine.op == MMA || (o.ptr == mine.ptr && o.ldm == mine.ldm &&
                                                                 o.layout == mine.layout));
        if (!same)
            emu::die("wmma::%s in warp %d of block (%u,%u,%u): lane %d is not making the same call (divergent "
                     "code, or different pointer/ldm/layout across the warp)", what, me / 32, blockIdx.x,
                     blockIdx.y, blockIdx.z, i - base);
    }
}
// Second rendezvous: nobody starts the next collective (overwriting its call, or its fragments that
// other lanes read in mma) before every lane has checked and finished this one.
inline void leave() { emu::warp_barrier(); }

template <typename T>
inline void check_memory(const void* ptr, unsigned ldm, bool store, const char* what) {
    if ((uintptr_t)ptr % 32 != 0) emu::die("wmma::%s: pointer %p is not 256-bit (32-byte) aligned", what, ptr);
    if (ldm % (16 / sizeof(T)) != 0)
        emu::die("wmma::%s: ldm %u is not a multiple of %zu (16 bytes of %zu-byte elements)", what, ldm,
                 16 / sizeof(T), sizeof(T));
    if (store && ldm < 16) emu::die("wmma::%s: ldm %u below 16: the stored rows would overlap", what, ldm);
}
inline int lane() { return emu::self()->linear % 32; }
// element (row, col) of a matrix stored at p with leading dimension ldm
inline size_t offset(int row, int col, unsigned ldm, bool row_major_memory) {
    return row_major_memory ? (size_t)row * ldm + col : (size_t)col * ldm + row;
}

template <typename Frag, typename T>
inline void load(Frag& f, const T* p, unsigned ldm, Kind kind, bool row_major_memory) {
    check_memory<T>(p, ldm, false, "load_matrix_sync");
    arrive(Call{LOAD, 0, p, nullptr, ldm, row_major_memory}, "load_matrix_sync");
    for (int e = 0; e < Frag::num_elements; e++) {
        const int pos = maps().position[kind][lane() * 8 + e];
        f.x[e] = p[offset(pos / 16, pos % 16, ldm, row_major_memory)];
    }
    leave();
}

}  // namespace emu_wmma

namespace nvcuda {
namespace wmma {

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = emu_wmma::stored<T>(v);
}

// matrix_a / matrix_b: the layout is the fragment's
template <typename Use, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p, unsigned ldm) {
    emu_wmma::load(f, p, ldm, emu_wmma::kind_of<Use, Layout>::value, std::is_same<Layout, row_major>::value);
}
// accumulator: the layout is the call's
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout) {
    emu_wmma::load(f, p, ldm, emu_wmma::ACC, layout == mem_row_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
    using namespace emu_wmma;
    check_memory<float>(p, ldm, true, "store_matrix_sync");
    arrive(Call{STORE, 0, p, nullptr, ldm, layout == mem_row_major}, "store_matrix_sync");
    for (int e = 0; e < f.num_elements; e++) {
        const int pos = maps().position[ACC][lane() * 8 + e];
        p[offset(pos / 16, pos % 16, ldm, layout == mem_row_major)] = f.x[e];
    }
    leave();
}

// d = a b + c, fp32 accumulation. Each lane computes its own 8 elements of d, reading the row of A
// and the column of B it needs from the lanes that hold them.
template <typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
    using namespace emu_wmma;
    typedef fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> FragA;
    typedef fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> FragB;
    const Kind ka = kind_of<matrix_a, LayoutA>::value, kb = kind_of<matrix_b, LayoutB>::value;
    arrive(Call{MMA, 0, &a, &b, 0, 0}, "mma_sync");
    const int base = emu::self()->linear - lane();
    const Maps& m = maps();
    auto A = [&](int row, int k) {
        const int slot = m.slot_of[ka][row * 16 + k];
        return value(((const FragA*)calls()[base + slot / 8].ptr)->x[slot % 8]);
    };
    auto B = [&](int k, int col) {
        const int slot = m.slot_of[kb][k * 16 + col];
        return value(((const FragB*)calls()[base + slot / 8].ptr2)->x[slot % 8]);
    };
    float out[8];
    for (int e = 0; e < 8; e++) {
        const int pos = m.position[ACC][lane() * 8 + e], row = pos / 16, col = pos % 16;
        float acc = c.x[e];
        for (int k = 0; k < 16; k++) acc += A(row, k) * B(k, col);
        out[e] = acc;
    }
    for (int e = 0; e < 8; e++) d.x[e] = out[e];  // d may be c; other lanes read only a and b
    leave();
}

}  // namespace wmma
}  // namespace nvcuda
