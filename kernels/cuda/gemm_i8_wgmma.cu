// int8 GEMM twin for Hopper (sm_90a): the same result as gemm_i8.cu (the
// GEMM unit, docs/numerics.md) with wgmma s8 and TMA.
//
// wgmma reads 8-bit operands K-major only, and the unit's B is K×N row-major
// (N-major), so a pre-pass (`ferrite_i8_transpose`, timed with the GEMM)
// writes Bᵀ (N×K, row pitch ldt) to a scratch buffer; then
// `ferrite_gemm_i8_wgmma_n<BN>` computes C = epilogue(A·B + bias) from A and
// Bᵀ, both K-major like the bf16 kernel's operands.
//
// 128×BN×128 block tiles (128 int8 = one 128-byte swizzle row along K; BN =
// 256, 128 or 64, the host picks the widest whose grid fills every SM),
// warp-specialized as gemm_bf16_wgmma.cu: one producer thread issues TMA loads
// into 128B-swizzled stages, two consumer warpgroups (64 rows × BN each) run
// wgmma m64nBNk32 from shared memory and keep one group in flight, releasing
// a stage when the group that read it has finished. TMA zero-fills rows and
// columns past M, N and K, and zeros add nothing, so any shape works; the
// fused epilogue masks what lies outside C.
//
// wgmma without .satfinite wraps its int32 accumulator like mma.sync, and
// integer addition is associative modulo 2^32, so the result equals
// ferrite_hw::gemm::gemm bit for bit whatever the tile order.
#include "fixed.cuh"
#include "common_bf16.cuh"  // smem_u32
#include "common_hopper.cuh"

#define IBM 128
#define IBK 128

__device__ __forceinline__ void wgmma_s8(int (&d)[128], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
        : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_s8(int (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(da), "l"(db), "r"(1));
}


__device__ __forceinline__ void wgmma_s8(int (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "l"(da), "l"(db), "r"(1));
}

// Pipeline depth per tile width: 192, 192 and 192 KiB of stages.
template <int BN>
struct I8Tile {
    static constexpr int STAGES = BN == 256 ? 4 : (BN == 128 ? 6 : 8);
    static constexpr unsigned A_BYTES = IBM * IBK, B_BYTES = BN * IBK;
};

// The fused epilogue on one consumer thread's accumulators. Fragment of
// m64nNk32: 8-column group j holds (row, 8j + 2q + 0..1) in d[4j..4j+1] and
// (row + 8, same columns) in d[4j+2..4j+3]. One instance per output type and
// bias use keeps each straight-line; the tile's columns start at col0, and
// ncols = N − col0 of them exist.
template <int BN, bool BIAS, bool REQUANT>
__device__ __forceinline__ void store_fragment(const int (&d)[BN / 2], const int* sbias, signed char* __restrict__ C,
                                               long long ldc, int row0, int col0, int M, int ncols, bool relu,
                                               int qmult, unsigned qshift) {
    const int c0 = 2 * (threadIdx.x % 4);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
        if (row >= M) continue;
        signed char* out = C + (long long)row * ldc + (REQUANT ? col0 : 4 * col0);
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int c = c0 + 8 * j;
            if (c >= ncols) continue;
            int v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
            if (BIAS) {
                v0 = wrap_add(v0, sbias[c]);
                v1 = wrap_add(v1, sbias[c + 1]);
            }
            if (relu) {
                v0 = max(v0, 0);
                v1 = max(v1, 0);
            }
            if (REQUANT) {
                const signed char q0 = requantize(v0, qmult, qshift), q1 = requantize(v1, qmult, qshift);
                if (c + 1 < ncols)
                    *reinterpret_cast<unsigned short*>(out + c) =
                        (unsigned short)((unsigned char)q0 | ((unsigned)(unsigned char)q1 << 8));
                else
                    out[c] = q0;
            } else {
                int* o = reinterpret_cast<int*>(out) + c;
                if (c + 1 < ncols)
                    *reinterpret_cast<int2*>(o) = make_int2(v0, v1);
                else
                    *o = v0;
            }
        }
    }
}

