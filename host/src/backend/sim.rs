//! The simulator device: a unit's RTL clocked cycle by cycle against an AXI
//! memory model, driven through its registers exactly like a board.
use crate::device::{
    check_attention_buffers, check_gemm_buffers, check_moe_buffers, AttentionArgs, Buffer, CycleStats, Device,
    DeviceError, DeviceInfo, DeviceKind, GemmArgs, Launch, Layout, MoeArgs, Problem, RunStats,
};
use crate::driver::{self, ControlPort, Poll};
use ferrite_hw::attention::{self, AttentionConfig, AttentionLayout, AttentionProblem};
use ferrite_hw::gemm::{rtl, GemmConfig, GemmLayout, GemmProblem};
use ferrite_hw::moe::{self, MoeConfig, MoeLayout, MoeProblem};
use ferrite_hw::regmap::RegisterMap;
use ferrite_hw::vitis::{Inputs, Outputs, PinLevel};
use ferrite_sim::{verilator_available, MemoryConfig, SimError, Simulation, VerilatorInstance, VerilatorModel};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::Instant;

/// Cycles `ap_rst_n` is held low when the device is created.
const RESET_CYCLES: u64 = 16;
/// Cycles between two polls of CTRL; CYCLES gives the exact count regardless.
const POLL_INTERVAL: u64 = 32;

/// Which simulator evaluates the RTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Verilator-compiled C++ of the exported Verilog: fast, the reference.
    Verilator,
    /// rust-hdl's own event simulator of the same design: slow, needs no tools.
    RustHdl,
}

impl Engine {
    /// Verilator when it is installed. Otherwise rust-hdl, except under CI
    /// (env `CI` set), where a missing Verilator must fail the run instead of
    /// silently testing something else.
    pub fn detect() -> Result<Self, DeviceError> {
        if verilator_available() {
            Ok(Self::Verilator)
        } else if std::env::var_os("CI").is_some() {
            Err(missing_verilator("CI is set, so the rust-hdl fallback is not used"))
        } else {
            Ok(Self::RustHdl)
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Verilator => "verilator",
            Self::RustHdl => "rust-hdl",
        })
    }
}

fn missing_verilator(why: &str) -> DeviceError {
    DeviceError::MissingTool {
        tool: "verilator",
        hint: format!("{why}; install it (`apt-get install verilator`) or choose the rust-hdl engine"),
    }
}

fn sim_error(e: SimError) -> DeviceError {
    match e {
        SimError::VerilatorNotFound => missing_verilator("not on PATH"),
        e => DeviceError::Backend { backend: "simulator", source: Box::new(e) },
    }
}

/// The unit under simulation, whichever engine runs it.
enum Dut {
    Verilator(VerilatorInstance),
    RustHdl(Box<dyn PinLevel>),
}

impl PinLevel for Dut {
    fn eval(&mut self, inputs: &Inputs) -> Outputs {
        match self {
            Self::Verilator(d) => d.eval(inputs),
            Self::RustHdl(d) => d.eval(inputs),
        }
    }

    fn tick(&mut self, inputs: &Inputs) -> Outputs {
        match self {
            Self::Verilator(d) => d.tick(inputs),
            Self::RustHdl(d) => d.tick(inputs),
        }
    }

    fn data_bits(&self) -> usize {
        match self {
            Self::Verilator(d) => d.data_bits(),
            Self::RustHdl(d) => d.data_bits(),
        }
    }
}

/// Which unit a [`SimDevice`] simulates, with its one config.
#[derive(Debug, Clone, PartialEq)]
pub enum SimUnit {
    Gemm(GemmConfig),
    Attention(AttentionConfig),
    Moe(MoeConfig),
}

impl From<GemmConfig> for SimUnit {
    fn from(cfg: GemmConfig) -> Self {
        Self::Gemm(cfg)
    }
}

impl From<AttentionConfig> for SimUnit {
    fn from(cfg: AttentionConfig) -> Self {
        Self::Attention(cfg)
    }
}

impl From<MoeConfig> for SimUnit {
    fn from(cfg: MoeConfig) -> Self {
        Self::Moe(cfg)
    }
}

impl SimUnit {
    fn validate(&self) -> Result<(), DeviceError> {
        match self {
            Self::Gemm(c) => c.validate()?,
            Self::Attention(c) => c.validate()?,
            Self::Moe(c) => c.validate()?,
        }
        Ok(())
    }

