//! Ferrite runtime: one [`Device`] trait over every place a unit can run (the
//! CPU golden model, cycle-level simulation, CUDA, OpenCL, XRT and PYNQ
//! boards), the register-level [`driver`] shared by the memory-mapped
//! backends, host-array [`ops`], image [`manifest`]s and `.npy` I/O.
//!
//! A library user of the `Device` trait needs nothing else: the CLI, plots,
//! tables and progress bars live in `ferrite-host`.
pub mod backend;
pub mod bitfile;
pub mod block;
pub mod board;
pub mod device;
pub mod driver;
pub mod manifest;
pub mod memory;
pub mod npy;
pub mod ops;
pub mod weights;

pub use device::{Buffer, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RunStats};
