// FlashAttention forward for Hopper (sm_90a), bf16 in/out, f32 softmax and
// accumulators, d = 64 or 128, causal or not; same contract as flash_attn.cu
// (Q, K, V, O [batch·heads][N][D] contiguous, N a multiple of 128).
//
// FA3-style: a block owns 128 query rows; warpgroup 0 is the producer (one
// thread loads Q once and 128-key K/V blocks by TMA into a 2-stage ring of
// 128B-swizzled tiles, `full`/`empty` mbarriers), warpgroups 1 and 2 each own
// 64 rows: S = Q·Kᵀ by wgmma from shared memory, the online softmax on the
// accumulators, then O += P·V by wgmma with P straight from registers (the S
// accumulator layout is wgmma's A-register layout) and V MN-major from shared
// memory. Tiles are 64 columns wide (one swizzle atom) and d/64 of them side
// by side.
#include "common_bf16.cuh"
#include "common_hopper.cuh"

#define FBM 128
#define FBN 128
#define NEG_INF __int_as_float(0xff800000)

// S += Q·Kᵀ slice: A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss_n128(float* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(1));
}
// O += P·V slice: P (bf16 pairs) from registers, V from shared memory, MN-major.
__device__ __forceinline__ void wgmma_rs_n128(float* d, const unsigned* a, unsigned long long db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
// O += P·V slice: P (bf16 pairs) from registers, V from shared memory, MN-major.
__device__ __forceinline__ void wgmma_rs_n64(float* d, const unsigned* a, unsigned long long db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

template <int D>
__device__ __forceinline__ void wgmma_rs(float* d, const unsigned* a, unsigned long long db) {
    if constexpr (D == 128) wgmma_rs_n128(d, a, db);
    else wgmma_rs_n64(d, a, db);
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <int D>
__device__ __forceinline__ void flash_fwd_wgmma(const TmaMap& tq, const TmaMap& tk, const TmaMap& tv,
                                                bf16_t* __restrict__ O, int N, float scale_log2, int causal) {
    constexpr int CHUNKS = D / 64;                // 64-column swizzle atoms per row
    constexpr int TILE = FBN * 128;               // one 128-row × 64-column atom tile, bytes
    constexpr int KV_BYTES = CHUNKS * TILE;       // one K (or V) block
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned base = (smem_u32(smem) + 1023) & ~1023u;
    const unsigned sq = base, sk = sq + CHUNKS * TILE, sv = sk + 2 * KV_BYTES, bars = sv + 2 * KV_BYTES;
    const unsigned q_full = bars, full = bars + 8, empty = bars + 24;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    // Causal blocks differ in work: start the longest (last query blocks) first.
    const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = qb * FBM, row0 = blockIdx.y * N;  // row0: this head's first row in the 2-D maps
    const int nkv = causal ? qb + 1 : N / FBN;

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        for (int s = 0; s < 2; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (tid == 0) {
            mbar_expect_tx(q_full, CHUNKS * TILE);
            for (int c = 0; c < CHUNKS; c++) tma_load(sq + c * TILE, &tq, q_full, c * 64, row0 + q0);
            for (int j = 0; j < nkv; j++) {
                const int s = j & 1;
                if (j >= 2) mbar_wait(empty + 8 * s, ((j >> 1) - 1) & 1);
                mbar_expect_tx(full + 8 * s, 2 * KV_BYTES);
                for (int c = 0; c < CHUNKS; c++) {
                    tma_load(sk + s * KV_BYTES + c * TILE, &tk, full + 8 * s, c * 64, row0 + j * FBN);
                    tma_load(sv + s * KV_BYTES + c * TILE, &tv, full + 8 * s, c * 64, row0 + j * FBN);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int warp = tid / 32, lane = tid % 32;
    // This thread's two rows inside the block: r (half 0) and r + 8 (half 1).
    const int r = (wg - 1) * 64 + warp * 16 + lane / 4;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
    const unsigned qa = sq + (wg - 1) * 64 * 128;
    mbar_wait(q_full, 0);

    for (int j = 0; j < nkv; j++) {
        const int s = j & 1;
        const unsigned kb = sk + s * KV_BYTES, vb = sv + s * KV_BYTES;
        mbar_wait(full + 8 * s, (j >> 1) & 1);
        float sc[64];
#pragma unroll
        for (int i = 0; i < 64; i++) sc[i] = 0.f;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
            wgmma_ss_n128(sc, smem_desc(qa + (kk / 4) * TILE + (kk % 4) * 32),
                          smem_desc(kb + (kk / 4) * TILE + (kk % 4) * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        // Register i of group g holds row r + 8·((i>>1)&1), column 16g + 2(lane%4) + (i&1) + 8·(i>>2).
        if (causal && j == qb) {
#pragma unroll
            for (int g = 0; g < 8; g++)
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const int col = 16 * g + 2 * (lane % 4) + (i & 1) + 8 * (i >> 2);
                    if (col > r + 8 * ((i >> 1) & 1)) sc[8 * g + i] = NEG_INF;
                }
        }
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = NEG_INF;
#pragma unroll
            for (int g = 0; g < 8; g++) {
                mx = fmaxf(mx, fmaxf(sc[8 * g + 2 * h], sc[8 * g + 2 * h + 1]));
                mx = fmaxf(mx, fmaxf(sc[8 * g + 4 + 2 * h], sc[8 * g + 5 + 2 * h]));
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[h], mx * scale_log2);
            alpha[h] = fast_exp2(m[h] - m_new);
            m[h] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int g = 0; g < 8; g++)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (((i >> 1) & 1) == h) {
                        float p = fast_exp2(fmaf(sc[8 * g + i], scale_log2, -m_new));
                        sc[8 * g + i] = p;
                        sum += p;
                    }
            l[h] = l[h] * alpha[h] + sum;
        }
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] *= alpha[(i >> 1) & 1];
        unsigned pa[8][4];
#pragma unroll
        for (int g = 0; g < 8; g++) {
            pa[g][0] = pack_bf16(sc[8 * g], sc[8 * g + 1]);
            pa[g][1] = pack_bf16(sc[8 * g + 2], sc[8 * g + 3]);
            pa[g][2] = pack_bf16(sc[8 * g + 4], sc[8 * g + 5]);
            pa[g][3] = pack_bf16(sc[8 * g + 6], sc[8 * g + 7]);
        }
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int g = 0; g < 8; g++) wgmma_rs<D>(o, pa[g], smem_desc(vb + g * 16 * 128, TILE));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (tid == 0) mbar_arrive(empty + 8 * s);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        l[h] = 1.f / l[h];
    }
    bf16_t* out = O + ((long long)row0 + q0 + r) * D + 2 * (lane % 4);
#pragma unroll
    for (int g = 0; g < D / 16; g++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int h = q & 1, i = 2 * q;  // registers i, i+1: half h, columns +8·(q>>1)
            *reinterpret_cast<unsigned*>(out + 8ll * D * h + 16 * g + 8 * (q >> 1)) =
                pack_bf16(o[8 * g + i] * l[h], o[8 * g + i + 1] * l[h]);
        }
}

#define FLASH(D)                                                                                               \
    extern "C" __global__ void __launch_bounds__(384, 1) ferrite_flash_wgmma_d##D(                            \
        const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv, \
        bf16_t* O, int N, float scale_log2, int causal) {                                                      \
        flash_fwd_wgmma<D>(tq, tk, tv, O, N, scale_log2, causal);                                              \
    }
FLASH(64)
FLASH(128)
