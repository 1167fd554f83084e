#include <metal_stdlib>
using namespace metal;

// Roofline probes: what this GPU can read, write and copy, and how fast it runs dependent FMAs.
// The read and write probes stride by the grid so that neighbouring threads touch neighbouring
// 16-byte vectors: every access is coalesced.

// Bandwidth probe: one read and one write of 4 bytes per thread.
kernel void copy_f32(device const float* src [[buffer(0)]],
                     device float* dst [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    dst[i] = src[i];
}

// Read probe: 64 bytes read per thread, 4 written.
kernel void read_f32x4(device const float4* src [[buffer(0)]],
                       device float* dst [[buffer(1)]],
                       uint i [[thread_position_in_grid]],
                       uint n [[threads_per_grid]]) {
    float4 acc = src[i];
    for (uint j = 1; j < 4; ++j) {
        acc += src[i + j * n];
    }
    dst[i] = (acc.x + acc.y) + (acc.z + acc.w);
}

// Write probe: 64 bytes written per thread (one broadcast value read).
kernel void write_f32x4(device const float* src [[buffer(0)]],
                        device float4* dst [[buffer(1)]],
                        uint i [[thread_position_in_grid]],
                        uint n [[threads_per_grid]]) {
    const float4 v = float4(src[0]);
    for (uint j = 0; j < 4; ++j) {
        dst[i + j * n] = v;
    }
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
