//! The CUDA device: bit-exact twins of the FPGA units on a GPU, through cudarc.
//!
//! [`CudaDevice`] implements [`Device`] for the GEMM unit with the integer
//! tensor cores (`kernels/cuda/gemm_i8.cu`), equal to
//! `ferrite_hw::gemm::gemm` bit for bit, so a board's output can be checked
//! against a GPU; likewise the attention unit ([`attention`]) and the MoE
//! router ([`moe`]). [`float`] holds the fast bf16/f32 kernels the GPU
//! benchmark measures.
pub mod attention;
pub mod float;
pub mod moe;
pub mod runtime;

use crate::device::{
    check_gemm_buffers, Buffer, Device, DeviceError, DeviceInfo, DeviceKind, GemmArgs, Launch, Layout, Problem,
    RunStats,
};
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use ferrite_hw::attention::AttentionLayout;
use ferrite_hw::gemm::{GemmLayout, GemmProblem};
use ferrite_hw::moe::MoeLayout;
use ferrite_hw::numerics::exp2_lut;
use runtime::{driver, Gpu, GEMM_I8};
use std::collections::HashMap;
use std::time::Instant;

/// Row pitches must be multiples of this: the GEMM and MoE kernels load rows
/// in aligned 16-byte chunks.
pub const PITCH_ALIGN: u64 = 16;
/// Output tile of the int8 GEMM kernel (grid = ⌈N/64⌉ × ⌈M/64⌉).
const GEMM_TILE: usize = 64;

/// A GPU as a [`Device`]; buffers are device allocations.
pub struct CudaDevice {
    gpu: Gpu,
    buffers: HashMap<u64, CudaSlice<u8>>,
    next_id: u64,
    /// The exp2 LUT, uploaded on first use ([`CudaDevice::lut`]).
    lut: Option<CudaSlice<u32>>,
    /// The MoE twin's per-chunk expert counts, grown as needed.
    moe_counts: Option<CudaSlice<u32>>,
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
        Ok(Self { gpu: Gpu::open(ordinal)?, buffers: HashMap::new(), next_id: 1, lut: None, moe_counts: None })
    }

    /// The opened GPU (for the float kernels and the benchmark).
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    fn slice(&self, buf: Buffer) -> Result<&CudaSlice<u8>, DeviceError> {
        self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    fn run_gemm(&mut self, g: &GemmArgs) -> Result<(), DeviceError> {
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
        self.gpu.sync()
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
            Launch::Gemm(g) => self.run_gemm(g)?,
            Launch::Attention(a) => self.run_attention(a)?,
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
