//! The streaming attention unit: FlashAttention's online softmax in fixed
//! point, one pass over K/V, no N×N score buffer.
pub mod config;
pub mod lane;
pub mod model;
pub mod regs;
pub mod rtl;

pub use config::{AttentionConfig, AttentionLayout, AttentionParams, AttentionProblem};
pub use model::{attention, attention_f64, AttentionOutput};
