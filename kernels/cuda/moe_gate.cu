// Fused MoE gate, float32: softmax over E expert logits, top-k, renormalize the
// k chosen probabilities to sum to 1. One kernel, one read of the logits, one
// write of (weight, index) pairs; PyTorch needs softmax, topk, sum and divide.
//
// After renormalization the softmax denominator cancels: w_i = exp(x_i − x_max)
// / Σ_{j<k} exp(x_j − x_max) over the chosen j. Softmax is strictly increasing,
// so the top-k of the probabilities is the top-k of the logits; the kernel
// never exponentiates the E − k others.
//
// G lanes serve one token, each holding V consecutive logits in registers
// (float4 loads when rows are 16-byte aligned). Top-k is k rounds of a 64-bit
// key argmax — order-preserving float bits above, 2^32−1−index below, so ties
// go to the lower expert index as a stable sort would — local over V values,
// then a log2(G)-step butterfly. Register arrays are only indexed with
// unrolled constants, so nothing spills to local memory.

__device__ __forceinline__ unsigned long long gate_key(float x, int e) {
    unsigned u = __float_as_uint(x);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (0xffffffffu - (unsigned)e);
}

__device__ __forceinline__ float key_value(unsigned long long key) {
    unsigned u = (unsigned)(key >> 32);
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

template <int G, int V, bool VEC>
__device__ __forceinline__ void moe_gate(const float* __restrict__ logits, float* __restrict__ w_out,
                                         int* __restrict__ i_out, int T, int E, int k) {
    const int lane = threadIdx.x & 31, sub = lane % G;
    const long long token = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / G;
    // Whole lane groups leave together, so the shuffles below see full groups.
    if (token >= T) return;
    const unsigned mask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << (lane / G * G));
    const float* x = logits + token * E + sub * V;
    const int e0 = sub * V;
    unsigned long long key[V];
    if (VEC) {
#pragma unroll
        for (int c = 0; c < V; c += 4) {
            float4 f = e0 + c < E ? __ldg(reinterpret_cast<const float4*>(x + c)) : make_float4(0.f, 0.f, 0.f, 0.f);
            key[c] = gate_key(f.x, e0 + c);
            key[c + 1] = gate_key(f.y, e0 + c + 1);
            key[c + 2] = gate_key(f.z, e0 + c + 2);
            key[c + 3] = gate_key(f.w, e0 + c + 3);
        }
    } else {
#pragma unroll
        for (int c = 0; c < V; c++) key[c] = e0 + c < E ? gate_key(__ldg(x + c), e0 + c) : 0ull;
    }
#pragma unroll
    for (int c = 0; c < V; c++)
        if (e0 + c >= E) key[c] = 0ull;  // never selected

    // Choices this lane writes: r = s·G + sub for s < S (k ≤ 8).
    constexpr int S = (8 + G - 1) / G;
    float mx = 0.f, sum = 0.f, my_x[S];
    int my_e[S];
    for (int r = 0; r < k; r++) {
        unsigned long long best = 0ull;
#pragma unroll
        for (int c = 0; c < V; c++) best = key[c] > best ? key[c] : best;
#pragma unroll
        for (int off = G / 2; off > 0; off >>= 1) {
            unsigned long long o = __shfl_xor_sync(mask, best, off, G);
            best = o > best ? o : best;
        }
#pragma unroll
        for (int c = 0; c < V; c++)
            if (key[c] == best) key[c] = 0ull;
        const float v = key_value(best);
        if (r == 0) mx = v;
        sum += expf(v - mx);
        // Lane r % G writes choice r: its value and expert, kept in registers.
#pragma unroll
        for (int s = 0; s < S; s++)
            if (r == s * G + sub) {
                my_x[s] = v;
                my_e[s] = (int)(0xffffffffu - (unsigned)best);
            }
    }
    const float inv = 1.f / sum;
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int r = s * G + sub;
        if (r < k) {
            w_out[token * k + r] = expf(my_x[s] - mx) * inv;
            i_out[token * k + r] = my_e[s];
        }
    }
}

#define GATE(G, V, VEC, NAME)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) ferrite_moe_gate_##NAME(                         \
        const float* logits, float* w, int* idx, int T, int E, int k) {                                \
        moe_gate<G, V, VEC>(logits, w, idx, T, E, k);                                                  \
    }
// Names: lanes per token × values per lane, v for float4 loads.
GATE(1, 4, true, 1x4v)
GATE(2, 4, true, 2x4v)
GATE(4, 4, true, 4x4v)
GATE(4, 8, true, 4x8v)
GATE(8, 8, true, 8x8v)
GATE(16, 8, true, 16x8v)
GATE(32, 8, true, 32x8v)
GATE(1, 4, false, 1x4)
GATE(2, 4, false, 2x4)
GATE(4, 4, false, 4x4)
GATE(4, 8, false, 4x8)
GATE(8, 8, false, 8x8)
GATE(16, 8, false, 16x8)
GATE(32, 8, false, 32x8)
