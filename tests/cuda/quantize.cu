// Check of ZeRO++'s block quantization (gpu/shard_math.cuh: quantize_blocks, dequantize_blocks)
// against the CPU backend's (cpu/backend_cpu.c: the same zero3.h per-block functions in C loops):
// codes and scales bitwise equal for floatX and fp32 inputs, including all-zero blocks and blocks
// with one large outlier; every element within half a step of its block's scale (the round trip);
// and dequantize, written and accumulated (the sum in fp32, rounded once), bitwise equal.
// Build: make -C tests/cuda bin/quantize_bf16 (or _fp32); run: tests/cuda/bin/quantize_bf16
#include "common.h"
#include "../../gpu/shard_math.cuh"

// The CPU backend's quantization of n values (n a multiple of the block), as cpu_quantize does it.
static void cpu_reference(const std::vector<float>& x, std::vector<signed char>& codes, std::vector<float>& scales) {
    const size_t nb = x.size() / ZERO3_QUANT_BLOCK;
    codes.resize(x.size());
    scales.resize(nb);
    for (size_t b = 0; b < nb; b++) {
        float amax = 0.0f;
        for (int i = 0; i < ZERO3_QUANT_BLOCK; i++) amax = fmaxf(amax, fabsf(x[b * ZERO3_QUANT_BLOCK + i]));
        scales[b] = zero3_quant_scale(amax);
        for (int i = 0; i < ZERO3_QUANT_BLOCK; i++)
            codes[b * ZERO3_QUANT_BLOCK + i] = zero3_quant_code(x[b * ZERO3_QUANT_BLOCK + i], scales[b]);
    }
}

// Input of n values: blocks at very different magnitudes, an all-zero block, an outlier block.
static std::vector<float> make_input(size_t n, Rng& rng, bool floatx) {
    std::vector<float> x = random_float(n, -1.0f, 1.0f, rng);
    for (size_t b = 0; b < n / ZERO3_QUANT_BLOCK; b++)
        for (int i = 0; i < ZERO3_QUANT_BLOCK; i++) x[b * ZERO3_QUANT_BLOCK + i] *= powf(10.0f, (float)(b % 7) - 4.0f);
    for (int i = 0; i < ZERO3_QUANT_BLOCK; i++) x[ZERO3_QUANT_BLOCK + i] = 0.0f;
    x[2 * ZERO3_QUANT_BLOCK + 17] = 300.0f;
    if (floatx) for (float& v : x) v = round_floatX(v);
    return x;
}

template <typename T>
static bool check(const char* name, size_t n, Rng& rng) {
    const bool floatx = sizeof(T) == sizeof(floatX) && !std::is_same<T, float>::value;
    std::vector<float> x = make_input(n, rng, floatx);
    T* d_x = floatx ? (T*)to_device_floatX(x) : (T*)to_device_float(x);
    const size_t bytes = zero3_quant_bytes(n);
    char* d_packed = device_alloc<char>(bytes);
    poison(d_packed, bytes);
    quantize_blocks<T>(d_x, n, d_packed, 0);
    std::vector<char> packed(bytes);
    cudaCheck(cudaMemcpy(packed.data(), d_packed, bytes, cudaMemcpyDeviceToHost));
    std::vector<signed char> codes;
    std::vector<float> scales;
    cpu_reference(x, codes, scales);
    bool ok = memcmp(packed.data(), codes.data(), n) == 0 && memcmp(packed.data() + n, scales.data(), scales.size() * 4) == 0;
    if (!ok) fprintf(stderr, "  %s: codes or scales differ from the CPU backend's\n", name);
    // the round trip: every element within half a step of its block's scale
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const float s = scales[i / ZERO3_QUANT_BLOCK];
        const double e = s > 0 ? fabs((double)x[i] - (double)codes[i] * s) / s : fabs((double)x[i]);
        worst = fmax(worst, e);
    }
    if (worst > 0.5 + 1e-6) { fprintf(stderr, "  %s: round trip %.6f steps off\n", name, worst); ok = false; }
    // dequantize, written then accumulated onto the input, against the CPU's arithmetic
    T* d_out = floatx ? (T*)to_device_floatX(x) : (T*)to_device_float(x);
    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        if (!accumulate) poison(d_out, n);
        else if (floatx) upload_floatX((floatX*)d_out, x);
        else cudaCheck(cudaMemcpy(d_out, x.data(), n * 4, cudaMemcpyHostToDevice));
        dequantize_blocks<T>(d_packed, n, d_out, accumulate, 0);
        std::vector<float> got = floatx ? from_device_floatX((floatX*)d_out, n) : from_device_float((float*)d_out, n);
        for (size_t i = 0; i < n && ok; i++) {
            float v = (float)codes[i] * scales[i / ZERO3_QUANT_BLOCK];
            float want = accumulate ? x[i] + v : v;
            if (floatx) want = round_floatX(want);
            if (memcmp(&got[i], &want, 4) != 0) {
                fprintf(stderr, "  %s: dequantize%s[%zu] %.9g, the CPU's %.9g\n", name, accumulate ? " accumulate" : "", i, got[i], want);
                ok = false;
            }
        }
    }
    float ms = time_ms([&] { quantize_blocks<T>(d_x, n, d_packed, 0); });
    report(name, ok, worst, ms, (double)n * sizeof(T) + bytes, 0.0);
    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_packed));
    return ok;
}

int main() {
    print_device();
    const size_t n = SIZE((size_t)ZERO3_QUANT_BLOCK * 65536, (size_t)ZERO3_QUANT_BLOCK * 40);
    Rng rng(23);
    check<floatX>("quantize_floatX", n, rng);
    check<float>("quantize_fp32", n, rng);
    return finish();
}
