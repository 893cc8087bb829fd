// Bit-exact twin of the streaming attention unit's golden model
// (ferrite_hw::attention::model). One warp per query row walks the keys in
// order with the same fixed-point online softmax:
//
//   s = q·k (int32)          t = round(s · Ms / 2^Ss)     (log2 domain, 8 frac bits)
//   e = floor(t)             first key: m = e, δ = 0;  e > m: δ = e − m, m = e;  else δ = 0
//   p = LUT[frac] >> -int    (Q1.15)
//   l = rnd(l / 2^δ) + p     o[x] = rnd(o[x] / 2^δ) + p · v[x]
//   r = floor(2^32 / l)      out = round(o · r / 2^16)  [→ requantize to int8]
//
// Every step is integer arithmetic, so the only way to match the model is to
// do the same steps in the same key order; the parallelism is across query
// rows (warps) and the head dimension (lanes), never across keys.

#include "fixed.cuh"

// Lanes own x = lane + 32·i for i < 4 (head_dim ≤ 128). Each head's rows are
// contiguous; heads are q_stride / kv_stride / o_stride bytes apart (the layout).
extern "C" __global__ void ferrite_attention_fixed(
    const signed char* __restrict__ Q, const signed char* __restrict__ K,
    const signed char* __restrict__ V, const unsigned* __restrict__ lut,
    const int* __restrict__ kv_len,  // per batch entry
    void* __restrict__ out, int heads, int heads_total, int seq_q, int seq_kv, int d,
    long long q_stride, long long kv_stride, long long o_stride,
    int causal, int score_mult, unsigned score_shift, int out_requant, int out_mult,
    unsigned out_shift) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= (long long)heads_total * seq_q) return;
    const int h = (int)(row / seq_q), i = (int)(row % seq_q), b = h / heads;
    const signed char* q = Q + h * q_stride + (long long)i * d;
    const signed char* kh = K + h * kv_stride;
    const signed char* vh = V + h * kv_stride;
    char* oh = reinterpret_cast<char*>(out) + h * o_stride;
    int keys = kv_len[b];
    if (causal && keys > i + 1) keys = i + 1;

    int qx[4];
    long long o[4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
        int x = lane + 32 * c;
        qx[c] = x < d ? q[x] : 0;
        o[c] = 0;
    }
    long long m = 0, l = 0;
    for (int j = 0; j < keys; j++) {
        const signed char* kj = kh + (long long)j * d;
        const signed char* vj = vh + (long long)j * d;
        int s = 0;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int x = lane + 32 * c;
            if (x < d) s += qx[c] * (int)kj[x];
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        long long t = round_shift((long long)s * (long long)score_mult, score_shift);
        long long e = floor_shift(t, EXP2_FRAC_BITS);
        long long delta = 0;
        if (j == 0) {
            m = e;
        } else if (e > m) {
            delta = e - m;
            m = e;
        }
        long long p = exp2_fixed(lut, t - (m << EXP2_FRAC_BITS));  // argument ≤ 2^F − 1
        unsigned rs = delta > 62 ? 62u : (unsigned)delta;
        l = round_shift(l, rs) + p;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int x = lane + 32 * c;
            if (x < d) o[c] = round_shift(o[c], rs) + p * (long long)vj[x];
        }
    }
    long long r = (1ll << 32) / l;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        int x = lane + 32 * c;
        if (x >= d) continue;
        int fixed = (int)round_shift(o[c] * r, 16);
        if (out_requant) {
            reinterpret_cast<signed char*>(oh)[(long long)i * d + x] = requantize(fixed, out_mult, out_shift);
        } else {
            reinterpret_cast<int*>(oh)[(long long)i * d + x] = fixed;
        }
    }
}
