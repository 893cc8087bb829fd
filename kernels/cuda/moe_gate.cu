// Fused MoE gate, float32: softmax over E expert logits, top-k, renormalize the
// k chosen probabilities to sum to 1. One kernel, one read of the logits, one
// write of (weight, index) pairs; PyTorch needs softmax, topk, sum and divide.
//
// After renormalization the softmax denominator cancels: w_i = exp(x_i − x_max)
// / Σ_{j<k} exp(x_j − x_max) over the chosen j. Softmax is strictly increasing,
// so the top-k of the probabilities is the top-k of the logits; the kernel
// never exponentiates the E − k others.
//
// Up to 32 experts: G lanes serve one token, each holding V consecutive logits in registers
// (float4 loads when rows are 16-byte aligned). Top-k is k rounds of: the
// group's largest value (a local max over V, then a log2(G)-step butterfly),
// then the lowest expert index holding it (the same for indices) — so ties
// go to the lower expert index, as a stable sort would — which its lane
// marks taken. Floats and 32-bit indices keep every step one instruction
// wide; register arrays are only indexed with unrolled constants, so nothing
// spills to local memory.

#define NEG_INF __int_as_float(0xff800000)

// A lane's V logits x[0..V) (experts e0..e0+V) into registers; slots past E read −∞, so they
// lose every comparison with a real expert. VEC: float4 loads, for rows that are 16-byte aligned.
template <int V, bool VEC>
__device__ __forceinline__ void load_logits(const float* __restrict__ x, int e0, int E, float (&v)[V]) {
    if (VEC) {
#pragma unroll
        for (int c = 0; c < V; c += 4) {
            float4 f = e0 + c < E ? __ldg(reinterpret_cast<const float4*>(x + c)) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[c] = f.x;
            v[c + 1] = f.y;
            v[c + 2] = f.z;
            v[c + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int c = 0; c < V; c++) v[c] = e0 + c < E ? __ldg(x + c) : 0.f;
    }
#pragma unroll
    for (int c = 0; c < V; c++)
        if (e0 + c >= E) v[c] = NEG_INF;
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
    float v[V];
    load_logits<V, VEC>(x, e0, E, v);
    // Bit c: value c is taken or is no expert.
    unsigned taken = 0;
#pragma unroll
    for (int c = 0; c < V; c++)
        if (e0 + c >= E) taken |= 1u << c;

    // Choices this lane writes: r = s·G + sub for s < S (k ≤ 8).
    constexpr int S = (8 + G - 1) / G;
    float mx = 0.f, sum = 0.f, my_x[S];
    int my_e[S];
    for (int r = 0; r < k; r++) {
        float best = v[0];
#pragma unroll
        for (int c = 1; c < V; c++) best = fmaxf(best, v[c]);
#pragma unroll
        for (int off = G / 2; off > 0; off >>= 1) best = fmaxf(best, __shfl_xor_sync(mask, best, off, G));
        int bi = 0x7fffffff;
#pragma unroll
        for (int c = V - 1; c >= 0; c--)
            if (v[c] == best && !(taken >> c & 1)) bi = e0 + c;
#pragma unroll
        for (int off = G / 2; off > 0; off >>= 1) bi = min(bi, __shfl_xor_sync(mask, bi, off, G));
#pragma unroll
        for (int c = 0; c < V; c++)
            if (e0 + c == bi) {
                v[c] = NEG_INF;
                taken |= 1u << c;
            }
        if (r == 0) mx = best;
        sum += exp2f((best - mx) * 1.4426950408889634f);
        // Lane r % G writes choice r: its value and expert, kept in registers.
#pragma unroll
        for (int s = 0; s < S; s++)
            if (r == s * G + sub) {
                my_x[s] = best;
                my_e[s] = bi;
            }
    }
    const float inv = 1.f / sum;
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int r = s * G + sub;
        if (r < k) {
            w_out[token * k + r] = exp2f((my_x[s] - mx) * 1.4426950408889634f) * inv;
            i_out[token * k + r] = my_e[s];
        }
    }
}

// Above 32 experts, k rounds over every logit cost more than building each
// lane's sorted top 8 once: insertion of its V logits in index order (an equal
// value goes behind the ones held, so ties keep the lower index), then
// log2(G) bitonic merges with the partner lane's list under the same order
// (value descending, index ascending). Measured 1.3–1.5 µs faster than the
// rounds at E = 64, k = 8 (docs/gpu.md).
__device__ __forceinline__ bool beats(float va, int ia, float vb, int ib) {
    return va > vb || (va == vb && ia < ib);
}

