// proc/bf16.h: bf16 <-> fp32, one value at a time; the only definition of the rounding the project
// makes on the host: the CPU kernels (cpu/kernels_bf16.h) and the CPU backend for every bf16 they
// make, and the host library (host/common.h) for model files, checkpoints and tests. A leaf: it
// includes nothing of the project, so any layer may include it.
//
// bf16 is the top half of an fp32: 1 sign bit, the same 8 exponent bits, 7 stored mantissa bits
// (8 significant bits). So widening is a shift, and narrowing is rounding away the low 16 bits:
// to nearest, ties to even (unit roundoff u = 2^-8), values past the largest bf16 go to infinity,
// and a NaN stays a NaN (its top mantissa bit is set so that dropping low bits cannot make it Inf).
#ifndef PROC_BF16_H
#define PROC_BF16_H

#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static inline uint16_t f32_to_bf16(float f) {   // round to nearest even
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffff) > 0x7f800000) return (uint16_t)((bits >> 16) | 0x40);   // NaN stays NaN
    bits += 0x7fff + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

#endif