    fn verilog(&self) -> Result<String, DeviceError> {
        Ok(match self {
            Self::Gemm(c) => rtl::verilog(c)?,
            Self::Attention(c) => attention::rtl::verilog(c)?,
            Self::Moe(c) => moe::rtl::verilog(c)?,
        })
    }

    fn hdl_model(&self) -> Result<Box<dyn PinLevel>, DeviceError> {
        Ok(match self {
            Self::Gemm(c) => rtl::hdl_model(c)?,
            Self::Attention(c) => attention::rtl::hdl_model(c)?,
            Self::Moe(c) => moe::rtl::hdl_model(c)?,
        })
    }

    pub fn kernel_name(&self) -> String {
        match self {
            Self::Gemm(c) => c.kernel_name(),
            Self::Attention(c) => c.kernel_name(),
            Self::Moe(c) => c.kernel_name(),
        }
    }

    fn port_bits(&self) -> usize {
        match self {
            Self::Gemm(c) => c.port_bits,
            Self::Attention(c) => c.port_bits,
            Self::Moe(c) => c.port_bits,
        }
    }

    fn register_map(&self) -> RegisterMap {
        match self {
            Self::Gemm(c) => c.register_map(),
            Self::Attention(c) => c.register_map(),
            Self::Moe(c) => c.register_map(),
        }
    }

    fn clock_mhz(&self) -> f64 {
        match self {
            Self::Gemm(c) => c.clock_mhz,
            Self::Attention(c) => c.clock_mhz,
            Self::Moe(c) => c.clock_mhz,
        }
    }

    fn multipliers(&self) -> u64 {
        match self {
            Self::Gemm(c) => c.macs() as u64,
            Self::Attention(c) => c.multipliers() as u64,
            Self::Moe(c) => c.macs() as u64,
        }
    }
}

/// A unit in simulation; buffers live in its AXI memory.
pub struct SimDevice {
    unit: SimUnit,
    map: RegisterMap,
    engine: Engine,
    sim: Simulation<Dut>,
    /// Allocated buffers by device address. The memory model's allocator only
    /// grows, so `free` forgets the handle and the space is not reused.
    buffers: HashMap<u64, u64>,
}

impl SimDevice {
    /// Generate the RTL for `cfg`, build it with `engine` (Verilator builds are
    /// cached on disk) and reset it. `mem.data_bits` is set to the unit's port
    /// width. `vcd` writes a waveform of the whole session (Verilator only).
    pub fn new(
        unit: impl Into<SimUnit>,
        mut mem: MemoryConfig,
        engine: Engine,
        vcd: Option<&Path>,
    ) -> Result<Self, DeviceError> {
        let unit = unit.into();
        unit.validate()?;
        let dut = match engine {
            Engine::Verilator => {
                if !verilator_available() {
                    return Err(missing_verilator("not on PATH"));
                }
                let verilog = unit.verilog()?;
                let model = VerilatorModel::build(&verilog, &unit.kernel_name(), unit.port_bits(), vcd.is_some())
                    .map_err(sim_error)?;
                Dut::Verilator(model.instance(vcd).map_err(sim_error)?)
            }
            Engine::RustHdl => {
                if vcd.is_some() {
                    return Err(DeviceError::Config("VCD traces need the verilator engine".into()));
                }
                Dut::RustHdl(unit.hdl_model()?)
            }
        };
        mem.data_bits = unit.port_bits();
        let mut sim = Simulation::new(dut, mem).map_err(sim_error)?;
        sim.reset(RESET_CYCLES).map_err(sim_error)?;
        Ok(Self { map: unit.register_map(), unit, engine, sim, buffers: HashMap::new() })
    }

    pub fn unit(&self) -> &SimUnit {
        &self.unit
    }

    /// The GEMM config, for errors and limits; `None` for other units.
    fn gemm_cfg(&self, what: &'static str) -> Result<&GemmConfig, DeviceError> {
        match &self.unit {
            SimUnit::Gemm(c) => Ok(c),
            _ => Err(DeviceError::Unsupported { device: self.unit.kernel_name(), unit: what }),
        }
    }

    fn attention_cfg(&self) -> Result<&AttentionConfig, DeviceError> {
        match &self.unit {
            SimUnit::Attention(c) => Ok(c),
            _ => Err(DeviceError::Unsupported { device: self.unit.kernel_name(), unit: "attention" }),
        }
    }

    fn moe_cfg(&self) -> Result<&MoeConfig, DeviceError> {
        match &self.unit {
            SimUnit::Moe(c) => Ok(c),
            _ => Err(DeviceError::Unsupported { device: self.unit.kernel_name(), unit: "moe" }),
        }
    }