template <int G, int V, bool VEC>
__device__ __forceinline__ void moe_gate_sorted(const float* __restrict__ logits, float* __restrict__ w_out,
                                                int* __restrict__ i_out, int T, int E, int k) {
    const int lane = threadIdx.x & 31, sub = lane % G;
    const long long token = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / G;
    if (token >= T) return;
    const unsigned mask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << (lane / G * G));
    const float* x = logits + token * E + sub * V;
    const int e0 = sub * V;
    float v[V];
    load_logits<V, VEC>(x, e0, E, v);
    // Slots past E hold −∞ with an index ≥ E; k ≤ E real experts always beat them.
    // The list: values descending, ties by index ascending; empty slots hold index INT_MAX.
    float L[8];
    int I[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        L[j] = NEG_INF;
        I[j] = 0x7fffffff;
    }
#pragma unroll
    for (int c = 0; c < V; c++) {
        const float nv = v[c];
        const int ni = e0 + c;
        bool gt[8];
#pragma unroll
        for (int j = 0; j < 8; j++) gt[j] = nv > L[j] || I[j] == 0x7fffffff;
#pragma unroll
        for (int j = 7; j > 0; j--) {
            L[j] = gt[j - 1] ? L[j - 1] : (gt[j] ? nv : L[j]);
            I[j] = gt[j - 1] ? I[j - 1] : (gt[j] ? ni : I[j]);
        }
        L[0] = gt[0] ? nv : L[0];
        I[0] = gt[0] ? ni : I[0];
    }
#pragma unroll
    for (int off = 1; off < G; off <<= 1) {
        float B[8];
        int J[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            B[j] = __shfl_xor_sync(mask, L[j], off, G);
            J[j] = __shfl_xor_sync(mask, I[j], off, G);
        }
        // The better of mine and the partner's reversed: the top 8 of both, bitonic.
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const bool a = beats(L[j], I[j], B[7 - j], J[7 - j]);
            L[j] = a ? L[j] : B[7 - j];
            I[j] = a ? I[j] : J[7 - j];
        }
#pragma unroll
        for (int d = 4; d > 0; d >>= 1)
#pragma unroll
            for (int j = 0; j < 8; j++)
                if ((j & d) == 0) {
                    const bool a = beats(L[j], I[j], L[j + d], I[j + d]);
                    const float hi = a ? L[j] : L[j + d], lo = a ? L[j + d] : L[j];
                    const int ihi = a ? I[j] : I[j + d], ilo = a ? I[j + d] : I[j];
                    L[j] = hi;
                    I[j] = ihi;
                    L[j + d] = lo;
                    I[j + d] = ilo;
                }
    }
    const float mx = L[0];
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (j < k) sum += exp2f((L[j] - mx) * 1.4426950408889634f);
    const float inv = 1.f / sum;
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (j < k && j % G == sub) {
            w_out[token * k + j] = exp2f((L[j] - mx) * 1.4426950408889634f) * inv;
            i_out[token * k + j] = I[j];
        }
}

#define GATE(ALGO, G, V, VEC, NAME)                                                                    \
    extern "C" __global__ void __launch_bounds__(256) ferrite_moe_gate_##NAME(                         \
        const float* logits, float* w, int* idx, int T, int E, int k) {                                \
        ALGO<G, V, VEC>(logits, w, idx, T, E, k);                                                      \
    }
// Names: lanes per token × values per lane, v for float4 loads; rounds up to
// 32 experts, sorted lists above.
GATE(moe_gate, 1, 4, true, 1x4v)
GATE(moe_gate, 2, 4, true, 2x4v)
GATE(moe_gate, 4, 4, true, 4x4v)
GATE(moe_gate, 4, 8, true, 4x8v)
GATE(moe_gate_sorted, 4, 16, true, 4x16v)
GATE(moe_gate_sorted, 8, 16, true, 8x16v)
GATE(moe_gate_sorted, 16, 16, true, 16x16v)
GATE(moe_gate, 1, 4, false, 1x4)
GATE(moe_gate, 2, 4, false, 2x4)
GATE(moe_gate, 4, 4, false, 4x4)
GATE(moe_gate, 4, 8, false, 4x8)
GATE(moe_gate_sorted, 4, 16, false, 4x16)
GATE(moe_gate_sorted, 8, 16, false, 8x16)
GATE(moe_gate_sorted, 16, 16, false, 16x16)
