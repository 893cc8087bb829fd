//! [`crate::Device`] implementations.
pub mod cpu;
#[cfg(feature = "sim")]
pub mod sim;
