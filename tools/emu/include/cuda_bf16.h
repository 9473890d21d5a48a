// Emulated bf16 for the CPU emulator (tools/emu): storage is the upper 16 bits of an IEEE fp32;
// conversion from float rounds to nearest even (NaN stays NaN), exactly as the CUDA intrinsics.
#pragma once
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
};

inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t bits = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    __nv_bfloat16 b;
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        b.x = (uint16_t)((bits >> 16) | 0x40);  // quiet NaN
        return b;
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    b.x = (uint16_t)(bits >> 16);
    return b;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
