//! The fast float kernels a GPU user would run instead of the bit-exact twins:
//! bf16 GEMM, FlashAttention-style forward, fused MoE gate. Each function
//! checks shapes and buffer lengths, then enqueues one launch on the GPU's
//! stream without waiting (so the benchmark can time back-to-back launches).
//!
//! bf16 values are raw `u16` bit patterns on both sides; [`to_bf16`] and
//! [`from_bf16`] convert on the host.
use super::runtime::{driver, Gpu, FLASH_ATTN, FLASH_ATTN_WGMMA, GEMM_BF16, GEMM_BF16_WGMMA, MOE_GATE};
use crate::device::DeviceError;
use cudarc::driver::{sys, CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};

/// f32 → bf16 bits, round to nearest even (NaN stays NaN).
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

fn bad(msg: String) -> DeviceError {
    DeviceError::Problem(msg)
}

fn need_len<T>(name: &str, s: &CudaSlice<T>, want: usize) -> Result<(), DeviceError> {
    if s.len() < want {
        return Err(bad(format!("{name} has {} elements, needs {want}", s.len())));
    }
    Ok(())
}

/// Block tile of the bf16 GEMM kernel; shapes must be multiples of it.
pub const GEMM_TILE_MN: usize = 128;
pub const GEMM_TILE_K: usize = 64;
const GEMM_SMEM: u32 = 3 * 2 * 128 * 64 * 2;

