// Bit-exact twin of the streaming attention unit's golden model
// (ferrite_hw::attention::model) on the integer tensor cores. Per query row
// the model walks the keys in order:
//
//   s = q·k (int32)          t = round(s · Ms / 2^Ss)     (log2 domain, 8 frac bits)
//   e = floor(t)             first key: m = e, δ = 0;  e > m: δ = e − m, m = e;  else δ = 0
//   p = LUT[frac] >> -int    (Q1.14)
//   l = rnd(l / 2^δ) + p     o[x] = rnd(o[x] / 2^δ) + p · v[x]
//   r = floor(2^32 / l)      out = round(o · r / 2^16)  [→ requantize to int8]
//
// Here a warp takes 16 query rows and a block of BK keys at a time:
//   * S = Q·Kᵀ with mma.sync m16n8k32 s8 (exact int32), then t, e and the LUT
//     index per element in 64-bit integer math as in fixed.cuh.
//   * Between two increases of a row's running maximum m the model's update
//     is a plain sum, o += Σ p·v. So the only thing tied to key order is where
//     m rises: each key's p uses the running maximum *at that key* (a prefix
//     max over the block, by quad shuffles), and o, l are rounded by 2^δ
//     exactly there. m starts at key 0's e (the model's first key sets m
//     with δ = 0). A block where no row's maximum rises (the common case
//     after the first blocks; no shuffle needed to tell) is one P·V product.
//     Where rows rise once in the block (the first key above m is at the
//     block's maximum, found by per-byte quad minima of key indices), keys
//     before the rise see m and keys from it on the new maximum: two P·V
//     products, keys before and keys from the rise on, with the rescale of
//     the accumulator halves of rising rows only in between. Otherwise (the
//     first block, mostly) the block is cut per row into segments of equal
//     running maximum (a prefix max by quad shuffles), and each segment is
//     one P·V product (P masked to it) after the rescale that opens it.
//   * P·V exactly: p < 2^15, so P = 256·P_hi + P_lo with both in u8, and two
//     mma.sync m16n8k32 u8·s8 products accumulate o/256 and o mod 256 in int32
//     (H and L, o = 256·H + L); a rescale recombines them in int32 where
//     every row of the warp has l < NARROW_L (then o fits, and L takes all
//     of it, H = 0), else in 64 bits. Without a rescale L grows by < 2^15 per
//     key, so every 32768 keys it is folded into H (o unchanged); the host
//     limits keys to 2^17 so H fits.
//   * l is summed per thread and only reduced over the quad where a rescale
//     needs the exact row total.
// V is read from shared memory with ldmatrix.trans on 16-bit pairs: a thread
// gets two keys × two dims per matrix; byte permutes give each n8 tile of
// P·V four keys of one dim, so the tiles alternate even and odd dims and a
// thread ends up owning four consecutive output dims. K and V blocks come
// through cp.async: at DP ≥ 64 into a ring of stages under mbarriers (warps
// drift apart), else two stages under a CTA barrier per block (KV_STAGES).

#include "fixed.cuh"
#include "common_bf16.cuh"    // cp_async16, ldmatrix_x4, ldmatrix_x4_trans
#include "common_hopper.cuh"  // mbarriers

