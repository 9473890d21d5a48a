// test_quantize.c: ZeRO++'s block quantization through the real CPU backend (be->quantize,
// be->dequantize), on the units the engine lays out for -qw 8 on N = 1..5 ranks (simulated one rank
// at a time, as test_engine_layout.c does; no collective is called):
//  1. the layout: every shard is a whole number of blocks, and the tensor offsets are the same on
//     every N (only the tail padding changes), so a block covers the same elements on every N;
//  2. the round trip: every element comes back within half a step (its block's amax / 127, worked
//     out here in double) of its value, up to fp32's rounding of the scale and the product, codes never exceed the block's largest magnitude, and an
//     all-zero block comes back exact;
//  3. the same for any N: each rank quantizing and dequantizing only its own shard gives, assembled,
//     bitwise the values one rank gets from the whole unit;
//  4. dequantize with accumulate adds (in fp32) to what the buffer held.
#include "../../host/common.h"
#include "../../host/gpt2.h"
#include "../../zero3.h"
#include "../../cpu/backend_cpu.h"

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL: " __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static void *t_alloc(void *ctx, size_t bytes) { return xcalloc(1, bytes); }

// The engine's layout of GPT-2 `c` with -qw 8 on `world` ranks (seen from rank 0).
static void layout(Zero3 *z, Zero3Backend *fake, const GPT2Config *c, int world) {
    memset(fake, 0, sizeof *fake);
    fake->world = world;
    fake->alloc = t_alloc;
    Zero3Config zc = {.stage = 3, .prefetch_depth = 1, .align = 64, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = 1, .quant_weights = 8};
    zero3_init(z, fake, &zc);
    gpt2_register_units(c, z);
}

// Unit values: random, each tensor at its own magnitude (1e-4 .. 1e2), one all-zero block, padding 0.
static float *unit_values(const Zero3Unit *U, size_t P, uint64_t *rng) {
    float *x = (float *)xcalloc(P, sizeof(float));
    for (int t = 0; t < U->ntensors; t++) {
        float mag = powf(10.0f, (float)(t % 7) - 4.0f);
        for (size_t i = 0; i < U->tensors[t].numel; i++) {
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            x[U->tensors[t].offset + i] = mag * ((float)(*rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
        }
    }
    if (P >= 2 * ZERO3_QUANT_BLOCK) memset(x + ZERO3_QUANT_BLOCK, 0, ZERO3_QUANT_BLOCK * sizeof(float));
    return x;
}

// quantize + dequantize n values of x into y through the backend
static void round_trip(const Zero3Backend *be, const float *x, float *y, size_t n) {
    void *packed = xmalloc(zero3_quant_bytes(n));
    be->quantize(be->ctx, x, ZERO3_F32, n, packed);
    be->dequantize(be->ctx, packed, n, y, ZERO3_F32, 0);
    free(packed);
}

static void check_round_trip(const char *unit, const float *x, const float *y, size_t P) {
    size_t bad = 0, zero_bad = 0;
    for (size_t b = 0; b < P / ZERO3_QUANT_BLOCK; b++) {
        double amax = 0.0;
        for (size_t i = b * ZERO3_QUANT_BLOCK; i < (b + 1) * ZERO3_QUANT_BLOCK; i++) amax = fmax(amax, fabs((double)x[i]));
        // half a step, plus the fp32 roundings of the scale and of code * scale (an ulp of amax each)
        double allowed = 0.5 * amax / 127.0 + amax * ldexp(1.0, -23) * 2.0;
        for (size_t i = b * ZERO3_QUANT_BLOCK; i < (b + 1) * ZERO3_QUANT_BLOCK; i++) {
            if (fabs((double)x[i] - (double)y[i]) > allowed || fabs((double)y[i]) > amax * (1.0 + ldexp(1.0, -22))) bad++;
            if (amax == 0.0 && y[i] != 0.0f) zero_bad++;
        }
    }
    CHECK(bad == 0, "unit %s: %zu elements more than half a step from their value", unit, bad);
    CHECK(zero_bad == 0, "unit %s: an all-zero block came back non-zero", unit);
}

static void test_model(const Zero3Backend *be, const GPT2Config *c, const char *name) {
    Zero3 ref;
    Zero3Backend fake_ref;
    layout(&ref, &fake_ref, c, 1);
    uint64_t rng = 23;
    for (int u = 0; u < ref.nunits; u++) {
        const Zero3Unit *U = &ref.units[u];
        float *x = unit_values(U, U->padded, &rng), *y = (float *)xmalloc(U->padded * sizeof(float));
        round_trip(be, x, y, U->padded);
        check_round_trip(U->name, x, y, U->padded);
        for (int world = 2; world <= 5; world++) {
            Zero3 z;
            Zero3Backend fake;
            layout(&z, &fake, c, world);
            const Zero3Unit *V = &z.units[u];
            CHECK(V->shard % ZERO3_QUANT_BLOCK == 0, "unit %s N=%d: shard %zu is not whole blocks", V->name, world, V->shard);
            for (int t = 0; t < U->ntensors; t++)
                CHECK(V->tensors[t].offset == U->tensors[t].offset, "unit %s N=%d: tensor %d moved", V->name, world, t);
            float *xn = (float *)xcalloc(V->padded, sizeof(float)), *yn = (float *)xmalloc(V->padded * sizeof(float));
            memcpy(xn, x, (V->padded < U->padded ? V->padded : U->padded) * sizeof(float));
            for (int r = 0; r < world; r++) round_trip(be, xn + (size_t)r * V->shard, yn + (size_t)r * V->shard, V->shard);
            size_t end = U->tensors[U->ntensors - 1].offset + U->tensors[U->ntensors - 1].numel, differ = 0;
            for (size_t i = 0; i < end; i++) differ += memcmp(&yn[i], &y[i], sizeof(float)) != 0;
            CHECK(differ == 0, "unit %s N=%d: %zu values differ from one rank's quantized unit", V->name, world, differ);
            free(xn); free(yn);
            zero3_free(&z);
        }
        // accumulate: y + dequantize(quantize(x)) == 2 y, element by element in fp32
        void *packed = xmalloc(zero3_quant_bytes(U->padded));
        be->quantize(be->ctx, x, ZERO3_F32, U->padded, packed);
        float *acc = (float *)xmalloc(U->padded * sizeof(float));
        memcpy(acc, y, U->padded * sizeof(float));
        be->dequantize(be->ctx, packed, U->padded, acc, ZERO3_F32, 1);
        size_t wrong = 0;
        for (size_t i = 0; i < U->padded; i++) wrong += acc[i] != y[i] + y[i];
        CHECK(wrong == 0, "unit %s: dequantize with accumulate is off at %zu elements", U->name, wrong);
        free(packed); free(acc); free(x); free(y);
    }
    printf("ok   %s: %d units, round trip within half a step, the same quantized model on N = 1..5\n", name, ref.nunits);
    zero3_free(&ref);
}

int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);   // built without MPI: one rank, the real shard math
    const char *models[] = {"d2c48h2t32", "d3c72h3t64"};
    for (int m = 0; m < 2; m++) {
        GPT2Config c;
        if (gpt2_config_from_descriptor(models[m], &c) != 0) { fprintf(stderr, "bad descriptor %s\n", models[m]); return 1; }
        test_model(&be, &c, models[m]);
    }
    backend_cpu_finish(&be);
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("test_quantize: all passed\n");
    return 0;
}
