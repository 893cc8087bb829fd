//! rust-hdl generator of the GEMM unit (in progress).