#define WARPS 4
#define ROWS (16 * WARPS)
// e of a masked key: below every real e (|t| < 2^38, the host checks, so
// |e| ≤ 2^30 + 1), so it never moves a running maximum, and m − EMASK > 31 for
// every real m, so its p is 0 (every row's key 0 is valid, so m is real before
// a masked key). Differences of e are taken unsigned: they stay below 2^32.
#define EMASK (-(3 << 29))
// Keys between folds of L into H: 32768 keys add |L| < 2^30 (to the < 2^29 +
// 131 an int32 rescale leaves there, see NARROW_L).
#define FOLD_KEYS 32768
// DP ≥ 64: K/V stages in shared memory, and how many blocks ahead a warp
// issues its share of a block's loads. Warps are tied only by mbarriers: a
// block's stage is refilled once every warp is done with it, so a warp may run
// min(KV_AHEAD, KV_STAGES − 1 − KV_AHEAD) blocks ahead of the slowest (a warp
// on a rescaling block no longer holds the others up at a CTA barrier).
// DP = 32 keeps two stages and a CTA barrier per block. The host sizes shared
// memory as the LUT plus 2·stages·BK·(DP + 16) bytes, stages = kv_stages(DP).
#ifndef KV_STAGES
#define KV_STAGES 6
#endif
#ifndef KV_AHEAD
#define KV_AHEAD 2
#endif
static_assert(KV_AHEAD >= 1 && KV_AHEAD < KV_STAGES, "loads run 1 to KV_STAGES - 1 blocks ahead");
// Per instance (DP dims): keys a block, whether K/V go through the mbarrier
// ring, and its stages; the host sizes shared memory by ATTENTION_MMA_STAGES
// and ATTENTION_MMA_BK. 32-key blocks at DP ≥ 64 keep the score tile small
// (d = 64: 168 registers, three CTAs an SM; docs/gpu.md).
#define ATTENTION_MMA_BK(dp) ((dp) >= 64 ? 32 : 64)
#define ATTENTION_MMA_RING(dp) ((dp) >= 64)
#define ATTENTION_MMA_STAGES(dp) (ATTENTION_MMA_RING(dp) ? KV_STAGES : 2)
// CTAs an SM each instance is compiled for (__launch_bounds__).
#define ATTENTION_MMA_MIN_CTAS(dp) ((dp) == 64 ? 3 : 1)
template <int DP>
struct KvRing {
    static constexpr bool on = ATTENTION_MMA_RING(DP);
    static constexpr int stages = ATTENTION_MMA_STAGES(DP);
};

typedef signed char i8;

