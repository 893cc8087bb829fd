// Fixed-point helpers shared by the bit-exact CUDA twins (docs/numerics.md),
// the CUDA counterpart of kernels/opencl/fixed.cl. The host expands
// `#include "fixed.cuh"` into each twin and passes the constants the twins
// share with the golden models as NVRTC -D options generated from ferrite_hw
// (runtime.rs `defines`), so kernels and models cannot drift:
//   EXP2_FRAC_BITS   fraction bits of log2-domain values (numerics::EXP2_FRAC_BITS)
//   GEMM_FLAG_*      the GEMM unit's FLAGS bits (gemm::FLAG_BIAS, _RELU, _REQUANT)
//   MOE_*            the router's record layout, limits and weight arithmetic (moe)

// p / 2^s rounded half away from zero (numerics::round_shift), for |p| < 2^62.
__device__ __forceinline__ long long round_shift(long long p, unsigned s) {
    if (s == 0) return p;
    long long half = 1ll << (s - 1);
    return (p + half - (p < 0 ? 1 : 0)) >> s;
}

// floor(x / 2^s): CUDA's >> on a signed value is arithmetic.
__device__ __forceinline__ long long floor_shift(long long x, unsigned s) { return x >> s; }

// 2^(u / 2^EXP2_FRAC_BITS) in Q1.14 for u < 2^EXP2_FRAC_BITS (numerics::exp2_fixed):
// the LUT on the fraction bits, right shift by the (non-positive) integer part.
__device__ __forceinline__ long long exp2_fixed(const unsigned* __restrict__ lut, long long u) {
    long long ip = floor_shift(u, EXP2_FRAC_BITS);
    int fp = (int)(u & ((1ll << EXP2_FRAC_BITS) - 1));
    unsigned sh = -ip > 31 ? 31u : (unsigned)(-ip);
    return (long long)(__ldg(lut + fp) >> sh);
}

// Two's-complement wrapping int32 add, done unsigned to stay defined.
__device__ __forceinline__ int wrap_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }

// sat8(round(x · mult / 2^shift)) (numerics::requantize).
__device__ __forceinline__ signed char requantize(long long x, int mult, unsigned shift) {
    long long q = round_shift(x * (long long)mult, shift);
    return (signed char)(q < -128 ? -128 : (q > 127 ? 127 : q));
}

// The GEMM unit's epilogue on one accumulator: wrapping bias add, ReLU; the
// caller requantizes (GEMM_FLAG_REQUANT) or stores the int32.
__device__ __forceinline__ int gemm_pre_requant(int acc, unsigned flags, int bias) {
    int v = (flags & GEMM_FLAG_BIAS) ? wrap_add(acc, bias) : acc;
    return ((flags & GEMM_FLAG_RELU) && v < 0) ? 0 : v;
}
