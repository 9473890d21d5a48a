/*
Benchmark of the CPU kernels in cpu/kernels.h at GPT-2 124M (d12) shapes: the four linear layers of a
block and the LM head on B*T = 1024 tokens, and causal attention with T = 1024, NH = 12.

Build and run (from the repository root):
    gcc -O3 -march=native -fopenmp -o build/bench_cpu_kernels tools/bench/bench_cpu_kernels.c -lm
    ./build/bench_cpu_kernels            # 1 and 2 threads
    ./build/bench_cpu_kernels 1 4 8      # any list of thread counts
Prints, per kernel and thread count, the best time of a few runs and GFLOP/s, then the share of each
kind of kernel in one whole block's forward and backward. Times are taken by the peaks' clock
(tools/bench/bench_peak.h: the wall clock, or BENCH_CLOCK=cpu for one thread on a busy machine). A matmul forward
is 2*BT*C*OC flops; its backward twice that (dinp and dweight; dbias is negligible). Attention
counts the causal half of its products: forward 2 products, backward 4, each 2*B*NH*(T*T/2)*hs.
*/
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "../../cpu/kernels.h"
#include "bench_peak.h"

// a buffer of n floats, uniform in [-1, 1), from a fixed xorshift sequence
static float *random_floats(size_t n, unsigned long long *state) {
    float *x = malloc(n * sizeof(float));
    if (!x) { fprintf(stderr, "bench_cpu_kernels: out of memory allocating %zu floats\n", n); exit(1); }
    for (size_t i = 0; i < n; i++) {
        *state ^= *state << 13; *state ^= *state >> 7; *state ^= *state << 17;
        x[i] = (float)((*state >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
    }
    return x;
}

typedef struct { const char *name; int C, OC; } LinearShape;

int main(int argc, char **argv) {
    int thread_counts[16], n_counts = 0;
    for (int i = 1; i < argc && n_counts < 16; i++) {
        char *end;
        long n = strtol(argv[i], &end, 10);
        if (*end != '\0' || n < 1 || n > 1024) {
            fprintf(stderr, "bench_cpu_kernels: thread count '%s' is not an integer in 1..1024\n", argv[i]);
            return 1;
        }
        thread_counts[n_counts++] = (int)n;
    }
    if (n_counts == 0) { thread_counts[0] = 1; thread_counts[1] = 2; n_counts = 2; }

    const int B = 1, T = 1024, BT = B * T;   // 1024 tokens, as one d12 sequence
    const LinearShape shapes[] = {
        {"qkv     ", 768, 2304}, {"attproj ", 768, 768}, {"fc      ", 768, 3072},
        {"fcproj  ", 3072, 768}, {"lm head ", 768, 50304},
    };
    const int n_shapes = sizeof(shapes) / sizeof(shapes[0]);
    unsigned long long rng = 0x2545F4914F6CDD1Dull;

    printf("cpu/kernels.h benchmark: SIMD width %d floats, matmul tile %dx%d, BT = %d\n",
           CK_VEC, MM_TILE_ROWS, MM_TILE_COLS, BT);
    printf("%-10s %7s %7s %8s | %10s %9s | %10s %9s\n", "kernel", "C", "OC", "threads",
           "fwd ms", "GFLOP/s", "bwd ms", "GFLOP/s");
    for (int s = 0; s < n_shapes; s++) {
        int C = shapes[s].C, OC = shapes[s].OC;
        float *inp = random_floats((size_t)BT * C, &rng), *weight = random_floats((size_t)OC * C, &rng);
        float *bias = random_floats(OC, &rng), *out = random_floats((size_t)BT * OC, &rng);
        float *dout = random_floats((size_t)BT * OC, &rng), *dinp = random_floats((size_t)BT * C, &rng);
        float *dweight = random_floats((size_t)OC * C, &rng), *dbias = random_floats(OC, &rng);
        int reps = OC > 10000 ? 2 : 5;
        double flops = 2.0 * BT * C * OC;
        for (int tc = 0; tc < n_counts; tc++) {
            const int threads = thread_counts[tc];
            omp_set_num_threads(threads);
            double t_fwd, t_bwd;
            BEST_TIME(t_fwd, reps, threads, matmul_forward(out, inp, weight, bias, B, T, C, OC));
            BEST_TIME(t_bwd, reps, threads, matmul_backward(dinp, GRAD_ADD, dweight, dbias, dout, inp, weight, B, T, C, OC));
            printf("%-10s %7d %7d %8d | %10.2f %9.1f | %10.2f %9.1f\n", shapes[s].name, C, OC, thread_counts[tc],
                   1e3 * t_fwd, flops / t_fwd * 1e-9, 1e3 * t_bwd, 2 * flops / t_bwd * 1e-9);
        }
        free(inp); free(weight); free(bias); free(out); free(dout); free(dinp); free(dweight); free(dbias);
    }

    // attention, d12 shapes with one sequence of 1024
    {
        int C = 768, NH = 12, hs = C / NH;
        size_t tt = (size_t)B * NH * T * T;
        float *qkv = random_floats((size_t)BT * 3 * C, &rng), *out = random_floats((size_t)BT * C, &rng);
        float *preatt = random_floats(tt, &rng), *att = random_floats(tt, &rng);
        float *dout = random_floats((size_t)BT * C, &rng), *dqkv = random_floats((size_t)BT * 3 * C, &rng);
        float *dpreatt = random_floats(tt, &rng), *datt = random_floats(tt, &rng);
        double product = 2.0 * B * NH * ((double)T * T / 2) * hs;
        for (int tc = 0; tc < n_counts; tc++) {
            const int threads = thread_counts[tc];
            omp_set_num_threads(threads);
            double t_fwd, t_bwd;
            BEST_TIME(t_fwd, 3, threads, attention_forward(out, preatt, att, qkv, B, T, C, NH));
            BEST_TIME(t_bwd, 3, threads, attention_backward(dqkv, GRAD_ADD, dpreatt, datt, dout, qkv, att, B, T, C, NH));
            printf("%-10s %7d %7s %8d | %10.2f %9.1f | %10.2f %9.1f\n", "attention", C, "T=1024", thread_counts[tc],
                   1e3 * t_fwd, 2 * product / t_fwd * 1e-9, 1e3 * t_bwd, 4 * product / t_bwd * 1e-9);
        }
        free(qkv); free(out); free(preatt); free(att); free(dout); free(dqkv); free(dpreatt); free(datt);
    }

    // one whole d12 transformer block, forward and backward (as the trainer calls them), time per
    // kind of kernel: where the time goes besides the matmuls
    {
        int C = 768, NH = 12;
        size_t btc = (size_t)BT * C, cc = (size_t)C * C, tt = (size_t)B * NH * T * T;
        // activations
        float *x = random_floats(btc, &rng), *ln1 = random_floats(btc, &rng), *qkv = random_floats(3 * btc, &rng);
        float *atty = random_floats(btc, &rng), *attproj = random_floats(btc, &rng), *res2 = random_floats(btc, &rng);
        float *ln2 = random_floats(btc, &rng), *fch = random_floats(4 * btc, &rng), *fch_gelu = random_floats(4 * btc, &rng);
        float *fcproj = random_floats(btc, &rng), *res3 = random_floats(btc, &rng);
        float *preatt = random_floats(tt, &rng), *att = random_floats(tt, &rng);
        float *mean1 = random_floats(BT, &rng), *rstd1 = random_floats(BT, &rng);
        float *mean2 = random_floats(BT, &rng), *rstd2 = random_floats(BT, &rng);
        // parameters and their gradients
        float *lnw = random_floats(C, &rng), *lnb = random_floats(C, &rng), *dlnw = random_floats(C, &rng), *dlnb = random_floats(C, &rng);
        float *qkvw = random_floats(3 * cc, &rng), *attprojw = random_floats(cc, &rng);
        float *fcw = random_floats(4 * cc, &rng), *fcprojw = random_floats(4 * cc, &rng), *bias = random_floats(4 * C, &rng);
        float *dw = random_floats(4 * cc, &rng), *dbias = random_floats(4 * C, &rng);
        // activation gradients
        float *dres = random_floats(btc, &rng), *dfcproj = random_floats(btc, &rng), *dfch_gelu = random_floats(4 * btc, &rng);
        float *dfch = random_floats(4 * btc, &rng), *dln = random_floats(btc, &rng), *datty = random_floats(btc, &rng);
        float *dqkv = random_floats(3 * btc, &rng), *dpreatt = random_floats(tt, &rng), *datt = random_floats(tt, &rng);
        enum { K_MATMUL, K_ATTENTION, K_LAYERNORM, K_GELU, K_RESIDUAL, K_COUNT };
        const char *names[K_COUNT] = {"matmul", "attention", "layernorm", "gelu", "residual"};
        for (int tc = 0; tc < n_counts; tc++) {
            const int threads = thread_counts[tc];
            omp_set_num_threads(threads);
            double ms[K_COUNT] = {0}, t0;
            #define TIMED(kind, call) do { t0 = peak_now(threads); call; ms[kind] += 1e3 * (peak_now(threads) - t0); } while (0)
            for (int rep = 0; rep < 2; rep++) {
                if (rep == 1) for (int k = 0; k < K_COUNT; k++) ms[k] = 0;   // the first pass warms up
                TIMED(K_LAYERNORM, layernorm_forward(ln1, mean1, rstd1, x, lnw, lnb, B, T, C));
                TIMED(K_MATMUL, matmul_forward(qkv, ln1, qkvw, bias, B, T, C, 3 * C));
                TIMED(K_ATTENTION, attention_forward(atty, preatt, att, qkv, B, T, C, NH));
                TIMED(K_MATMUL, matmul_forward(attproj, atty, attprojw, bias, B, T, C, C));
                TIMED(K_RESIDUAL, residual_forward(res2, x, attproj, BT * C));
                TIMED(K_LAYERNORM, layernorm_forward(ln2, mean2, rstd2, res2, lnw, lnb, B, T, C));
                TIMED(K_MATMUL, matmul_forward(fch, ln2, fcw, bias, B, T, C, 4 * C));
                TIMED(K_GELU, gelu_forward(fch_gelu, fch, BT * 4 * C));
                TIMED(K_MATMUL, matmul_forward(fcproj, fch_gelu, fcprojw, bias, B, T, 4 * C, C));
                TIMED(K_RESIDUAL, residual_forward(res3, res2, fcproj, BT * C));
                // backward; dres holds d(res3) and flows down (the residual backward is its copy into dfcproj)
                TIMED(K_RESIDUAL, residual_backward(dfcproj, dres, dres, BT * C));
                TIMED(K_MATMUL, matmul_backward(dfch_gelu, GRAD_WRITE, dw, dbias, dfcproj, fch_gelu, fcprojw, B, T, 4 * C, C));
                TIMED(K_GELU, gelu_backward(dfch, GRAD_WRITE, fch, dfch_gelu, BT * 4 * C));
                TIMED(K_MATMUL, matmul_backward(dln, GRAD_WRITE, dw, dbias, dfch, ln2, fcw, B, T, C, 4 * C));
                TIMED(K_LAYERNORM, layernorm_backward(dres, dlnw, dlnb, dln, res2, lnw, mean2, rstd2, B, T, C));
                TIMED(K_MATMUL, matmul_backward(datty, GRAD_WRITE, dw, dbias, dres, atty, attprojw, B, T, C, C));
                TIMED(K_ATTENTION, attention_backward(dqkv, GRAD_WRITE, dpreatt, datt, datty, qkv, att, B, T, C, NH));
                TIMED(K_MATMUL, matmul_backward(dln, GRAD_WRITE, dw, dbias, dqkv, ln1, qkvw, B, T, C, 3 * C));
                TIMED(K_LAYERNORM, layernorm_backward(dres, dlnw, dlnb, dln, x, lnw, mean1, rstd1, B, T, C));
            }
            #undef TIMED
            double total = 0;
            for (int k = 0; k < K_COUNT; k++) total += ms[k];
            printf("one d12 block, forward + backward, %d thread(s): %.1f ms =", threads, total);
            for (int k = 0; k < K_COUNT; k++)
                printf(" %s %.0f%%%s", names[k], 100 * ms[k] / total, k + 1 < K_COUNT ? "," : "\n");
        }
        float *all[] = {x, ln1, qkv, atty, attproj, res2, ln2, fch, fch_gelu, fcproj, res3, preatt, att, mean1, rstd1,
                        mean2, rstd2, lnw, lnb, dlnw, dlnb, qkvw, attprojw, fcw, fcprojw, bias, dw, dbias, dres,
                        dfcproj, dfch_gelu, dfch, dln, datty, dqkv, dpreatt, datt};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
    }
    return 0;
}
