//! [`Simulation`]: a unit, its memory and its control bus, clocked together.
use crate::axilite::{Access, AxiLiteMaster, Completion};
use crate::memory::{AxiMemory, MemoryConfig, MemoryStats};
use crate::SimError;
use ferrite_hw::regmap::CTRL_ADDR_BITS;
use ferrite_hw::vitis::{Inputs, Outputs, PinLevel};

/// Cycles a register access may wait for its response before it is abandoned.
pub const CONTROL_TIMEOUT_CYCLES: u64 = 1000;

/// A unit with the Vitis port list, an [`AxiMemory`] on `m_axi_gmem` and an
/// AXI4-Lite master on `s_axi_control`.
///
/// Each cycle: the memory and the master set the inputs, the unit settles
/// (`eval`), handshakes are read from the settled values, the clock rises
/// (`tick`) and the memory advances. Protocol errors the memory records are
/// sticky: every later call returns them as [`SimError::Protocol`].
pub struct Simulation<D: PinLevel> {
    dut: D,
    mem: AxiMemory,
    ctrl: AxiLiteMaster,
    inputs: Inputs,
    /// Outputs settled before the last clock edge, and after it.
    settled: Outputs,
    last: Outputs,
    cycle: u64,
}

impl<D: PinLevel> Simulation<D> {
    /// Wraps a unit; call [`reset`](Self::reset) before using it.
    pub fn new(dut: D, config: MemoryConfig) -> Result<Self, SimError> {
        if dut.data_bits() != config.data_bits {
            return Err(SimError::Config(format!(
                "the unit's memory port is {} bits but the memory model is configured for {}",
                dut.data_bits(),
                config.data_bits
            )));
        }
        let mem = AxiMemory::new(config)?;
        let inputs = Inputs { ap_rst_n: 1, ..Inputs::default() };
        let (settled, last) = (Outputs::default(), Outputs::default());
        Ok(Self { dut, mem, ctrl: AxiLiteMaster::default(), inputs, settled, last, cycle: 0 })
    }

    /// Holds `ap_rst_n` low for `cycles` clock cycles, dropping in-flight transfers.
    pub fn reset(&mut self, cycles: u64) -> Result<(), SimError> {
        self.ctrl.abort();
        self.inputs.ap_rst_n = 0;
        for _ in 0..cycles {
            self.clock();
        }
        self.inputs.ap_rst_n = 1;
        self.check()
    }

    /// Runs `cycles` clock cycles, stopping early at a protocol error.
    pub fn step(&mut self, cycles: u64) -> Result<(), SimError> {
        self.check()?;
        for _ in 0..cycles {
            self.clock();
            self.check()?;
        }
        Ok(())
    }

    /// Writes a 32-bit control register through an AXI4-Lite transaction.
    pub fn write_reg(&mut self, offset: u32, value: u32) -> Result<(), SimError> {
        self.access("write", Access::Write { offset, value }).map(|_| ())
    }

    /// Reads a 32-bit control register through an AXI4-Lite transaction.
    pub fn read_reg(&mut self, offset: u32) -> Result<u32, SimError> {
        self.access("read", Access::Read { offset })
    }

    fn access(&mut self, op: &'static str, access: Access) -> Result<u32, SimError> {
        let (Access::Write { offset, .. } | Access::Read { offset }) = access;
        if !offset.is_multiple_of(4) || offset >= 1 << CTRL_ADDR_BITS {
            return Err(SimError::Config(format!(
                "control register offset {offset:#x} is not a word inside the {}-byte window",
                1 << CTRL_ADDR_BITS
            )));
        }
        self.check()?;
        if self.inputs.ap_rst_n == 0 {
            return Err(SimError::Config("register access while in reset".into()));
        }
        self.ctrl.start(access);
        for _ in 0..CONTROL_TIMEOUT_CYCLES {
            let done = self.clock();
            self.check()?;
            if let Some(Completion { data, resp }) = done {
                if resp != 0 {
                    return Err(SimError::Protocol(format!(
                        "s_axi_control {op} at {offset:#x} answered with response code {resp}"
                    )));
                }
                return Ok(data);
            }
        }
        self.ctrl.abort();
        Err(SimError::ControlTimeout { op, offset, cycles: CONTROL_TIMEOUT_CYCLES })
    }

