//! The simulator device: a unit's RTL clocked cycle by cycle against an AXI
//! memory model, driven through its registers exactly like a board.
use crate::device::{
    Buffer, CycleStats, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RegValue, RunStats,
};
use crate::driver::{self, ControlPort, LaunchArgs, Poll};
use crate::manifest::UnitConfig;
use ferrite_hw::regmap::RegisterMap;
use ferrite_hw::unit::Unit;
use ferrite_hw::vitis::{Inputs, Outputs, PinLevel};
use ferrite_sim::{
    verilator_available, MemoryConfig, MemoryStats, SimError, Simulation, VerilatorInstance, VerilatorModel,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    /// Verilator with `--x-initial unique --x-assign unique`: every register
    /// and memory without an initial value starts random from the seed (≠ 0),
    /// to prove the unit never relies on a simulator zeroing its state.
    VerilatorXRandom(u32),
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
            Self::VerilatorXRandom(_) => "verilator-x-random",
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

    fn cycle(&mut self, inputs: &Inputs, settled: &mut Outputs, after: &mut Outputs) {
        match self {
            Self::Verilator(d) => d.cycle(inputs, settled, after),
            Self::RustHdl(d) => d.cycle(inputs, settled, after),
        }
    }

    fn data_bits(&self) -> usize {
        match self {
            Self::Verilator(d) => d.data_bits(),
            Self::RustHdl(d) => d.data_bits(),
        }
    }
}

/// A unit in simulation; buffers live in its AXI memory.
pub struct SimDevice {
    unit: Arc<dyn Unit>,
    /// The typed configuration, for typed launches; `None` for a unit built
    /// with [`SimDevice::generic`], which runs register-level launches only.
    config: Option<UnitConfig>,
    map: RegisterMap,
    engine: Engine,
    sim: Simulation<Dut>,
    /// Allocated buffers by device address. The memory model's allocator only
    /// grows, so `free` forgets the handle and the space is not reused.
    buffers: HashMap<u64, u64>,
    /// Fills input padding before each typed launch (seeded from the memory's seed).
    padding: ChaCha8Rng,
    /// Cycles simulated since reset, as of the last poll ([`Device::cycles_done`]).
    cycles_done: Arc<AtomicU64>,
}

impl SimDevice {
    /// Generate the RTL for `cfg`, build it with `engine` (Verilator builds are
    /// cached on disk) and reset it. `mem.data_bits` is set to the unit's port
    /// width. `vcd` writes a waveform of the whole session (Verilator only).
    pub fn new(
        unit: impl Into<UnitConfig>,
        mem: MemoryConfig,
        engine: Engine,
        vcd: Option<&Path>,
    ) -> Result<Self, DeviceError> {
        let config = unit.into();
        let unit: Arc<dyn Unit> = match &config {
            UnitConfig::Gemm(c) => Arc::new(c.clone()),
            UnitConfig::Attention(c) => Arc::new(c.clone()),
            UnitConfig::Moe(c) => Arc::new(c.clone()),
        };
        Self::build(unit, Some(config), mem, engine, vcd)
    }

    /// Any [`Unit`], driven through register-level launches
    /// ([`Launch::Registers`]) only: the path a new unit takes before (or
    /// instead of) typed host support.
    pub fn generic(
        unit: Arc<dyn Unit>,
        mem: MemoryConfig,
        engine: Engine,
        vcd: Option<&Path>,
    ) -> Result<Self, DeviceError> {
        Self::build(unit, None, mem, engine, vcd)
    }

