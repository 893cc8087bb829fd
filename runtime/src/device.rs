//! The one [`Device`] trait every backend implements.
//!
//! Shaped like burn's compute servers and cudarc's safe wrappers: buffers are
//! opaque handles into memory the device owns, and a launch names a unit with
//! typed arguments. Everything that varies per unit lives in the
//! `#[non_exhaustive]` enums [`Problem`], [`Layout`] and [`Launch`], so adding
//! attention or MoE adds variants there and leaves the trait (and backends
//! that do not run the new unit) untouched: they answer
//! [`DeviceError::Unsupported`].
use ferrite_hw::attention::{AttentionLayout, AttentionProblem};
use ferrite_hw::gemm::{GemmLayout, GemmProblem};
use ferrite_hw::moe::{MoeLayout, MoeProblem};
use ferrite_hw::unit::Unit;
use ferrite_hw::HwError;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// What kind of machine a device is; reports and timeouts differ per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// Runs on the host CPU; no clock, no cycle count.
    Cpu,
    /// A cycle-level RTL simulation; cycles are exact, wall time is not.
    Simulator,
    /// A GPU (CUDA, OpenCL).
    Gpu,
    /// An FPGA card driven through XRT.
    Fpga,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::Simulator => "simulator",
            Self::Gpu => "gpu",
            Self::Fpga => "fpga",
        })
    }
}

/// Static description of a device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    pub name: String,
    pub kind: DeviceKind,
    /// Clock of the unit in MHz, for devices that count cycles.
    pub clock_mhz: Option<f64>,
}

/// Opaque handle to a device buffer. Only the device that allocated it can use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buffer {
    id: u64,
    len: u64,
}

impl Buffer {
    /// Made by backends when they allocate; `id` is whatever the backend can look up.
    pub fn new(id: u64, len: u64) -> Self {
        Self { id, len }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One call of a unit, before buffers exist: the device answers with the
/// [`Layout`] it wants, after checking the problem fits the unit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    Gemm(GemmProblem),
    Attention(AttentionProblem),
    Moe(MoeProblem),
}

impl Problem {
    /// The unit's name, for errors.
    pub fn unit(&self) -> &'static str {
        match self {
            Self::Gemm(_) => "gemm",
            Self::Attention(_) => "attention",
            Self::Moe(_) => "moe",
        }
    }

    /// Useful multiply-accumulates.
    pub fn macs(&self) -> u64 {
        match self {
            Self::Gemm(p) => p.macs(),
            Self::Attention(p) => p.macs(),
            Self::Moe(p) => p.macs(),
        }
    }
}

/// How a problem's operands must be laid out in this device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    Gemm(GemmLayout),
    Attention(AttentionLayout),
    Moe(MoeLayout),
}

/// Arguments of one GEMM launch: buffers laid out as `layout` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmArgs {
    pub problem: GemmProblem,
    pub layout: GemmLayout,
    pub a: Buffer,
    pub b: Buffer,
    /// Present exactly when `problem.bias` is set.
    pub bias: Option<Buffer>,
    pub c: Buffer,
}

/// Arguments of one attention launch: buffers laid out as `layout` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionArgs {
    pub problem: AttentionProblem,
    pub layout: AttentionLayout,
    pub q: Buffer,
    pub k: Buffer,
    pub v: Buffer,
    pub o: Buffer,
    /// int32 valid keys per batch entry; present exactly when `problem.kv_len` is.
    pub kv_len: Option<Buffer>,
}

/// Arguments of one MoE router launch: buffers laid out as `layout` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeArgs {
    pub problem: MoeProblem,
    pub layout: MoeLayout,
    /// T×H int8 tokens, rows `layout.ldx` apart.
    pub x: Buffer,
    /// E×H int8 gate weights (one row per expert), rows `layout.ldw` apart.
    pub w: Buffer,
    /// E int32 logit biases; present exactly when `problem.bias` is set.
    pub bias: Option<Buffer>,
    /// T route records of [`ferrite_hw::moe::config::RECORD_BYTES`] bytes.
    pub route: Buffer,
    /// Per expert, its kept token indices (u32), rows `layout.dpitch` apart.
    pub dispatch: Buffer,
    /// u32 words: dropped, capacity, then the E per-expert loads.
    pub stats: Buffer,
}

/// A unit known only through its [`Unit`] trait, as a register-level launch names it.
#[derive(Clone)]
pub struct UnitRef(pub Arc<dyn Unit>);

impl fmt::Debug for UnitRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.kernel_name())
    }
}

/// Two references are the same unit when they generate the same kernel with the same map.
impl PartialEq for UnitRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.kernel_name() == other.0.kernel_name() && self.0.register_map() == other.0.register_map()
    }
}