__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_u8s8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// One arrival once this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void mbar_arrive_cp_async(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ int quad_max(int x) {
    x = max(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ int quad_min(int x) {
    x = min(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return min(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ long long quad_sum(long long x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Keys [kb, kb + BK) of K and V into row-padded shared memory (LD bytes a
// row). RING: each thread then arrives once on `full` (count 32·WARPS), when
// its copies have landed; else it commits a cp.async group. Keys ≥ seq_kv are
// not loaded: they are masked, so their rows only ever meet p = 0 or a masked
// score. Dims ≥ d stay unset: Q's are zero, and output
// dims ≥ d are not stored.
template <int DP, int BK, int LD, bool RING>
__device__ __forceinline__ void load_kv(i8* ks, i8* vs, const i8* kh, const i8* vh, int kb, int seq_kv, int d,
                                        unsigned full) {
    const int keys = min(BK, seq_kv - kb);
    const long long base = (long long)kb * d;
    if (d == DP && keys == BK && (BK * DP / 16) % (32 * WARPS) == 0) {
        // Whole block, d = DP: a compile-time split, no division.
        constexpr int CPR = DP / 16;
#pragma unroll
        for (int i = 0; i < BK * CPR / (32 * WARPS); i++) {
            const int c = threadIdx.x + i * 32 * WARPS, r = c / CPR, off = (c % CPR) << 4;
            cp_async16(smem_addr(ks + r * LD + off), kh + base + r * DP + off);
            cp_async16(smem_addr(vs + r * LD + off), vh + base + r * DP + off);
        }
    } else if ((d & 15) == 0) {
        const int cpr = d >> 4, total = keys * cpr;
        for (int c = threadIdx.x; c < total; c += 32 * WARPS) {
            const int r = c / cpr, off = (c - r * cpr) << 4;
            cp_async16(smem_addr(ks + r * LD + off), kh + base + (long long)r * d + off);
            cp_async16(smem_addr(vs + r * LD + off), vh + base + (long long)r * d + off);
        }
    } else {
        for (int c = threadIdx.x; c < keys * d; c += 32 * WARPS) {
            const int r = c / d, x = c - r * d;
            ks[r * LD + x] = kh[base + c];
            vs[r * LD + x] = vh[base + c];
        }
        if (RING) mbar_arrive(full);
        return;
    }
    if (RING)
        mbar_arrive_cp_async(full);
    else
        asm volatile("cp.async.commit_group;\n" ::);
}

// o += P·V for one block: P (this thread's p of rows g and g+8, S layout) split
// into u8 halves as mma A fragments, V's fragments by ldmatrix.trans.
// p(t, c): this thread's p of element (t, c) (S layout), masked as the
// caller needs; only the 32-key steps from ks0 on (warp-uniform).
template <int DP, int BK, int LD, class Fp>
__device__ __forceinline__ void pv(int (&H)[DP / 16][2][4], int (&L)[DP / 16][2][4], Fp p, const i8* vs, int lane,
                                   int ks0 = 0) {
#pragma unroll
    for (int ks = 0; ks < BK / 32; ks++) {
        if (ks < ks0) continue;
        unsigned hi[4], lo[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            // a0: row g, tiles 4ks, 4ks+1; a1: row g+8; a2, a3: tiles 4ks+2, 4ks+3.
            const int t = 4 * ks + 2 * (i >> 1), c = 2 * (i & 1);
            unsigned x = __byte_perm(p(t, c), p(t, c + 1), 0x5140);
            unsigned y = __byte_perm(p(t + 1, c), p(t + 1, c + 1), 0x5140);
            lo[i] = __byte_perm(x, y, 0x5410);
            hi[i] = __byte_perm(x, y, 0x7632);
        }
#pragma unroll
        for (int G = 0; G < DP / 16; G++) {
            unsigned r[4];
            ldmatrix_x4_trans(r, smem_addr(vs + (32 * ks + lane) * LD + 16 * G));
            const unsigned be0 = __byte_perm(r[0], r[1], 0x6420), bo0 = __byte_perm(r[0], r[1], 0x7531);
            const unsigned be1 = __byte_perm(r[2], r[3], 0x6420), bo1 = __byte_perm(r[2], r[3], 0x7531);
            mma_u8s8(H[G][0], hi, be0, be1);
            mma_u8s8(L[G][0], lo, be0, be1);
            mma_u8s8(H[G][1], hi, bo0, bo1);
            mma_u8s8(L[G][1], lo, bo0, bo1);
        }
    }
}

// l below which a row's o fits in 32 bits with room for the rounding addend:
// |o| ≤ 128·l + 130 always (|v| ≤ 128, so adding p·v keeps it, and a rescale
// by δ ≥ 1 gives |rnd(o/2^δ)| ≤ (128·l + 130)/2^δ + 1/2 ≤ 128·rnd(l/2^δ) + 130),
// so l < 2^22 gives |o| < 2^29 + 131. Such a rescale leaves all of o in L
// (H = 0): one instruction fewer than splitting it, and FOLD_KEYS keys of
// p_lo·v on top keep |L| < 2^29 + 131 + 2^30 < 2^31.
#define NARROW_L (1ll << 22)

// f(H, L) on each accumulator pair of row g (rr = 0) or g + 8 (rr = 1) of this thread.
template <int DP, int rr, class F>
__device__ __forceinline__ void each_row_acc(int (&H)[DP / 16][2][4], int (&L)[DP / 16][2][4], F f) {
#pragma unroll
    for (int G = 0; G < DP / 16; G++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int cc = 0; cc < 2; cc++) f(H[G][j][2 * rr + cc], L[G][j][2 * rr + cc]);
}

// o = round(o / 2^dl) (o = 256·H + L) for the accumulators of row g (rr = 0)
// or g + 8 (rr = 1) of this thread. narrow (warp-uniform): every row's l before
// the rescale is below NARROW_L, so o and the rounding fit in int32 (a shift
// by 31 then gives 0, as by any dl ≥ 31). RISE: the caller knows dl ≥ 1, so
// the rounding needs no case for dl = 0.
template <int DP, int rr, bool RISE>
__device__ __forceinline__ void rescale_rows(int (&H)[DP / 16][2][4], int (&L)[DP / 16][2][4], unsigned dl,
                                             bool narrow) {
    if (narrow) {
        const unsigned d2 = min(dl, 31u);
        const int half = RISE || d2 ? 1 << (d2 - 1) : 0, neg = RISE || d2 ? -1 : 0;
        each_row_acc<DP, rr>(H, L, [&](int& h, int& l) {
            const int o = (int)((unsigned)h * 256u + (unsigned)l);
            h = 0;
            l = (o + half + ((o >> 31) & neg)) >> d2;
        });
    } else {
        each_row_acc<DP, rr>(H, L, [&](int& h, int& l) {
            const long long o = round_shift((long long)h * 256 + l, dl);
            h = (int)(o >> 8);
            l = (int)(o & 255);
        });
    }
}

// rr as a compile-time index, so H and L stay in registers.
template <int DP, bool RISE>
__device__ __forceinline__ void rescale_half(int (&H)[DP / 16][2][4], int (&L)[DP / 16][2][4], int rr, unsigned dl,
                                             bool narrow) {
    if (rr == 0)
        rescale_rows<DP, 0, RISE>(H, L, dl, narrow);
    else
        rescale_rows<DP, 1, RISE>(H, L, dl, narrow);
}

// DP: d rounded up to a multiple of 32 (the Q·Kᵀ k-step); BK keys a block.
// HI: score_shift ≥ 33, so 2^(Ss−1) has a zero low word and t and e are
// shifts of X's high word alone (three instructions fewer per score).
template <int DP, int BK, bool HI>
__device__ __forceinline__ void attention_mma(const i8* __restrict__ Q, const i8* __restrict__ K,
                                              const i8* __restrict__ V, const unsigned* __restrict__ lut,
                                              const int* __restrict__ kv_len, void* __restrict__ out, int heads,
                                              int heads_total, int seq_q, int seq_kv, int d, long long q_stride,
                                              long long kv_stride, long long o_stride, int causal, int score_mult,
                                              unsigned score_shift, int out_requant, int out_mult,
                                              unsigned out_shift) {
    constexpr int LD = DP + 16;  // 16 bytes of row padding: ldmatrix rows hit distinct banks
    constexpr int NT = BK / 8;   // S tiles of 8 keys
    constexpr int NG = DP / 16;  // P·V dim groups (an even and an odd n8 tile each)
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned* lut_s = reinterpret_cast<unsigned*>(smem);  // [256][32]: a copy per lane, no bank conflicts
    constexpr bool RING = KvRing<DP>::on;
    constexpr int STAGES = KvRing<DP>::stages;
    i8* kv_s = reinterpret_cast<i8*>(smem + 256 * 32 * 4);  // [STAGES][K, V][BK][LD]
    // RING: full[s]: stage s's block has landed (every thread's copies);
    // empty[s]: every warp is done reading it.
    __shared__ __align__(8) unsigned long long bars[RING ? 2 * STAGES : 1];
    const unsigned full0 = smem_addr(bars), empty0 = full0 + 8 * STAGES;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
    const int nqb = (seq_q + ROWS - 1) / ROWS;
    // Causal: the blocks with the most keys first, over all heads.
    const int h = blockIdx.x % heads_total;
    const int qb = causal ? nqb - 1 - (int)(blockIdx.x / heads_total) : (int)(blockIdx.x / heads_total);
    const int r0 = qb * ROWS, w0 = r0 + 16 * warp, rg = w0 + g;
    const int kvl = kv_len ? kv_len[h / heads] : seq_kv;  // null: no padded entries
    const int lim0 = causal ? min(kvl, rg + 1) : kvl, lim1 = causal ? min(kvl, rg + 9) : kvl;
    const int kend = causal ? min(kvl, r0 + ROWS) : kvl;  // keys any row of the block sees
    const int wend = causal ? min(kvl, w0 + 16) : kvl;    // ... any row of this warp
    const int wlo = causal ? min(kvl, w0 + 1) : kvl;      // ... every row of this warp
    const i8* kh = K + h * kv_stride;
    const i8* vh = V + h * kv_stride;

    if (RING) {
        if (threadIdx.x == 0) {
            for (int i = 0; i < STAGES; i++) {
                mbar_init(full0 + 8 * i, 32 * WARPS);
                mbar_init(empty0 + 8 * i, WARPS);
            }
        }
        __syncthreads();  // the barriers are initialized
    }
    const int nblk = (kend + BK - 1) / BK;
    auto load = [&](int b) {
        const int s = b % STAGES;
        load_kv<DP, BK, LD, RING>(kv_s + s * 2 * BK * LD, kv_s + s * 2 * BK * LD + BK * LD, kh, vh, b * BK, seq_kv,
                                  d, full0 + 8 * s);
    };
    // The first blocks' loads fly while the LUT is copied.
#pragma unroll
    for (int b = 0; b < (RING ? KV_AHEAD : 1); b++)
        if (b < nblk) load(b);
    {
        // Warp w copies entries 64w .. 64w + 63, lane l writes copy l: two
        // loads a thread, conflict-free stores.
        static_assert(WARPS * 64 == 256, "the LUT copy assumes four warps");
        const unsigned v0 = __ldg(lut + 64 * warp + lane), v1 = __ldg(lut + 64 * warp + 32 + lane);
#pragma unroll 8
        for (int j = 0; j < 64; j++)
            lut_s[(64 * warp + j) * 32 + lane] = __shfl_sync(0xffffffffu, j < 32 ? v0 : v1, j & 31);
    }
    if (RING) __syncthreads();  // the LUT copies (else the loop's first barrier)

    // Q as A fragments: a0 row g, a1 row g+8, a2/a3 the same 16 dims further.
    unsigned qa[DP / 32][4];
    {
        const i8* qh = Q + h * q_stride;
#pragma unroll
        for (int ks = 0; ks < DP / 32; ks++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = rg + 8 * (i & 1), x0 = 32 * ks + 16 * (i >> 1) + 4 * tig;
                unsigned w = 0;
#pragma unroll
                for (int b = 0; b < 4; b++)
                    if (row < seq_q && x0 + b < d) w |= (unsigned)(unsigned char)qh[(long long)row * d + x0 + b] << (8 * b);
                qa[ks][i] = w;
            }
    }

    // t = round(s·Ms / 2^Ss) as X >> Ss with X = s·Ms + 2^(Ss−1) − [s < 0]
    // (fixed.cuh's round_shift); only the low words of t and e = t >> 8 are
    // needed: a funnel shift by up to 32, then an arithmetic one.
    const long long half = score_shift ? 1ll << (score_shift - 1) : 0;
    const int negadj = score_shift ? -1 : 0;
    const unsigned ta = min(score_shift, 32u), tb = min(max((int)score_shift - 32, 0), 31);
    const unsigned ea = min(score_shift + 8, 32u), eb = min(max((int)score_shift + 8 - 32, 0), 31);
    const int half_hi = (int)(half >> 32);

    int H[NG][2][4], L[NG][2][4];
#pragma unroll
    for (int G = 0; G < NG; G++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) H[G][j][c] = L[G][j][c] = 0;
    int m[2] = {EMASK, EMASK};
    long long lpart[2] = {0, 0};  // this thread's share of l per row

    const unsigned* lutl = lut_s + lane;
    for (int blk = 0; blk < nblk; blk++) {
        const int kb = blk * BK, st = blk % STAGES;
        if (RING) {
            // This thread's share of block blk + KV_AHEAD, into the stage of
            // block blk + KV_AHEAD − STAGES once every warp is done with it.
            const int nb = blk + KV_AHEAD;
            if (nb < nblk) {
                if (nb >= STAGES) mbar_wait(empty0 + 8 * (nb % STAGES), (unsigned)(nb / STAGES - 1) & 1);
                load(nb);
            }
            mbar_wait(full0 + 8 * st, (unsigned)(blk / STAGES) & 1);
        } else {
            asm volatile("cp.async.wait_all;\n" ::);
            __syncthreads();
            // Every warp is past the previous block, so the other stage is free.
            if (blk + 1 < nblk) load(blk + 1);
        }
        const i8* ks_ = kv_s + st * 2 * BK * LD;
        const i8* vs_ = ks_ + BK * LD;
        if (kb < wend) {
            int S[NT][4];
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int c = 0; c < 4; c++) S[t][c] = 0;
#pragma unroll
            for (int t = 0; t < NT; t += 2)
#pragma unroll
                for (int ks = 0; ks < DP / 32; ks++) {
                    unsigned r[4];
                    // matrices: keys 8t.. (dims +0, +16), keys 8t+8.. (dims +0, +16)
                    ldmatrix_x4(r, smem_addr(ks_ + (8 * t + 8 * (lane >> 4) + (lane & 7)) * LD + 32 * ks +
                                             16 * ((lane >> 3) & 1)));
                    mma_s8(S[t], qa[ks], r[0], r[1]);
                    mma_s8(S[t + 1], qa[ks], r[2], r[3]);
                }
            // Element (t, c): row g (c < 2) or g+8, key kb + 8t + 2·tig + (c & 1).
            const bool need_mask = kb + BK > wlo;
            int E[NT][4], F[NT][4];
            int rmax[2] = {EMASK, EMASK};
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int s = S[t][c];
                    int tl, e;
                    if (HI) {
                        // X = s·Ms + (2^(Ss−1) − [s < 0]) with the addend built from two words.
                        const int sg = s >> 31;
                        const long long X = (long long)s * score_mult +
                                            (long long)(((unsigned long long)(unsigned)(half_hi + sg) << 32) | (unsigned)sg);
                        const int xh = (int)((unsigned long long)X >> 32);
                        tl = xh >> tb;
                        e = xh >> eb;
                    } else {
                        const long long X = (long long)s * score_mult + half + (long long)((s >> 31) & negadj);
                        const unsigned xl = (unsigned)X, xh = (unsigned)((unsigned long long)X >> 32);
                        tl = (int)__funnelshift_rc(xl, xh, ta) >> tb;
                        e = (int)__funnelshift_rc(xl, xh, ea) >> eb;
                    }
                    E[t][c] = e;
                    F[t][c] = (tl & 255) << 5;
                }
            if (need_mask) {
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int c = 0; c < 4; c++)
                        if (kb + 8 * t + 2 * tig + (c & 1) >= (c < 2 ? lim0 : lim1)) E[t][c] = EMASK;
            }
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int c = 0; c < 4; c++) rmax[c >> 1] = max(rmax[c >> 1], E[t][c]);
            if (blk == 0) {
                // The model's first key sets m with δ = 0: start from key 0's e
                // (valid for every row), so block 0 only rises past it.
                m[0] = __shfl_sync(0xffffffffu, E[0][0], lane & ~3);
                m[1] = __shfl_sync(0xffffffffu, E[0][2], lane & ~3);
            }
            int P[NT][4];
            if (!__any_sync(0xffffffffu, rmax[0] > m[0] || rmax[1] > m[1])) {
                // No row's maximum rises (the common case): one P·V product.
                int lsum[2] = {0, 0};
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        P[t][c] = (int)(lutl[F[t][c]] >> min((unsigned)m[c >> 1] - (unsigned)E[t][c], 31u));
                        lsum[c >> 1] += P[t][c];
                    }
                pv<DP, BK, LD>(H, L, [&](int t, int c) { return P[t][c]; }, vs_, lane);
                lpart[0] += lsum[0];
                lpart[1] += lsum[1];
            } else {
                const int qm[2] = {quad_max(rmax[0]), quad_max(rmax[1])};
                const bool rise0 = qm[0] > m[0], rise1 = qm[1] > m[1];
                // Per row: the first key above m and the first key at the block's
                // maximum, a byte each, reduced over the quad by per-byte minima.
                unsigned jg[2] = {BK, BK}, jq[2] = {BK, BK};
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        const unsigned kk = 8 * t + 2 * tig + (c & 1);
                        if (E[t][c] > m[c >> 1]) jg[c >> 1] = min(jg[c >> 1], kk);
                        if (E[t][c] == qm[c >> 1]) jq[c >> 1] = min(jq[c >> 1], kk);
                    }
                unsigned j = jg[0] | jg[1] << 8 | jq[0] << 16 | jq[1] << 24;
                j = __vminu4(j, __shfl_xor_sync(0xffffffffu, j, 1));
                j = __vminu4(j, __shfl_xor_sync(0xffffffffu, j, 2));
                // A row rises once iff its first key above m is at the maximum.
                const bool once = (!rise0 || (j & 255) == ((j >> 16) & 255)) && (!rise1 || ((j >> 8) & 255) == j >> 24);
                if (__all_sync(0xffffffffu, once)) {
                    // Every rising row rises once, at key b: keys before b see m,
                    // keys from b on see qm. Two products, keys before b and
                    // keys from b on, with the rescale of the rising rows between.
                    const int b[2] = {rise0 ? (int)((j >> 16) & 255) : BK, rise1 ? (int)(j >> 24) : BK};
                    int lb[2] = {0, 0}, la[2] = {0, 0};
#pragma unroll
                    for (int t = 0; t < NT; t++)
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            const int rr = c >> 1;
                            const bool before = 8 * t + 2 * tig + (c & 1) < b[rr];
                            P[t][c] = (int)(lutl[F[t][c]] >> min((unsigned)(before ? m[rr] : qm[rr]) - (unsigned)E[t][c], 31u));
                            if (before) lb[rr] += P[t][c];
                            else la[rr] += P[t][c];
                        }
                    // This thread's keys: 8t + 2·tig + (c & 1).
                    pv<DP, BK, LD>(
                        H, L, [&](int t, int c) { return 8 * t + 2 * tig + (c & 1) < b[c >> 1] ? P[t][c] : 0; }, vs_,
                        lane);
#pragma unroll
                    for (int rr = 0; rr < 2; rr++) {
                        const bool r = rr ? rise1 : rise0;
                        // Only the half of the accumulators whose row rose somewhere in the warp.
                        if (__any_sync(0xffffffffu, r)) {
                            const long long lt = quad_sum(lpart[rr] + lb[rr]);
                            const bool narrow = __all_sync(0xffffffffu, lt < NARROW_L);
                            if (r) {
                                const unsigned dl = min((unsigned)qm[rr] - (unsigned)m[rr], 62u);
                                lpart[rr] = (tig ? 0 : round_shift(lt, dl)) + la[rr];
                                m[rr] = qm[rr];
                                rescale_half<DP, true>(H, L, rr, dl, narrow);
                            } else {
                                lpart[rr] += lb[rr];
                            }
                        } else {
                            lpart[rr] += lb[rr];
                        }
                    }
                    // Keys from the first rise on only (b = BK for rows that do not rise).
                    const int ks0 = (int)__reduce_min_sync(0xffffffffu, (unsigned)min(b[0], b[1])) / 32;
                    pv<DP, BK, LD>(
                        H, L, [&](int t, int c) { return 8 * t + 2 * tig + (c & 1) >= b[c >> 1] ? P[t][c] : 0; }, vs_,
                        lane, ks0);
                } else {
                    // Some row rises more than once: M, the running maximum at
                    // each key, by a prefix max over the block (quad shuffles).
                    int M[NT][4];
#pragma unroll
                    for (int rr = 0; rr < 2; rr++) {
                        int carry = m[rr];
#pragma unroll
                        for (int t = 0; t < NT; t++) {
                            const int e0 = E[t][2 * rr], e1 = E[t][2 * rr + 1];
                            // Keys of tile t in order: tig 0's pair, tig 1's, ...
                            int x = max(e0, e1);
                            x = max(x, __shfl_up_sync(0xffffffffu, x, 1, 4));
                            x = max(x, __shfl_up_sync(0xffffffffu, x, 2, 4));
                            int before = __shfl_up_sync(0xffffffffu, x, 1, 4);
                            before = tig ? max(before, carry) : carry;
                            M[t][2 * rr] = max(before, e0);
                            M[t][2 * rr + 1] = max(before, max(e0, e1));
                            carry = max(carry, __shfl_sync(0xffffffffu, x, 3, 4));
                        }
                    }
#pragma unroll
                    for (int t = 0; t < NT; t++)
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            P[t][c] = (int)(lutl[F[t][c]] >> min((unsigned)M[t][c] - (unsigned)E[t][c], 31u));
                    // Segments of equal running maximum, in key order: keys with
                    // M == cur, then the rescale that opens the next segment.
                    long long lt[2] = {quad_sum(lpart[0]), quad_sum(lpart[1])};
                    // cur: the segment's maximum; a row with no segment left gets
                    // INT_MAX, which no M equals or exceeds.
                    int cur[2] = {m[0], m[1]};
                    while (true) {
                        int ls[2] = {0, 0};
                        int nxt[2] = {0x7fffffff, 0x7fffffff};
#pragma unroll
                        for (int t = 0; t < NT; t++)
#pragma unroll
                            for (int c = 0; c < 4; c++) {
                                const int rr = c >> 1;
                                ls[rr] += M[t][c] == cur[rr] ? P[t][c] : 0;
                                if (M[t][c] > cur[rr]) nxt[rr] = min(nxt[rr], M[t][c]);
                            }
                        pv<DP, BK, LD>(
                            H, L, [&](int t, int c) { return M[t][c] == cur[c >> 1] ? P[t][c] : 0; }, vs_, lane);
                        unsigned dl[2];
#pragma unroll
                        for (int rr = 0; rr < 2; rr++) {
                            lt[rr] += quad_sum((long long)ls[rr]);
                            nxt[rr] = quad_min(nxt[rr]);
                            dl[rr] = nxt[rr] == 0x7fffffff ? 0u : min((unsigned)nxt[rr] - (unsigned)cur[rr], 62u);
                            if (dl[rr]) m[rr] = nxt[rr];
                            cur[rr] = nxt[rr];
                        }
                        if (!__any_sync(0xffffffffu, dl[0] | dl[1])) break;
                        // Written out per row half: a loop here stayed rolled
                        // and put small arrays on the stack.
                        auto rescale = [&](const int rr) {
                            const bool narrow = __all_sync(0xffffffffu, lt[rr] < NARROW_L);
                            lt[rr] = round_shift(lt[rr], dl[rr]);
                            if (__any_sync(0xffffffffu, dl[rr])) rescale_half<DP, false>(H, L, rr, dl[rr], narrow);
                        };
                        rescale(0);
                        rescale(1);
                    }
                    lpart[0] = tig ? 0 : lt[0];
                    lpart[1] = tig ? 0 : lt[1];
                }
            }
        }
        if (RING) {
            // This warp is done reading the stage.
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * st);
        }
        if ((kb + BK) % FOLD_KEYS == 0) {
#pragma unroll
            for (int G = 0; G < NG; G++)
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        H[G][j][c] += L[G][j][c] >> 8;
                        L[G][j][c] &= 255;
                    }
        }
    }

    // r = floor(2^32 / l) per row; out = round(o · r / 2^16). Thread owns dims
    // 16G + 4·tig + {j, 2 + j} of rows g (c < 2) and g+8.
    long long r[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const long long l = quad_sum(lpart[rr]);
        r[rr] = l > 0 ? (1ll << 32) / l : 0;
    }
    char* oh = reinterpret_cast<char*>(out) + h * o_stride;