    /// One clock cycle; returns a control access that completed in it.
    fn clock(&mut self) -> Option<Completion> {
        let in_reset = self.inputs.ap_rst_n == 0;
        if in_reset {
            self.mem.reset_port();
        }
        self.mem.drive(&mut self.inputs);
        self.ctrl.drive(&mut self.inputs);
        self.dut.cycle(&self.inputs, &mut self.settled, &mut self.last);
        let done = self.ctrl.observe(&self.inputs, &self.settled);
        if !in_reset {
            self.mem.clock(&self.inputs, &self.settled);
        }
        self.cycle += 1;
        done
    }

    fn check(&self) -> Result<(), SimError> {
        match self.mem.error() {
            Some(e) => Err(SimError::Protocol(e.to_string())),
            None => Ok(()),
        }
    }

    /// Clock cycles run so far, reset included.
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    /// The `interrupt` output after the last clock edge.
    pub fn interrupt(&self) -> bool {
        self.last.interrupt != 0
    }

    pub fn mem(&self) -> &AxiMemory {
        &self.mem
    }

    pub fn mem_mut(&mut self) -> &mut AxiMemory {
        &mut self.mem
    }

    pub fn stats(&self) -> MemoryStats {
        self.mem.stats()
    }

    pub fn dut(&self) -> &D {
        &self.dut
    }

    pub fn dut_mut(&mut self) -> &mut D {
        &mut self.dut
    }

    /// Gives the unit back, e.g. to finish its waveform.
    pub fn into_dut(self) -> D {
        self.dut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit whose outputs never change, for checks that need no RTL.
    struct Fixed(Outputs);

    impl PinLevel for Fixed {
        fn eval(&mut self, _: &Inputs) -> Outputs {
            self.0.clone()
        }
        fn tick(&mut self, _: &Inputs) -> Outputs {
            self.0.clone()
        }
        fn data_bits(&self) -> usize {
            128
        }
    }

    fn cfg() -> MemoryConfig {
        MemoryConfig { data_bits: 128, ..MemoryConfig::default() }
    }

    #[test]
    fn width_mismatch_and_bad_offsets_are_refused() {
        let r = Simulation::new(Fixed(Outputs::default()), MemoryConfig::default());
        assert!(matches!(r, Err(SimError::Config(_))));
        let mut sim = Simulation::new(Fixed(Outputs::default()), cfg()).unwrap();
        assert!(matches!(sim.write_reg(0x13, 0), Err(SimError::Config(_))));
        assert!(matches!(sim.read_reg(0x1000), Err(SimError::Config(_))));
    }

    #[test]
    fn silent_control_slave_times_out() {
        let mut sim = Simulation::new(Fixed(Outputs::default()), cfg()).unwrap();
        sim.reset(3).unwrap();
        let r = sim.read_reg(0x10);
        assert!(matches!(r, Err(SimError::ControlTimeout { op: "read", offset: 0x10, .. })), "{r:?}");
        assert_eq!(sim.cycle(), 3 + CONTROL_TIMEOUT_CYCLES);
    }

    #[test]
    fn memory_protocol_errors_are_sticky() {
        let bad_read =
            Outputs { gmem_arvalid: 1, gmem_araddr: 4, gmem_arsize: 4, gmem_arburst: 1, ..Outputs::default() };
        let mut sim = Simulation::new(Fixed(bad_read), cfg()).unwrap();
        // Nothing is checked while the unit is in reset.
        sim.reset(5).unwrap();
        assert!(matches!(sim.step(10), Err(SimError::Protocol(m)) if m.contains("not aligned")));
        assert_eq!(sim.cycle(), 6, "stepping stops at the failing cycle");
        assert!(matches!(sim.read_reg(0), Err(SimError::Protocol(_))));
        assert!(matches!(sim.step(1), Err(SimError::Protocol(_))));
    }
}
