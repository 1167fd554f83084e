#include <metal_stdlib>
using namespace metal;

// A reference for the 5-D constant pad 2.15 fixed: up to 2.14 MPSGraph's pad wrote wrong values
// once a plane reached 2^16 elements. Input (1, 2, 2, 256, 256) bfloat16:
// planes of exactly 2^16; the Wan VAE causal pad (W 1+1, H 1+1, T 2+0) with zeros. One thread per
// output element, copying bit patterns, so nothing depends on float rules.
constant uint C = 2;
constant uint T = 2;
constant uint H = 256;
constant uint W = 256;

kernel void constant_pad_wan_bf16(device const ushort* src [[buffer(0)]],
                                  device ushort* dst [[buffer(1)]],
                                  uint i [[thread_position_in_grid]]) {
    const uint ow = W + 2;
    const uint oh = H + 2;
    const uint ot = T + 2;
    const uint w = i % ow;
    const uint h = (i / ow) % oh;
    const uint t = (i / (ow * oh)) % ot;
    const uint c = i / (ow * oh * ot);
    ushort v = 0;
    if (c < C && t >= 2u && h >= 1u && h <= H && w >= 1u && w <= W) {
        v = src[((c * T + (t - 2u)) * H + (h - 1u)) * W + (w - 1u)];
    }
    dst[i] = v;
}
