//! Ferrite: ML dataflow accelerators written in Rust with `rust-hdl`.
//!
//! This root crate only re-exports the workspace crates so that the cross-crate
//! integration tests in `tests/` and the benches in `benches/` have one import path.
pub use ferrite_host as host;
pub use ferrite_hw as hw;
pub use ferrite_sim as sim;
