// FlashAttention-2-style forward, bf16 in/out, f32 softmax and accumulators:
// O = softmax(Q·Kᵀ · scale [+ causal mask]) · V for Q, K, V, O laid out
// [batch·heads][N][D] contiguous. A block of 8 warps owns 128 query rows (16 per
// warp) and streams 64-key blocks of K and V through a double-buffered cp.async
// pipeline; S and P never leave registers (the S accumulator's layout is the
// next mma's A-operand layout), and the online softmax rescales O only by
// exp2 of the running-max change. N must be a multiple of 128 (host checks).
#include "common_bf16.cuh"

#define BR 128
#define BC 64
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <int D>
__device__ __forceinline__ void flash_fwd(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K,
                                          const bf16_t* __restrict__ V, bf16_t* __restrict__ O, int N,
                                          float scale_log2, int causal) {
    constexpr int RB = D * 2;        // bytes per row
    constexpr int CH = D / 8;        // 16-byte chunks per row
    constexpr int KV_BYTES = BC * RB;  // one K or V block
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned sq = smem_u32(smem), sk = sq + BR * RB, sv = sk + 2 * KV_BYTES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Causal blocks differ in work: start the longest (last query blocks) first.
    const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = qb * BR;
    const long long head = (long long)blockIdx.y * N * D;
    const bf16_t* Qh = Q + head;
    const bf16_t* Kh = K + head;
    const bf16_t* Vh = V + head;

    for (int idx = tid; idx < BR * CH; idx += 256) {
        int r = idx / CH, c = idx % CH;
        cp_async16(sq + swz(r, c, RB), Qh + (long long)(q0 + r) * D + c * 8);
    }
    auto load_kv = [&](int buf, int j) {
        for (int idx = tid; idx < BC * CH; idx += 256) {
            int r = idx / CH, c = idx % CH;
            long long go = (long long)(j * BC + r) * D + c * 8;
            cp_async16(sk + buf * KV_BYTES + swz(r, c, RB), Kh + go);
            cp_async16(sv + buf * KV_BYTES + swz(r, c, RB), Vh + go);
        }
    };
    load_kv(0, 0);
    cp_async_commit();

    const int nblocks = causal ? (q0 + BR) / BC : N / BC;
    unsigned qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int r = 0; r < 4; r++) o[i][r] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = q0 + warp * 16 + g;  // this thread's rows: row0, row0 + 8

    for (int j = 0; j < nblocks; j++) {
        cp_async_wait<0>();
        __syncthreads();
        if (j + 1 < nblocks) load_kv((j + 1) & 1, j + 1);
        cp_async_commit();
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                ldmatrix_x4(qf[kk], sq + swz(warp * 16 + (lane & 15), 2 * kk + (lane >> 4), RB));
        }
        const unsigned kb = sk + (j & 1) * KV_BYTES, vb = sv + (j & 1) * KV_BYTES;
        float s[BC / 8][4];
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) s[n][r] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int np = 0; np < BC / 16; np++) {
                unsigned b[4];
                ldmatrix_x4(b, kb + swz(np * 16 + (lane & 7) + (lane >> 4) * 8, 2 * kk + ((lane >> 3) & 1), RB));
                mma_bf16(s[2 * np], qf[kk], b);
                mma_bf16(s[2 * np + 1], qf[kk], b + 2);
            }
        const bool diag = causal && (j + 1) * BC - 1 > q0 + warp * 16;
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float x = s[n][r] * scale_log2;
                if (diag) {
                    int key = j * BC + n * 8 + t * 2 + (r & 1);
                    int q = row0 + (r >> 1) * 8;
                    if (key > q) x = NEG_INF;
                }
                s[n][r] = x;
                if (r < 2) mx0 = fmaxf(mx0, x);
                else mx1 = fmaxf(mx1, x);
            }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        // Block 0 always holds key 0, which every query sees: the maxima are
        // finite from the first block on, so no -inf - -inf below.
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float a0 = fast_exp2(m0 - n0), a1 = fast_exp2(m1 - n1);
        m0 = n0;
        m1 = n1;
        l0 *= a0;
        l1 *= a1;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= a0;
            o[i][1] *= a0;
            o[i][2] *= a1;
            o[i][3] *= a1;
        }
        unsigned pf[BC / 16][4];
#pragma unroll
        for (int n = 0; n < BC / 8; n++) {
            float p0 = fast_exp2(s[n][0] - n0), p1 = fast_exp2(s[n][1] - n0);
            float p2 = fast_exp2(s[n][2] - n1), p3 = fast_exp2(s[n][3] - n1);
            l0 += p0 + p1;
            l1 += p2 + p3;
            pf[n >> 1][(n & 1) * 2] = pack_bf16(p0, p1);
            pf[n >> 1][(n & 1) * 2 + 1] = pack_bf16(p2, p3);
        }
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++)
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                unsigned b[4];
                ldmatrix_x4_trans(b, vb + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * dp + (lane >> 4), RB));
                mma_bf16(o[2 * dp], pf[kk], b);
                mma_bf16(o[2 * dp + 1], pf[kk], b + 2);
            }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    const float i0 = 1.f / l0, i1 = 1.f / l1;
    bf16_t* Oh = O + head;
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        int col = i * 8 + t * 2;
        *reinterpret_cast<unsigned*>(Oh + (long long)row0 * D + col) = pack_bf16(o[i][0] * i0, o[i][1] * i0);
        *reinterpret_cast<unsigned*>(Oh + (long long)(row0 + 8) * D + col) = pack_bf16(o[i][2] * i1, o[i][3] * i1);
    }
}

extern "C" __global__ void __launch_bounds__(256) ferrite_flash_fwd_d64(const bf16_t* Q, const bf16_t* K,
                                                                      const bf16_t* V, bf16_t* O, int N,
                                                                      float scale_log2, int causal) {
    flash_fwd<64>(Q, K, V, O, N, scale_log2, causal);
}
extern "C" __global__ void __launch_bounds__(256) ferrite_flash_fwd_d128(const bf16_t* Q, const bf16_t* K,
                                                                       const bf16_t* V, bf16_t* O, int N,
                                                                       float scale_log2, int causal) {
    flash_fwd<128>(Q, K, V, O, N, scale_log2, causal);
}
