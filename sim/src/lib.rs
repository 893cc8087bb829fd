//! Cycle-level simulation of Ferrite units.
//!
//! A unit's Verilog is built with Verilator at run time ([`verilator`]), driven
//! clock by clock through [`ferrite_hw::vitis::PinLevel`] by a [`Simulation`]
//! that owns an AXI4 memory model ([`memory`]) on `m_axi_gmem` and an AXI4-Lite
//! master ([`axilite`]) on `s_axi_control`. The `ap_start`/`ap_done` driver is
//! not here: the host crate shares it between this simulator and real boards.
pub mod axilite;
pub mod icarus;
pub mod memory;
mod simulation;
pub mod verilator;

pub use icarus::{iverilog_or_skip, iverilog_version, IcarusInstance, IcarusModel};
pub use memory::{AxiMemory, MemoryConfig, MemoryStats};
pub use simulation::{Simulation, CONTROL_TIMEOUT_CYCLES};
pub use verilator::{verilator_available, verilator_or_skip, verilator_version, VerilatorInstance, VerilatorModel};

use std::path::PathBuf;

/// Everything that can go wrong while building or running a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(
        "Verilator was not found on PATH; install it with `scripts/install-deps.sh` \
         or `apt-get install verilator`"
    )]
    VerilatorNotFound,
    #[error("Verilator build of `{top}` failed (full log: {}):\n{tail}", log.display())]
    Build { top: String, log: PathBuf, tail: String },
    #[error("cannot load the simulation library {}: {reason}", path.display())]
    Load { path: PathBuf, reason: String },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("invalid simulation setup: {0}")]
    Config(String),
    #[error("memory model: {0}")]
    Memory(String),
    #[error("AXI protocol error: {0}")]
    Protocol(String),
    #[error("s_axi_control {op} at {offset:#x} got no response within {cycles} cycles")]
    ControlTimeout { op: &'static str, offset: u32, cycles: u64 },
}

impl SimError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }
}
