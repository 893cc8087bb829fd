//! The OpenCL device (feature `opencl`, crate `opencl3`).
//!
//! On a Xilinx platform the unit is the hardware kernel of an xclbin, loaded
//! as a program binary from a checked manifest; everywhere else (PoCL, GPU
//! drivers) the units' integer arithmetic is built from the OpenCL C ports in
//! `kernels/opencl/` ([`SOURCES`]): GEMM, attention and the MoE router. Both
//! take their arguments in the order of the unit's register map, which is also
//! the order of `kernel.xml` and of the ports' parameter lists, so one launch
//! path serves both. A port appends what the hardware fixes at generation
//! time or holds on chip (attention's head dimension, the exp2 LUT, scratch).
use crate::device::{
    check_attention_buffers, check_gemm_buffers, check_moe_buffers, AttentionArgs, Buffer, Device, DeviceError,
    DeviceInfo, DeviceKind, GemmArgs, Launch, Layout, MoeArgs, Problem, RunStats,
};
use crate::driver::{self, LaunchArgs};
use crate::manifest::{LoadedManifest, UnitConfig};
use ferrite_hw::attention::{AttentionConfig, AttentionLayout};
use ferrite_hw::gemm::{GemmConfig, GemmLayout, GemmProblem};
use ferrite_hw::moe::config::{
    E_LIMIT, FLAG_BIAS, FLAG_CAPACITY, FLAG_RENORMALIZE, FLAG_TOPK_SOFTMAX, K_LIMIT, RECORD_BYTES, REC_IDS, REC_SLOTS,
    REC_WEIGHTS,
};
use ferrite_hw::moe::model::{RECIP_BITS, WEIGHT_SHIFT};
use ferrite_hw::moe::{MoeConfig, MoeLayout};
use ferrite_hw::numerics::{exp2_lut, EXP2_FRAC_BITS};
use ferrite_hw::regmap::{ArgKind, RegisterMap};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device as ClDevice, CL_DEVICE_TYPE_ALL};
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer as ClBuffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::{cl_mem, CL_BLOCKING};
use std::collections::HashMap;
use std::time::Instant;

/// The GEMM port: `ferrite_gemm`.
const GEMM_CL: (&str, &str) = ("gemm.cl", include_str!("../../../kernels/opencl/gemm.cl"));
/// The attention port: `ferrite_attention`.
const ATTENTION_CL: (&str, &str) = ("attention.cl", include_str!("../../../kernels/opencl/attention.cl"));
/// The MoE router port: `ferrite_moe_gate`, then `ferrite_moe_dispatch`.
const MOE_CL: (&str, &str) = ("moe.cl", include_str!("../../../kernels/opencl/moe.cl"));

/// Fixed-point helpers every port uses (rounding shifts, the exp2 LUT lookup,
/// byte stores), prepended to each port when it is built.
const FIXED_CL: &str = include_str!("../../../kernels/opencl/fixed.cl");

/// OpenCL C ports of the units, by file name in `kernels/opencl/`; each is
/// built as its own program, after `fixed.cl`, with [`build_options`].
pub const SOURCES: &[(&str, &str)] = &[GEMM_CL, ATTENTION_CL, MOE_CL];

/// Most work-items of `ferrite_moe_dispatch`'s single work-group (the size of its local array).
const DISPATCH_ITEMS: usize = 256;

/// Compiler options of every port: the constants the ports share with the golden
/// models come from the Rust definitions, so the two cannot drift.
fn build_options() -> String {
    let defines: [(&str, u64); 14] = [
        ("EXP2_FRAC_BITS", EXP2_FRAC_BITS.into()),
        ("MOE_E_LIMIT", E_LIMIT as u64),
        ("MOE_K_LIMIT", K_LIMIT as u64),
        ("MOE_RECORD_BYTES", RECORD_BYTES as u64),
        ("MOE_REC_IDS", REC_IDS as u64),
        ("MOE_REC_WEIGHTS", REC_WEIGHTS as u64),
        ("MOE_REC_SLOTS", REC_SLOTS as u64),
        ("MOE_RECIP_BITS", RECIP_BITS.into()),
        ("MOE_WEIGHT_SHIFT", WEIGHT_SHIFT.into()),
        ("MOE_FLAG_BIAS", FLAG_BIAS.into()),
        ("MOE_FLAG_TOPK_SOFTMAX", FLAG_TOPK_SOFTMAX.into()),
        ("MOE_FLAG_RENORMALIZE", FLAG_RENORMALIZE.into()),
        ("MOE_FLAG_CAPACITY", FLAG_CAPACITY.into()),
        ("MOE_DISPATCH_ITEMS", DISPATCH_ITEMS as u64),
    ];
    let mut options = String::from("-cl-std=CL1.2");
    for (name, value) in defines {
        options.push_str(&format!(" -D{name}={value}u"));
    }
    options
}

