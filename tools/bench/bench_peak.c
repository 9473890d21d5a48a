/*
tools/bench/bench_peak.c: the measured peak of a core's 512-bit fp32 FMA and bf16 dot product (VDPBF16PS),
in GFLOP/s, per thread count (tools/bench/bench_peak.h says how it runs and how flops are counted).

    make bench_peak && ./build/bench_peak          # 1 and 2 threads
    ./build/bench_peak 1 2 4                       # any list of thread counts
    BENCH_CLOCK=cpu ./build/bench_peak 1           # one thread, on a shared machine
The matmuls' fractions of these peaks: tools/bench/bench_bf16_kernels.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include "bench_peak.h"

int main(int argc, char **argv) {
    int counts[16], n_counts = 0;
    for (int i = 1; i < argc && n_counts < 16; i++) {
        char *end;
        long n = strtol(argv[i], &end, 10);
        if (*end != '\0' || n < 1 || n > 1024) {
            fprintf(stderr, "bench_peak: thread count '%s' is not an integer in 1..1024\n", argv[i]);
            return 1;
        }
        counts[n_counts++] = (int)n;
    }
    if (n_counts == 0) { counts[0] = 1; counts[1] = 2; n_counts = 2; }
    printf("%-8s | %-28s | %-28s | %s\n", "threads", "fp32 FMA zmm GFLOP/s (/core)", "VDPBF16PS zmm GFLOP/s (/core)",
           "ratio");
    for (int i = 0; i < n_counts; i++) {
        int t = counts[i];
        double fma = peak_gflops(PEAK_FP32_FMA, t, 10), dp = peak_gflops(PEAK_BF16_DP, t, 10);
        printf("%-8d | %10.1f (%6.1f)%10s | %10.1f (%6.1f)%10s | %.2f\n", t, fma, fma / t, "", dp, dp / t, "",
               fma > 0 ? dp / fma : 0.0);
    }
    if (!peak_available(PEAK_BF16_DP)) printf("(this CPU has no AVX512_BF16: its peak is shown as 0)\n");
    return 0;
}