    fn fits_moe(&self, p: &MoeProblem) -> Result<(), DeviceError> {
        let cfg = self.moe_cfg()?;
        p.validate()?;
        p.validate_for(cfg).map_err(|e| DeviceError::TooBig { device: cfg.kernel_name(), reason: e.to_string() })
    }

    fn run_moe(&mut self, m: &MoeArgs) -> Result<u64, DeviceError> {
        let cfg = self.moe_cfg()?.clone();
        check_moe_buffers(m)?;
        self.fits_moe(&m.problem)?;
        let beat = cfg.port_bytes() as u64;
        for (name, pitch) in [("LDX", m.layout.ldx), ("LDW", m.layout.ldw), ("DPITCH", m.layout.dpitch)] {
            if !pitch.is_multiple_of(beat) {
                return Err(DeviceError::Problem(format!(
                    "{name} = {pitch} is not a multiple of the {beat}-byte beat"
                )));
            }
        }
        let args = driver::moe_args(&cfg, m, &|buf| self.known(buf))?;
        let p = &m.problem;
        // Weights load once; every token streams its row past each lane group and
        // writes a record plus up to k dispatch entries.
        let (x_beats, w_beats) = (m.layout.x_bytes / beat, m.layout.w_bytes / beat);
        let work = w_beats + x_beats * cfg.groups() as u64 + (p.tokens * (p.top_k + 4)) as u64 + p.experts as u64;
        let poll = Poll { interval: POLL_INTERVAL, limit: self.stretch(work, p.tokens as u64 / 16 + 4) };
        driver::launch(&mut SimPort(&mut self.sim), &self.map, &args, poll)
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    fn check(&self, buf: Buffer, offset: u64, len: usize) -> Result<u64, DeviceError> {
        let size = *self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        let end = offset.checked_add(len as u64).filter(|&e| e <= size);
        end.map(|_| buf.id() + offset).ok_or(DeviceError::OutOfBounds { id: buf.id(), offset, len: len as u64, size })
    }

    /// A generous bound on a run's cycles: every beat of traffic (re-reading A
    /// once per column tile) and every MAC step, each stretched by the memory's
    /// latency and stall probabilities, times ten.
    fn timeout_cycles(&self, cfg: &GemmConfig, p: &GemmProblem, l: &GemmLayout) -> u64 {
        let (row_tiles, col_tiles) = (p.m.div_ceil(cfg.rows) as u64, p.n.div_ceil(cfg.cols) as u64);
        let beats =
            (l.a_bytes * col_tiles + l.b_bytes * row_tiles + l.c_bytes + l.bias_bytes) / cfg.port_bytes() as u64;
        self.stretch(beats + p.macs() / cfg.macs() as u64, row_tiles * col_tiles)
    }

    /// `work` cycles plus `restarts` memory round trips, stretched by the
    /// memory's stall probabilities, times ten: a bound no healthy run reaches.
    fn stretch(&self, work: u64, restarts: u64) -> u64 {
        let mem = self.sim.mem().config();
        let latency = (mem.read_latency + mem.write_latency) as u64;
        let stall = (1.0 - mem.ready_stall_prob) * (1.0 - mem.valid_stall_prob);
        (10.0 * (work + restarts * (latency + 64)) as f64 / stall) as u64 + 100_000
    }

    fn known(&self, buf: Buffer) -> Result<u64, DeviceError> {
        if self.buffers.contains_key(&buf.id()) {
            Ok(buf.id())
        } else {
            Err(DeviceError::UnknownBuffer(buf.id()))
        }
    }

    fn run_attention(&mut self, a: &AttentionArgs) -> Result<u64, DeviceError> {
        let cfg = self.attention_cfg()?.clone();
        check_attention_buffers(a)?;
        self.fits_attention(&a.problem)?;
        let p = &a.problem;
        let beat = cfg.port_bytes() as u64;
        for (name, stride) in [("Q", a.layout.q_stride), ("KV", a.layout.kv_stride), ("O", a.layout.o_stride)] {
            if !stride.is_multiple_of(beat) {
                return Err(DeviceError::Problem(format!(
                    "{name} head stride {stride} is not a multiple of the {beat}-byte beat"
                )));
            }
        }
        let args = driver::attention_args(&cfg, a, &|buf| self.known(buf))?;
        // Keys stream at ≥ one per two cycles; every block also loads Q and writes O.
        let blocks = (p.heads_total() * p.seq_q.div_ceil(cfg.lanes)) as u64;
        let work = blocks * (2 * p.seq_kv as u64 + 4 * p.dim as u64 + 200);
        let poll = Poll { interval: POLL_INTERVAL, limit: self.stretch(work, blocks) };
        driver::launch(&mut SimPort(&mut self.sim), &self.map, &args, poll)
    }

    fn fits_attention(&self, p: &AttentionProblem) -> Result<(), DeviceError> {
        let cfg = self.attention_cfg()?;
        p.validate()?;
        p.validate_for(cfg).map_err(|e| DeviceError::TooBig { device: cfg.kernel_name(), reason: e.to_string() })
    }

    fn run_gemm(&mut self, g: &GemmArgs) -> Result<u64, DeviceError> {
        let cfg = self.gemm_cfg("gemm")?.clone();
        check_gemm_buffers(g)?;
        self.fits(&g.problem)?;
        let beat = cfg.port_bytes() as u64;
        for (name, ld) in [("LDA", g.layout.lda), ("LDB", g.layout.ldb), ("LDC", g.layout.ldc)] {
            if !ld.is_multiple_of(beat) {
                return Err(DeviceError::Problem(format!("{name} = {ld} is not a multiple of the {beat}-byte beat")));
            }
        }
        let args = driver::gemm_args(&cfg, g, &|buf| self.known(buf))?;
        let poll = Poll { interval: POLL_INTERVAL, limit: self.timeout_cycles(&cfg, &g.problem, &g.layout) };
        driver::launch(&mut SimPort(&mut self.sim), &self.map, &args, poll)
    }

    /// The problem is valid and fits this unit's buffers.
    fn fits(&self, p: &GemmProblem) -> Result<(), DeviceError> {
        let cfg = self.gemm_cfg("gemm")?;
        p.validate()?;
        p.validate_for(cfg).map_err(|e| DeviceError::TooBig { device: cfg.kernel_name(), reason: e.to_string() })
    }
}

impl Device for SimDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: format!("sim ({}, {})", self.engine, self.unit.kernel_name()),
            kind: DeviceKind::Simulator,
            clock_mhz: Some(self.unit.clock_mhz()),
        }
    }

    /// Beat-aligned row pitches, as the unit's bursts require.
    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        match problem {
            Problem::Gemm(p) => {
                self.fits(p)?;
                Ok(Layout::Gemm(GemmLayout::new(self.gemm_cfg("gemm")?, p)))
            }
            Problem::Attention(p) => {
                self.fits_attention(p)?;
                Ok(Layout::Attention(AttentionLayout::new(p, self.attention_cfg()?.port_bytes() as u64)))
            }
            Problem::Moe(p) => {
                self.fits_moe(p)?;
                Ok(Layout::Moe(MoeLayout::new(self.moe_cfg()?, p)))
            }
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let addr = self.sim.mem_mut().alloc(bytes).map_err(sim_error)?;
        self.buffers.insert(addr, bytes);
        Ok(Buffer::new(addr, bytes))
    }

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let addr = self.check(buf, offset, data.len())?;
        self.sim.mem_mut().write(addr, data).map_err(sim_error)
    }

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let addr = self.check(buf, offset, out.len())?;
        out.copy_from_slice(&self.sim.mem().read(addr, out.len()).map_err(sim_error)?);
        Ok(())
    }

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        self.buffers.remove(&buf.id()).map(drop).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        let cycles = match launch {
            Launch::Gemm(g) => self.run_gemm(g)?,
            Launch::Attention(a) => self.run_attention(a)?,
            Launch::Moe(m) => self.run_moe(m)?,
        };
        Ok(RunStats {
            wall: start.elapsed(),
            useful_macs: launch.useful_macs(),
            cycles: Some(CycleStats { cycles, clock_mhz: self.unit.clock_mhz(), multipliers: self.unit.multipliers() }),
        })
    }
}

/// The simulation's AXI4-Lite master as a [`ControlPort`]; ticks are clock cycles.
struct SimPort<'a>(&'a mut Simulation<Dut>);

impl ControlPort for SimPort<'_> {
    fn read32(&mut self, offset: u32) -> Result<u32, DeviceError> {
        self.0.read_reg(offset).map_err(sim_error)
    }

    fn write32(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
        self.0.write_reg(offset, value).map_err(sim_error)
    }

    fn wait(&mut self, ticks: u64) -> Result<(), DeviceError> {
        self.0.step(ticks).map_err(sim_error)
    }

    fn now(&self) -> u64 {
        self.0.cycle()
    }

    fn tick_name(&self) -> &'static str {
        "cycles"
    }
}
