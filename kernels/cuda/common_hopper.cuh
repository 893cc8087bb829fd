// Hopper (sm_90a) helpers shared by the wgmma kernels and the attention twin
// (expanded into each source by the host, like common_bf16.cuh): TMA
// descriptors and loads, mbarriers, shared-memory matrix descriptors.
// CUtensorMap: 128 opaque bytes, passed by value as a __grid_constant__.
struct __align__(64) TmaMap {
    unsigned long long v[16];
};

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// One arrival (release: this thread's earlier shared-memory reads and writes
// happen before a waiter's acquire).
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Until the barrier's phase of this parity has completed (acquire). Before
// sm_90 (the attention twin's mbarrier ring on Ampere) try_wait does not
// exist and test_wait polls instead.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
#if __CUDA_ARCH__ >= 900
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
#else
            "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
#endif
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

__device__ __forceinline__ void tma_load(unsigned dst, const TmaMap* map, unsigned bar, int inner, int outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
        "[%2];\n" ::"r"(dst),
        "l"(map), "r"(bar), "r"(inner), "r"(outer)
        : "memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle, 8-row groups 1024 bytes
// apart (SBO); `lbo` is the byte stride between 64-element atoms along M/N of
// an MN-major operand (ignored for K-major ones).
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned lbo = 16) {
    return (unsigned long long)((addr & 0x3ffff) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | (64ull << 32) |
           (1ull << 62);
}

