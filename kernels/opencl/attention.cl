/*
 * The Ferrite streaming attention unit's arithmetic in OpenCL C, bit-exact
 * with ferrite_hw::attention::attention (docs/numerics.md). Per query row the
 * keys are consumed in order:
 *
 *   s = q.k (int32)            t = round(s * smult / 2^sshift)   (log2 domain, 8 fraction bits)
 *   e = floor(t / 2^8)         first key: m = e, d = 0;  e > m: d = e - m, m = e;  else d = 0
 *   p = lut[frac] >> -int      (Q1.14, of t - m * 2^8)
 *   l = rnd(l / 2^d) + p       o[x] = rnd(o[x] / 2^d) + p * v[x]
 *   r = floor(2^32 / l)        out = round(o * r / 2^16)   [-> sat8(round(out * omult / 2^oshift))]
 *
 * Every step is integer arithmetic whose result depends on the key order, so
 * the parallelism is across query rows only: one work-item per row, keys in
 * order. The 64-bit o accumulators of a row live in `acc` (dim per row,
 * stored [x][row] so neighbouring work-items touch neighbouring words), which
 * keeps the port free of a head-dimension limit.
 *
 * Arguments follow the unit's register map (AttentionConfig::register_map),
 * then what the hardware fixes at generation time or holds on chip: the head
 * dimension, the exp2 LUT (ferrite_hw::numerics::exp2_lut, uploaded by the
 * host so the two cannot drift) and the accumulator scratch.
 *
 * EXP2_FRAC_BITS comes from the host's build options (opencl.rs
 * build_options, from ferrite_hw::numerics), so the two cannot drift.
 *
 * Signed overflow and right shifts of negative values are avoided (undefined
 * or implementation-defined in OpenCL C): wrapping sums run in uint, floors
 * and rounding shifts work on magnitudes.

 *
 * round_shift, floor_shift, exp2_fixed and store_le32 are in fixed.cl, which
 * the host prepends to this file.
 */
/* FLAGS bits, as AttentionProblem::flags() sets them. */
#define FLAG_CAUSAL 1u
#define FLAG_KVLEN 2u
#define FLAG_INT8 4u

/* Global size: heads_total * seq_q, one work-item per query row. */
__kernel void ferrite_attention(__global const char *q,
                                __global const char *k,
                                __global const char *v,
                                __global uchar *o,
                                __global const int *kv_len,
                                uint heads_total, uint hpb, uint seq_q, uint seq_kv,
                                uint q_stride, uint kv_stride, uint o_stride,
                                uint flags, int smult, uint sshift, int omult, uint oshift,
                                uint dim,
                                __global const uint *lut,
                                __global long *acc)
{
    size_t row = get_global_id(0);
    size_t rows = (size_t)heads_total * seq_q;
    if (row >= rows)
        return;
    uint h = (uint)(row / seq_q), i = (uint)(row % seq_q);
    /* The host checks the KVLEN buffer; the clamp only keeps reads in bounds. */
    uint keys = (flags & FLAG_KVLEN) ? min((uint)max(kv_len[h / hpb], 1), seq_kv) : seq_kv;
    if ((flags & FLAG_CAUSAL) && keys > i + 1)
        keys = i + 1;
    __global const char *qi = q + (size_t)h * q_stride + (size_t)i * dim;
    __global const char *kh = k + (size_t)h * kv_stride;
    __global const char *vh = v + (size_t)h * kv_stride;
    for (uint x = 0; x < dim; ++x)
        acc[(size_t)x * rows + row] = 0;
    long m = 0, l = 0;
    for (uint j = 0; j < keys; ++j) {
        __global const char *kj = kh + (size_t)j * dim;
        __global const char *vj = vh + (size_t)j * dim;
        uint s = 0;
        for (uint x = 0; x < dim; ++x)
            s += (uint)((int)qi[x] * (int)kj[x]);
        long t = round_shift((long)as_int(s) * (long)smult, sshift);
        long e = floor_shift(t, EXP2_FRAC_BITS);
        long delta = 0;
        if (j == 0) {
            m = e;
        } else if (e > m) {
            delta = e - m;
            m = e;
        }
        long p = exp2_fixed(lut, t - m * (1l << EXP2_FRAC_BITS));
        uint shift = (uint)min(delta, 62l);
        l = round_shift(l, shift) + p;
        for (uint x = 0; x < dim; ++x) {
            size_t a = (size_t)x * rows + row;
            acc[a] = round_shift(acc[a], shift) + p * (long)vj[x];
        }
    }
    /* l >= 2^14: the running maximum's own key contributes p = 1.0. */
    long r = (1l << 32) / l;
    __global uchar *orow = o + (size_t)h * o_stride;
    for (uint x = 0; x < dim; ++x) {
        int fixed = (int)round_shift(acc[(size_t)x * rows + row] * r, 16);
        size_t at = (size_t)i * dim + x;
        if (flags & FLAG_INT8) {
            long y = round_shift((long)fixed * (long)omult, oshift);
            orow[at] = as_uchar((char)clamp(y, -128l, 127l));
        } else {
            store_le32(orow + 4 * at, as_uint(fixed));
        }
    }
}
