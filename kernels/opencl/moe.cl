/*
 * The Ferrite MoE router unit's arithmetic in OpenCL C, bit-exact with
 * ferrite_hw::moe::route (docs/numerics.md, "MoE router unit"). Per token:
 *
 *   z[e] = sum_h x[h] * W[e][h] (+ bias[e])        int32, wrapping
 *   sel  = the k largest z in rank order; ties -> lower expert index
 *   t[e] = round(z[e] * smult / 2^sshift)          log2 domain, 8 fraction bits
 *   p[e] = exp2_fixed(t[e] - max t)                Q1.14, the attention unit's LUT
 *   L    = sum over all e (softmax-top-k) or over sel (top-k-softmax, renormalize)
 *   r    = floor(2^40 / L)      w_i = min(round(p[sel_i] * r / 2^24), 65535)
 *
 * Two kernels, both with the unit's register-map arguments followed by the
 * exp2 LUT (ferrite_hw::numerics::exp2_lut, uploaded by the host):
 *
 * - ferrite_moe_gate: one work-item per token writes its whole 64-byte route
 *   record: ids @0, Q0.16 weights @8, everything else zero (padding, unused
 *   choices, and the slots @32 that ferrite_moe_dispatch fills in).
 * - ferrite_moe_dispatch: capacity slots are sequential in token order, so one
 *   work-group scans the records: each work-item owns experts e = lid, lid +
 *   size, ... and walks the tokens in order, giving slot = load[e] while
 *   load[e] < C (else -1, dropped), writing the dispatch row, then the loads,
 *   dropped and C into STATS. A token's choices are distinct experts, so no
 *   two work-items write the same slot.
 *
 * Signed overflow and right shifts of negative values are avoided (undefined
 * or implementation-defined in OpenCL C), as in gemm.cl.
 *
 * Constants shared with the golden model come from the host's build options
 * (opencl.rs build_options, from the Rust definitions): EXP2_FRAC_BITS,
 * MOE_E_LIMIT, MOE_K_LIMIT, MOE_RECORD_BYTES, MOE_REC_IDS / _WEIGHTS / _SLOTS,
 * MOE_RECIP_BITS, MOE_WEIGHT_SHIFT, MOE_FLAG_*, and MOE_DISPATCH_ITEMS (the
 * most work-items the host launches ferrite_moe_dispatch with).

 *
 * round_shift, floor_shift, exp2_fixed and store_le32 are in fixed.cl, which
 * the host prepends to this file.
 */

