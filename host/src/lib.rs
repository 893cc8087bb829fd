//! Ferrite host runtime: one [`Device`] trait over every place a unit can
//! run (the CPU golden model, cycle-level simulation, and later CUDA, OpenCL
//! and XRT boards), the register-level [`driver`] shared by the memory-mapped
//! backends, host-array [`ops`], and `.npy` I/O for the `ferrite` CLI.
pub mod backend;
pub mod bitstream;
pub mod board_cli;
pub mod compare;
pub mod deploy;
pub mod device;
pub mod devices;
pub mod driver;
#[cfg(feature = "cuda")]
pub mod gpu_bench;
pub mod manifest;
pub mod npy;
pub mod ops;
pub mod resources;
pub mod routing;

pub use device::{Buffer, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RunStats};
