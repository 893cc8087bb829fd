// Bit-exact twin of the MoE router unit's golden model (ferrite_hw::moe::route):
//
//   z[e] = Σ_h x[h]·W[e][h] (+ bias[e])         exact int32 (dp4a; wraps like the unit)
//   sel  = k largest z, rank order, ties → lower expert index
//   t[e] = round(z[e]·M / 2^S)                 p[e] = LUT[t − max t] (Q1.14)
//   L    = Σ_e p[e]  or  Σ_i p[sel_i]           r = floor(2^40 / L)
//   w_i  = min(round(p[sel_i]·r / 2^24), 65535)
//   slot of (t, e) = tokens before t that chose e  (kept when < C, else −1)
//
// Four launches. `route` computes each token's choices and weights (one warp
// per token). Slots are a per-expert exclusive prefix count over tokens, done
// as a chunked scan: `count` histograms each chunk of CHUNK tokens, `scan` (one
// block) turns the chunk counts into per-chunk offsets and writes the
// statistics, `place` ranks tokens inside their chunk in token order and
// writes the slots and the dispatch plan. Nothing depends on atomics' order.

#include "fixed.cuh"

#define CHUNK 256
#define KMAX MOE_K_LIMIT
#define I64_MIN (-0x7fffffffffffffffll - 1)

// Lanes are split as EL expert lanes × (32/EL) lanes over H: lane = hl·EL + el
// owns experts el + EL·c (c < C) and the 16-byte columns hl, hl + 32/EL, ….
// A packed key orders (z desc, expert asc) and carries p: z<<24 | (255−e)<<16 | p.
template <int C>
__device__ __forceinline__ void route_token(const signed char* __restrict__ X, const signed char* __restrict__ W,
                                            const int* __restrict__ bias, const unsigned* __restrict__ lut,
                                            unsigned char* __restrict__ route, long long tok, int H, int E,
                                            int k, long long ldx, long long ldw, int EL, int flags, int smult,
                                            unsigned sshift) {
    const int lane = threadIdx.x & 31, el = lane % EL, hl = lane / EL, HL = 32 / EL;
    const signed char* x = X + tok * ldx;
    int z[C];
#pragma unroll
    for (int c = 0; c < C; c++) z[c] = 0;
    for (int col = hl; col * 16 < H; col += HL) {
        int4 xv = *reinterpret_cast<const int4*>(x + col * 16);
        int xs[4] = {xv.x, xv.y, xv.z, xv.w};
        // Bytes past H are row padding: zero them so they add nothing.
        int rem = H - col * 16;
        if (rem < 16) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int r = rem - 4 * j;
                xs[j] = r >= 4 ? xs[j] : (r <= 0 ? 0 : (int)((unsigned)xs[j] & (0xffffffffu >> (32 - 8 * r))));
            }
        }
#pragma unroll
        for (int c = 0; c < C; c++) {
            int e = el + EL * c;
            if (e < E) {
                int4 wv = *reinterpret_cast<const int4*>(W + e * ldw + col * 16);
                z[c] = __dp4a(xs[0], wv.x, z[c]);
                z[c] = __dp4a(xs[1], wv.y, z[c]);
                z[c] = __dp4a(xs[2], wv.z, z[c]);
                z[c] = __dp4a(xs[3], wv.w, z[c]);
            }
        }
    }
    // Sum the H lanes (every lane of an expert group ends with the full logit).
#pragma unroll
    for (int c = 0; c < C; c++) {
        for (int off = EL; off < 32; off <<= 1) z[c] += __shfl_xor_sync(0xffffffffu, z[c], off);
        int e = el + EL * c;
        if ((flags & MOE_FLAG_BIAS) && e < E) z[c] = wrap_add(z[c], bias[e]);
    }
    // t and max t (t is monotone in z, but compute the max honestly).
    long long t[C];
    long long tmax = I64_MIN;
#pragma unroll
    for (int c = 0; c < C; c++) {
        t[c] = round_shift((long long)z[c] * (long long)smult, sshift);
        if (el + EL * c < E && t[c] > tmax) tmax = t[c];
    }
    for (int off = 1; off < EL; off <<= 1) {
        long long o = __shfl_xor_sync(0xffffffffu, tmax, off);
        tmax = o > tmax ? o : tmax;
    }
    long long key[C];
    long long lsum = 0;