/* Global size: T, one work-item per token. */
__kernel void ferrite_moe_gate(__global const char *x,
                               __global const char *wg,
                               __global const int *bias,
                               __global uchar *route,
                               __global uchar *dispatch,
                               __global uint *stats,
                               uint tokens, uint hidden, uint experts, uint top_k,
                               uint ldx, uint ldw, uint dpitch,
                               uint flags, uint cf, int smult, uint sshift,
                               __global const uint *lut)
{
    size_t tok = get_global_id(0);
    if (tok >= tokens)
        return;
    __global const char *xt = x + tok * ldx;
    int z[MOE_E_LIMIT];
    uint sel[MOE_K_LIMIT];
    int selz[MOE_K_LIMIT];
    uint n = 0;
    long t_max = 0;
    for (uint e = 0; e < experts; ++e) {
        __global const char *we = wg + (size_t)e * ldw;
        uint acc = 0;
        for (uint hh = 0; hh < hidden; ++hh)
            acc += (uint)((int)xt[hh] * (int)we[hh]);
        if (flags & MOE_FLAG_BIAS)
            acc += (uint)bias[e];
        int ze = as_int(acc);
        z[e] = ze;
        long te = round_shift((long)ze * (long)smult, sshift);
        t_max = (e == 0 || te > t_max) ? te : t_max;
        /* Insertion into the sorted top-k: strictly greater goes first, so ties keep the lower index. */
        if (n < top_k || ze > selz[n - 1]) {
            uint at = n < top_k ? n : top_k - 1;
            while (at > 0 && ze > selz[at - 1]) {
                sel[at] = sel[at - 1];
                selz[at] = selz[at - 1];
                --at;
            }
            sel[at] = e;
            selz[at] = ze;
            n = n < top_k ? n + 1 : n;
        }
    }
    long l = 0;
    if (flags & (MOE_FLAG_TOPK_SOFTMAX | MOE_FLAG_RENORMALIZE)) {
        for (uint i = 0; i < top_k; ++i)
            l += exp2_fixed(lut, round_shift((long)selz[i] * (long)smult, sshift) - t_max);
    } else {
        for (uint e = 0; e < experts; ++e)
            l += exp2_fixed(lut, round_shift((long)z[e] * (long)smult, sshift) - t_max);
    }
    /* l >= 2^14 when it includes the top-1 expert, whose p is exactly 1.0. */
    long r = (1l << MOE_RECIP_BITS) / l;
    __global uchar *rec = route + tok * MOE_RECORD_BYTES;
    for (uint b = 0; b < MOE_RECORD_BYTES; ++b)
        rec[b] = 0;
    for (uint i = 0; i < top_k; ++i) {
        long p = exp2_fixed(lut, round_shift((long)selz[i] * (long)smult, sshift) - t_max);
        uint w = (uint)min(round_shift(p * r, MOE_WEIGHT_SHIFT), 65535l);
        rec[MOE_REC_IDS + i] = (uchar)sel[i];
        rec[MOE_REC_WEIGHTS + 2 * i] = (uchar)w;
        rec[MOE_REC_WEIGHTS + 2 * i + 1] = (uchar)(w >> 8);
    }
}

/* One work-group of at most MOE_DISPATCH_ITEMS work-items, after ferrite_moe_gate. */
__kernel void ferrite_moe_dispatch(__global const char *x,
                                   __global const char *wg,
                                   __global const int *bias,
                                   __global uchar *route,
                                   __global uchar *dispatch,
                                   __global uint *stats,
                                   uint tokens, uint hidden, uint experts, uint top_k,
                                   uint ldx, uint ldw, uint dpitch,
                                   uint flags, uint cf, int smult, uint sshift,
                                   __global const uint *lut)
{
    __local uint dropped[MOE_DISPATCH_ITEMS];
    uint lid = (uint)get_local_id(0), items = (uint)get_local_size(0);
    /* C = min(ceil(cf * T * k / (E * 2^16)), T), exact: cf * T * k < 2^59. */
    uint cap = tokens;
    if (flags & MOE_FLAG_CAPACITY) {
        ulong num = (ulong)cf * ((ulong)tokens * top_k), den = (ulong)experts << 16;
        cap = (uint)min((num + den - 1) / den, (ulong)tokens);
    }
    uint mine = 0;
    for (uint e = lid; e < experts; e += items) {
        uint load = 0;
        __global uchar *row = dispatch + (size_t)e * dpitch;
        for (uint tok = 0; tok < tokens; ++tok) {
            __global uchar *rec = route + (size_t)tok * MOE_RECORD_BYTES;
            for (uint i = 0; i < top_k; ++i) {
                if (rec[MOE_REC_IDS + i] != e)
                    continue;
                uint slot = 0xffffffffu; /* -1: dropped */
                if (load < cap) {
                    slot = load;
                    store_le32(row + 4 * (size_t)slot, tok);
                }
                store_le32(rec + MOE_REC_SLOTS + 4 * i, slot);
                ++load;
                break;
            }
        }
        stats[2 + e] = load;
        mine += load > cap ? load - cap : 0;
    }
    dropped[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        uint sum = 0;
        for (uint i = 0; i < items; ++i)
            sum += dropped[i];
        stats[0] = sum;
        stats[1] = cap;
    }
}
