/*
tools/bench/bench_bf16_kernels.c: the bf16 matmuls of cpu/kernels_bf16.h beside cpu/kernels.h's fp32 ones, at
GPT-2 124M (d12) shapes with B = 8, T = 64 (B*T = 512 tokens): the four linear layers of a block and
the LM head (Vp = 50304), forward and backward, each as GFLOP/s and as a fraction of the measured
peak of its instruction (tools/bench/bench_peak.h: fp32 FMA for fp32, VDPBF16PS for bf16) on as many cores.

    make bench_bf16_kernels && ./build/bench_bf16_kernels      # 1 and 2 threads
    ./build/bench_bf16_kernels 1 4                             # any list of thread counts
    BENCH_CLOCK=cpu ./build/bench_bf16_kernels 1               # one thread, on a shared machine
A forward is 2*BT*C*OC flops, its backward twice that (dinp and dweight; dbias is negligible); the
same count for every precision, so GFLOP/s compare times directly. Times are taken by the peaks'
clock (tools/bench/bench_peak.h: BENCH_CLOCK=cpu for one thread on a busy machine). The portable path is timed too:
it is what a CPU without AVX512_BF16 runs (its fraction is of the fp32 FMA peak, the instruction it
uses). Each time is the best of a few runs after one warm-up.
*/
#include <stdio.h>
#include <stdlib.h>
#include "../../cpu/kernels_bf16.h"
#include "bench_peak.h"

static float *random_floats(size_t n, unsigned long long *state) {   // uniform in [-1, 1)
    float *x = malloc(n * sizeof(float));
    if (!x) { fprintf(stderr, "bench_bf16_kernels: out of memory allocating %zu floats\n", n); exit(1); }
    for (size_t i = 0; i < n; i++) {
        *state ^= *state << 13; *state ^= *state >> 7; *state ^= *state << 17;
        x[i] = (float)((*state >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
    }
    return x;
}
static uint16_t *to_bf16(const float *x, size_t n) {
    uint16_t *b = malloc(n * sizeof(uint16_t));
    if (!b) { fprintf(stderr, "bench_bf16_kernels: out of memory allocating %zu bf16\n", n); exit(1); }
    bf16_from_f32_array(b, x, n);
    return b;
}

typedef struct { const char *name; int C, OC; } LinearShape;

int main(int argc, char **argv) {
    int counts[16], n_counts = 0;
    for (int i = 1; i < argc && n_counts < 16; i++) {
        char *end;
        long n = strtol(argv[i], &end, 10);
        if (*end != '\0' || n < 1 || n > 1024) {
            fprintf(stderr, "bench_bf16_kernels: thread count '%s' is not an integer in 1..1024\n", argv[i]);
            return 1;
        }
        counts[n_counts++] = (int)n;
    }
    if (n_counts == 0) { counts[0] = 1; counts[1] = 2; n_counts = 2; }
    const int B = 8, T = 64, BT = B * T;
    const LinearShape shapes[] = {{"qkv", 768, 2304}, {"attproj", 768, 768}, {"fc", 768, 3072},
                                  {"fcproj", 3072, 768}, {"lm head", 768, 50304}};
    const int n_shapes = sizeof(shapes) / sizeof(shapes[0]);
    int has_avx512bf16 = bf16_path_available(BF16_PATH_AVX512);
    printf("bf16 matmuls at B=%d T=%d; path chosen by CPUID: %s\n", B, T, bf16_path_name(bf16_path_best()));
    for (int tc = 0; tc < n_counts; tc++) {
        int threads = counts[tc];
        omp_set_num_threads(threads);
        double peak_fma = peak_gflops(PEAK_FP32_FMA, threads, 10), peak_dp = peak_gflops(PEAK_BF16_DP, threads, 10);
        printf("\n%d thread(s): measured peak fp32 FMA %.1f GFLOP/s, VDPBF16PS %.1f GFLOP/s\n", threads, peak_fma, peak_dp);
        printf("%-8s %5s %6s | %-21s | %-21s | %-21s | %s\n", "layer", "C", "OC", "fp32 fwd / bwd", "bf16 avx512 fwd / bwd",
               "bf16 portable fwd/bwd", "GFLOP/s (fraction of its peak)");
        unsigned long long rng = 0x2545F4914F6CDD1Dull;
        for (int s = 0; s < n_shapes; s++) {
            int C = shapes[s].C, OC = shapes[s].OC;
            float *inp = random_floats((size_t)BT * C, &rng), *w = random_floats((size_t)OC * C, &rng);
            float *bias = random_floats(OC, &rng), *out = random_floats((size_t)BT * OC, &rng);
            float *dout = random_floats((size_t)BT * OC, &rng), *dinp = random_floats((size_t)BT * C, &rng);
            float *dw = random_floats((size_t)OC * C, &rng), *db = random_floats(OC, &rng);
            uint16_t *w16 = to_bf16(w, (size_t)OC * C), *b16 = to_bf16(bias, OC);
            uint16_t *dw16 = to_bf16(dw, (size_t)OC * C), *db16 = to_bf16(db, OC);
            for (size_t i = 0; i < (size_t)OC * C; i++) dw16[i] = 0;   // gradients that stay small
            for (int i = 0; i < OC; i++) db16[i] = 0;
            int reps = OC > 10000 ? 3 : 10;
            double flops = 2.0 * BT * C * OC, t[6];
            BEST_TIME(t[0], reps, threads, matmul_forward(out, inp, w, bias, B, T, C, OC));
            BEST_TIME(t[1], reps, threads, matmul_backward(dinp, GRAD_ADD, dw, db, dout, inp, w, B, T, C, OC));
            for (int p = 0; p < 2; p++) {
                Bf16Path path = p == 0 ? BF16_PATH_AVX512 : BF16_PATH_PORTABLE;
                if (!bf16_path_available(path)) { t[2 + 2 * p] = t[3 + 2 * p] = 0; continue; }
                Bf16Matmul mm = bf16_matmul_new(path);
                BEST_TIME(t[2 + 2 * p], reps, threads, matmul_forward_bf16(&mm, out, inp, w16, b16, B, T, C, OC));
                BEST_TIME(t[3 + 2 * p], reps, threads, matmul_backward_bf16(&mm, dinp, GRAD_ADD, dw16, db16, dout, inp, w16, B, T, C, OC));
                bf16_matmul_free(&mm);
            }
            double peaks[6] = {peak_fma, peak_fma, peak_dp, peak_dp, peak_fma, peak_fma};
            printf("%-8s %5d %6d |", shapes[s].name, C, OC);
            for (int k = 0; k < 6; k++) {
                double gf = t[k] > 0 ? (k % 2 ? 2 : 1) * flops / t[k] * 1e-9 : 0;
                printf(" %5.0f (%3.0f%%)%s", gf, peaks[k] > 0 ? 100 * gf / peaks[k] : 0.0, k % 2 ? " |" : "");
            }
            printf("\n");
            free(inp); free(w); free(bias); free(out); free(dout); free(dinp); free(dw); free(db);
            free(w16); free(b16); free(dw16); free(db16);
        }
    }
    if (!has_avx512bf16) printf("(no AVX512_BF16 on this CPU: the avx512 columns are 0)\n");
    return 0;
}
