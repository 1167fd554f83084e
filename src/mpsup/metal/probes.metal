#include <metal_stdlib>
using namespace metal;

// Bandwidth probe: one read and one write of 4 bytes per thread.
kernel void copy_f32(device const float* src [[buffer(0)]],
                     device float* dst [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    dst[i] = src[i];
}

// Compute probe: a dependent chain of 1024 fused multiply-adds per thread (2048 FLOP),
// converging to 1.0 so that no value overflows or goes denormal.
kernel void fma_chain(device const float* src [[buffer(0)]],
                      device float* dst [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    float y = src[i];
    for (int k = 0; k < 1024; ++k) {
        y = fma(y, 0.999f, 0.001f);
    }
    dst[i] = y;
}
