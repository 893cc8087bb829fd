//! The GEMM unit's register table: the register map, the driver's argument
//! names and the RTL's argument decoder all come from it.
use rust_hdl::prelude::*;

crate::register_table! {
    hwinfo: "rows | cols<<8 | log2(port_bits)<<16 | unit id<<24",
    status: "bit0: the last run was refused (bad arguments) or saw an AXI error response";
    a: A Buffer "int8 A, M×K row-major, row pitch LDA bytes";
    b: B Buffer "int8 B, K×N row-major, row pitch LDB bytes";
    bias: BIAS Buffer "int32 bias, N entries (read when FLAGS.bias)";
    c: C Buffer "output C, M×N row-major (int32, or int8 when FLAGS.requant), row pitch LDC bytes";
    m: M Scalar "rows of A and C (≥ 1)";
    n: N Scalar "columns of B and C (≥ 1)";
    k: K Scalar "columns of A, rows of B (1..=k_max)";
    lda: LDA Scalar "A row pitch in bytes (multiple of the beat)";
    ldb: LDB Scalar "B row pitch in bytes (multiple of the beat)";
    ldc: LDC Scalar "C row pitch in bytes (multiple of the beat)";
    flags: FLAGS Flags "bit0 bias, bit1 relu, bit2 requantize to int8" {
        use_bias: BIAS = 0,
        relu: RELU = 1,
        requant: REQUANT = 2,
    };
    qmult: QMULT Scalar "requantization multiplier (int32)";
    qshift: QSHIFT Shift "requantization right shift (0..=62)";
}