/// `C[M,N] = A[M,K] · B[N,K]ᵀ` in bf16 with f32 accumulation: the wgmma kernel
/// on Hopper when N is a multiple of [`WGMMA_TILE_N`], else the mma.sync one.
pub fn gemm_bf16(
    gpu: &Gpu,
    a: &CudaSlice<u16>,
    b: &CudaSlice<u16>,
    c: &mut CudaSlice<u16>,
    (m, n, k): (usize, usize, usize),
) -> Result<(), DeviceError> {
    if m == 0 || n == 0 || k == 0 || m % GEMM_TILE_MN != 0 || n % GEMM_TILE_MN != 0 || k % GEMM_TILE_K != 0 {
        return Err(bad(format!(
            "bf16 GEMM {m}×{n}×{k}: M and N must be positive multiples of {GEMM_TILE_MN}, K of {GEMM_TILE_K}"
        )));
    }
    if [m, n, k].iter().any(|&x| x > i32::MAX as usize) {
        return Err(bad("bf16 GEMM shapes must fit in int32".into()));
    }
    need_len("A", a, m * k)?;
    need_len("B", b, n * k)?;
    need_len("C", c, m * n)?;
    if gpu.arch == "sm_90a" && n.is_multiple_of(WGMMA_TILE_N) {
        return gemm_bf16_wgmma(gpu, a, b, c, (m, n, k));
    }
    let f = gpu.function(GEMM_BF16, "ferrite_gemm_bf16_mma")?;
    gpu.set_dynamic_smem(&f, GEMM_SMEM)?;
    let tiles = (m / GEMM_TILE_MN) * (n / GEMM_TILE_MN);
    let cfg = LaunchConfig { grid_dim: (tiles as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: GEMM_SMEM };
    let (mi, ni, ki) = (m as i32, n as i32, k as i32);
    let mut l = gpu.stream.launch_builder(&f);
    l.arg(a).arg(b).arg(c).arg(&mi).arg(&ni).arg(&ki);
    // SAFETY: argument order and types match the kernel; lengths checked above.
    unsafe { l.launch(cfg) }.map_err(driver("launching ferrite_gemm_bf16_mma"))?;
    Ok(())
}

/// Block tile of the Hopper kernel (`gemm_bf16_wgmma.cu`): 128 × 256 × 64.
pub const WGMMA_TILE_N: usize = 256;
/// Four stages of a 128×64 A tile and a 256×64 B tile, the mbarriers, and
/// slack to align the tiles to the 1024-byte swizzle period.
const WGMMA_SMEM: u32 = 4 * (128 * 64 * 2 + 256 * 64 * 2) + 64 + 1024;

/// A TMA descriptor as a kernel argument (128 opaque bytes, by value).
#[repr(transparent)]
pub(super) struct TmaMap(sys::CUtensorMap);
// SAFETY: plain bytes the kernel reads as its `TmaMap` parameter.
unsafe impl DeviceRepr for TmaMap {}

/// TMA descriptor of a K-major bf16 matrix `[rows][k]`, loaded in boxes of
/// `box_rows` × 64 with the 128-byte swizzle wgmma reads.
fn tma_map(ptr: sys::CUdeviceptr, rows: usize, k: usize, box_rows: u32) -> Result<TmaMap, DeviceError> {
    let bf16 = sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    tma_map_k_major(ptr, bf16, rows, k, 2 * k as u64, box_rows)
}

/// TMA descriptor of a K-major matrix `[rows][k]` of `dtype` with row pitch
/// `pitch` bytes (a multiple of 16), loaded in boxes of `box_rows` rows × 128
/// bytes with the 128-byte swizzle wgmma reads; reads past `rows` or `k`
/// fill zeros.
pub(super) fn tma_map_k_major(
    ptr: sys::CUdeviceptr,
    dtype: sys::CUtensorMapDataType,
    rows: usize,
    k: usize,
    pitch: u64,
    box_rows: u32,
) -> Result<TmaMap, DeviceError> {
    let elem_bytes = if dtype == sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 { 2 } else { 1 };
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    let dims = [k as u64, rows as u64];
    let strides = [pitch];
    let boxes = [128 / elem_bytes, box_rows];
    let elem = [1u32, 1];
    // SAFETY: every pointer is to a local array of the rank the call names;
    // `map` is written by the driver before it is read.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            dtype,
            2,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    r.result().map_err(driver("encoding a TMA descriptor"))?;
    // SAFETY: initialized by the successful call above.
    Ok(TmaMap(unsafe { map.assume_init() }))
}

/// The Hopper kernel: TMA + wgmma, warp-specialized (shapes checked by the caller).
fn gemm_bf16_wgmma(
    gpu: &Gpu,
    a: &CudaSlice<u16>,
    b: &CudaSlice<u16>,
    c: &mut CudaSlice<u16>,
    (m, n, k): (usize, usize, usize),
) -> Result<(), DeviceError> {
    let f = gpu.function(GEMM_BF16_WGMMA, "ferrite_gemm_bf16_wgmma")?;
    gpu.set_dynamic_smem(&f, WGMMA_SMEM)?;
    let s = &gpu.stream;
    let (pa, _ra) = a.device_ptr(s);
    let (pb, _rb) = b.device_ptr(s);
    let (ma, mb) = (tma_map(pa, m, k, 128)?, tma_map(pb, n, k, WGMMA_TILE_N as u32)?);
    let tiles = (m / GEMM_TILE_MN) * (n / WGMMA_TILE_N);
    let cfg = LaunchConfig { grid_dim: (tiles as u32, 1, 1), block_dim: (384, 1, 1), shared_mem_bytes: WGMMA_SMEM };
    let (mi, ni, ki) = (m as i32, n as i32, k as i32);
    let mut l = s.launch_builder(&f);
    l.arg(&ma).arg(&mb).arg(c).arg(&mi).arg(&ni).arg(&ki);
    // SAFETY: argument order and types match the kernel; the descriptors
    // cover exactly A and B, whose lengths the caller checked.
    unsafe { l.launch(cfg) }.map_err(driver("launching ferrite_gemm_bf16_wgmma"))?;
    Ok(())
}

/// Query rows per block of the attention kernel; N must be a multiple.
pub const ATTN_BLOCK_Q: usize = 128;

/// `O = softmax(Q·Kᵀ/√d [causal]) · V`, bf16, `[heads_total][n][d]` contiguous.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention(
    gpu: &Gpu,
    q: &CudaSlice<u16>,
    k: &CudaSlice<u16>,
    v: &CudaSlice<u16>,
    o: &mut CudaSlice<u16>,
    heads_total: usize,
    n: usize,
    d: usize,
    causal: bool,
) -> Result<(), DeviceError> {
    let func = match d {
        64 => "ferrite_flash_fwd_d64",
        128 => "ferrite_flash_fwd_d128",
        _ => return Err(bad(format!("flash attention: d = {d} (supported: 64, 128)"))),
    };
    if n == 0 || !n.is_multiple_of(ATTN_BLOCK_Q) || n > i32::MAX as usize {
        return Err(bad(format!("flash attention: N = {n} must be a positive multiple of {ATTN_BLOCK_Q}")));
    }
    if heads_total == 0 || heads_total > 65_535 {
        return Err(bad(format!("flash attention: batch·heads = {heads_total} (supported: 1..=65535)")));
    }
    let len = heads_total * n * d;
    for (name, s) in [("Q", q), ("K", k), ("V", v)] {
        need_len(name, s, len)?;
    }
    need_len("O", o, len)?;
    let scale_log2 = std::f32::consts::LOG2_E / (d as f32).sqrt();
    let (ni, ci) = (n as i32, i32::from(causal));
    if gpu.arch == "sm_90a" {
        return flash_attention_wgmma(gpu, (q, k, v, o), heads_total, n, d, scale_log2, causal);
    }
    let f = gpu.function(FLASH_ATTN, func)?;
    // Q tile (128 rows) + double-buffered K and V blocks (64 rows each).
    let smem = ((ATTN_BLOCK_Q + 4 * 64) * d * 2) as u32;
    gpu.set_dynamic_smem(&f, smem)?;
    let cfg = LaunchConfig {
        grid_dim: ((n / ATTN_BLOCK_Q) as u32, heads_total as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: smem,
    };
    let mut l = gpu.stream.launch_builder(&f);
    l.arg(q).arg(k).arg(v).arg(o).arg(&ni).arg(&scale_log2).arg(&ci);
    // SAFETY: argument order and types match the kernel; lengths checked above.
    unsafe { l.launch(cfg) }.map_err(driver("launching flash attention"))?;
    Ok(())
}

/// Q, K, V and O of one attention launch.
type Qkvo<'a> = (&'a CudaSlice<u16>, &'a CudaSlice<u16>, &'a CudaSlice<u16>, &'a mut CudaSlice<u16>);

/// The Hopper kernel (`flash_attn_wgmma.cu`): TMA + wgmma, warp-specialized
/// (shapes checked by the caller).
fn flash_attention_wgmma(
    gpu: &Gpu,
    (q, k, v, o): Qkvo,
    heads_total: usize,
    n: usize,
    d: usize,
    scale_log2: f32,
    causal: bool,
) -> Result<(), DeviceError> {
    let func = if d == 64 { "ferrite_flash_wgmma_d64" } else { "ferrite_flash_wgmma_d128" };
    let f = gpu.function(FLASH_ATTN_WGMMA, func)?;
    // Q tile plus two stages of K and V (128 rows each), mbarriers, alignment slack.
    let smem = ((1 + 4) * 128 * d * 2 + 64 + 1024) as u32;
    gpu.set_dynamic_smem(&f, smem)?;
    let s = &gpu.stream;
    let rows = heads_total * n;
    let (pq, _rq) = q.device_ptr(s);
    let (pk, _rk) = k.device_ptr(s);
    let (pv, _rv) = v.device_ptr(s);
    let maps = (tma_map(pq, rows, d, 128)?, tma_map(pk, rows, d, 128)?, tma_map(pv, rows, d, 128)?);
    let cfg = LaunchConfig {
        grid_dim: ((n / ATTN_BLOCK_Q) as u32, heads_total as u32, 1),
        block_dim: (384, 1, 1),
        shared_mem_bytes: smem,
    };
    let (ni, ci) = (n as i32, i32::from(causal));
    let mut l = s.launch_builder(&f);
    l.arg(&maps.0).arg(&maps.1).arg(&maps.2).arg(o).arg(&ni).arg(&scale_log2).arg(&ci);
    // SAFETY: argument order and types match the kernel; the descriptors cover
    // exactly Q, K and V, whose lengths the caller checked, as it did O's.
    unsafe { l.launch(cfg) }.map_err(driver("launching ferrite_flash_wgmma"))?;
    Ok(())
}

/// Softmax over `e` logits per token, top-`k` (k ≤ 8), renormalized: weights
/// `[t][k]` (descending) and expert indices `[t][k]`.
pub fn moe_gate(
    gpu: &Gpu,
    logits: &CudaSlice<f32>,
    weights: &mut CudaSlice<f32>,
    indices: &mut CudaSlice<i32>,
    (t, e, k): (usize, usize, usize),
) -> Result<(), DeviceError> {
    // Lanes per token and kernel (values per lane in its name, `v` for float4
    // loads, which need 16-byte rows); see moe_gate.cu.
    let vec = e % 4 == 0;
    let pick = |v: &'static str, s: &'static str| if vec { v } else { s };
    let (lanes, func) = match e {
        1..=4 => (1, pick("ferrite_moe_gate_1x4v", "ferrite_moe_gate_1x4")),
        5..=8 => (2, pick("ferrite_moe_gate_2x4v", "ferrite_moe_gate_2x4")),
        9..=16 => (4, pick("ferrite_moe_gate_4x4v", "ferrite_moe_gate_4x4")),
        17..=32 => (4, pick("ferrite_moe_gate_4x8v", "ferrite_moe_gate_4x8")),
        33..=64 => (4, pick("ferrite_moe_gate_4x16v", "ferrite_moe_gate_4x16")),
        65..=128 => (8, pick("ferrite_moe_gate_8x16v", "ferrite_moe_gate_8x16")),
        129..=256 => (16, pick("ferrite_moe_gate_16x16v", "ferrite_moe_gate_16x16")),
        _ => return Err(bad(format!("MoE gate: E = {e} (supported: 1..=256)"))),
    };
    if k == 0 || k > e.min(8) {
        return Err(bad(format!("MoE gate: k = {k} must be in 1..=min(E, 8) (E = {e})")));
    }
    if t == 0 || t > i32::MAX as usize / 32 {
        return Err(bad(format!("MoE gate: T = {t} out of range")));
    }
    need_len("logits", logits, t * e)?;
    need_len("weights", weights, t * k)?;
    need_len("indices", indices, t * k)?;
    let f = gpu.function(MOE_GATE, func)?;
    let threads = (t * lanes) as u64;
    let cfg =
        LaunchConfig { grid_dim: (threads.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let (ti, ei, ki) = (t as i32, e as i32, k as i32);
    let mut l = gpu.stream.launch_builder(&f);
    l.arg(logits).arg(weights).arg(indices).arg(&ti).arg(&ei).arg(&ki);
    // SAFETY: argument order and types match the kernel; lengths checked above.
    unsafe { l.launch(cfg) }.map_err(driver("launching the MoE gate"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_trip_rounds_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
        // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
    }
}