    fn build(
        unit: Arc<dyn Unit>,
        config: Option<UnitConfig>,
        mut mem: MemoryConfig,
        engine: Engine,
        vcd: Option<&Path>,
    ) -> Result<Self, DeviceError> {
        unit.validate()?;
        let dut = match engine {
            Engine::Verilator => {
                if !verilator_available() {
                    return Err(missing_verilator("not on PATH"));
                }
                let verilog = ferrite_hw::unit::verilog(&*unit)?;
                let model = VerilatorModel::build(&verilog, &unit.kernel_name(), unit.port_bits(), vcd.is_some())
                    .map_err(sim_error)?;
                Dut::Verilator(model.instance(vcd).map_err(sim_error)?)
            }
            Engine::VerilatorXRandom(seed) => {
                if !verilator_available() {
                    return Err(missing_verilator("not on PATH"));
                }
                if vcd.is_some() || seed == 0 {
                    return Err(DeviceError::Config("the x-random engine needs a seed ≠ 0 and takes no VCD".into()));
                }
                let model = VerilatorModel::build_x_random(
                    &ferrite_hw::unit::verilog(&*unit)?,
                    &unit.kernel_name(),
                    unit.port_bits(),
                )
                .map_err(sim_error)?;
                Dut::Verilator(model.instance_seeded(None, seed).map_err(sim_error)?)
            }
            Engine::RustHdl => {
                if vcd.is_some() {
                    return Err(DeviceError::Config("VCD traces need the verilator engine".into()));
                }
                Dut::RustHdl(unit.hdl_model()?)
            }
        };
        mem.data_bits = unit.port_bits();
        let padding = ChaCha8Rng::seed_from_u64(mem.seed ^ 0x9add_1e55);
        let mut sim = Simulation::new(dut, mem).map_err(sim_error)?;
        sim.reset(RESET_CYCLES).map_err(sim_error)?;
        let cycles_done = Arc::new(AtomicU64::new(sim.cycle()));
        Ok(Self { map: unit.register_map(), unit, config, engine, sim, buffers: HashMap::new(), padding, cycles_done })
    }

    /// The typed configuration (`None` for a [`generic`](Self::generic) unit).
    pub fn config(&self) -> Option<&UnitConfig> {
        self.config.as_ref()
    }