template <int BN>
__device__ __forceinline__ void gemm_i8_wgmma(const TmaMap& tmA, const TmaMap& tmB, const int* __restrict__ bias,
                                              signed char* __restrict__ C, int M, int N, int K, long long ldc,
                                              unsigned flags, int qmult, unsigned qshift) {
    constexpr int STAGES = I8Tile<BN>::STAGES;
    constexpr unsigned A_BYTES = I8Tile<BN>::A_BYTES, B_BYTES = I8Tile<BN>::B_BYTES;
    extern __shared__ __align__(1024) unsigned char smem[];
    // The 128B swizzle repeats every 1024 bytes: tiles start on that boundary.
    const unsigned base = (smem_u32(smem) + 1023) & ~1023u;
    const unsigned sa = base, sb = base + STAGES * A_BYTES, bars = sb + STAGES * B_BYTES;
    const unsigned full = bars, empty = bars + 8 * STAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;

    // Grouped raster: 8 block-rows share each B panel while it is in L2.
    const int tiles_m = (M + IBM - 1) / IBM, tiles_n = (N + BN - 1) / BN, pid = blockIdx.x, group = 8;
    const int first_m = (pid / (group * tiles_n)) * group;
    const int gsize = min(tiles_m - first_m, group);
    const int bm = first_m + (pid % (group * tiles_n)) % gsize;
    const int bn = (pid % (group * tiles_n)) / gsize;

    // The tile's bias, staged before the mainloop (a global load per column in
    // the epilogue would wait a full L2 round trip each).
    int* sbias = reinterpret_cast<int*>(smem + (bars + 16 * STAGES - smem_u32(smem)));
    if (flags & GEMM_FLAG_BIAS)
        for (int i = threadIdx.x; i < BN; i += blockDim.x) sbias[i] = bn * BN + i < N ? bias[bn * BN + i] : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int KT = (K + IBK - 1) / IBK;

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            for (int kt = 0; kt < KT; kt++) {
                const int s = kt % STAGES;
                if (kt >= STAGES) mbar_wait(empty + 8 * s, ((kt / STAGES) - 1) & 1);
                mbar_expect_tx(full + 8 * s, A_BYTES + B_BYTES);
                tma_load(sa + s * A_BYTES, &tmA, full + 8 * s, kt * IBK, bm * IBM);
                tma_load(sb + s * B_BYTES, &tmB, full + 8 * s, kt * IBK, bn * BN);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    int d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[i] = 0;
    const unsigned a_off = (wg - 1) * 64 * IBK;  // this warpgroup's 64 rows
    for (int kt = 0; kt < KT; kt++) {
        const int s = kt % STAGES;
        mbar_wait(full + 8 * s, (kt / STAGES) & 1);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < IBK / 32; kk++)
            wgmma_s8(d, smem_desc(sa + s * A_BYTES + a_off + kk * 32), smem_desc(sb + s * B_BYTES + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // Keep this stage's group in flight; the previous one has finished, so
        // its stage goes back to the producer.
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (tid == 0 && kt > 0) mbar_arrive(empty + 8 * ((kt - 1) % STAGES));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");

    const int row0 = bm * IBM + (wg - 1) * 64 + (tid / 32) * 16 + (tid % 32) / 4, ncols = N - bn * BN;
    const bool relu = flags & GEMM_FLAG_RELU;
    if (flags & GEMM_FLAG_REQUANT) {
        if (flags & GEMM_FLAG_BIAS)
            store_fragment<BN, true, true>(d, sbias, C, ldc, row0, bn * BN, M, ncols, relu, qmult, qshift);
        else
            store_fragment<BN, false, true>(d, sbias, C, ldc, row0, bn * BN, M, ncols, relu, qmult, qshift);
    } else {
        if (flags & GEMM_FLAG_BIAS)
            store_fragment<BN, true, false>(d, sbias, C, ldc, row0, bn * BN, M, ncols, relu, qmult, qshift);
        else
            store_fragment<BN, false, false>(d, sbias, C, ldc, row0, bn * BN, M, ncols, relu, qmult, qshift);
    }
}

// A and Bᵀ as TMA maps (K-major, 128×128 and BN×128 boxes, 128B swizzle); C
// row-major with pitch ldc bytes (a multiple of 16); flags as gemm_i8.cu.
#define GEMM_I8_WGMMA(BN)                                                                                        \
    extern "C" __global__ void __launch_bounds__(384, 1) ferrite_gemm_i8_wgmma_n##BN(                          \
        const __grid_constant__ TmaMap tmA, const __grid_constant__ TmaMap tmB, const int* __restrict__ bias,    \
        signed char* __restrict__ C, int M, int N, int K, long long ldc, unsigned flags, int qmult,              \
        unsigned qshift) {                                                                                       \
        gemm_i8_wgmma<BN>(tmA, tmB, bias, C, M, N, K, ldc, flags, qmult, qshift);                                \
    }
GEMM_I8_WGMMA(256)
GEMM_I8_WGMMA(128)
GEMM_I8_WGMMA(64)

// Bᵀ[n][k] = B[k][n] for K×N int8 B (pitch ldb) into N×K Bᵀ (pitch ldt, a
// multiple of 16 ≥ K), one 128×128 tile per block of 256 threads. Rows k ≥ K
// read as zeros, so the padding bytes of Bᵀ's rows are zeros too; columns
// n ≥ N (B's pitch padding, never trusted) are not written.
extern "C" __global__ void __launch_bounds__(256) ferrite_i8_transpose(const signed char* __restrict__ B,
                                                                       signed char* __restrict__ Bt, int K, int N,
                                                                       long long ldb, long long ldt) {
    // s[k][n], 16-byte chunk c of row r stored at chunk c ^ (r/16): both the
    // row-wise stores and the column-wise word loads below (a warp reads 8
    // distinct chunks × 4 words) are then free of bank conflicts.
    __shared__ __align__(16) unsigned char s[128 * 128];
    const int tid = threadIdx.x, k0 = blockIdx.y * 128, n0 = blockIdx.x * 128;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int r = tid / 8 + 32 * j, c = tid % 8;
        int4 v = make_int4(0, 0, 0, 0);
        if (k0 + r < K && n0 + 16 * c < N)
            v = *reinterpret_cast<const int4*>(B + (long long)(k0 + r) * ldb + n0 + 16 * c);
        *reinterpret_cast<int4*>(&s[r * 128 + ((c ^ (r / 16)) * 16)]) = v;
    }
    __syncthreads();
    // This thread: rows 16kc.. of s, columns 4g..4g+3 → rows 4g..4g+3 of Bᵀ.
    const int kc = tid % 8, g = tid / 8;
    if (k0 + 16 * kc >= K) return;
    unsigned w[16];
#pragma unroll
    for (int i = 0; i < 16; i++)
        w[i] = *reinterpret_cast<const unsigned*>(&s[(16 * kc + i) * 128 + ((g / 4) ^ kc) * 16 + (g % 4) * 4]);
    unsigned o[4][4];  // o[j][q]: column 4g + j, rows 16kc + 4q .. + 3
#pragma unroll
    for (int q = 0; q < 4; q++) {
        // 4×4 byte transpose of w[4q..4q+3].
        const unsigned t0 = __byte_perm(w[4 * q], w[4 * q + 1], 0x5140);
        const unsigned t1 = __byte_perm(w[4 * q], w[4 * q + 1], 0x7362);
        const unsigned t2 = __byte_perm(w[4 * q + 2], w[4 * q + 3], 0x5140);
        const unsigned t3 = __byte_perm(w[4 * q + 2], w[4 * q + 3], 0x7362);
        o[0][q] = __byte_perm(t0, t2, 0x5410);
        o[1][q] = __byte_perm(t0, t2, 0x7632);
        o[2][q] = __byte_perm(t1, t3, 0x5410);
        o[3][q] = __byte_perm(t1, t3, 0x7632);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int n = n0 + 4 * g + j;
        if (n < N)
            *reinterpret_cast<uint4*>(Bt + (long long)n * ldt + k0 + 16 * kc) =
                make_uint4(o[j][0], o[j][1], o[j][2], o[j][3]);
    }
}
