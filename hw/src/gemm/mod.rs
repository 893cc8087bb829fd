//! The int8 GEMM unit: an output-stationary systolic array with a fused
//! bias/ReLU/requantize epilogue behind Vitis RTL-kernel interfaces.
pub mod array;
pub mod config;
pub mod epilogue;
pub mod model;
pub mod regs;
pub mod rtl;

pub use config::{GemmConfig, GemmLayout, GemmProblem};
pub use model::{gemm, gemm_f64, GemmOutput};
