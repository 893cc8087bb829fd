//! The Icarus device: a unit's exported Verilog in Icarus Verilog, an
//! event-driven simulator like Vivado's xsim, behind the same register-level
//! driver as the boards. It exists to prove the export portable (docs/simulators.md):
//! registers start as X, the memory applies random backpressure, and the
//! padding of every input row is filled with random bytes before a launch.
use crate::device::{
    Buffer, CycleStats, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RunStats,
};
use crate::driver::{self, ControlPort, LaunchArgs, Poll};
use crate::manifest::UnitConfig;
use ferrite_hw::regmap::RegisterMap;
use ferrite_sim::icarus::{IcarusInstance, IcarusModel, BASE};
use ferrite_sim::{MemoryConfig, SimError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::time::Instant;

/// Buffers start on 4 KiB boundaries, as on the other devices.
const ALLOC_ALIGN: u64 = 4096;
/// Cycles between two polls of CTRL.
const POLL_INTERVAL: u64 = 64;

fn sim_error(e: SimError) -> DeviceError {
    DeviceError::Backend { backend: "icarus", source: Box::new(e) }
}

/// A unit in Icarus; buffers live in the testbench memory from [`BASE`].
pub struct IcarusDevice {
    unit: UnitConfig,
    map: RegisterMap,
    sim: IcarusInstance,
    /// The testbench memory as last loaded or dumped, up to the last allocation.
    image: Vec<u8>,
    /// Whether `image` has changes the testbench has not loaded yet.
    dirty: bool,
    capacity: u64,
    buffers: HashMap<u64, u64>,
    padding: ChaCha8Rng,
    limit: u64,
}

impl IcarusDevice {
    /// Generates and compiles `unit` with a testbench of `bytes` of memory
    /// (cached), starts it with `mem`'s latencies, stall probabilities and
    /// seed, and resets it. `limit` bounds the cycles a launch may take.
    pub fn new(unit: impl Into<UnitConfig>, mem: &MemoryConfig, bytes: u64, limit: u64) -> Result<Self, DeviceError> {
        let unit = unit.into();
        unit.validate()?;
        let model =
            IcarusModel::build(&unit.verilog()?, &unit.kernel_name(), unit.port_bits(), bytes).map_err(sim_error)?;
        let sim = model.instance(mem).map_err(sim_error)?;
        Ok(Self {
            map: unit.register_map(),
            unit,
            sim,
            image: Vec::new(),
            dirty: false,
            capacity: bytes,
            buffers: HashMap::new(),
            padding: ChaCha8Rng::seed_from_u64(mem.seed ^ 0x9add_1e55),
            limit,
        })
    }

    /// Cycles a launch may take before [`DeviceError::Timeout`] (a launch cut
    /// short stays running in the unit: tests use it to reset mid-run).
    pub fn set_limit(&mut self, cycles: u64) {
        self.limit = cycles;
    }

    /// The running simulation, for resets and traffic counts.
    pub fn sim(&mut self) -> &mut IcarusInstance {
        &mut self.sim
    }

    fn check(&self, buf: Buffer, offset: u64, len: usize) -> Result<usize, DeviceError> {
        let size = *self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        let end = offset.checked_add(len as u64).filter(|&e| e <= size);
        end.map(|_| (buf.id() - BASE + offset) as usize).ok_or(DeviceError::OutOfBounds {
            id: buf.id(),
            offset,
            len: len as u64,
            size,
        })
    }

    fn known(&self, buf: Buffer) -> Result<u64, DeviceError> {
        self.buffers.get(&buf.id()).map(|_| buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    /// Random bytes in the padding of every input buffer of `launch`.
    fn scramble_inputs(&mut self, launch: &Launch) {
        for input in launch.input_rows() {
            let start = (input.buf.id() - BASE) as usize;
            for (offset, len) in input.padding() {
                let at = start + offset as usize;
                self.padding.fill(&mut self.image[at..at + len as usize]);
                self.dirty = true;
            }
        }
    }
}

impl Device for IcarusDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: format!("icarus ({})", self.unit.kernel_name()),
            kind: DeviceKind::Simulator,
            clock_mhz: Some(self.unit.clock_mhz()),
        }
    }

    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        self.unit.layout(&self.unit.kernel_name(), problem)
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let start = (self.image.len() as u64).next_multiple_of(ALLOC_ALIGN);
        // Bursts are whole beats, so the image covers the last beat of every buffer.
        let end = (start + bytes).next_multiple_of(self.unit.port_bits() as u64 / 8);
        if bytes == 0 || end > self.capacity {
            return Err(DeviceError::OutOfMemory { requested: bytes, available: self.capacity.saturating_sub(start) });
        }
        self.image.resize(end as usize, 0);
        self.dirty = true;
        self.buffers.insert(BASE + start, bytes);
        Ok(Buffer::new(BASE + start, bytes))
    }

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let at = self.check(buf, offset, data.len())?;
        self.image[at..at + data.len()].copy_from_slice(data);
        self.dirty = true;
        Ok(())
    }

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let at = self.check(buf, offset, out.len())?;
        out.copy_from_slice(&self.image[at..at + out.len()]);
        Ok(())
    }

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        self.buffers.remove(&buf.id()).map(drop).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        self.launch_edited(launch, &|_| {})
    }
}

impl IcarusDevice {
    /// Runs the host driver's launch sequence in Icarus with the register
    /// values `edit` leaves, so tests can send what the host would refuse and
    /// see what the unit does. The memory is read back afterwards whether the
    /// unit finished, refused or timed out.
    pub fn launch_edited(&mut self, launch: &Launch, edit: &dyn Fn(&mut LaunchArgs)) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        let mut args = self.unit.launch_args(&self.unit.kernel_name(), launch, &|buf| self.known(buf))?;
        edit(&mut args);
        self.scramble_inputs(launch);
        if self.dirty {
            self.sim.load(&self.image).map_err(sim_error)?;
            self.dirty = false;
        }
        let poll = Poll { interval: POLL_INTERVAL, limit: self.limit };
        let cycles = driver::launch(&mut IcarusPort(&mut self.sim), &self.map, &args, poll);
        self.image = self.sim.dump(self.image.len()).map_err(sim_error)?;
        Ok(RunStats {
            wall: start.elapsed(),
            useful_macs: launch.useful_macs(),
            cycles: Some(CycleStats {
                cycles: cycles?,
                clock_mhz: self.unit.clock_mhz(),
                multipliers: self.unit.multipliers(),
            }),
        })
    }
}

/// The testbench's AXI4-Lite master as a [`ControlPort`]; ticks are clock cycles.
struct IcarusPort<'a>(&'a mut IcarusInstance);

impl ControlPort for IcarusPort<'_> {
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
