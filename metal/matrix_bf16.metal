#include <metal_stdlib>
using namespace metal;

// Matrix throughput probe (bfloat): simdgroup 8x8 matrix multiply-accumulate, the units MPS's own
// matmuls use. One threadgroup is one simdgroup (32 threads). Each runs four independent chains of
// X <- A X + B for 256 steps (4 x 256 x 1024 FLOP); A's rows sum to at most 1/2, so every chain
// converges to the same (I - A)^-1 B and rounding errors do not grow.
kernel void matrix_chain_bf16(device const bfloat* src [[buffer(0)]],
                            device bfloat* dst [[buffer(1)]],
                            uint g [[threadgroup_position_in_grid]]) {
    simdgroup_matrix<bfloat, 8, 8> a;
    simdgroup_matrix<bfloat, 8, 8> b;
    simdgroup_load(a, src + g * 128, 8);
    simdgroup_load(b, src + g * 128 + 64, 8);
    simdgroup_matrix<bfloat, 8, 8> x0 = b;
    simdgroup_matrix<bfloat, 8, 8> x1 = a;
    simdgroup_matrix<bfloat, 8, 8> x2 = make_filled_simdgroup_matrix<bfloat, 8, 8>(bfloat(0.0f));
    simdgroup_matrix<bfloat, 8, 8> x3 = make_filled_simdgroup_matrix<bfloat, 8, 8>(bfloat(1.0f));
    simdgroup_matrix<bfloat, 8, 8> t;
    for (int k = 0; k < 256; ++k) {
        simdgroup_multiply_accumulate(t, a, x0, b);
        x0 = t;
        simdgroup_multiply_accumulate(t, a, x1, b);
        x1 = t;
        simdgroup_multiply_accumulate(t, a, x2, b);
        x2 = t;
        simdgroup_multiply_accumulate(t, a, x3, b);
        x3 = t;
    }
    simdgroup_store(x0, dst + g * 256, 8);
    simdgroup_store(x1, dst + g * 256 + 64, 8);
    simdgroup_store(x2, dst + g * 256 + 128, 8);
    simdgroup_store(x3, dst + g * 256 + 192, 8);
}
