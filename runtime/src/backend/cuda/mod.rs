//! The CUDA device: bit-exact twins of the FPGA units on a GPU, through cudarc.
//!
//! [`CudaDevice`] implements [`Device`] for the GEMM unit with the integer
//! tensor cores (`kernels/cuda/gemm_i8_wgmma.cu` on Hopper, `gemm_i8.cu`
//! elsewhere), equal to `ferrite_hw::gemm::gemm` bit for bit, so a board's
//! output can be checked against a GPU; likewise the attention unit
//! ([`attention`]) and the MoE router ([`moe`]). [`float`] holds the fast
//! bf16/f32 kernels the GPU benchmark measures.
pub mod attention;
pub mod float;
pub mod moe;
pub mod runtime;

use crate::device::{
    check_gemm_buffers, Buffer, Device, DeviceError, DeviceInfo, DeviceKind, GemmArgs, Launch, Layout, Problem,
    RunStats,
};
use cudarc::driver::{sys, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use ferrite_hw::attention::AttentionLayout;
use ferrite_hw::gemm::{GemmLayout, GemmProblem};
use ferrite_hw::moe::MoeLayout;
use ferrite_hw::numerics::exp2_lut;
use runtime::{driver, Gpu, GEMM_I8, GEMM_I8_WGMMA};
use std::collections::HashMap;
use std::time::Instant;

/// Row pitches must be multiples of this: the GEMM and MoE kernels load rows
/// in aligned 16-byte chunks.
pub const PITCH_ALIGN: u64 = 16;
/// Output tile of the mma.sync int8 GEMM kernel (grid = ⌈N/64⌉ × ⌈M/64⌉).
const GEMM_TILE: usize = 64;
/// Rows (M) and depth (K) of the Hopper kernel's block tile.
const WGMMA_TILE_M: usize = 128;
const WGMMA_TILE_K: usize = 128;
/// Square tile of the Bᵀ pre-pass (`ferrite_i8_transpose`).
const TRANSPOSE_TILE: usize = 128;

/// Which int8 GEMM kernel [`CudaDevice`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmKernel {
    /// wgmma + TMA on Hopper (sm_90a), with the widest tile that still fills
    /// every SM; mma.sync elsewhere.
    Auto,
    /// mma.sync on any GPU (tests of the portable kernel on a Hopper).
    MmaSync,
    /// wgmma with block tiles `tile_n` (64, 128 or 256) columns wide (Hopper only).
    Wgmma { tile_n: usize },
}

/// Pipeline stages of the Hopper kernel for a tile width (gemm_i8_wgmma.cu `I8Tile`).
fn wgmma_stages(tile_n: usize) -> usize {
    match tile_n {
        256 => 4,
        128 => 6,
        _ => 8,
    }
}

/// A GPU as a [`Device`]; buffers are device allocations.
pub struct CudaDevice {
    gpu: Gpu,
    buffers: HashMap<u64, CudaSlice<u8>>,
    next_id: u64,
    /// The exp2 LUT, uploaded on first use ([`CudaDevice::lut`]).
    lut: Option<CudaSlice<u32>>,
    /// The MoE twin's per-chunk expert counts, grown as needed.
    moe_counts: Option<CudaSlice<u32>>,
    /// Bᵀ for the Hopper GEMM kernel (wgmma reads int8 operands K-major only),
    /// grown as needed.
    bt: Option<CudaSlice<u8>>,
    gemm_kernel: GemmKernel,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("name", &self.gpu.name)
            .field("arch", &self.gpu.arch)
            .field("buffers", &self.buffers.len())
            .finish()
    }
}

impl CudaDevice {
    /// Open GPU `ordinal`. Without a driver, NVRTC or GPU this is an error
    /// ([`DeviceError::MissingTool`]), never a panic.
    pub fn new(ordinal: usize) -> Result<Self, DeviceError> {
        Ok(Self {
            gpu: Gpu::open(ordinal)?,
            buffers: HashMap::new(),
            next_id: 1,
            lut: None,
            moe_counts: None,
            bt: None,
            gemm_kernel: GemmKernel::Auto,
        })
    }

