// Fused MoE gate, float32: softmax over E expert logits, top-k, renormalize the
// k chosen probabilities to sum to 1. One kernel, one read of the logits, one
// write of (weight, index) pairs; PyTorch needs softmax, topk, sum and divide.
//
// L lanes cooperate on one token (L = 8 for E ≤ 8, so a warp serves four
// tokens; L = 32 above), each lane holding VALS logits in registers. Top-k is
// k rounds of a lane-group argmax (ties go to the lower expert index, as a
// stable sort would) that knocks the winner out; register arrays are only
// indexed with unrolled constants so nothing spills to local memory.

#define NEG_INF __int_as_float(0xff800000)

template <int L, int VALS>
__device__ __forceinline__ void moe_gate(const float* __restrict__ logits, float* __restrict__ w_out,
                                         int* __restrict__ i_out, int T, int E, int k) {
    const int lane = threadIdx.x & 31, sub = lane % L;
    const long long token = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / L;
    // Whole lane groups leave together, so the shuffles below see full groups.
    if (token >= T) return;
    const unsigned mask = L == 32 ? 0xffffffffu : (((1u << L) - 1u) << (lane / L * L));
    const float* x = logits + token * E;
    float v[VALS];
#pragma unroll
    for (int c = 0; c < VALS; c++) {
        int e = sub + L * c;
        v[c] = e < E ? x[e] : NEG_INF;
    }
    float mx = NEG_INF;
#pragma unroll
    for (int c = 0; c < VALS; c++) mx = fmaxf(mx, v[c]);
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(mask, mx, off, L));
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < VALS; c++) {
        v[c] = sub + L * c < E ? expf(v[c] - mx) : -1.f;  // -1: never selected
        sum += v[c] > 0.f ? v[c] : 0.f;
    }
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(mask, sum, off, L);
    const float inv = 1.f / sum;
    float picked = 0.f, my_w[VALS];
    int my_slot[VALS];
#pragma unroll
    for (int c = 0; c < VALS; c++) my_slot[c] = -1;
    for (int r = 0; r < k; r++) {
        float best = -2.f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int c = 0; c < VALS; c++) {
            int e = sub + L * c;
            if (v[c] > best) {
                best = v[c];
                bi = e;
            }
        }
#pragma unroll
        for (int off = L / 2; off > 0; off >>= 1) {
            float ob = __shfl_xor_sync(mask, best, off, L);
            int oi = __shfl_xor_sync(mask, bi, off, L);
            if (ob > best || (ob == best && oi < bi)) {
                best = ob;
                bi = oi;
            }
        }
        picked += best * inv;
#pragma unroll
        for (int c = 0; c < VALS; c++)
            if (sub + L * c == bi) {
                my_w[c] = best * inv;
                my_slot[c] = r;
                v[c] = -1.f;
            }
    }
    const float renorm = 1.f / picked;
#pragma unroll
    for (int c = 0; c < VALS; c++)
        if (my_slot[c] >= 0) {
            w_out[token * k + my_slot[c]] = my_w[c] * renorm;
            i_out[token * k + my_slot[c]] = sub + L * c;
        }
}

#define GATE(L, V)                                                                               \
    extern "C" __global__ void ferrite_moe_gate_##L##x##V(const float* logits, float* w, int* idx, \
                                                         int T, int E, int k) {                  \
        moe_gate<L, V>(logits, w, idx, T, E, k);                                                 \
    }
GATE(8, 1)
GATE(32, 1)
GATE(32, 2)
GATE(32, 4)
GATE(32, 8)
