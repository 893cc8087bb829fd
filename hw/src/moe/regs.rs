//! The MoE router unit's register table: the register map, the driver's
//! argument names and the RTL's argument decoder all come from it.
use rust_hdl::prelude::*;

crate::register_table! {
    hwinfo: "e_max−1 | lanes<<8 | log2(port_bits)<<16 | k_max<<20 | unit id<<24",
    status: "bit0: the last run was refused (bad arguments) or saw an AXI error response";
    x: X Buffer "int8 tokens, T×H row-major, row pitch LDX bytes";
    wg: WG Buffer "int8 gate weights, E×H row-major (nn.Linear layout), row pitch LDW bytes";
    bias: BIAS Buffer "int32 gate bias, E entries (read when FLAGS.bias)";
    route: ROUTE Buffer "per token a 64-byte record: u8 ids[8] @0, u16 weights[8] @8 (Q0.16), i32 slots[8] @32";
    dispatch: DISPATCH Buffer "per expert a row of DPITCH bytes: int32 token indices, in slot order";
    stats: STATS Buffer "int32 dropped, capacity, load[E] (tokens routed to each expert)";
    t: T Scalar "tokens (1..=2^24)";
    h: H Scalar "hidden size (1..=h_max)";
    e: E Scalar "experts (1..=e_max)";
    k: K Scalar "choices per token (1..=min(k_max, E))";
    ldx: LDX Scalar "X row pitch in bytes (multiple of the beat)";
    ldw: LDW Scalar "WG row pitch in bytes (multiple of the beat)";
    dpitch: DPITCH Scalar "DISPATCH row pitch in bytes (≥ 4·capacity)";
    flags: FLAGS Flags "bit0 bias, bit1 top-k then softmax, bit2 renormalize, bit3 capacity limit" {
        use_bias: BIAS = 0,
        topk_softmax: TOPK_SOFTMAX = 1,
        renormalize: RENORMALIZE = 2,
        capacity: CAPACITY = 3,
    };
    cf: CF Scalar "capacity factor, unsigned Q16.16 (> 0 when FLAGS.capacity)";
    smult: SMULT Scalar "logit → log2-domain multiplier (> 0)";
    sshift: SSHIFT Shift "logit → log2-domain shift (0..=62)";
}
