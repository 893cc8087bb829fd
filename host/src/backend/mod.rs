//! [`crate::Device`] implementations.
pub mod cpu;
pub mod sim;
