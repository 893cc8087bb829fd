//! The attention unit's register table: the register map, the driver's
//! argument names and the RTL's argument decoder all come from it.
use rust_hdl::prelude::*;

crate::register_table! {
    hwinfo: "head_dim | lanes<<8 | log2(port_bits)<<16 | unit id<<24",
    status: "bit0: refused arguments or an AXI error response";
    q: Q Buffer "int8 Q, [batch·heads][seq_q][d], head pitch Q_STRIDE bytes";
    k: K Buffer "int8 K, [batch·heads][seq_kv][d], head pitch KV_STRIDE bytes";
    v: V Buffer "int8 V, same layout as K";
    o: O Buffer "output, [batch·heads][seq_q][d] int32 Q16 (or int8 with FLAGS.int8), head pitch O_STRIDE";
    kvlen: KVLEN Buffer "int32 valid keys per batch entry (read when FLAGS.kvlen)";
    heads: HEADS Scalar "batch·heads (≥ 1)";
    hpb: HPB Scalar "heads per batch entry (≥ 1)";
    seq_q: SEQ_Q Scalar "query rows per head (≥ 1)";
    seq_kv: SEQ_KV Scalar "key/value rows per head (≥ 1)";
    q_stride: Q_STRIDE Scalar "bytes between heads in Q (multiple of the beat)";
    kv_stride: KV_STRIDE Scalar "bytes between heads in K and V (multiple of the beat)";
    o_stride: O_STRIDE Scalar "bytes between heads in O (multiple of the beat)";
    flags: FLAGS Flags "bit0 causal, bit1 kvlen buffer, bit2 int8 output" {
        causal: CAUSAL = 0,
        use_kvlen: KVLEN = 1,
        out8: INT8 = 2,
    };
    smult: SMULT Scalar "score → log2-domain multiplier";
    sshift: SSHIFT Shift "score → log2-domain shift (0..=62)";
    omult: OMULT Scalar "output requantization multiplier";
    oshift: OSHIFT Shift "output requantization shift (0..=62)";
}
