// Standalone harness for attention_mma.cu: the kernel against a reference
// version (old.cu, bit-exact with the golden model by test-cuda) on random small
// cases and on the bench shape, plus timing (README.md). Build:
//   nvcc -O3 -arch=sm_90a -std=c++17 -DEXP2_FRAC_BITS=8 -DGEMM_FLAG_BIAS=1 -DGEMM_FLAG_RELU=2 -DGEMM_FLAG_REQUANT=4 harness.cu
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <string>
#include <cuda_runtime.h>

namespace oldk {
#include "old.cu"
// K/V keys in shared memory per launch (two stages of bk before the macros existed).
static int kv_keys(int dp, int bk) {
#ifdef ATTENTION_MMA_STAGES
    (void)bk;
    return ATTENTION_MMA_STAGES(dp) * ATTENTION_MMA_BK(dp);
#else
    (void)dp;
    return 2 * bk;
#endif
}
}
#undef WARPS
#undef ROWS
#undef EMASK
#undef FOLD_KEYS
#undef ATTENTION_MMA_ARGS
#undef ATTENTION_MMA_PASS
#undef ATTENTION_MMA_KERNEL
#undef KV_STAGES
#undef KV_AHEAD
#undef NARROW_L
#undef ATTENTION_MMA_STAGES
#undef ATTENTION_MMA_BK
#undef ATTENTION_MMA_RING
#undef ATTENTION_MMA_MIN_CTAS
#ifndef NEWFILE
#define NEWFILE "attention_mma.cu"
#endif
#include NEWFILE

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef void (*Kern)(const i8*, const i8*, const i8*, const unsigned*, const int*, void*, int, int, int, int, int,
                     long long, long long, long long, int, int, unsigned, int, int, unsigned);

static unsigned long long rs = 88172645463325252ull;
static unsigned long long xr() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static double ur() { return (xr() >> 11) * (1.0 / 9007199254740992.0); }
static int ri(int lo, int hi) { return lo + (int)(xr() % (unsigned long long)(hi - lo + 1)); }

static void from_scale(double scale, int* mult, unsigned* shift) {
    int e = (int)floor(log2(scale));
    int sh = 30 - e;
    *shift = sh;
    *mult = (int)llround(scale * pow(2.0, sh));
}

struct Prob { int batch, heads, seq_q, seq_kv, d, causal, requant; std::vector<int> kvl; int sm; unsigned ss; int om; unsigned os; };

// bk: keys a block of a kernel older than ATTENTION_MMA_BK (oldk::kv_keys).
static void pick(const Prob& p, Kern* oldf, Kern* newf, int* bk, int* dp) {
    bool hi = p.ss >= 33;
    if (p.d <= 32) { *dp = 32; *bk = 64; *oldf = hi ? oldk::old_attention_mma_d32_hi : oldk::old_attention_mma_d32; *newf = hi ? ferrite_attention_mma_d32_hi : ferrite_attention_mma_d32; }
    else if (p.d <= 64) { *dp = 64; *bk = 64; *oldf = hi ? oldk::old_attention_mma_d64_hi : oldk::old_attention_mma_d64; *newf = hi ? ferrite_attention_mma_d64_hi : ferrite_attention_mma_d64; }
    else { *dp = 128; *bk = 32; *oldf = hi ? oldk::old_attention_mma_d128_hi : oldk::old_attention_mma_d128; *newf = hi ? ferrite_attention_mma_d128_hi : ferrite_attention_mma_d128; }
}

static unsigned* d_lut;

static float launch(Kern f, const Prob& p, int bk, int dp, const i8* q, const i8* k, const i8* v, const int* kvl, void* o, int iters) {
    int ht = p.batch * p.heads;
    // The LUT copies and the K/V stages; the larger of the two kernels' needs
    // serves both.
    const int keys_new = ATTENTION_MMA_STAGES(dp) * ATTENTION_MMA_BK(dp), keys_old = oldk::kv_keys(dp, bk);
    const int keys = keys_new > keys_old ? keys_new : keys_old;
    int smem = 256 * 32 * 4 + 2 * keys * (dp + 16);
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int blocks = ht * ((p.seq_q + 63) / 64);
    long long qs = (long long)p.seq_q * p.d, kvs = (long long)p.seq_kv * p.d, os = (long long)p.seq_q * p.d * (p.requant ? 1 : 4);
    auto go = [&]() { f<<<blocks, 128, smem>>>(q, k, v, d_lut, kvl, o, p.heads, ht, p.seq_q, p.seq_kv, p.d, qs, kvs, os, p.causal, p.sm, p.ss, p.requant, p.om, p.os); };
    go();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    if (iters == 0) return 0;
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    go(); go();
    cudaEventRecord(a);
    for (int i = 0; i < iters; i++) go();
    cudaEventRecord(b);
    CK(cudaEventSynchronize(b));
    float ms; cudaEventElapsedTime(&ms, a, b);
    return ms / iters;
}

