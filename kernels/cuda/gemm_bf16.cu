// bf16 GEMM, f32 accumulation, bf16 output: C[M,N] = A[M,K] · B[N,K]ᵀ (both
// operands K-major, the layout of nn.Linear weights; PyTorch's reference is
// `a @ b.T`). Step 1 of the ladder in docs/gpu.md: Ampere-style tensor cores
// (mma.sync m16n8k16) fed by ldmatrix from XOR-swizzled shared memory, a
// 3-stage cp.async pipeline, 128×128×64 block tiles, 8 warps of 64×32.
// Shapes must be multiples of the tile (the host checks): this kernel exists
// to be fast, not general.
#include "common_bf16.cuh"

#define TBM 128
#define TBN 128
#define TBK 64
#define STAGES 3
#define TILE_BYTES (TBM * TBK * 2)  // one operand tile of one stage

extern "C" __global__ void __launch_bounds__(256) ferrite_gemm_bf16_mma(
    const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M,
    int N, int K) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned sbase = smem_u32(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;

    // Grouped raster: 8 block-rows share each B panel while it is in L2.
    const int tiles_n = N / TBN, pid = blockIdx.x, group = 8;
    const int first_m = (pid / (group * tiles_n)) * group;
    const int gsize = min(M / TBM - first_m, group);
    const int bm = first_m + (pid % (group * tiles_n)) % gsize;
    const int bn = (pid % (group * tiles_n)) / gsize;
    const bf16_t* Ab = A + (long long)bm * TBM * K;
    const bf16_t* Bb = B + (long long)bn * TBN * K;

    auto load = [&](int stage, int kt) {
        unsigned sa = sbase + stage * 2 * TILE_BYTES, sb = sa + TILE_BYTES;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int idx = tid + c * 256, r = idx >> 3, ch = idx & 7;
            long long go = (long long)r * K + kt * TBK + ch * 8;
            cp_async16(sa + swz(r, ch, 128), Ab + go);
            cp_async16(sb + swz(r, ch, 128), Bb + go);
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.f;

    const int KT = K / TBK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        int nk = kt + STAGES - 1;
        if (nk < KT) load(nk % STAGES, nk);
        cp_async_commit();
        unsigned sa = sbase + (kt % STAGES) * 2 * TILE_BYTES, sb = sa + TILE_BYTES;
#pragma unroll
        for (int kk = 0; kk < TBK / 16; kk++) {
            unsigned af[4][4], bfr[2][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                ldmatrix_x4(af[i], sa + swz(wm + i * 16 + (lane & 15), 2 * kk + (lane >> 4), 128));
#pragma unroll
            for (int jp = 0; jp < 2; jp++)
                ldmatrix_x4(bfr[jp], sb + swz(wn + jp * 16 + (lane & 7) + (lane >> 4) * 8,
                                              2 * kk + ((lane >> 3) & 1), 128));
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_bf16(acc[i][j], af[i], &bfr[j >> 1][(j & 1) * 2]);
        }
    }
    cp_async_wait<0>();

    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            long long row = (long long)bm * TBM + wm + i * 16 + g;
            int col = bn * TBN + wn + j * 8 + t * 2;
            *reinterpret_cast<unsigned*>(C + row * N + col) = pack_bf16(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<unsigned*>(C + (row + 8) * N + col) = pack_bf16(acc[i][j][2], acc[i][j][3]);
        }
}