/// Build one port (a `(file, source)` of [`SOURCES`]) after `fixed.cl`; a
/// failure carries the build log (its line numbers count `fixed.cl` first).
fn build(context: &Context, (file, src): (&str, &str)) -> Result<Program, DeviceError> {
    Program::create_and_build_from_source(context, &format!("{FIXED_CL}{src}"), &build_options())
        .map_err(|log| cl_error(&format!("building kernels/opencl/fixed.cl + {file}"), log))
}

/// Held while platforms are discovered and programs built: two threads doing
/// that at once crash ocl-icd with PoCL 3.1 (SIGSEGV, seen with parallel tests).
static DISCOVERY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn discovery_lock() -> std::sync::MutexGuard<'static, ()> {
    DISCOVERY.lock().unwrap_or_else(|e| e.into_inner())
}

fn cl_error(what: &str, e: impl std::fmt::Display) -> DeviceError {
    DeviceError::Backend { backend: "opencl", source: format!("{what}: {e}").into() }
}

/// One OpenCL device as the `devices` report and [`OpenClDevice::open`] see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClDeviceSummary {
    pub platform_index: usize,
    pub device_index: usize,
    pub platform: String,
    pub device: String,
    pub version: String,
    pub compute_units: u32,
    pub global_mem_bytes: u64,
}

/// Is this platform Xilinx's (XRT's OpenCL), where units are xclbins?
fn is_xilinx(platform_name: &str) -> bool {
    platform_name.contains("Xilinx") || platform_name.contains("AMD Xilinx")
}

/// Every OpenCL device of every platform the ICD loader finds.
pub fn list() -> Result<Vec<ClDeviceSummary>, DeviceError> {
    let _guard = discovery_lock();
    let mut out = Vec::new();
    for (pi, p) in get_platforms().map_err(|e| cl_error("listing platforms", e))?.iter().enumerate() {
        let platform = p.name().unwrap_or_default();
        for (di, id) in p.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default().into_iter().enumerate() {
            let d = ClDevice::new(id);
            out.push(ClDeviceSummary {
                platform_index: pi,
                device_index: di,
                platform: platform.clone(),
                device: d.name().unwrap_or_default(),
                version: d.version().unwrap_or_default(),
                compute_units: d.max_compute_units().unwrap_or(0),
                global_mem_bytes: d.global_mem_size().unwrap_or(0),
            });
        }
    }
    Ok(out)
}

/// The attention and MoE ports, with what their hardware units hold on chip.
struct Ports {
    attention: Kernel,
    moe_gate: Kernel,
    moe_dispatch: Kernel,
    /// Work-items of the dispatch work-group: at most [`DISPATCH_ITEMS`] and what the device allows.
    dispatch_items: usize,
    /// `exp2_lut()` as little-endian u32 words: the LUT ROM of the attention and MoE units.
    lut: ClBuffer<u8>,
    /// Register maps of the default units: the ports' argument order.
    attention_map: RegisterMap,
    moe_map: RegisterMap,
}