// Runs old and new; returns true if bit-identical.
static bool run(const Prob& p, int gauss, int iters, float* t_old, float* t_new) {
    int ht = p.batch * p.heads;
    size_t nq = (size_t)ht * p.seq_q * p.d, nkv = (size_t)ht * p.seq_kv * p.d;
    std::vector<signed char> q(nq), k(nkv), v(nkv);
    auto gen = [&](std::vector<signed char>& x) {
        for (auto& b : x) {
            if (gauss) { double u1 = ur() + 1e-300, u2 = ur(); double g = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2); double y = round(g * 32); b = (signed char)(y < -128 ? -128 : y > 127 ? 127 : y); }
            else b = (xr() % 8 == 0) ? -128 : (signed char)(xr() & 255);
        }
    };
    gen(q); gen(k); gen(v);
    i8 *dq, *dk, *dv; int* dkvl = nullptr; void *o1, *o2;
    size_t ob = (size_t)ht * p.seq_q * p.d * (p.requant ? 1 : 4);
    CK(cudaMalloc(&dq, nq)); CK(cudaMalloc(&dk, nkv)); CK(cudaMalloc(&dv, nkv));
    CK(cudaMalloc(&o1, ob)); CK(cudaMalloc(&o2, ob));
    CK(cudaMemset(o1, 0x5a, ob)); CK(cudaMemset(o2, 0xa5, ob));
    CK(cudaMemcpy(dq, q.data(), nq, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, k.data(), nkv, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, v.data(), nkv, cudaMemcpyHostToDevice));
    if (!p.kvl.empty()) { CK(cudaMalloc(&dkvl, 4 * p.kvl.size())); CK(cudaMemcpy(dkvl, p.kvl.data(), 4 * p.kvl.size(), cudaMemcpyHostToDevice)); }
    Kern fo, fn; int bk, dp; pick(p, &fo, &fn, &bk, &dp);
    *t_old = launch(fo, p, bk, dp, dq, dk, dv, dkvl, o1, iters);
    *t_new = launch(fn, p, bk, dp, dq, dk, dv, dkvl, o2, iters);
    std::vector<unsigned char> h1(ob), h2(ob);
    CK(cudaMemcpy(h1.data(), o1, ob, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h2.data(), o2, ob, cudaMemcpyDeviceToHost));
    bool same = memcmp(h1.data(), h2.data(), ob) == 0;
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(o1); cudaFree(o2); if (dkvl) cudaFree(dkvl);
    return same;
}

int main(int argc, char** argv) {
    std::vector<unsigned> lut(256);
    for (int i = 0; i < 256; i++) lut[i] = (unsigned)llround(pow(2.0, i / 256.0) * 16384.0);
    CK(cudaMalloc(&d_lut, 1024));
    CK(cudaMemcpy(d_lut, lut.data(), 1024, cudaMemcpyHostToDevice));
    int ncheck = argc > 1 ? atoi(argv[1]) : 200;
    int iters = argc > 2 ? atoi(argv[2]) : 10;
    int bad = 0;
    for (int c = 0; c < ncheck; c++) {
        Prob p;
        const int ds[] = {1, 16, 20, 32, 33, 64, 100, 128};
        p.d = ds[c % 8];
        p.batch = ri(1, 2); p.heads = ri(1, 3);
        p.seq_q = ri(1, 300); p.seq_kv = ri(1, c % 5 == 0 ? 2000 : 600);
        p.causal = c % 3 == 0;
        if (c % 4 == 1) { for (int b = 0; b < p.batch; b++) p.kvl.push_back(ri(1, p.seq_kv)); }
        const double sc[] = {1.0 / 32, 1.0 / 8, 1.0, 4.0, 1.0 / 128};
        double s = sc[c % 5];
        from_scale(s * s / sqrt((double)p.d) * 1.4426950408889634 * 256.0, &p.sm, &p.ss);
        p.requant = c % 7 == 3;
        from_scale(s / 0.05 / 65536.0, &p.om, &p.os);
        float a, b;
        bool ok = run(p, c % 2, 0, &a, &b);
        if (!ok) { bad++; printf("MISMATCH case %d: d=%d b=%d h=%d sq=%d skv=%d causal=%d kvl=%d shift=%u requant=%d gauss=%d\n", c, p.d, p.batch, p.heads, p.seq_q, p.seq_kv, p.causal, (int)p.kvl.size(), p.ss, p.requant, c % 2); }
    }
    printf("check: %d cases, %d mismatches\n", ncheck, bad);
    for (int d : {64, 128})
        for (int causal : {0, 1}) {
            Prob p{4, 16, 4096, 4096, d, causal, 0, {}, 0, 0, 0, 0};
            from_scale(1.0 / 1024 / sqrt((double)d) * 1.4426950408889634 * 256.0, &p.sm, &p.ss);
            float to, tn;
            bool ok = run(p, 1, iters, &to, &tn);
            double pairs = causal ? 4096.0 * 4097 / 2 : 4096.0 * 4096;
            double ops = 4.0 * d * pairs * 64;
            printf("d=%d %s: old %.3f ms (%.1f TOP/s)  new %.3f ms (%.1f TOP/s)  x%.3f  %s\n", d, causal ? "causal" : "full  ", to, ops / to / 1e9, tn, ops / tn / 1e9, to / tn, ok ? "bit-identical" : "MISMATCH");
            if (!ok) bad++;
        }
    return bad ? 1 : 0;
}