#pragma unroll
    for (int G = 0; G < NG; G++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int row = rg + 8 * (c >> 1), x = 16 * G + 4 * tig + 2 * (c & 1) + j;
                if (row >= seq_q || x >= d) continue;
                const long long o = (long long)H[G][j][c] * 256 + L[G][j][c];
                const int fixed = (int)round_shift(o * r[c >> 1], 16);
                const long long at = (long long)row * d + x;
                if (out_requant) {
                    reinterpret_cast<signed char*>(oh)[at] = requantize(fixed, out_mult, out_shift);
                } else {
                    reinterpret_cast<int*>(oh)[at] = fixed;
                }
            }
}

#define ATTENTION_MMA_ARGS                                                                                          \
    const i8 *__restrict__ Q, const i8 *__restrict__ K, const i8 *__restrict__ V, const unsigned *__restrict__ lut, \
        const int *__restrict__ kv_len, void *__restrict__ out, int heads, int heads_total, int seq_q, int seq_kv,  \
        int d, long long q_stride, long long kv_stride, long long o_stride, int causal, int score_mult,             \
        unsigned score_shift, int out_requant, int out_mult, unsigned out_shift
#define ATTENTION_MMA_PASS                                                                                      \
    Q, K, V, lut, kv_len, out, heads, heads_total, seq_q, seq_kv, d, q_stride, kv_stride, o_stride, causal, \
        score_mult, score_shift, out_requant, out_mult, out_shift

// d ≤ 32, d ≤ 64, d ≤ 128, each for any score shift and for shifts ≥ 33 (_hi).
#define ATTENTION_MMA_KERNEL(name, dp, bk, hi)                                           \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, ATTENTION_MMA_MIN_CTAS(dp)) \
        name(ATTENTION_MMA_ARGS) {                                                       \
        attention_mma<dp, bk, hi>(ATTENTION_MMA_PASS);                                   \
    }
ATTENTION_MMA_KERNEL(ferrite_attention_mma_d32, 32, ATTENTION_MMA_BK(32), false)
ATTENTION_MMA_KERNEL(ferrite_attention_mma_d64, 64, ATTENTION_MMA_BK(64), false)
ATTENTION_MMA_KERNEL(ferrite_attention_mma_d128, 128, ATTENTION_MMA_BK(128), false)
ATTENTION_MMA_KERNEL(ferrite_attention_mma_d32_hi, 32, ATTENTION_MMA_BK(32), true)
ATTENTION_MMA_KERNEL(ferrite_attention_mma_d64_hi, 64, ATTENTION_MMA_BK(64), true)
ATTENTION_MMA_KERNEL(ferrite_attention_mma_d128_hi, 128, ATTENTION_MMA_BK(128), true)