impl Ports {
    fn build(context: &Context, device: &ClDevice, queue: &CommandQueue) -> Result<Self, DeviceError> {
        let kernel = |program: &Program, name: &str| {
            Kernel::create(program, name).map_err(|e| cl_error(&format!("kernel {name}"), e))
        };
        let attention = kernel(&build(context, ATTENTION_CL)?, "ferrite_attention")?;
        let moe = build(context, MOE_CL)?;
        let (moe_gate, moe_dispatch) = (kernel(&moe, "ferrite_moe_gate")?, kernel(&moe, "ferrite_moe_dispatch")?);
        let dispatch_items = moe_dispatch
            .get_work_group_size(device.id())
            .map_err(|e| cl_error("work-group size of ferrite_moe_dispatch", e))?
            .min(DISPATCH_ITEMS);
        let words: Vec<u8> = exp2_lut().iter().flat_map(|w| w.to_le_bytes()).collect();
        // SAFETY: no host pointer; the buffer is owned by the returned struct.
        let mut lut = unsafe { ClBuffer::<u8>::create(context, CL_MEM_READ_WRITE, words.len(), std::ptr::null_mut()) }
            .map_err(|e| cl_error("allocating the exp2 LUT", e))?;
        // SAFETY: blocking write of the whole buffer.
        unsafe { queue.enqueue_write_buffer(&mut lut, CL_BLOCKING, 0, &words, &[]) }
            .map_err(|e| cl_error("writing the exp2 LUT", e))?;
        Ok(Self {
            attention,
            moe_gate,
            moe_dispatch,
            dispatch_items,
            lut,
            attention_map: AttentionConfig::default().register_map(),
            moe_map: MoeConfig::default().register_map(),
        })
    }
}

/// Where the units' kernels come from.
enum Flavor {
    /// The OpenCL C ports of all three units; any layout works, so operands are dense.
    Port(Box<Ports>),
    /// The GEMM hardware kernel of an xclbin: its config fixes the beat and limits.
    Xclbin,
}

/// One kernel argument: a buffer or a 32-bit scalar.
enum Arg {
    Mem(cl_mem),
    Word(u32),
}

/// A unit on an OpenCL device.
pub struct OpenClDevice {
    name: String,
    flavor: Flavor,
    /// The GEMM unit's configuration (for the port: the default, whose register
    /// map gives the argument order; the port has no array or buffer limits).
    cfg: GemmConfig,
    map: RegisterMap,
    context: Context,
    queue: CommandQueue,
    gemm: Kernel,
    buffers: HashMap<u64, ClBuffer<u8>>,
    /// Bound to optional buffers a launch lacks: kernels may not get a null buffer everywhere.
    dummy: ClBuffer<u8>,
    next_id: u64,
}

impl OpenClDevice {
    /// Open device `device` of platform `platform`. A Xilinx platform needs
    /// `image`, a manifest with an xclbin; other platforms build the ports.
    pub fn open(platform: usize, device: usize, image: Option<&LoadedManifest>) -> Result<Self, DeviceError> {
        let _guard = discovery_lock();
        let platforms = get_platforms()
            .map_err(|e| cl_error("listing platforms (is an OpenCL ICD installed? Debian: pocl-opencl-icd)", e))?;
        let p = platforms.get(platform).ok_or_else(|| {
            DeviceError::Config(format!(
                "no OpenCL platform {platform} ({} found; `ferrite devices` lists them)",
                platforms.len()
            ))
        })?;
        let pname = p.name().map_err(|e| cl_error("platform name", e))?;
        let ids = p.get_devices(CL_DEVICE_TYPE_ALL).map_err(|e| cl_error("listing devices", e))?;
        let id = *ids.get(device).ok_or_else(|| {
            DeviceError::Config(format!("platform {platform} ({pname}) has no device {device} ({} found)", ids.len()))
        })?;
        let dev = ClDevice::new(id);
        let dname = dev.name().map_err(|e| cl_error("device name", e))?;
        let context = Context::from_device(&dev).map_err(|e| cl_error("creating a context", e))?;
        let queue = CommandQueue::create_default_with_properties(&context, 0, 0)
            .map_err(|e| cl_error("creating a queue", e))?;
        let (flavor, cfg, program, kernel_name) = if is_xilinx(&pname) {
            let m =
                image.ok_or_else(|| DeviceError::Config(format!("{pname} runs xclbins: give the image's manifest")))?;
            // The OpenCL xclbin path drives the GEMM kernel's arguments only;
            // attention and MoE images run through the xrt backend.
            let cfg = match &m.manifest.unit {
                UnitConfig::Gemm(c) => c,
                other => {
                    return Err(DeviceError::Config(format!(
                        "{pname}: the opencl backend loads GEMM xclbins only, this one holds the {} unit \
                         (run it with the xrt backend: `ferrite deploy --manifest ...`)",
                        other.name()
                    )))
                }
            };
            let path = m
                .image_path()
                .ok_or_else(|| DeviceError::Config("the manifest has no xclbin: its build did not run v++".into()))?;
            let binary = std::fs::read(&path).map_err(|e| cl_error(&format!("reading {}", path.display()), e))?;
            let program = Program::create_and_build_from_binary(&context, &[&binary], "")
                .map_err(|e| cl_error(&format!("loading {}", path.display()), e))?;
            (Flavor::Xclbin, cfg.clone(), program, m.manifest.kernel.clone())
        } else {
            let program = build(&context, GEMM_CL)?;
            let ports = Ports::build(&context, &dev, &queue)?;
            (Flavor::Port(Box::new(ports)), GemmConfig::default(), program, "ferrite_gemm".to_string())
        };
        let gemm = Kernel::create(&program, &kernel_name).map_err(|e| cl_error(&format!("kernel {kernel_name}"), e))?;
        // SAFETY: no host pointer; the buffer is owned by the device struct.
        let dummy = unsafe { ClBuffer::<u8>::create(&context, CL_MEM_READ_WRITE, 4, std::ptr::null_mut()) }
            .map_err(|e| cl_error("allocating", e))?;
        Ok(Self {
            name: format!(
                "opencl {platform}:{device} ({dname}, {})",
                if matches!(flavor, Flavor::Port(_)) { "OpenCL C ports" } else { "xclbin" }
            ),
            flavor,
            map: cfg.register_map(),
            cfg,
            context,
            queue,
            gemm,
            buffers: HashMap::new(),
            dummy,
            next_id: 1,
        })
    }

