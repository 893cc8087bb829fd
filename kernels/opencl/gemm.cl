/*
 * The Ferrite GEMM unit's arithmetic in OpenCL C, bit-exact with
 * ferrite_hw::gemm::gemm (docs/numerics.md):
 *
 *   C[i][j] = epilogue(sum_k A[i][k] * B[k][j] + bias[j])
 *
 * int8 operands, exact int32 products, an int32 accumulator and bias add that
 * wrap like two's-complement hardware, optional ReLU, then either the int32
 * value or sat8(round_half_away(x * qmult / 2^qshift)).
 *
 * Signed overflow is undefined in OpenCL C as in C99, so the wrapping sums are
 * done in uint and reinterpreted with as_int; the rounding shift avoids
 * right-shifting negative values (implementation-defined) by working on the
 * magnitude. Buffers are row-major with row pitches in bytes (lda, ldb, ldc),
 * as GemmLayout lays them out; flags bits are GemmProblem::flags().

 *
 * round_shift, floor_shift, exp2_fixed and store_le32 are in fixed.cl, which
 * the host prepends to this file.
 */
#define FLAG_BIAS    1u
#define FLAG_RELU    2u
#define FLAG_REQUANT 4u

static char requantize(int x, int qmult, uint qshift)
{
    long q = round_shift((long)x * (long)qmult, qshift);
    return (char)clamp(q, -128l, 127l);
}

/* One work-item per output element: global size (N rounded up, M rounded up). */
__kernel void ferrite_gemm(__global const char *a,
                           __global const char *b,
                           __global const int *bias,
                           __global uchar *c,
                           uint m, uint n, uint k,
                           uint lda, uint ldb, uint ldc,
                           uint flags, int qmult, uint qshift)
{
    uint j = get_global_id(0);
    uint i = get_global_id(1);
    if (i >= m || j >= n)
        return;
    __global const char *arow = a + (size_t)i * lda;
    uint acc = 0;
    for (uint kk = 0; kk < k; ++kk)
        acc += (uint)((int)arow[kk] * (int)b[(size_t)kk * ldb + j]);
    if (flags & FLAG_BIAS)
        acc += (uint)bias[j];
    int v = as_int(acc);
    if ((flags & FLAG_RELU) && v < 0)
        v = 0;
    __global uchar *crow = c + (size_t)i * ldc;
    if (flags & FLAG_REQUANT) {
        crow[j] = as_uchar(requantize(v, qmult, qshift));
    } else {
        /* Little-endian int32, byte by byte: ldc need not keep rows 4-byte aligned. */
        uint u = as_uint(v);
        crow[4 * j + 0] = (uchar)(u);
        crow[4 * j + 1] = (uchar)(u >> 8);
        crow[4 * j + 2] = (uchar)(u >> 16);
        crow[4 * j + 3] = (uchar)(u >> 24);
    }
}