impl Eq for UnitRef {}

/// The value of one argument register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegValue {
    /// A buffer: the device writes its address.
    Buffer(Buffer),
    Scalar(u64),
}

/// A launch given register by register: the generic path. Any unit with a
/// register table runs this way on the simulator and the boards with no host
/// code of its own, and on the CPU through [`Unit::run_registers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterArgs {
    pub unit: UnitRef,
    /// A value for every argument register of the unit's map, by name.
    pub values: Vec<(String, RegValue)>,
    /// Multiply-accumulates the launch performs (0 for a unit without multipliers).
    pub useful_macs: u64,
}

/// A unit launch with typed arguments, or register by register.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launch {
    Gemm(GemmArgs),
    Attention(AttentionArgs),
    Moe(MoeArgs),
    Registers(RegisterArgs),
}

impl Launch {
    /// Multiply-accumulates the launch performs (utilization's numerator).
    pub fn useful_macs(&self) -> u64 {
        match self {
            Self::Gemm(g) => g.problem.macs(),
            Self::Attention(a) => a.problem.macs(),
            Self::Moe(m) => m.problem.macs(),
            Self::Registers(r) => r.useful_macs,
        }
    }

    /// The unit's name, for errors.
    pub fn unit(&self) -> &'static str {
        match self {
            Self::Gemm(_) => "gemm",
            Self::Attention(_) => "attention",
            Self::Moe(_) => "moe",
            Self::Registers(r) => r.unit.0.name(),
        }
    }

    /// Where each input buffer of a typed launch holds data; a register-level
    /// launch carries no layout to tell data from padding, so it has none.
    pub fn input_rows(&self) -> Vec<InputRows> {
        let one = |buf: Buffer, bytes: u64| InputRows { buf, row: bytes, pitch: bytes, rows: 1 };
        let mut out = Vec::new();
        match self {
            Self::Gemm(g) => {
                let (p, l) = (&g.problem, &g.layout);
                out.push(InputRows { buf: g.a, row: p.k as u64, pitch: l.lda, rows: p.m as u64 });
                out.push(InputRows { buf: g.b, row: p.n as u64, pitch: l.ldb, rows: p.k as u64 });
                out.extend(g.bias.map(|b| one(b, 4 * p.n as u64)));
            }
            Self::Attention(a) => {
                let (p, l) = (&a.problem, &a.layout);
                let heads = p.heads_total() as u64;
                out.push(InputRows { buf: a.q, row: (p.seq_q * p.dim) as u64, pitch: l.q_stride, rows: heads });
                for buf in [a.k, a.v] {
                    out.push(InputRows { buf, row: (p.seq_kv * p.dim) as u64, pitch: l.kv_stride, rows: heads });
                }
                if let (Some(buf), Some(lens)) = (a.kv_len, &p.kv_len) {
                    out.push(one(buf, 4 * lens.len() as u64));
                }
            }
            Self::Moe(m) => {
                let (p, l) = (&m.problem, &m.layout);
                out.push(InputRows { buf: m.x, row: p.hidden as u64, pitch: l.ldx, rows: p.tokens as u64 });
                out.push(InputRows { buf: m.w, row: p.hidden as u64, pitch: l.ldw, rows: p.experts as u64 });
                out.extend(m.bias.map(|b| one(b, 4 * p.experts as u64)));
            }
            Self::Registers(_) => {}
        }
        out
    }
}

/// An input buffer's data: `rows` rows of `row` bytes, `pitch` bytes apart.
/// Every other byte of the buffer is padding, which no unit may read as data;
/// the simulators fill it with random bytes before each launch to prove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputRows {
    pub buf: Buffer,
    pub row: u64,
    pub pitch: u64,
    pub rows: u64,
}

impl InputRows {
    /// The padding as (offset, length) spans inside the buffer.
    pub fn padding(&self) -> Vec<(u64, u64)> {
        let len = self.buf.len();
        (0..self.rows)
            .map(|r| (r * self.pitch + self.row, (r + 1) * self.pitch))
            .chain(std::iter::once((self.rows * self.pitch, len)))
            .map(|(start, end)| (start.min(len), end.min(len)))
            .filter(|(start, end)| end > start)
            .map(|(start, end)| (start, end - start))
            .collect()
    }
}

/// Measurements of one launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunStats {
    /// Host wall time of the launch (for a simulator: simulation time).
    pub wall: Duration,
    /// Useful multiply-accumulates of the problem.
    pub useful_macs: u64,
    /// Cycle-level detail, for devices that count cycles.
    pub cycles: Option<CycleStats>,
}

