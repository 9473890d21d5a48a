// test_sampler.c: the sampler's arithmetic by hand on a tiny vocabulary (host/common.h's random_u32,
// random_f32 and sample_from, which trainer_sample uses for every token it prints).
//
//  1. The RNG: the trainer seeds the sampling state with seed ^ 0x5DEECE66D. The first three draws
//     for the default seed 1337, worked out with Python's big integers (xorshift* by its definition:
//     s ^= s >> 12; s ^= s << 25; s ^= s >> 27; out = (s * 0x2545F4914F6CDD1D mod 2^64) >> 32) and
//     typed in: 1096007155, 710731251, 1564029742; as coins (out >> 8) / 2^24: 0.25518399477005005,
//     0.16547995805740356, 0.36415404081344604.
//  2. The draw: a coin picks the first token whose cumulative probability exceeds it. On the
//     vocabulary {0.1, 0.2, 0.3, 0.4} the cumulative sums are 0.1, 0.3, 0.6, 1.0, so by hand: coin 0
//     -> 0; 0.0999 -> 0; 0.1001 -> 1; 0.2999 -> 1; 0.3001 -> 2; 0.9999 -> 3; a token of probability 0
//     is never drawn; rounding that leaves the total under the coin gives the last token.
//  3. The two together, as the trainer draws its first three tokens for seed 1337 on the
//     vocabulary {0.2, 0.05, 0.15, 0.6} (sums 0.2, 0.25, 0.4, 1.0): coins 0.255 -> 2, 0.165 -> 0,
//     0.364 -> 2.
#include "../../host/common.h"
#include <stdio.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL: " __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

int main(void) {
    uint64_t rng = 1337ull ^ 0x5DEECE66Dull;
    const uint32_t want_u32[3] = {1096007155u, 710731251u, 1564029742u};
    const double want_coin[3] = {0.25518399477005005, 0.16547995805740356, 0.36415404081344604};
    for (int i = 0; i < 3; i++) {
        uint64_t copy = rng;
        uint32_t u = random_u32(&copy);
        float coin = random_f32(&rng);
        CHECK(u == want_u32[i], "draw %d of seed 1337: %u, by hand %u", i, u, want_u32[i]);
        CHECK((double)coin == want_coin[i], "coin %d of seed 1337: %.17g, by hand %.17g", i, coin, want_coin[i]);
    }
    const float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    const struct { float coin; int token; } hand[] = {
        {0.0f, 0}, {0.0999f, 0}, {0.1001f, 1}, {0.2999f, 1}, {0.3001f, 2}, {0.5999f, 2}, {0.6001f, 3}, {0.9999f, 3}};
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) {
        int got = sample_from(p, 4, hand[i].coin);
        CHECK(got == hand[i].token, "coin %.4f on {0.1, 0.2, 0.3, 0.4}: token %d, by hand %d", hand[i].coin, got, hand[i].token);
    }
    const float zero_first[3] = {0.0f, 0.5f, 0.5f};
    CHECK(sample_from(zero_first, 3, 0.0f) == 1, "coin 0 drew a token of probability 0");
    const float short_sum[3] = {0.3f, 0.3f, 0.3f};
    CHECK(sample_from(short_sum, 3, 0.95f) == 2, "a total of 0.9 under coin 0.95 must give the last token");
    const float q[4] = {0.2f, 0.05f, 0.15f, 0.6f};
    const int want_tokens[3] = {2, 0, 2};
    rng = 1337ull ^ 0x5DEECE66Dull;
    for (int i = 0; i < 3; i++) {
        int got = sample_from(q, 4, random_f32(&rng));
        CHECK(got == want_tokens[i], "token %d of seed 1337 on {0.2, 0.05, 0.15, 0.6}: %d, by hand %d", i, got, want_tokens[i]);
    }
    if (failures) { fprintf(stderr, "test_sampler: %d failures\n", failures); return 1; }
    printf("test_sampler: the RNG's first draws and the inverse-CDF draw on a tiny vocabulary match the hand figures\n");
    return 0;
}
