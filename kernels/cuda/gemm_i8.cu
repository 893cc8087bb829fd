// Bit-exact twin of the GEMM unit (docs/numerics.md):
//   C = epilogue(A·B + bias), int8 operands, exact int32 accumulation on the
//   integer tensor cores (mma.sync m16n8k32 s8), wrapping int32 bias add,
//   optional ReLU, optional requantization (round half away from zero,
//   saturate to int8).
//
// Integer addition is associative modulo 2^32 and mma.sync without .satfinite
// wraps, so the tiling and the tensor cores' internal order never change a
// result: the output equals ferrite_hw::gemm::gemm bit for bit.
//
// A (M×K) and B (K×N) are row-major with row pitches lda/ldb in bytes, each a
// multiple of 16 (the host checks), so every 16-byte chunk load is aligned.
// Bytes past K (or N) inside a row's pitch are never trusted: loads mask them
// to zero, so whatever the caller left in the padding cannot leak in.

#include "fixed.cuh"

#define BM 64
#define BN 64
#define BK 64
// Shared-memory rows are padded to 80 bytes (20 words): the eight rows a
// quarter-warp's fragment loads touch then land in eight distinct bank groups.
#define LDS 80

typedef signed char i8;

// Load 16 bytes of a row at byte offset `col`, zeroing bytes at col+i >= lim.
__device__ __forceinline__ int4 load_masked(const i8* row, int col, int lim) {
    int4 v = make_int4(0, 0, 0, 0);
    if (col >= lim) return v;
    v = *reinterpret_cast<const int4*>(row + col);
    int valid = lim - col;
    if (valid < 16) {
        int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int keep = valid - 4 * i;  // bytes of word i to keep
            if (keep <= 0) w[i] = 0;
            else if (keep < 4) w[i] &= (int)((1u << (8 * keep)) - 1u);
        }
        v = make_int4(w[0], w[1], w[2], w[3]);
    }
    return v;
}

__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// flags: GEMM_FLAG_BIAS, GEMM_FLAG_RELU, GEMM_FLAG_REQUANT (int8 output).
extern "C" __global__ void __launch_bounds__(128) ferrite_gemm_i8(
    const i8* __restrict__ A, const i8* __restrict__ B, const int* __restrict__ bias,
    void* __restrict__ C, int M, int N, int K, long long lda, long long ldb, long long ldc,
    unsigned flags, int qmult, unsigned qshift) {
    __shared__ __align__(16) i8 As[BM * LDS];  // [m][k]
    __shared__ __align__(16) i8 Bs[BN * LDS];  // [n][k]: B transposed, k contiguous

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;  // warp's 32×32 sub-tile
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    int acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // A tile: 64 rows × 4 chunks of 16 bytes, two chunks per thread.
#pragma unroll
        for (int c = 0; c < 2; c++) {
            int idx = tid + c * 128, r = idx >> 2, ch = (idx & 3) * 16;
            int4 v = make_int4(0, 0, 0, 0);
            if (m0 + r < M) v = load_masked(A + (long long)(m0 + r) * lda, k0 + ch, K);
            *reinterpret_cast<int4*>(&As[r * LDS + ch]) = v;
        }
        // B tile: 64 k-rows × 4 chunks of 16 n-bytes, stored transposed.
#pragma unroll
        for (int c = 0; c < 2; c++) {
            int idx = tid + c * 128, r = idx >> 2, ch = (idx & 3) * 16;
            int4 v = make_int4(0, 0, 0, 0);
            if (k0 + r < K) v = load_masked(B + (long long)(k0 + r) * ldb, n0 + ch, N);
            const i8* bytes = reinterpret_cast<const i8*>(&v);
#pragma unroll
            for (int i = 0; i < 16; i++) Bs[(ch + i) * LDS + r] = bytes[i];
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 32) {
            unsigned af[2][4], bf[4][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const i8* base = &As[(wm + i * 16 + g) * LDS + kk + t * 4];
                af[i][0] = *reinterpret_cast<const unsigned*>(base);
                af[i][1] = *reinterpret_cast<const unsigned*>(base + 8 * LDS);
                af[i][2] = *reinterpret_cast<const unsigned*>(base + 16);
                af[i][3] = *reinterpret_cast<const unsigned*>(base + 8 * LDS + 16);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const i8* base = &Bs[(wn + j * 8 + g) * LDS + kk + t * 4];
                bf[j][0] = *reinterpret_cast<const unsigned*>(base);
                bf[j][1] = *reinterpret_cast<const unsigned*>(base + 16);
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_s8(acc[i][j], af[i], bf[j]);
        }
        __syncthreads();
    }

    // Fused epilogue, element by element, exactly numerics.rs.
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int row = m0 + wm + i * 16 + g + (r >> 1) * 8;
                int col = n0 + wn + j * 8 + t * 2 + (r & 1);
                if (row >= M || col >= N) continue;
                int v = gemm_pre_requant(acc[i][j][r], flags, (flags & GEMM_FLAG_BIAS) ? bias[col] : 0);
                if (flags & GEMM_FLAG_REQUANT) {
                    (reinterpret_cast<i8*>(C) + (long long)row * ldc)[col] = requantize(v, qmult, qshift);
                } else {
                    reinterpret_cast<int*>(reinterpret_cast<i8*>(C) + (long long)row * ldc)[col] = v;
                }
            }
}