#pragma unroll
    for (int c = 0; c < C; c++) {
        int e = el + EL * c;
        long long p = exp2_fixed(lut, t[c] - tmax);  // argument ≤ 0
        if (e < E) {
            lsum += p;
            key[c] = ((long long)z[c] << 24) | ((long long)(255 - e) << 16) | p;
        } else {
            key[c] = I64_MIN;
        }
    }
    for (int off = 1; off < EL; off <<= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);

    int ids[KMAX];
    long long ps[KMAX];
    long long lsel = 0;
#pragma unroll
    for (int r = 0; r < KMAX; r++) {
        ids[r] = 0;
        ps[r] = 0;
        if (r < k) {
            long long best = I64_MIN;
#pragma unroll
            for (int c = 0; c < C; c++) best = key[c] > best ? key[c] : best;
            for (int off = 1; off < EL; off <<= 1) {
                long long o = __shfl_xor_sync(0xffffffffu, best, off);
                best = o > best ? o : best;
            }
#pragma unroll
            for (int c = 0; c < C; c++)
                if (key[c] == best) key[c] = I64_MIN;
            ids[r] = 255 - (int)((best >> 16) & 255);
            ps[r] = best & 0xffff;
            lsel += ps[r];
        }
    }
    // Softmax-top-k without renormalization divides by all E; otherwise by the k.
    const bool over_chosen = (flags & MOE_FLAG_TOPK_SOFTMAX) || (flags & MOE_FLAG_RENORMALIZE);
    const long long L = over_chosen ? lsel : lsum;
    const long long recip = (1ll << MOE_RECIP_BITS) / L;
    if (lane == 0) {
        unsigned wd[8];
        wd[0] = wd[1] = 0;
#pragma unroll
        for (int r = 0; r < KMAX; r++) {
            if (r < k) wd[r / 4] |= (unsigned)ids[r] << (8 * (r % 4));
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            unsigned lo = 0, hi = 0;
            if (2 * j < k) {
                long long w = round_shift(ps[2 * j] * recip, MOE_WEIGHT_SHIFT);
                lo = (unsigned)(w > 65535 ? 65535 : w);
            }
            if (2 * j + 1 < k) {
                long long w = round_shift(ps[2 * j + 1] * recip, MOE_WEIGHT_SHIFT);
                hi = (unsigned)(w > 65535 ? 65535 : w);
            }
            wd[2 + j] = lo | (hi << 16);
        }
        wd[6] = wd[7] = 0;
        uint4* rec = reinterpret_cast<uint4*>(route + tok * MOE_RECORD_BYTES);
        rec[0] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
        rec[1] = make_uint4(wd[4], wd[5], wd[6], wd[7]);
    }
}

#define ROUTE(C)                                                                                                  \
    extern "C" __global__ void ferrite_moe_route_c##C(const signed char* X, const signed char* W, const int* bias, \
                                                        const unsigned* lut, unsigned char* route, int T, int H,   \
                                                        int E, int k, long long ldx, long long ldw, int EL,       \
                                                        int flags, int smult, unsigned sshift) {                  \
        long long tok = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;                                  \
        if (tok >= T) return;                                                                                     \
        route_token<C>(X, W, bias, lut, route, tok, H, E, k, ldx, ldw, EL, flags, smult, sshift);                 \
    }
ROUTE(1)
ROUTE(2)
ROUTE(4)
ROUTE(8)

// Chosen experts of token `tok`, from its route record.
__device__ __forceinline__ void read_ids(const unsigned char* route, long long tok, unsigned& w0, unsigned& w1) {
    uint2 v = *reinterpret_cast<const uint2*>(route + tok * MOE_RECORD_BYTES);
    w0 = v.x;
    w1 = v.y;
}

// counts[chunk·E + e] = tokens of the chunk that chose e. Block = CHUNK threads.
extern "C" __global__ void ferrite_moe_count(const unsigned char* route, unsigned* counts, int T, int E, int k) {
    __shared__ unsigned hist[256];
    for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
    __syncthreads();
    long long tok = (long long)blockIdx.x * CHUNK + threadIdx.x;
    if (tok < T) {
        unsigned w0, w1;
        read_ids(route, tok, w0, w1);
        for (int r = 0; r < k; r++) atomicAdd(&hist[((r < 4 ? w0 : w1) >> (8 * (r % 4))) & 255], 1u);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) counts[(long long)blockIdx.x * E + e] = hist[e];
}