/// Cycle counts of a unit with a fixed multiplier array.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleStats {
    /// Cycles from ap_start to ap_done, as the unit's CYCLES register reports.
    pub cycles: u64,
    pub clock_mhz: f64,
    /// Multipliers in the unit (rows · cols for the GEMM array).
    pub multipliers: u64,
}

impl RunStats {
    /// Time the launch takes on hardware at the device clock: cycles / clock.
    pub fn projected(&self) -> Option<Duration> {
        self.cycles.map(|c| Duration::from_secs_f64(c.cycles as f64 / (c.clock_mhz * 1e6)))
    }

    /// Useful MACs / (multipliers · cycles), in 0..=1.
    pub fn utilization(&self) -> Option<f64> {
        self.cycles
            .filter(|c| c.cycles > 0 && c.multipliers > 0)
            .map(|c| self.useful_macs as f64 / (c.multipliers as f64 * c.cycles as f64))
    }
}

/// Every way a device operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Operands do not match the problem, or the problem is malformed.
    #[error("invalid problem: {0}")]
    Problem(String),
    /// The problem is valid but does not fit this device's unit (K > k_max, ...).
    #[error("problem too big for {device}: {reason}")]
    TooBig { device: String, reason: String },
    /// The unit or device configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The device has no such unit.
    #[error("{device} cannot run {unit} launches")]
    Unsupported { device: String, unit: &'static str },
    /// A handle that this device did not allocate, or already freed.
    #[error("unknown buffer handle {0}")]
    UnknownBuffer(u64),
    #[error("access of {len} bytes at offset {offset} is outside buffer {id} of {size} bytes")]
    OutOfBounds { id: u64, offset: u64, len: u64, size: u64 },
    #[error("out of device memory: {requested} bytes requested, {available} available")]
    OutOfMemory { requested: u64, available: u64 },
    /// A tool or library the backend needs is not installed.
    #[error("{tool} not found: {hint}")]
    MissingTool { tool: &'static str, hint: String },
    /// The hardware identifies as something other than the configuration expects.
    #[error("HWINFO is {found:#010x}, expected {expected:#010x} (bitstream/model built for another configuration?)")]
    HwInfoMismatch { expected: u32, found: u32 },
    #[error("unit is busy: CTRL = {ctrl:#x} without ap_idle before start")]
    Busy { ctrl: u32 },
    /// A register-map argument the launch did not supply, or one the map lacks.
    #[error("register argument: {0}")]
    Argument(String),
    /// The unit never raised ap_done.
    #[error("timeout: no ap_done after {elapsed} {unit} (limit {limit})")]
    Timeout { elapsed: u64, limit: u64, unit: &'static str },
    /// The unit finished but flagged the run as refused or failed.
    #[error("unit reported a failed run: STATUS = {status:#x} (arguments refused or AXI error response)")]
    Fault { status: u32 },
    /// An error from the backend's own runtime (simulator, CUDA, OpenCL, XRT).
    #[error("{backend}: {source}")]
    Backend {
        backend: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl From<HwError> for DeviceError {
    fn from(e: HwError) -> Self {
        match e {
            HwError::Config(m) => Self::Config(m),
            HwError::Problem(m) => Self::Problem(m),
        }
    }
}

/// A compute device: memory plus units that run on it.
///
/// Methods take `&mut self` because simulators step state on every access;
/// backends with thread-safe runtimes (cudarc, opencl3, XRT) satisfy it trivially.
pub trait Device {
    fn info(&self) -> DeviceInfo;

    /// Check that `problem` fits this device and say how to lay out its operands
    /// (dense for CPU, beat-aligned pitches for memory-mapped units).
    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError>;

    /// A zero-initialised buffer of `bytes` bytes.
    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError>;

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError>;

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError>;

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError>;

    /// Run one unit to completion.
    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError>;

    /// For simulators: the clock cycles simulated since reset, updated while a
    /// launch runs, so another thread can show progress of a long simulation
    /// (a launch reports its cycles only at the end). `None` for devices that
    /// do not count cycles as they go.
    fn cycles_done(&self) -> Option<Arc<AtomicU64>> {
        None
    }
}

/// Check a GEMM launch's buffers are big enough for its layout, so backends
/// never read past a buffer whatever the caller passed.
pub(crate) fn check_gemm_buffers(args: &GemmArgs) -> Result<(), DeviceError> {
    let l = &args.layout;
    let p = &args.problem;
    let need = |name: &str, buf: Buffer, bytes: u64| {
        if buf.len() < bytes {
            Err(DeviceError::Problem(format!("buffer {name} has {} bytes, the layout needs {bytes}", buf.len())))
        } else {
            Ok(())
        }
    };
    let rows = |ld: u64, row_bytes: usize, name: &str| {
        if ld < row_bytes as u64 {
            Err(DeviceError::Problem(format!("{name} pitch {ld} is below its row of {row_bytes} bytes")))
        } else {
            Ok(())
        }
    };
    rows(l.lda, p.k, "A")?;
    rows(l.ldb, p.n, "B")?;
    rows(l.ldc, p.n * p.out_elem_bytes(), "C")?;
    need("A", args.a, l.lda * p.m as u64)?;
    need("B", args.b, l.ldb * p.k as u64)?;
    need("C", args.c, l.ldc * p.m as u64)?;
    match (p.bias, args.bias) {
        (true, Some(b)) => need("bias", b, 4 * p.n as u64),
        (true, None) => Err(DeviceError::Problem("bias enabled but no bias buffer given".into())),
        (false, Some(_)) => Err(DeviceError::Problem("bias buffer given but the bias flag is off".into())),
        (false, None) => Ok(()),
    }
}

/// Check an MoE launch's buffers against its layout (as [`check_gemm_buffers`]).
pub(crate) fn check_moe_buffers(args: &MoeArgs) -> Result<(), DeviceError> {
    let (l, p) = (&args.layout, &args.problem);
    if l.ldx < p.hidden as u64 || l.ldw < p.hidden as u64 || l.dpitch < 4 * p.capacity_slots() as u64 {
        return Err(DeviceError::Problem(format!(
            "pitches LDX {} / LDW {} / DPITCH {} are below their rows ({} / {} / {} bytes)",
            l.ldx,
            l.ldw,
            l.dpitch,
            p.hidden,
            p.hidden,
            4 * p.capacity_slots()
        )));
    }
    let (t, e) = (p.tokens as u64, p.experts as u64);
    let bias_need = if p.bias { 4 * e } else { 0 };
    for (name, buf, bytes) in [
        ("X", Some(args.x), l.ldx * t),
        ("W", Some(args.w), l.ldw * e),
        ("route", Some(args.route), (ferrite_hw::moe::config::RECORD_BYTES as u64) * t),
        ("dispatch", Some(args.dispatch), l.dpitch * e),
        ("stats", Some(args.stats), 4 * (e + 2)),
        ("bias", args.bias, bias_need),
    ] {
        if let Some(buf) = buf {
            if buf.len() < bytes {
                return Err(DeviceError::Problem(format!(
                    "buffer {name} has {} bytes, the layout needs {bytes}",
                    buf.len()
                )));
            }
        }
    }
    match (p.bias, args.bias) {
        (true, None) => Err(DeviceError::Problem("bias enabled but no bias buffer given".into())),
        (false, Some(_)) => Err(DeviceError::Problem("bias buffer given but the bias flag is off".into())),
        _ => Ok(()),
    }
}

/// Check an attention launch's strides hold a head and its buffers hold the
/// layout (as [`check_gemm_buffers`]), and that a key-length buffer comes
/// exactly with `kv_len`.
pub(crate) fn check_attention_buffers(args: &AttentionArgs) -> Result<(), DeviceError> {
    let (p, l) = (&args.problem, &args.layout);
    p.validate()?;
    let nh = p.heads_total() as u64;
    let elem = ferrite_hw::attention::AttentionLayout::out_elem_bytes(p) as u64;
    let (q_row, kv_row) = ((p.seq_q * p.dim) as u64, (p.seq_kv * p.dim) as u64);
    for (name, buf, stride, head) in [
        ("Q", args.q, l.q_stride, q_row),
        ("K", args.k, l.kv_stride, kv_row),
        ("V", args.v, l.kv_stride, kv_row),
        ("O", args.o, l.o_stride, q_row * elem),
    ] {
        if stride < head {
            return Err(DeviceError::Problem(format!("{name} head stride {stride} is below a head's {head} bytes")));
        }
        if buf.len() < stride * nh {
            return Err(DeviceError::Problem(format!(
                "buffer {name} has {} bytes, the layout needs {}",
                buf.len(),
                stride * nh
            )));
        }
    }
    match (&p.kv_len, args.kv_len) {
        (Some(lens), Some(buf)) if buf.len() < 4 * lens.len() as u64 => Err(DeviceError::Problem(format!(
            "the key-length buffer has {} bytes, {} entries need {}",
            buf.len(),
            lens.len(),
            4 * lens.len()
        ))),
        (Some(_), Some(_)) | (None, None) => Ok(()),
        _ => Err(DeviceError::Problem("the key-length buffer must be given exactly when kv_len is".into())),
    }
}
