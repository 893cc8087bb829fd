//! The MoE router unit: gate projection (x·W_gᵀ on its own multiplier lanes),
//! top-k, fixed-point softmax, capacity assignment, load statistics and the
//! dispatch plan, in one pass over the tokens.
pub mod config;
pub mod model;
pub mod regs;
pub mod rtl;
pub mod tail;

pub use config::{CapacityFactor, GateMode, MoeConfig, MoeLayout, MoeProblem};
pub use model::{agreement, route, route_f64, F64Agreement, MoeOutput, RouterF64};
