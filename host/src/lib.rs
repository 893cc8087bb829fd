//! Ferrite's tooling over [`ferrite_runtime`]: cross-device comparison,
//! sampled checks of large problems, bitstream recipes, resource estimates, board deploy,
//! device listing, the GPU benchmark, MoE routing analysis, post-route timing, and the `ferrite` CLI.
//!
//! The runtime's modules are re-exported under their old paths, so
//! `ferrite_host::device::Device` and `ferrite_runtime::Device` are one trait.
pub mod bitstream;
pub mod board_cli;
pub mod checks;
pub mod clock;
pub mod compare;
pub mod deploy;
pub mod devices;
#[cfg(feature = "cuda")]
pub mod gpu_bench;
pub mod resources;
pub mod routing;
pub mod timing;

pub use ferrite_runtime::{backend, block, device, driver, manifest, memory, npy, ops, weights};
pub use ferrite_runtime::{Buffer, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RunStats};