    fn buffer(&self, buf: Buffer, offset: u64, len: usize) -> Result<&ClBuffer<u8>, DeviceError> {
        let b = self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        if offset.checked_add(len as u64).is_none_or(|end| end > buf.len()) {
            return Err(DeviceError::OutOfBounds { id: buf.id(), offset, len: len as u64, size: buf.len() });
        }
        Ok(b)
    }

    fn fits(&self, p: &GemmProblem) -> Result<(), DeviceError> {
        p.validate()?;
        match self.flavor {
            Flavor::Port(_) => Ok(()),
            Flavor::Xclbin => p
                .validate_for(&self.cfg)
                .map_err(|e| DeviceError::TooBig { device: self.name.clone(), reason: e.to_string() }),
        }
    }

    /// The ports, or `Unsupported` for `unit` on an xclbin (it holds only the GEMM unit).
    fn ports(&self, unit: &'static str) -> Result<&Ports, DeviceError> {
        match &self.flavor {
            Flavor::Port(p) => Ok(p),
            Flavor::Xclbin => Err(DeviceError::Unsupported { device: self.name.clone(), unit }),
        }
    }

    /// Buffers are named by handle id in [`LaunchArgs`]; this checks the handle is ours.
    fn known(&self, buf: Buffer) -> Result<u64, DeviceError> {
        if self.buffers.contains_key(&buf.id()) {
            Ok(buf.id())
        } else {
            Err(DeviceError::UnknownBuffer(buf.id()))
        }
    }

    /// `args` in `map`'s argument order (the kernels' parameter order); buffer 0
    /// (an optional buffer the launch lacks) binds the dummy buffer.
    fn map_args(&self, map: &RegisterMap, args: &LaunchArgs) -> Result<Vec<Arg>, DeviceError> {
        map.arguments()
            .map(|reg| {
                let value = args
                    .values
                    .iter()
                    .find(|(n, _)| *n == reg.name)
                    .map(|&(_, v)| v)
                    .ok_or_else(|| DeviceError::Argument(format!("no value for {}", reg.name)))?;
                if reg.kind == ArgKind::Buffer {
                    let mem = if value == 0 {
                        self.dummy.get()
                    } else {
                        self.buffers.get(&value).ok_or(DeviceError::UnknownBuffer(value))?.get()
                    };
                    Ok(Arg::Mem(mem))
                } else {
                    u32::try_from(value)
                        .map(Arg::Word)
                        .map_err(|_| DeviceError::Argument(format!("{} = {value} does not fit 32 bits", reg.name)))
                }
            })
            .collect()
    }