    /// The typed configuration, or `Unsupported` for a typed launch on a generic unit.
    fn typed(&self, unit: &'static str) -> Result<&UnitConfig, DeviceError> {
        self.config.as_ref().ok_or_else(|| DeviceError::Unsupported { device: self.unit.kernel_name(), unit })
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Traffic on the memory port since reset, for tests that a refused launch moved nothing.
    pub fn memory_stats(&self) -> MemoryStats {
        self.sim.stats()
    }

    fn check(&self, buf: Buffer, offset: u64, len: usize) -> Result<u64, DeviceError> {
        let size = *self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        let end = offset.checked_add(len as u64).filter(|&e| e <= size);
        end.map(|_| buf.id() + offset).ok_or(DeviceError::OutOfBounds { id: buf.id(), offset, len: len as u64, size })
    }

    fn known(&self, buf: Buffer) -> Result<u64, DeviceError> {
        if self.buffers.contains_key(&buf.id()) {
            Ok(buf.id())
        } else {
            Err(DeviceError::UnknownBuffer(buf.id()))
        }
    }

    /// A generous bound on a run's cycles: the run's traffic and compute,
    /// stretched by the memory's latency and stall probabilities, times ten.
    /// Only called after [`UnitConfig::launch_args`] accepted the launch.
    fn timeout_cycles(&self, launch: &Launch) -> u64 {
        let beat = (self.unit.port_bits() / 8) as u64;
        let (work, restarts) = match (&self.config, launch) {
            // Every beat of traffic (A re-read once per column tile) and every MAC step.
            (Some(UnitConfig::Gemm(c)), Launch::Gemm(g)) => {
                let (p, l) = (&g.problem, &g.layout);
                let (row_tiles, col_tiles) = (p.m.div_ceil(c.rows) as u64, p.n.div_ceil(c.cols) as u64);
                let beats = (l.a_bytes * col_tiles + l.b_bytes * row_tiles + l.c_bytes + l.bias_bytes) / beat;
                (beats + p.macs() / c.macs() as u64, row_tiles * col_tiles)
            }
            // Keys stream at ≥ one per two cycles; every block also loads Q and writes O.
            (Some(UnitConfig::Attention(c)), Launch::Attention(a)) => {
                let p = &a.problem;
                let blocks = (p.heads_total() * p.seq_q.div_ceil(c.lanes)) as u64;
                (blocks * (2 * p.seq_kv as u64 + 4 * p.dim as u64 + 200), blocks)
            }
            // Weights load once; every token streams its row past each lane group
            // and writes a record plus up to k dispatch entries.
            (Some(UnitConfig::Moe(c)), Launch::Moe(m)) => {
                let p = &m.problem;
                let (x_beats, w_beats) = (m.layout.x_bytes / beat, m.layout.w_bytes / beat);
                let work = w_beats + x_beats * c.groups() as u64 + (p.tokens * (p.top_k + 4)) as u64 + p.experts as u64;
                (work, p.tokens as u64 / 16 + 4)
            }
            // A unit known only by its registers: every byte of every buffer
            // moved once, and its multipliers busy for the launch's MACs.
            (_, Launch::Registers(r)) => {
                let bytes: u64 =
                    r.values.iter().map(|(_, v)| if let RegValue::Buffer(b) = v { b.len() } else { 0 }).sum();
                (bytes.div_ceil(beat) + r.useful_macs / self.unit.multipliers().max(1), 1)
            }
            _ => (0, 0),
        };
        let mem = self.sim.mem().config();
        let latency = (mem.read_latency + mem.write_latency) as u64;
        let stall = (1.0 - mem.ready_stall_prob) * (1.0 - mem.valid_stall_prob);
        (10.0 * (work + restarts * (latency + 64)) as f64 / stall) as u64 + 100_000
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

    fn cycles_done(&self) -> Option<Arc<AtomicU64>> {
        Some(self.cycles_done.clone())
    }

    /// Beat-aligned row pitches, as the unit's bursts require.
    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        self.typed(problem.unit())?.layout(&self.unit.kernel_name(), problem)
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
        self.launch_edited(launch, &|_| {})
    }
}

impl SimDevice {
    /// Runs the host driver's launch sequence with the register values `edit`
    /// leaves (typed launches), so tests can send what the host would refuse
    /// and see what the unit does. The padding of every input row is filled with random bytes
    /// first: padding is not data, and a unit that reads it fails its tests.
    pub fn launch_edited(&mut self, launch: &Launch, edit: &dyn Fn(&mut LaunchArgs)) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        let poll = Poll { interval: POLL_INTERVAL, limit: self.timeout_cycles(launch) };
        let address = |buf| self.known(buf);
        // A register-level launch is already what the caller wants written.
        let args = match launch {
            Launch::Registers(r) if r.unit.0.kernel_name() == self.unit.kernel_name() => {
                driver::register_args(&*self.unit, r, &address)?
            }
            Launch::Registers(r) => {
                return Err(DeviceError::Unsupported { device: self.unit.kernel_name(), unit: r.unit.0.name() })
            }
            typed => {
                let mut args = self.typed(typed.unit())?.launch_args(&self.unit.kernel_name(), typed, &address)?;
                edit(&mut args);
                LaunchArgs {
                    hwinfo: args.hwinfo,
                    values: args.values.into_iter().map(|(n, v)| (n.into(), v)).collect(),
                }
            }
        };
        // The launch's buffers passed the host's checks: fill their padding.
        for input in launch.input_rows() {
            for (offset, len) in input.padding() {
                let mut junk = vec![0; len as usize];
                self.padding.fill(&mut junk[..]);
                self.check(input.buf, offset, junk.len())?;
                self.sim.mem_mut().write(input.buf.id() + offset, &junk).map_err(sim_error)?;
            }
        }
        let cycles = driver::launch(&mut SimPort(&mut self.sim, &self.cycles_done), &self.map, &args, poll)?;
        Ok(RunStats {
            wall: start.elapsed(),
            useful_macs: launch.useful_macs(),
            cycles: Some(CycleStats { cycles, clock_mhz: self.unit.clock_mhz(), multipliers: self.unit.multipliers() }),
        })
    }
}

/// The simulation's AXI4-Lite master as a [`ControlPort`]; ticks are clock
/// cycles. Every wait publishes the cycle count for [`Device::cycles_done`].
struct SimPort<'a>(&'a mut Simulation<Dut>, &'a AtomicU64);

impl ControlPort for SimPort<'_> {
    fn read32(&mut self, offset: u32) -> Result<u32, DeviceError> {
        self.0.read_reg(offset).map_err(sim_error)
    }

    fn write32(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
        self.0.write_reg(offset, value).map_err(sim_error)
    }

    fn wait(&mut self, ticks: u64) -> Result<(), DeviceError> {
        self.0.step(ticks).map_err(sim_error)?;
        self.1.store(self.0.cycle(), Ordering::Relaxed);
        Ok(())
    }

    fn now(&self) -> u64 {
        self.0.cycle()
    }

    fn tick_name(&self) -> &'static str {
        "cycles"
    }
}
