//! Ferrite's hardware units.
//!
//! Each unit lives in its own module with the same three parts side by side:
//! `config` (the one config type every layer reads), `rtl` (the rust-hdl
//! generator) and `model` (the bit-exact golden model, which is the unit's
//! specification). All units share the Vitis RTL-kernel top-level port list
//! described in [`vitis`], so one simulator shim, one memory model and one
//! register-level driver serve every unit.
pub mod attention;
pub mod block;
pub mod blocks;
pub mod control;
pub mod gemm;
pub mod moe;
pub mod numerics;
pub mod portable;
pub mod regmap;
pub mod shell;
pub mod unit;
pub mod vitis;

/// Errors raised when a unit is configured or asked to run something it cannot.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HwError {
    #[error("invalid unit configuration: {0}")]
    Config(String),
    #[error("invalid problem: {0}")]
    Problem(String),
}