    /// Set `args` on `kernel` and enqueue it over `global` work-items (in work-groups
    /// of `local`, when given); the in-order queue runs enqueued kernels one after another.
    fn enqueue(
        &self,
        kernel: &Kernel,
        args: &[Arg],
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<(), DeviceError> {
        let name = kernel.function_name().unwrap_or_default();
        let want = kernel.num_args().map_err(|e| cl_error(&format!("arguments of {name}"), e))? as usize;
        if want != args.len() {
            return Err(DeviceError::Argument(format!("{name} takes {want} arguments, the launch has {}", args.len())));
        }
        for (i, arg) in args.iter().enumerate() {
            // SAFETY: the arguments follow the kernel's parameter list: cl_mem for
            // buffers, 32-bit values for scalars (checked by the tests of every port).
            unsafe {
                match arg {
                    Arg::Mem(m) => kernel.set_arg(i as u32, m),
                    Arg::Word(w) => kernel.set_arg(i as u32, w),
                }
            }
            .map_err(|e| cl_error(&format!("argument {i} of {name}"), e))?;
        }
        let local = local.map_or(std::ptr::null(), |l| l.as_ptr());
        // SAFETY: every argument is set, the size arrays have `global.len()` entries, and the
        // buffers outlive the launch: callers finish the queue before returning.
        unsafe {
            self.queue.enqueue_nd_range_kernel(
                kernel.get(),
                global.len() as u32,
                std::ptr::null(),
                global.as_ptr(),
                local,
                &[],
            )
        }
        .map_err(|e| cl_error(&format!("launching {name}"), e))?;
        Ok(())
    }

    fn finish(&self) -> Result<(), DeviceError> {
        self.queue.finish().map_err(|e| cl_error("waiting for the kernels", e))
    }

    fn run_gemm(&self, g: &GemmArgs) -> Result<(), DeviceError> {
        check_gemm_buffers(g)?;
        self.fits(&g.problem)?;
        let args = self.map_args(&self.map, &driver::gemm_args(&self.cfg, g, &|b| self.known(b))?)?;
        let p = &g.problem;
        let global = match self.flavor {
            Flavor::Port(_) => vec![p.n, p.m],
            Flavor::Xclbin => vec![1],
        };
        self.enqueue(&self.gemm, &args, &global, None)?;
        self.finish()
    }

    fn run_attention(&self, a: &AttentionArgs) -> Result<(), DeviceError> {
        let ports = self.ports("attention")?;
        self.check_attention(a)?;
        let p = &a.problem;
        let rows = p.heads_total() * p.seq_q;
        let dim = u32::try_from(p.dim).map_err(|_| DeviceError::Problem(format!("dim = {} over 2^32", p.dim)))?;
        // The 64-bit o accumulators of every row: the registers of the unit's lanes.
        let acc_bytes =
            p.dim.checked_mul(8).and_then(|row| row.checked_mul(rows)).ok_or_else(|| {
                DeviceError::Problem(format!("{rows} rows × dim {} overflow the address space", p.dim))
            })?;
        // SAFETY: no host pointer; the buffer lives until the queue is finished below.
        let acc = unsafe { ClBuffer::<u8>::create(&self.context, CL_MEM_READ_WRITE, acc_bytes, std::ptr::null_mut()) }
            .map_err(|e| cl_error(&format!("allocating {acc_bytes} bytes of accumulators"), e))?;
        let cfg = AttentionConfig::default();
        let mut args = self.map_args(&ports.attention_map, &driver::attention_args(&cfg, a, &|b| self.known(b))?)?;
        args.extend([Arg::Word(dim), Arg::Mem(ports.lut.get()), Arg::Mem(acc.get())]);
        self.enqueue(&ports.attention, &args, &[rows], None)?;
        self.finish()
    }

    /// What the kernel relies on beyond [`check_attention_buffers`]: a KVLEN
    /// buffer that says what the problem says.
    fn check_attention(&self, a: &AttentionArgs) -> Result<(), DeviceError> {
        check_attention_buffers(a)?;
        let p = &a.problem;
        match (&p.kv_len, a.kv_len) {
            (None, None) => Ok(()),
            (Some(lens), Some(buf)) => {
                let mut bytes = vec![0; 4 * lens.len()];
                let cl = self.buffer(buf, 0, bytes.len())?;
                // SAFETY: blocking read of a range checked against the buffer's size.
                unsafe { self.queue.enqueue_read_buffer(cl, CL_BLOCKING, 0, &mut bytes, &[]) }
                    .map_err(|e| cl_error("reading the key-length buffer", e))?;
                let found: Vec<i32> =
                    bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                if found.iter().zip(lens).any(|(&f, &want)| f as i64 != want as i64) {
                    return Err(DeviceError::Problem(format!(
                        "the key-length buffer holds {found:?}, the problem's kv_len is {lens:?}"
                    )));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn run_moe(&self, m: &MoeArgs) -> Result<(), DeviceError> {
        let ports = self.ports("moe")?;
        m.problem.validate()?;
        check_moe_buffers(m)?;
        let cfg = MoeConfig::default();
        let mut args = self.map_args(&ports.moe_map, &driver::moe_args(&cfg, m, &|b| self.known(b))?)?;
        args.push(Arg::Mem(ports.lut.get()));
        let items = m.problem.experts.min(ports.dispatch_items);
        self.enqueue(&ports.moe_gate, &args, &[m.problem.tokens], None)?;
        self.enqueue(&ports.moe_dispatch, &args, &[items], Some(&[items]))?;
        self.finish()
    }
}

impl Device for OpenClDevice {
    fn info(&self) -> DeviceInfo {
        let clock_mhz = matches!(self.flavor, Flavor::Xclbin).then_some(self.cfg.clock_mhz);
        DeviceInfo { name: self.name.clone(), kind: DeviceKind::Gpu, clock_mhz }
    }

    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        match problem {
            Problem::Gemm(p) => {
                self.fits(p)?;
                Ok(Layout::Gemm(match self.flavor {
                    Flavor::Port(_) => GemmLayout::with_beat(p, 1),
                    Flavor::Xclbin => GemmLayout::new(&self.cfg, p),
                }))
            }
            Problem::Attention(p) => {
                self.ports("attention")?;
                p.validate()?;
                Ok(Layout::Attention(AttentionLayout::new(p, 1)))
            }
            Problem::Moe(p) => {
                self.ports("moe")?;
                p.validate()?;
                Ok(Layout::Moe(MoeLayout::with_beat(p, 1)))
            }
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let size =
            usize::try_from(bytes.max(1)).map_err(|_| DeviceError::OutOfMemory { requested: bytes, available: 0 })?;
        // SAFETY: no host pointer; the buffer lives in the table until freed.
        let b = unsafe { ClBuffer::<u8>::create(&self.context, CL_MEM_READ_WRITE, size, std::ptr::null_mut()) }
            .map_err(|e| cl_error(&format!("allocating {bytes} bytes"), e))?;
        let id = self.next_id;
        self.next_id += 1;
        self.buffers.insert(id, b);
        // OpenCL leaves new buffers undefined; the trait promises zeros.
        let buf = Buffer::new(id, bytes);
        self.upload(buf, 0, &vec![0; bytes as usize])?;
        Ok(buf)
    }

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.buffer(buf, offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let b = self.buffers.get_mut(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        // SAFETY: blocking write of a range checked against the buffer's size.
        unsafe { self.queue.enqueue_write_buffer(b, CL_BLOCKING, offset as usize, data, &[]) }
            .map_err(|e| cl_error("writing a buffer", e))?;
        Ok(())
    }

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let b = self.buffer(buf, offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: blocking read of a range checked against the buffer's size.
        unsafe { self.queue.enqueue_read_buffer(b, CL_BLOCKING, offset as usize, out, &[]) }
            .map_err(|e| cl_error("reading a buffer", e))?;
        Ok(())
    }

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        self.buffers.remove(&buf.id()).map(drop).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        match launch {
            Launch::Gemm(g) => self.run_gemm(g)?,
            Launch::Attention(a) => self.run_attention(a)?,
            Launch::Moe(m) => self.run_moe(m)?,
            other => return Err(DeviceError::Unsupported { device: self.info().name, unit: other.unit() }),
        }
        Ok(RunStats { wall: start.elapsed(), useful_macs: launch.useful_macs(), cycles: None })
    }
}
