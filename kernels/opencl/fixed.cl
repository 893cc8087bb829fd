/*
 * Fixed-point helpers shared by the OpenCL C ports (docs/numerics.md); the
 * host prepends this file to each port before building it (opencl.rs build).
 * Signed overflow and right shifts of negative values are undefined or
 * implementation-defined in OpenCL C, so these work on magnitudes.
 * EXP2_FRAC_BITS comes from the build options (ferrite_hw::numerics).
 */

/* p / 2^s rounded half away from zero, for |p| <= 2^62 and s in 0..=62. */
static long round_shift(long p, uint s)
{
    if (s == 0)
        return p;
    ulong rnd = 1ul << (s - 1); /* 2^(s-1); `half` is a type name in OpenCL C */
    if (p >= 0)
        return (long)(((ulong)p + rnd) >> s);
    /* -(round(|p| / 2^s)) with ties away from zero: (|p| + rnd) >> s. */
    return -(long)(((ulong)(-p) + rnd) >> s);
}

/* floor(x / 2^s): an arithmetic right shift. */
static long floor_shift(long x, uint s)
{
    if (x >= 0)
        return x >> s;
    return -(long)(((ulong)(-x) + ((1ul << s) - 1)) >> s);
}

/* exp2_fixed: 2^(u / 2^8) in Q1.14 for u < 2^8, LUT on the fraction, shift by the integer part. */
static long exp2_fixed(__global const uint *lut, long u)
{
    long ip = floor_shift(u, EXP2_FRAC_BITS); /* <= 0 */
    uint fp = (uint)(u - ip * (1l << EXP2_FRAC_BITS));
    uint sh = (uint)min(-ip, 31l);
    return (long)(lut[fp] >> sh);
}

/* A little-endian 32-bit store to a byte buffer (records and outputs are byte-addressed). */
static void store_le32(__global uchar *dst, uint v)
{
    dst[0] = (uchar)v;
    dst[1] = (uchar)(v >> 8);
    dst[2] = (uchar)(v >> 16);
    dst[3] = (uchar)(v >> 24);
}