    /// Pick the int8 GEMM kernel (default [`GemmKernel::Auto`]); wgmma on a
    /// GPU other than a Hopper is an error.
    pub fn set_gemm_kernel(&mut self, kernel: GemmKernel) -> Result<(), DeviceError> {
        if let GemmKernel::Wgmma { tile_n } = kernel {
            if self.gpu.arch != "sm_90a" {
                return Err(DeviceError::Config(format!("wgmma needs sm_90a, this GPU is {}", self.gpu.arch)));
            }
            if ![64, 128, 256].contains(&tile_n) {
                return Err(DeviceError::Config(format!("wgmma tile width {tile_n} (supported: 64, 128, 256)")));
            }
        }
        self.gemm_kernel = kernel;
        Ok(())
    }

    /// The opened GPU (for the float kernels and the benchmark).
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    fn slice(&self, buf: Buffer) -> Result<&CudaSlice<u8>, DeviceError> {
        self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    /// Check a GEMM launch and enqueue it on the stream without waiting (the
    /// benchmark times back-to-back launches); [`Device::launch`] then syncs.
    pub fn enqueue_gemm(&mut self, g: &GemmArgs) -> Result<(), DeviceError> {
        check_gemm_buffers(g)?;
        let (p, l) = (&g.problem, &g.layout);
        check_limits(p)?;
        for (name, ld) in [("A", l.lda), ("B", l.ldb), ("C", l.ldc)] {
            if ld % PITCH_ALIGN != 0 {
                return Err(DeviceError::Problem(format!(
                    "{name} pitch {ld} is not a multiple of {PITCH_ALIGN} bytes (use CudaDevice::layout)"
                )));
            }
        }
        // The Bᵀ pre-pass has one block row per 128 of K (grid y ≤ 65535).
        let transposable = p.k.div_ceil(TRANSPOSE_TILE) <= 65_535;
        let tile_n = match self.gemm_kernel {
            GemmKernel::MmaSync => None,
            GemmKernel::Wgmma { .. } if !transposable => {
                return Err(DeviceError::TooBig {
                    device: "cuda".into(),
                    reason: format!("the wgmma kernel takes K ≤ {} (got {})", 65_535 * TRANSPOSE_TILE, p.k),
                })
            }
            GemmKernel::Wgmma { tile_n } => Some(tile_n),
            GemmKernel::Auto if self.gpu.arch == "sm_90a" && transposable => {
                // The widest tile whose grid still covers every SM.
                let tiles = |n: usize| p.m.div_ceil(WGMMA_TILE_M) * p.n.div_ceil(n);
                let sms = self.gpu.sm_count as usize;
                Some([256, 128].into_iter().find(|&n| tiles(n) >= sms).unwrap_or(64))
            }
            GemmKernel::Auto => None,
        };
        match tile_n {
            Some(tile_n) => self.enqueue_gemm_wgmma(g, tile_n),
            None => self.enqueue_gemm_mma(g),
        }
    }

    fn enqueue_gemm_mma(&self, g: &GemmArgs) -> Result<(), DeviceError> {
        let (p, l) = (&g.problem, &g.layout);
        let func = self.gpu.function(GEMM_I8, "ferrite_gemm_i8")?;
        let (a, b, c) = (self.slice(g.a)?, self.slice(g.b)?, self.slice(g.c)?);
        // Without a bias the kernel never reads its bias pointer; A stands in.
        let bias = match g.bias {
            Some(buf) => self.slice(buf)?,
            None => a,
        };
        let (m, n, k) = (p.m as i32, p.n as i32, p.k as i32);
        let (lda, ldb, ldc) = (l.lda as i64, l.ldb as i64, l.ldc as i64);
        let flags = p.flags();
        let (qmult, qshift) = p.requant.map_or((0, 0), |rq| (rq.multiplier, rq.shift));
        let cfg = LaunchConfig {
            grid_dim: (p.n.div_ceil(GEMM_TILE) as u32, p.m.div_ceil(GEMM_TILE) as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.gpu.stream.launch_builder(&func);
        launch
            .arg(a)
            .arg(b)
            .arg(bias)
            .arg(c)
            .arg(&m)
            .arg(&n)
            .arg(&k)
            .arg(&lda)
            .arg(&ldb)
            .arg(&ldc)
            .arg(&flags)
            .arg(&qmult)
            .arg(&qshift);
        // SAFETY: argument types and order match ferrite_gemm_i8; the buffers
        // were checked against the layout above, so every access is in bounds.
        unsafe { launch.launch(cfg) }.map_err(driver("launching ferrite_gemm_i8"))?;
        Ok(())
    }

    /// The Hopper path: Bᵀ into the scratch buffer, then the wgmma kernel.
    fn enqueue_gemm_wgmma(&mut self, g: &GemmArgs, tile_n: usize) -> Result<(), DeviceError> {
        let (p, l) = (&g.problem, &g.layout);
        let ldt = (p.k as u64).div_ceil(PITCH_ALIGN) * PITCH_ALIGN;
        let bt_bytes = (ldt * p.n as u64) as usize;
        if self.bt.as_ref().is_none_or(|bt| bt.len() < bt_bytes) {
            self.bt = None; // free the old one first
            self.bt = Some(self.gpu.stream.alloc_zeros::<u8>(bt_bytes).map_err(driver("allocating Bᵀ"))?);
        }
        let transpose = self.gpu.function(GEMM_I8_WGMMA, "ferrite_i8_transpose")?;
        let func = self.gpu.function(GEMM_I8_WGMMA, &format!("ferrite_gemm_i8_wgmma_n{tile_n}"))?;
        let stages = wgmma_stages(tile_n);
        // Stages of A and Bᵀ tiles, their mbarriers, the tile's bias, slack for
        // 1024-byte alignment.
        let smem = (stages * (WGMMA_TILE_M + tile_n) * WGMMA_TILE_K + 16 * stages + 4 * tile_n + 1024) as u32;
        self.gpu.set_dynamic_smem(&func, smem)?;
        let (a, b, c) = (self.slice(g.a)?, self.slice(g.b)?, self.slice(g.c)?);
        let bias = match g.bias {
            Some(buf) => self.slice(buf)?,
            None => a,
        };
        let bt = self.bt.as_ref().ok_or_else(|| DeviceError::Problem("no Bᵀ buffer".into()))?;
        let s = &self.gpu.stream;
        let (m, n, k) = (p.m as i32, p.n as i32, p.k as i32);
        let (ldb, ldt_i, ldc) = (l.ldb as i64, ldt as i64, l.ldc as i64);
        let cfg = LaunchConfig {
            grid_dim: (p.n.div_ceil(TRANSPOSE_TILE) as u32, p.k.div_ceil(TRANSPOSE_TILE) as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = s.launch_builder(&transpose);
        launch.arg(b).arg(bt).arg(&k).arg(&n).arg(&ldb).arg(&ldt_i);
        // SAFETY: argument types and order match ferrite_i8_transpose; B holds
        // K rows of ldb bytes (checked), Bᵀ N rows of ldt bytes (allocated above).
        unsafe { launch.launch(cfg) }.map_err(driver("launching ferrite_i8_transpose"))?;

        let u8_map = sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8;
        let (pa, _ra) = a.device_ptr(s);
        let (pbt, _rbt) = bt.device_ptr(s);
        let ma = float::tma_map_k_major(pa, u8_map, p.m, p.k, l.lda, WGMMA_TILE_M as u32)?;
        let mb = float::tma_map_k_major(pbt, u8_map, p.n, p.k, ldt, tile_n as u32)?;
        let flags = p.flags();
        let (qmult, qshift) = p.requant.map_or((0, 0), |rq| (rq.multiplier, rq.shift));
        let tiles = p.m.div_ceil(WGMMA_TILE_M) * p.n.div_ceil(tile_n);
        let cfg = LaunchConfig { grid_dim: (tiles as u32, 1, 1), block_dim: (384, 1, 1), shared_mem_bytes: smem };
        let mut launch = s.launch_builder(&func);
        launch
            .arg(&ma)
            .arg(&mb)
            .arg(bias)
            .arg(c)
            .arg(&m)
            .arg(&n)
            .arg(&k)
            .arg(&ldc)
            .arg(&flags)
            .arg(&qmult)
            .arg(&qshift);
        // SAFETY: argument types and order match ferrite_gemm_i8_wgmma_n*; the
        // maps cover A (checked against the layout) and Bᵀ exactly, C was
        // checked against the layout, and the kernel masks rows ≥ M, columns ≥ N.
        unsafe { launch.launch(cfg) }.map_err(driver("launching ferrite_gemm_i8_wgmma"))?;
        Ok(())
    }

    /// The exp2 LUT of `ferrite_hw::numerics::exp2_lut` on the GPU, uploaded
    /// once: both the attention and the MoE twin read it.
    fn lut(&mut self) -> Result<(), DeviceError> {
        if self.lut.is_none() {
            self.lut = Some(self.gpu.stream.clone_htod(&exp2_lut()).map_err(driver("uploading the exp2 LUT"))?);
        }
        Ok(())
    }
}

/// Problem sizes the int8 GEMM kernel indexes: 32-bit shapes, grid limits.
fn check_limits(p: &GemmProblem) -> Result<(), DeviceError> {
    p.validate()?;
    let too_big = |reason: String| Err(DeviceError::TooBig { device: "cuda".into(), reason });
    if [p.m, p.n, p.k].iter().any(|&x| i32::try_from(x).is_err()) {
        return too_big(format!("M, N, K must fit in int32 (got {}×{}×{})", p.m, p.n, p.k));
    }
    if p.m.div_ceil(GEMM_TILE) > 65_535 {
        return too_big(format!("M = {} exceeds 65535 row tiles of {GEMM_TILE}", p.m));
    }
    Ok(())
}

/// Dense rows rounded up to [`PITCH_ALIGN`] bytes (cudaMallocPitch-like).
pub fn cuda_layout(p: &GemmProblem) -> GemmLayout {
    let pitch = |bytes: u64| bytes.div_ceil(PITCH_ALIGN) * PITCH_ALIGN;
    let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
    let (lda, ldb, ldc) = (pitch(k), pitch(n), pitch(n * p.out_elem_bytes() as u64));
    GemmLayout { lda, ldb, ldc, a_bytes: lda * m, b_bytes: ldb * k, bias_bytes: 4 * n, c_bytes: ldc * m }
}

impl Device for CudaDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: format!("cuda ({}, {})", self.gpu.name, self.gpu.arch),
            kind: DeviceKind::Gpu,
            clock_mhz: None,
        }
    }

    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        match problem {
            Problem::Gemm(p) => {
                check_limits(p)?;
                Ok(Layout::Gemm(cuda_layout(p)))
            }
            Problem::Attention(p) => {
                attention::check_limits(p, &self.gpu.name)?;
                Ok(Layout::Attention(AttentionLayout::new(p, PITCH_ALIGN)))
            }
            Problem::Moe(p) => {
                moe::check_limits(p, &self.gpu.name)?;
                Ok(Layout::Moe(MoeLayout::with_beat(p, PITCH_ALIGN)))
            }
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let len = usize::try_from(bytes).map_err(|_| DeviceError::OutOfMemory { requested: bytes, available: 0 })?;
        let (free, _) = self.gpu.ctx.mem_get_info().map_err(driver("reading free memory"))?;
        if len > free {
            return Err(DeviceError::OutOfMemory { requested: bytes, available: free as u64 });
        }
        // A zero-byte request still gets a real allocation, so every handle is
        // backed by one; its Buffer says 0 bytes and bounds checks use that.
        let slice = self.gpu.stream.alloc_zeros::<u8>(len.max(1)).map_err(driver("allocating device memory"))?;
        let id = self.next_id;
        self.next_id += 1;
        self.buffers.insert(id, slice);
        Ok(Buffer::new(id, bytes))
    }

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let range = span(buf, offset, data.len())?;
        let stream = self.gpu.stream.clone();
        let slice = self.buffers.get_mut(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        if data.is_empty() {
            return Ok(());
        }
        let mut view = slice.slice_mut(range);
        stream.memcpy_htod(data, &mut view).map_err(driver("uploading"))?;
        self.gpu.sync()
    }

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let range = span(buf, offset, out.len())?;
        let slice = self.slice(buf)?;
        if out.is_empty() {
            return Ok(());
        }
        self.gpu.stream.memcpy_dtoh(&slice.slice(range), out).map_err(driver("downloading"))?;
        self.gpu.sync()
    }

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        self.buffers.remove(&buf.id()).map(drop).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        match launch {
            Launch::Gemm(g) => {
                self.enqueue_gemm(g)?;
                self.gpu.sync()?
            }
            Launch::Attention(a) => {
                self.enqueue_attention(a)?;
                self.gpu.sync()?
            }
            Launch::Moe(m) => {
                self.enqueue_moe(m)?;
                self.gpu.sync()?
            }
            other => return Err(DeviceError::Unsupported { device: self.info().name, unit: other.unit() }),
        }
        Ok(RunStats { wall: start.elapsed(), useful_macs: launch.useful_macs(), cycles: None })
    }
}

/// `offset..offset+len` inside a buffer of `buf.len()` bytes, checked.
fn span(buf: Buffer, offset: u64, len: usize) -> Result<std::ops::Range<usize>, DeviceError> {
    let oob = || DeviceError::OutOfBounds { id: buf.id(), offset, len: len as u64, size: buf.len() };
    let end = offset.checked_add(len as u64).filter(|&e| e <= buf.len()).ok_or_else(oob)?;
    Ok(offset as usize..end as usize)
}
