#include <metal_stdlib>
using namespace metal;

// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
// Both kernels work on bit patterns with integer arithmetic only: torch compiles shaders with fast
// math when PYTORCH_MPS_FAST_MATH=1, and then NAN, INFINITY and exp2 are not guaranteed (torch's own
// c10/metal/float8.h builds its values from bits for the same reason).

// float8_e4m3fn -> bfloat16. Every e4m3 value is exact in bfloat16, so nothing rounds.
kernel void fp8_e4m3_to_bf16(device const uchar* src [[buffer(0)]],
                             device bfloat* dst [[buffer(1)]],
                             uint i [[thread_position_in_grid]]) {
    const uint code = src[i];
    const uint sign = (code & 0x80u) << 8;
    const uint exponent = (code >> 3) & 0xFu;
    const uint mantissa = code & 0x7u;
    uint bits;
    if (exponent == 0xFu && mantissa == 0x7u) {
        bits = sign | 0x7FC0u;  // a quiet NaN, sign kept as torch keeps it
    } else if (exponent != 0u) {
        bits = sign | ((exponent + 120u) << 7) | (mantissa << 4);  // rebias 7 -> 127
    } else if (mantissa == 0u) {
        bits = sign;  // +-0
    } else {
        // Subnormal: mantissa * 2^-9. Normalize on its leading bit p: 2^(p-9) * (1 + rest / 2^p).
        const uint p = mantissa >= 4u ? 2u : (mantissa >= 2u ? 1u : 0u);
        bits = sign | ((118u + p) << 7) | (((mantissa ^ (1u << p)) << (7u - p)) & 0x7Fu);
    }
    dst[i] = as_type<bfloat>(ushort(bits));
}

// fp32 bit pattern -> float8_e4m3fn code, as torch's cast rounds: to nearest, ties to even; finite
// values past 448 and infinities saturate to +-448 (0x7E); NaN stays NaN (0x7F, sign kept).
inline uchar fp8_e4m3fn_from_bits(uint bits) {
    const uint sign = bits & 0x80000000u;
    const uint a = bits ^ sign;
    uint code;
    if (a > 0x7F800000u) {
        code = 0x7Fu;
    } else if (a >= 0x43F00000u) {  // 480 and up, infinity included
        code = 0x7Eu;
    } else if (a >= (121u << 23)) {  // 2^-6 and up: a normal e4m3 value
        uint v = (((a >> 23) - 120u) << 3) | ((a >> 20) & 0x7u);
        const uint rest = a & 0xFFFFFu;
        v += (rest > 0x80000u || (rest == 0x80000u && (v & 1u) != 0u)) ? 1u : 0u;
        code = min(v, 0x7Eu);  // rounding up from 448 would reach the NaN code: saturate instead
    } else {
        // Subnormal or zero: |x| / 2^-9 rounded to an integer, ties to even.
        const uint e = a >> 23;
        const uint sig = e == 0u ? (a & 0x7FFFFFu) : ((a & 0x7FFFFFu) | 0x800000u);
        const uint shift = e == 0u ? 140u : 141u - e;
        if (shift >= 25u) {
            code = 0u;  // below half the smallest subnormal
        } else {
            uint q = sig >> shift;
            const uint rest = sig & ((1u << shift) - 1u);
            const uint half_step = 1u << (shift - 1u);
            q += (rest > half_step || (rest == half_step && (q & 1u) != 0u)) ? 1u : 0u;
            code = q;
        }
    }
    return uchar(code | (sign >> 24));
}

// bfloat16 -> float8_e4m3fn (the bfloat16 bits arrive as ushort).
kernel void bf16_to_fp8_e4m3(device const ushort* src [[buffer(0)]],
                             device uchar* dst [[buffer(1)]],
                             uint i [[thread_position_in_grid]]) {
    dst[i] = fp8_e4m3fn_from_bits(uint(src[i]) << 16);
}