// One block of 32 warps: per expert an exclusive scan of its chunk counts (in
// place), then stats = dropped, capacity, load[E].
extern "C" __global__ void ferrite_moe_scan(unsigned* counts, unsigned* stats, int chunks, int E, unsigned cap) {
    __shared__ unsigned long long dropped_w[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    unsigned long long dropped = 0;
    for (int e = warp; e < E; e += warps) {
        unsigned carry = 0;
        for (int base = 0; base < chunks; base += 32) {
            int c = base + lane;
            unsigned v = c < chunks ? counts[(long long)c * E + e] : 0;
            unsigned incl = v;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                unsigned o = __shfl_up_sync(0xffffffffu, incl, off);
                if (lane >= off) incl += o;
            }
            if (c < chunks) counts[(long long)c * E + e] = carry + incl - v;
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
        if (lane == 0) {
            stats[2 + e] = carry;
            if (carry > cap) dropped += carry - cap;
        }
    }
    if (lane == 0) dropped_w[warp] = dropped;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long d = 0;
        for (int w = 0; w < warps; w++) d += dropped_w[w];
        stats[0] = (unsigned)d;
        stats[1] = cap;
    }
}

// Block = CHUNK threads, one token each. slot = chunk offset (from scan) +
// earlier warps of the chunk + earlier lanes of the warp, all per expert.
extern "C" __global__ void ferrite_moe_place(unsigned char* route, const unsigned* offsets, unsigned* dispatch, int T,
                                             int E, int k, long long dpitch, unsigned cap) {
    __shared__ unsigned whist[CHUNK / 32][256];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < (CHUNK / 32) * 256; i += blockDim.x) (&whist[0][0])[i] = 0;
    __syncthreads();
    const long long tok = (long long)blockIdx.x * CHUNK + threadIdx.x;
    const bool valid = tok < T;
    unsigned w0 = 0, w1 = 0;
    if (valid) read_ids(route, tok, w0, w1);
    // Bytes ≥ k of the id words are not choices.
    const unsigned m0 = k >= 4 ? 0xffffffffu : (0xffffffffu >> (32 - 8 * k));
    const unsigned m1 = k >= 8 ? 0xffffffffu : (k <= 4 ? 0u : (0xffffffffu >> (32 - 8 * (k - 4))));
    int rank[KMAX];
#pragma unroll
    for (int r = 0; r < KMAX; r++) rank[r] = 0;
    for (int j = 0; j < 31; j++) {
        unsigned a = __shfl_sync(0xffffffffu, w0, j), b = __shfl_sync(0xffffffffu, w1, j);
        if (j < lane) {
#pragma unroll
            for (int r = 0; r < KMAX; r++) {
                if (r < k) {
                    unsigned e = ((r < 4 ? w0 : w1) >> (8 * (r % 4))) & 255;
                    unsigned rep = e * 0x01010101u;
                    rank[r] += ((__vcmpeq4(a, rep) & m0) | (__vcmpeq4(b, rep) & m1)) != 0;
                }
            }
        }
    }
    if (valid)
        for (int r = 0; r < k; r++) atomicAdd(&whist[warp][((r < 4 ? w0 : w1) >> (8 * (r % 4))) & 255], 1u);
    __syncthreads();
    // Exclusive scan over the warps, per expert, starting at the chunk's offset.
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        unsigned run = offsets[(long long)blockIdx.x * E + e];
        for (int w = 0; w < CHUNK / 32; w++) {
            unsigned n = whist[w][e];
            whist[w][e] = run;
            run += n;
        }
    }
    __syncthreads();
    if (!valid) return;
    int slots[KMAX];
#pragma unroll
    for (int r = 0; r < KMAX; r++) {
        slots[r] = 0;
        if (r < k) {
            unsigned e = ((r < 4 ? w0 : w1) >> (8 * (r % 4))) & 255;
            unsigned s = whist[warp][e] + rank[r];
            if (s < cap) {
                slots[r] = (int)s;
                dispatch[(e * dpitch >> 2) + s] = (unsigned)tok;
            } else {
                slots[r] = -1;
            }
        }
    }
    int4* rec = reinterpret_cast<int4*>(route + tok * MOE_RECORD_BYTES + MOE_REC_SLOTS);
    rec[0] = make_int4(slots[0], slots[1], slots[2], slots[3]);
    rec[1] = make_int4(slots[4], slots[5], slots[6], slots[7]);
}
