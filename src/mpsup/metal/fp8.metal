#include <metal_stdlib>
using namespace metal;

// float8_e4m3fn -> bfloat16: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
// S.1111.111 is NaN. Every e4m3 value is exact in bfloat16, so no rounding happens here.
kernel void fp8_e4m3_to_bf16(device const uchar* src [[buffer(0)]],
                             device bfloat* dst [[buffer(1)]],
                             uint i [[thread_position_in_grid]]) {
    uint code = src[i];
    uint sign = (code >> 7) & 1u;
    uint exponent = (code >> 3) & 0xFu;
    uint mantissa = code & 0x7u;
    float magnitude;
    if (exponent == 0xFu && mantissa == 0x7u) {
        magnitude = NAN;
    } else if (exponent == 0u) {
        magnitude = float(mantissa) * 0.001953125f;  // subnormal: mantissa/8 * 2^-6
    } else {
        magnitude = (1.0f + float(mantissa) * 0.125f) * exp2(float(int(exponent) - 7));
    }
    dst[i] = bfloat(sign != 0u ? -magnitude : magnitude);
}
