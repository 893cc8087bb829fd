// bf16 GEMM for Hopper (sm_90a), step 2 of the ladder in docs/gpu.md:
// C[M,N] = A[M,K] · B[N,K]ᵀ, f32 accumulation, bf16 output, both operands
// K-major as in gemm_bf16.cu.
//
// 128×256×64 block tiles, 4-stage pipeline, warp-specialized: warpgroup 0 is
// the producer (one thread issues TMA bulk-tensor loads into 128B-swizzled
// shared memory, signalling `full` mbarriers with the byte count), warpgroups 1
// and 2 are consumers (each 64 rows × 256 columns with wgmma m64n256k16 straight
// from shared memory, then an `empty` arrive hands the stage back). setmaxnreg
// moves registers from the producer to the consumers' 128 accumulators.
// Shapes must be multiples of the tile (the host checks and otherwise uses
// the mma.sync kernel).
#include "common_bf16.cuh"
#include "common_hopper.cuh"

#define WBM 128
#define WBN 256
#define WBK 64
#define WSTAGES 4
#define A_BYTES (WBM * WBK * 2)
#define B_BYTES (WBN * WBK * 2)

__device__ __forceinline__ void wgmma_256(float* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1));
}

extern "C" __global__ void __launch_bounds__(384, 1) ferrite_gemm_bf16_wgmma(
    const __grid_constant__ TmaMap tmA, const __grid_constant__ TmaMap tmB, bf16_t* __restrict__ C, int M,
    int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem[];
    // The 128B swizzle repeats every 1024 bytes: tiles start on that boundary.
    const unsigned base = (smem_u32(smem) + 1023) & ~1023u;
    const unsigned sa = base, sb = base + WSTAGES * A_BYTES, bars = sb + WSTAGES * B_BYTES;
    const unsigned full = bars, empty = bars + 8 * WSTAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;

    // Grouped raster: 8 block-rows share each B panel while it is in L2.
    const int tiles_n = N / WBN, pid = blockIdx.x, group = 8;
    const int first_m = (pid / (group * tiles_n)) * group;
    const int gsize = min(M / WBM - first_m, group);
    const int bm = first_m + (pid % (group * tiles_n)) % gsize;
    const int bn = (pid % (group * tiles_n)) / gsize;

    if (threadIdx.x == 0) {
        for (int s = 0; s < WSTAGES; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int KT = K / WBK;

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            for (int kt = 0; kt < KT; kt++) {
                const int s = kt % WSTAGES;
                if (kt >= WSTAGES) mbar_wait(empty + 8 * s, ((kt / WSTAGES) - 1) & 1);
                mbar_expect_tx(full + 8 * s, A_BYTES + B_BYTES);
                tma_load(sa + s * A_BYTES, &tmA, full + 8 * s, kt * WBK, bm * WBM);
                tma_load(sb + s * B_BYTES, &tmB, full + 8 * s, kt * WBK, bn * WBN);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.f;
    const unsigned a_off = (wg - 1) * 64 * 128;  // this warpgroup's 64 rows
    for (int kt = 0; kt < KT; kt++) {
        const int s = kt % WSTAGES;
        mbar_wait(full + 8 * s, (kt / WSTAGES) & 1);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < WBK / 16; kk++)
            wgmma_256(d, smem_desc(sa + s * A_BYTES + a_off + kk * 32), smem_desc(sb + s * B_BYTES + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (tid == 0) mbar_arrive(empty + 8 * s);
    }
    // Accumulator fragment of m64nNk16: 16-column group g, register r.
    const int warp = tid / 32, lane = tid % 32;
    const long long row = (long long)bm * WBM + (wg - 1) * 64 + warp * 16 + lane / 4;
    bf16_t* c0 = C + row * N + bn * WBN + 2 * (lane % 4);
    bf16_t* c8 = c0 + 8ll * N;
#pragma unroll
    for (int g = 0; g < 16; g++) {
        *reinterpret_cast<unsigned*>(c0 + 16 * g) = pack_bf16(d[8 * g], d[8 * g + 1]);
        *reinterpret_cast<unsigned*>(c8 + 16 * g) = pack_bf16(d[8 * g + 2], d[8 * g + 3]);
        *reinterpret_cast<unsigned*>(c0 + 16 * g + 8) = pack_bf16(d[8 * g + 4], d[8 * g + 5]);
        *reinterpret_cast<unsigned*>(c8 + 16 * g + 8) = pack_bf16(d[8 * g + 6], d[8 * g + 7]);
    }
}
