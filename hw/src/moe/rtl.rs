//! rust-hdl generator of the MoE router unit (Vitis RTL kernel).
//!
//! One run: load the bias (optional) and all E gate rows into the lanes' RAMs,
//! compute the capacity, then stream the tokens. Per token, the gate lanes
//! compute `lanes` logits at a time, one beat of x per cycle (x rows are
//! double-buffered on chip, so the next token's row loads while this one
//! computes); a finished logit vector enters the tail, which takes one token
//! per cycle: top-k rounds, exponentials, normalizer, reciprocal, weights,
//! slots and load counters. A writer drains the tail's output FIFO: the token's
//! route record (one burst), its dispatch entries (single words), and at the
//! end the statistics.
use super::config::{MoeConfig, EXPERT_SLOTS, E_LIMIT, RECORD_BYTES, T_LIMIT};
use super::regs::{Args, TABLE};
use super::tail::{Choice, DivStage, ExpUnit, GateLane, PostLane, TopkRound, MB, META_TOK, POST_LATENCY, RB};
use crate::blocks::{
    AddTree16Pipe, Copies, Fifo, Kept, MulRoundSat16Pipe, MulU32Pipe, Occupancy, Pack, SkewLine, SyncRam,
};
use crate::shell::{Shell, VitisPorts};
use crate::HwError;
use crate::{clock, dff_setup};
use rust_hdl::prelude::*;

/// Stages of the reciprocal: quotient bits 26..0 of `2^40 / L`, `L ≥ 2^14`.
const DIV_STAGES: usize = 27;
/// Output FIFO depth: tokens admitted but not yet written. The writer takes
/// at least three cycles a token (a record beat, a dispatch entry's `DPrep`
/// and `WSend`), so no more than a third of the tail's latency is in flight
/// when it is the bottleneck (checked in `new`); 32 rather than 64 halves the
/// read pointers' fan-out into the writer (docs/timing.md).
const OUT_DEPTH: usize = 32;
/// Output FIFO word: route record and token index.
const OB: usize = RB + 32;
/// Half a route record: the writer's record register is two halves, each
/// enabled by a kept copy of its own.
const RB2: usize = RB / 2;
/// Cycles from s3 to the `s4_*` registers' inputs, so that s4 meets the posts' outputs.
const POST_DLY: usize = POST_LATENCY - 1;

/// The router on a `W`-bit port (`S` strobes) with `EL` expert slots in its
/// packed per-expert buses (`ZB`, `TB`, `PB` bits: see [`super::tail`]).
#[derive(LogicBlock)]
pub struct MoeUnit<const W: usize, const S: usize, const EL: usize, const ZB: usize, const TB: usize, const PB: usize> {
    pub vitis: VitisPorts<W, S>,

    shell: Shell<W, S>,
    /// The arguments as written (read on the start cycle) and as latched for the run.
    now: Args,
    run: Args,
    lanes: Vec<GateLane<W>>,
    posts: Vec<PostLane<ZB>>,
    xbuf: SyncRam<W>,
    r0: TopkRound<EL, ZB, TB>,
    exps: Vec<ExpUnit<TB>>,
    rounds: Vec<TopkRound<EL, ZB, PB>>,
    divs: Vec<DivStage>,
    choices: Vec<Choice>,
    /// The choices' weights, computed in the cycles after the reciprocal.
    wq: Vec<MulRoundSat16Pipe>,
    /// Records for the writer, which pops only on `o_occ`'s flag (a trusting
    /// pop: the write pointer's compare in front of the eight read-pointer
    /// copies was near the limit in every seed, docs/timing.md).
    ofifo: Fifo<OB>,
    /// Whether `ofifo` holds a record, as a flag: the writer's pop enables its
    /// 600-bit record registers.
    o_occ: Occupancy,
    /// T·k, then CF·(T·k), for the capacity ([`MulU32Pipe`]: registered, off the critical path).
    cap_mul: MulU32Pipe,
    /// Expert e's dispatch row address `DISPATCH + e·DPITCH` at word e, written
    /// one entry a cycle after ap_start (an accumulator, no multiply); the writer
    /// reads the row of the choice it writes next.
    dbase: SyncRam<64>,
    tb_on: DFF<Bit>,
    tb_i: DFF<Bits<16>>,
    tb_addr: DFF<Bits<64>>,

    // Run arguments, latched at ap_start.
    use_sk: DFF<Bit>,
    beats: DFF<Bits<16>>,
    groups: DFF<Bits<16>>,
    emask: DFF<Bits<EL>>,

    phase: DFF<Phase>,
    /// The phase is `Idle`, as kept flags set and cleared with it (from
    /// `Done` and the reset; cleared by `start`): the registers a run starts
    /// from load in every idle cycle, on these copies (they loaded on `start`
    /// in `Idle`, a decode of `phase` enabling ~250 loads, docs/timing.md).
    /// 0: the sizes (`beats`, `xmask`, `t_m1`); 1: the receiver's and the
    /// capacity's; 2: the dispatch table's and the writer's.
    idle_f: Copies<3>,
    /// The arguments as written are refused (docs/moe.md): registered from
    /// them every cycle in two stages (the sizes' checks, then their OR), as
    /// the GEMM's `refuse`: the control slave
    /// takes at least three cycles per AXI4-Lite write, so they are current
    /// when a write of `ap_start` starts a run.
    bad_args: DFF<Bit>,
    /// The sizes' checks, one register per argument (T, H, E, K): in one
    /// register their eight 32-bit compares and OR were one path
    /// (`args[14] → bad_size`, −2.13 ns, docs/timing.md).
    bad_t: DFF<Bit>,
    bad_h: DFF<Bit>,
    bad_e: DFF<Bit>,
    bad_k: DFF<Bit>,
    /// The checks that compare two arguments (K against E) or read a flag,
    /// in a register of their own beside them.
    bad_rel: DFF<Bit>,
    /// The pitches', alignment's and scale's checks, on the run's arguments
    /// in the capacity phases (two stages, the scale's shift split in two:
    /// `fm_sh` by SSHIFT's low three bits, then its high bits), read in
    /// `CapCheck` beside the dispatch pitch's: the same refusal before any
    /// traffic, off the cycle the start decides in (`args → bad_form`, 2.8–3.5
    /// ns of logic, was on the router's list, docs/timing.md).
    fm_sh: DFF<Bits<32>>,
    fm_a: DFF<Bit>,
    fm_b: DFF<Bit>,
    bad_form: DFF<Bit>,
    groups_of: Signal<Local, Bits<16>>,
    // Read-data receiver.
    recv_cnt: DFF<Bits<16>>,
    recv_rows: DFF<Bits<32>>,
    /// Every gate weight row is in (`recv_rows = E`), kept as `recv_rows`
    /// moves (from `E − 1`), and the bias vector's beats, registered from
    /// the run's E: `WWait`'s and `BiasWait`'s exits (which clear the
    /// receiver's counters) follow no 32-bit compare of an argument.
    w_in: DFF<Bit>,
    e_m1: DFF<Bits<32>>,
    bias_beats: DFF<Bits<16>>,
    /// The lane the next gate row goes to, one-hot (rotated by each row's
    /// end): the RAMs' write enables and `recv_grp`'s step read a flag, not
    /// a compare of a lane count (fan-out 130, docs/timing.md).
    recv_hot: Vec<DFF<Bit>>,
    recv_grp: DFF<Bits<16>>,
    /// The phase is `WReq` or `WWait`, as a flag set and cleared with it.
    in_w: DFF<Bit>,
    /// `in_w` as kept copies: the sequencer's start values load in every
    /// cycle of `WReq` and `WWait` (0 the beat's and group's counters, 1 the
    /// token's and the output's), where `WWait`'s exit decoded `phase` in
    /// front of them (`phase → cg`, `→ cgoff`, fan-out 30, docs/timing.md).
    w_cp: Copies<2>,
    /// `recv_cnt` will equal `bias_beats` (`BiasWait`'s exit), kept a cycle
    /// ahead from `bias_beats − 1` (`bias_m1`): the exit reads a flag, not a
    /// 16-bit compare in front of `recv_cnt`'s clear (`recv_cnt → recv_cnt`).
    b_end: DFF<Bit>,
    bias_m1: DFF<Bits<16>>,
    /// The gate RAMs' write, registered (enable per lane, address, data): the
    /// decode and the address's add are a cycle ahead of the RAMs.
    rw_we: Vec<DFF<Bit>>,
    rw_wa: DFF<Bits<16>>,
    rw_wd: DFF<Bits<W>>,
    /// The next span's arguments, registered every cycle from the run's
    /// arguments by two flags (`sp_w`: the bias span is loaded, the gate
    /// weights' is next; `sp_x`: the tokens' is next): the shell's span
    /// registers read flip-flops, where a select by decodes of `phase`
    /// stood in front of them (`phase → shell.ld_more`, fan-out 264).
    sp_w: DFF<Bit>,
    sp_x: DFF<Bit>,
    sp_addr: DFF<Bits<64>>,
    sp_beats: DFF<Bits<16>>,
    sp_rows: DFF<Bits<32>>,
    sp_pitch: DFF<Bits<32>>,
    rx: Signal<Local, Bit>,
    /// The next beat ends a row (`recv_cnt == beats_m1`), kept a cycle ahead:
    /// from the count after each beat, and recomputed in every cycle without
    /// one (each reset of `recv_cnt` is followed by such cycles: the reads
    /// after it are issued later). So the receiver's updates and the RAMs'
    /// write enables wait on no carry chain (the MoE router's critical path).
    row_end: DFF<Bit>,
    /// `row_end` as kept copies (fan-out 135): 0 the x rows' padding mask, 1
    /// the receiver's counters and `ahead`.
    row_end_cp: Copies<2>,
    /// `beats_m1 − 1` and `beats_m1 == 0`, for `row_end`.
    beats_m2: DFF<Bits<16>>,
    one_beat: DFF<Bit>,
    bias_bus: DFF<Bits<ZB>>,
    /// `bias_bus` with this cycle's beat written into its slot (`recv_cnt`):
    /// written slot by slot, the bus needs no clear at `start` (the clear's
    /// 900 enables hung on `start`, docs/timing.md); the lanes ignore it
    /// without FLAGS.bias.
    bias_nx: Signal<Local, Bits<ZB>>,
    c_wones: Constant<Bits<W>>,
    c_slot_at: Vec<Constant<Bits<16>>>,
    /// The bias slot the next beat goes into (`recv_cnt` in the bias phases),
    /// one-hot: set to slot 0 at `start`, shifted by each beat received in
    /// `BiasReq`/`BiasWait` (`in_bias`). Each slot's W enables hang off its
    /// flag, `in_bias` and `rvalid`, where they hung off a decode of `phase`
    /// and a compare of `recv_cnt` (the router's worst group, fan-out 128
    /// into 512 bits, docs/timing.md).
    bias_hot: Vec<DFF<Bit>>,
    /// The phase is `BiasReq` or `BiasWait`, as a flag set and cleared with it.
    in_bias: DFF<Bit>,
    _bias_slots: usize,
    // Capacity.
    /// The capacity multiplier's operands, registered so that the flow folds
    /// them into its input registers: T and k from ap_start, CF and T·k from
    /// `CapPrep`'s exit. A phase select in front of the multiplier was the
    /// router's critical path (docs/timing.md).
    cap_a: DFF<Bits<32>>,
    cap_b: DFF<Bits<32>>,
    cap_num: DFF<Bits<64>>,
    /// The numerator's add as a carry select, registered every cycle from
    /// the product: its low word plus `cap_dm1` with the carry out, its high
    /// word and that plus one; `cap_num` takes `{carry ? hi + 1 : hi, lo}`
    /// (`CapMul` a cycle longer). The 64-bit add from the multiplier into
    /// `cap_num` was the router's worst path at seed 4 (−1.21 ns, 38
    /// endpoints) and near 165 MHz in every seed (docs/timing.md).
    cap_lo: DFF<Bits<33>>,
    cap_hi: DFF<Bits<32>>,
    cap_hi1: DFF<Bits<32>>,
    cap_hs: Signal<Local, Bits<32>>,
    cap_rem: DFF<Bits<32>>,
    cap_q: DFF<Bits<64>>,
    cap_den: DFF<Bits<32>>,
    cap_dm1: DFF<Bits<32>>,
    cap_i: DFF<Bits<8>>,
    /// `cap_i` at its last count in `CapPrep`, `CapMul` and `CapDiv`, as
    /// flip-flops set the cycle before from `phase` and `cap_i` (each load
    /// hung off a compare of `cap_i` and a decode of `phase`, fan-out 160 to
    /// 194, docs/timing.md). `cap_me`: 0 `cap_num`, `cap_i` and `phase`, 1
    /// `cap_rem` and `cap_q`; `cap_de`: 0 `cap` and `phase`, 1 the statistics'
    /// clear.
    cap_pe: DFF<Bit>,
    cap_me: Copies<2>,
    cap_de: Copies<2>,
    c_mlat_m1: Constant<Bits<8>>,
    cap_r2: Signal<Local, Bits<32>>,
    /// `CapDiv`, as kept copies set on `CapMul`'s exit and cleared on
    /// `CapDiv`'s (`phase`'s decode enabled the division's 160 bits, fan-out
    /// 163, docs/timing.md): 0 `cap_num` and `cap_rem`, 1 `cap_q`.
    cap_dv: Copies<2>,
    /// The quotient is below T, registered: `cap` takes the raw quotient on
    /// `CapDiv`'s exit and T in `CapMin` (on `cap_fix`) when the capacity is
    /// off or the quotient is not below T (a 64-bit compare and select in
    /// front of `cap` was −1.42 ns, docs/timing.md).
    cap_lt: DFF<Bit>,
    cap_fix: DFF<Bit>,
    cap: DFF<Bits<32>>,
    /// DPITCH is below the capacity's 4 bytes a slot, registered from `cap`
    /// in `CapCmp` (a 64-bit compare in front of `CapCheck`'s decisions).
    cap_bad: DFF<Bit>,
    // Gate projection sequencer and its flag pipeline.
    ct: DFF<Bits<32>>,
    cg: DFF<Bits<16>>,
    cc: DFF<Bits<16>>,
    /// The gate RAMs' read address `cg · 2^logcm + cc`, kept as `cg` and `cc`
    /// move: the add behind `cg` (which fans out across the controller) into
    /// the lanes' LUT RAM addresses was the router's critical path.
    g_at: DFF<Bits<16>>,
    /// The group's first expert (`cg · lanes`).
    cgoff: DFF<Bits<16>>,
    go: Signal<Local, Bit>,
    /// `go` again, on copies 1 and 2 of `go_r`: `go_g` enables the group and
    /// token registers, `go_t` the token's end (`more`, `ahead`, `pending`);
    /// `go` the beat's.
    go_g: Signal<Local, Bit>,
    go_t: Signal<Local, Bit>,
    /// `go` a cycle ahead, from the next values of its registers, as kept
    /// copies: the gate of four flip-flops in front of `at_tok` and the
    /// counters was a loop that one placement routed at 7.5 ns.
    go_r: Copies<3>,
    /// The next beat starts a token (`cc` and `cg` are zero), `cc` is at a
    /// group's last beat and `cg` at the last group: kept as flags from the
    /// counts as they move, and `ahead ≠ 0` as `ahead_nz`, so `go` and
    /// `tok_end` (which fan out to the counters, the RAM addresses and s1)
    /// are gates of flip-flops, not of 16-bit compares (the MoE router's
    /// critical path, docs/timing.md).
    at_tok: DFF<Bit>,
    /// The phase is `Run`, as a flag set and cleared with it: the receiver's,
    /// the sequencer's and `ahead`'s updates decode no phase.
    in_run: DFF<Bit>,
    /// `in_run` as kept copies (fan-out 131): 0 the receiver (`xbuf`,
    /// `recv_cnt`, `recv_rows`, `ahead`), 1 the writer's pops, 2 `span_go`,
    /// `out_done` and `ahead_nz`.
    run_cp: Copies<3>,
    cc_last: DFF<Bit>,
    cg_last: DFF<Bit>,
    tok_last: Signal<Local, Bit>,
    ahead_nz: DFF<Bit>,
    /// `groups_m1 − 1` and `groups_m1 == 0`, for `cg_last`.
    groups_m2: DFF<Bits<16>>,
    one_group: DFF<Bit>,
    /// Tokens started and not yet popped by the writer (in the pipeline or the
    /// output FIFO), and whether one more may start: last cycle's count below
    /// depth − 1 (the count grows by at most one a cycle).
    pending: DFF<Bits<16>>,
    room: DFF<Bit>,
    /// T − 1, and whether token ct is not past it (ct < T), kept as ct moves.
    t_m1: DFF<Bits<32>>,
    more: DFF<Bit>,
    /// ct is the last token (ct = T − 1), kept as ct moves (from `t_m2` = T − 2),
    /// so the clear of `more` at the token's end compares nothing.
    ct_last: DFF<Bit>,
    t_m2: DFF<Bits<32>>,
    /// x rows received minus tokens finished: the row of token ct is on chip when not zero.
    ahead: DFF<Bits<16>>,
    /// A row's last beat came in (in `Run`), registered: `ahead` counts it a
    /// cycle later (AXI `rvalid`, fan-out 130, into `ahead`'s carry chains was
    /// −1.62 ns, docs/timing.md); `ahead_nz` adds it in, so `go` is as early.
    row_in: DFF<Bit>,
    /// ct + 2, for the x rows' read-ahead (row r loads once token r − 2 is issued).
    ct2: DFF<Bits<32>>,
    /// Beats less one (from `beats`, every cycle) and groups less one
    /// (latched at ap_start).
    beats_m1: DFF<Bits<16>>,
    groups_m1: DFF<Bits<16>>,
    tok_end: Signal<Local, Bit>,
    /// Cycles after ap_rst_n in which the tail may still hold tokens of an
    /// aborted run (its stages are not reset): their results are not pushed.
    flush: DFF<Bits<8>>,
    flushed: DFF<Bit>,
    s1_valid: DFF<Bit>,
    s1_first: DFF<Bit>,
    s1_last: DFF<Bit>,
    s1_g: DFF<Bits<16>>,
    s1_goff: DFF<Bits<16>>,
    s1_lastg: DFF<Bit>,
    s1_tok: DFF<Bits<32>>,
    s2_valid: DFF<Bit>,
    s2_g: DFF<Bits<16>>,
    s2_goff: DFF<Bits<16>>,
    s2_lastg: DFF<Bit>,
    s2_tok: DFF<Bits<32>>,
    /// s2's valid, group, group offset, last-group flag and token (bits 0, 1,
    /// 17, 33, 34) on their way to s3, beside the gate lanes' dot products.
    lane_tag: SkewLine<66>,
    s3_valid: DFF<Bit>,
    s3_g: DFF<Bits<16>>,
    s3_lastg: DFF<Bit>,
    s3_tok: DFF<Bits<32>>,
    /// s3's group, last-group flag and token (bits 0, 16, 17), and valid, on their way to s4.
    post_tag: SkewLine<49>,
    post_v: DFF<Bits<POST_DLY>>,
    s4_valid: DFF<Bit>,
    /// `s4_valid` (0: `coll_z`, 1: `coll_t`) and `s4_valid & s4_lastg` (0:
    /// `a_z`, `a_tok`, 1: `a_t`, `a_valid`) as kept copies: one flag enabled
    /// the collector's and the tail's 600 bits (fan-out 320).
    s4_vc: Copies<2>,
    s4_fin: Copies<2>,
    /// s4's group as a one-hot word (bit 0: the token's first group), decoded
    /// on the way in: the collector's selects read one bit each, where
    /// compares of the group index fanned out to every bit of the logit vectors.
    s4_hot: DFF<Bits<E_LIMIT>>,
    c_hot1: Constant<Bits<E_LIMIT>>,
    s4_lastg: DFF<Bit>,
    s4_tok: DFF<Bits<32>>,
    /// A lane group's logits and log2-domain values, lane j at slot j.
    zpack: Pack<32, ZB>,
    tpack: Pack<40, TB>,
    mz: Signal<Local, Bits<ZB>>,
    mt: Signal<Local, Bits<TB>>,
    /// The group's values placed at its slot (zero elsewhere).
    zplace: Signal<Local, Bits<ZB>>,
    tplace: Signal<Local, Bits<TB>>,
    coll_z: DFF<Bits<ZB>>,
    coll_t: DFF<Bits<TB>>,
    // Tail.
    a_valid: DFF<Bit>,
    a_z: DFF<Bits<ZB>>,
    a_t: DFF<Bits<TB>>,
    a_tok: DFF<Bits<32>>,
    sel0: Signal<Local, Bits<8>>,
    /// After round 0: its winner's t (the maximum) selected and registered.
    x1_valid: DFF<Bit>,
    x1_z: DFF<Bits<ZB>>,
    x1_t: DFF<Bits<TB>>,
    x1_mask: DFF<Bits<EL>>,
    x1_gt: DFF<Bits<32>>,
    x1_meta: DFF<Bits<MB>>,
    x1_tmax: DFF<Signed<40>>,
    /// The token's buses beside the exponentials' pipeline.
    xd_z: SkewLine<ZB>,
    xd_mask: SkewLine<EL>,
    xd_gt: SkewLine<32>,
    xd_meta: SkewLine<MB>,
    xd_v: SkewLine<1>,
    /// The token's exponentials, expert e at slot e (registers of the exponentials).
    ppack: Pack<16, PB>,
    /// Σ_e p, and its delay to the normalizer.
    psum: AddTree16Pipe<PB>,
    sd: SkewLine<32>,
    /// The last round's metadata, delayed to meet Σ_e p.
    r_meta: Signal<Local, Bits<MB>>,
    r_valid: Signal<Local, Bit>,
    qd_meta: SkewLine<MB>,
    qd_v: SkewLine<1>,
    q_meta: Signal<Local, Bits<MB>>,
    q_valid: Signal<Local, Bit>,
    /// Ids (bits 0..64) and token (64..96) of the reciprocal's output, and its
    /// valid, delayed to meet the weights.
    cd_meta: SkewLine<96>,
    cw_meta: Signal<Local, Bits<MB>>,
    cw_valid: Signal<Local, Bit>,
    cd_v: SkewLine<1>,
    ps: Vec<Signal<Local, Bits<32>>>,
    sk: Vec<Signal<Local, Bits<32>>>,
    d_valid: DFF<Bit>,
    d_l: DFF<Bits<32>>,
    d_meta: DFF<Bits<MB>>,
    rec_chain: Vec<Signal<Local, Bits<RB>>>,
    drop_chain: Vec<Signal<Local, Bits<32>>>,
    /// Expert e's load: one 32-bit counter per expert (one wide register with
    /// one wide adder is what synthesis could not finish, docs/timing.md).
    loads: Vec<DFF<Bits<32>>>,
    /// Expert e's load has reached the capacity, as of this cycle: from
    /// last cycle's load (`ld_ge`: ≥ cap, `ld_eq`: = cap − 1, compared from
    /// registers into registers) and whether last cycle's token took it
    /// (`ld_hit`). The choices' compares of the selected load against the
    /// capacity were the tail's longest logic (3.0–3.6 ns, docs/timing.md).
    ld_ge: Vec<DFF<Bit>>,
    ld_eq: Vec<DFF<Bit>>,
    ld_hit: Vec<DFF<Bit>>,
    full_e: Vec<Signal<Local, Bit>>,
    cap_m1: DFF<Bits<32>>,
    /// Each choice's expert id.
    sels: Vec<Signal<Local, Bits<8>>>,
    /// 1 when one of this token's choices takes expert e (at most one does):
    /// decoded from the ids before the weights' delay (`hit_in`) and delayed
    /// beside them (`cd_hit`), so the load counters' adds follow registers
    /// (the decode of `cd_v` and the ids in front of them, `cd_v → loads`,
    /// −0.64 ns, 62 endpoints on seeds 1–3, docs/timing.md).
    hit_in: Vec<Signal<Local, Bits<1>>>,
    cw_v1: Signal<Local, Bits<1>>,
    cd_hit: Vec<SkewLine<1>>,
    hits: Vec<Signal<Local, Bits<32>>>,
    /// Expert e's load as the statistics writer reads it at `si = e + 2`,
    /// selected the cycle before (`si = e + 1`: `si` steps by one, from
    /// `WSend` to `SPrep`): the select by `si` into `w_word` was the
    /// router's critical path (docs/timing.md).
    s_load: DFF<Bits<32>>,
    dropped: DFF<Bits<32>>,
    /// This token's dropped choices, added to `dropped` a cycle later: the
    /// count after the capacity compares was the unit's critical path.
    drop_n: DFF<Bits<32>>,
    o_valid: DFF<Bit>,
    o_rec: DFF<Bits<RB>>,
    o_tok: DFF<Bits<32>>,
    tokens_out: DFF<Bits<32>>,
    /// Every token is out (`tokens_out == T`), a cycle late (a token pushed
    /// keeps the writer busy for longer than that), and only from the run's
    /// second cycle, so no count of the last run's is seen.
    out_done: DFF<Bit>,
    // Writer.
    wstate: DFF<WriterState>,
    /// `wstate`'s decodes as kept flip-flops ([`Copies`], their `d` the decode
    /// of `wstate`'s next value, so each equals the decode every cycle): the
    /// idle pop enabled ~1 000 row bits and the record burst's shift 512, all
    /// off one decode of `wstate` (docs/timing.md). Idle: 0 the pop (FIFO,
    /// `o_occ`, the state, `w_left`, `w_tok`, `rb`), 1 and 2 the record's
    /// halves, 3 `w_slots`, 4 `w_ids`, `w_addr` and `route_ptr`.
    w_idle_cp: Copies<5>,
    /// In `Rec`: 0 the write port's selects, 1 the beat counters, 2 the state's exit.
    w_rec_cp: Copies<3>,
    /// In `Rec` or `WSend`: the shell's `wr_send`, a flip-flop.
    w_send: DFF<Bit>,
    /// The writer's other states, as flags from `wstate`'s next value: the
    /// state transitions and the address and word loads read flags, not
    /// decodes of `wstate` (fan-out 108).
    ws_dp: DFF<Bit>,
    ws_dw: DFF<Bit>,
    ws_sp: DFF<Bit>,
    ws_ws: DFF<Bit>,
    /// The statistics writer may start: the run's tokens are all out, the
    /// output FIFO empty and the writer idle (which, once true, stays true in
    /// `Run`), registered: `Run`'s hand-over to it decodes no `phase` into
    /// `wstate`'s next value, which the writer's copies load from.
    stats_go: DFF<Bit>,
    /// The route record, low and high half (`w_bcat` the two together),
    /// loaded by the pop and held through the burst.
    w_beats_lo: DFF<Bits<RB2>>,
    w_beats_hi: DFF<Bits<RB2>>,
    w_bcat: Signal<Local, Bits<RB>>,
    /// The burst's beat (`rb`'s low bits, a record being at most 4 beats),
    /// as kept copies, one per 32 bits of the port: the write data is the
    /// beat's share of the record by a select (`w_dsel`), so a beat taken
    /// loads 2 flip-flops a copy, not the record's 512 bits that a shift
    /// enabled off `wready` (fan-out 256, −0.66 ns, docs/timing.md).
    /// `c_sl[i]` is copy i's bits.
    rb_at: Vec<Kept<2>>,
    w_dsel: Signal<Local, Bits<W>>,
    w_beat0: Signal<Local, Bits<W>>,
    w_beat1: Signal<Local, Bits<W>>,
    w_beat2: Signal<Local, Bits<W>>,
    w_beat3: Signal<Local, Bits<W>>,
    c_wb1: Constant<Bits<16>>,
    c_wb2: Constant<Bits<16>>,
    c_wb3: Constant<Bits<16>>,
    c_sl: Vec<Constant<Bits<W>>>,
    _wsl: usize,
    pop_lo: Signal<Local, Bit>,
    pop_hi: Signal<Local, Bit>,
    pop_sl: Signal<Local, Bit>,
    pop_id: Signal<Local, Bit>,
    /// The popped record's ids and slots, shifted down a choice at a time, and
    /// the choices left: the writer's current choice is always at bit 0.
    w_ids: DFF<Bits<64>>,
    w_slots: DFF<Bits<256>>,
    w_left: DFF<Bits<8>>,
    /// No choice left (`w_left = 0`), kept as `w_left` moves, for the
    /// dispatch reader's shift and `DPrep`'s exit.
    w_none: DFF<Bit>,
    /// The next token's route record address: tokens leave the FIFO in order.
    route_ptr: DFF<Bits<64>>,
    /// `DPrep` with a choice left: the dispatch reader's shift, as kept
    /// copies of the decode (it enabled 320 bits): 0 `w_ids`, `w_left`,
    /// `w_none` and the read address, 1 `w_slots`.
    d_shift: Copies<2>,
    w_tok: DFF<Bits<32>>,
    w_addr: DFF<Bits<64>>,
    /// The dispatch entry's address as a carry select: the slot's offset
    /// (below 2^34) added to the row's low 34 bits, and the high 30 bits
    /// plus one beside it (one 64-bit carry chain in front of `w_addr` was
    /// 3.6 ns of logic, docs/timing.md).
    d_lo: Signal<Local, Bits<35>>,
    d_hi1: Signal<Local, Bits<30>>,
    /// `d_lo`, the row's high bits and those plus one, registered every cycle:
    /// `DPrep` loads `w_addr` from them, so the slot's carry chain ends in a
    /// register (from `w_slots` through it into `w_addr` was −1.06 ns,
    /// docs/timing.md). They hold the current choice's sum in `DPrep`, which
    /// comes a cycle or more after the choice's last move: `WSend` or
    /// `DWait` lies between two choices, and a record of two or more beats
    /// (or `DWait`) between the pop and the first.
    d_sum: DFF<Bits<35>>,
    d_hi: DFF<Bits<30>>,
    d_hi_p1: DFF<Bits<30>>,
    w_word: DFF<Bits<32>>,
    w_stats: DFF<Bit>,
    rb: DFF<Bits<8>>,
    /// `rb` is the record's last beat, kept as `rb` moves: `wr_last` reads a
    /// flag, not an 8-bit compare in front of the shell's `wr_fire` and the
    /// statistics index's enable (`rb → si_z`/`si_oh`, −1.88, fan-out 40).
    rb_last: DFF<Bit>,
    si: DFF<Bits<32>>,
    /// `si` is past the last statistics word (`si == E + 2`), kept as `si`
    /// moves, with `E + 1` registered from the run's E: the writer's next
    /// state reads a flag, not an add and a 32-bit compare.
    si_end: DFF<Bit>,
    /// `si` as flags: 0, 1, and `si = e + 1` at bit e (`s_load`'s select),
    /// shifted as `si` steps (a 32-bit compare per expert fanned out to
    /// `s_load`, fan-out 98).
    si_z: DFF<Bit>,
    si_1: DFF<Bit>,
    si_oh: DFF<Bits<EL>>,
    e_p1: DFF<Bits<32>>,
    stats_done: DFF<Bit>,
    /// Bytes of a token row's last beat that hold X (all when H fills it): the
    /// padding up to LDX is not data and must not reach the dot products.
    xmask: DFF<Bits<W>>,
    lane_off: Signal<Local, Bits<64>>,

    c_beat_ones: Constant<Bits<W>>,
    c_logp: Constant<Bits<16>>,
    c_pmask: Constant<Bits<64>>,
    c_pmask32: Constant<Bits<32>>,
    c_logcm: Constant<Bits<16>>,
    c_rb2: Constant<Bits<16>>,
    c_hmax: Constant<Bits<32>>,
    c_emax: Constant<Bits<32>>,
    c_tb_last: Constant<Bits<16>>,
    c_mlat: Constant<Bits<8>>,
    c_kmax: Constant<Bits<32>>,
    c_tlim: Constant<Bits<32>>,
    c_lanes: Constant<Bits<16>>,
    c_depth: Constant<Bits<16>>,
    c_depth_m1: Constant<Bits<16>>,
    c_flush: Constant<Bits<8>>,
    c_nb: Constant<Bits<8>>,
    c_rem0: Constant<Bits<32>>,
    c_strb: Constant<Bits<S>>,
    c_ones: Constant<Bits<S>>,
    c_gstart: Vec<Constant<Bits<32>>>,
    c_gp1: Vec<Constant<Bits<16>>>,
    c_gz: Vec<Constant<Bits<16>>>,
    c_gt: Vec<Constant<Bits<16>>>,
    c_i: Vec<Constant<Bits<32>>>,
    /// Choice i is taken (`i < K`), registered every cycle from the run's K:
    /// the normalizer's and the choices' gates read a flag, not a compare.
    k_act: Vec<DFF<Bit>>,
    c_e: Vec<Constant<Bits<8>>>,
    c_meta_tok: Constant<Bits<16>>,
    c_rb: Constant<Bits<16>>,
    _lanes: usize,
    _groups: usize,
    _emax: usize,
    _kmax: usize,
    _rounds: usize,
    _last_lo: usize,
    _last_hi: usize,
}

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum Phase {
    Idle,
    /// The capacity comes first: DPITCH must hold it (4 bytes a slot), and a
    /// launch whose dispatch rows would overlap is refused before any traffic.
    CapPrep,
    CapMul,
    CapDiv,
    /// `cap` becomes min(quotient, T) (see `cap_lt`).
    CapMin,
    /// `cap_bad` is registered from `cap`.
    CapCmp,
    CapCheck,
    BiasReq,
    BiasWait,
    WReq,
    WWait,
    Run,
    Stats,
    Finish,
    Done,
}

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum WriterState {
    Idle,
    Rec,
    DPrep,
    /// A cycle for the dispatch address's registered sum (`d_sum`) to take a
    /// new choice: after a dropped choice, and after a one-beat record.
    DWait,
    SPrep,
    WSend,
}

impl<const W: usize, const S: usize, const EL: usize, const ZB: usize, const TB: usize, const PB: usize>
    MoeUnit<W, S, EL, ZB, TB, PB>
{
    pub fn new(cfg: &MoeConfig) -> Result<Self, HwError> {
        cfg.validate()?;
        if cfg.port_bits != W || W / 8 != S || cfg.expert_slots() != EL || (ZB, TB, PB) != (32 * EL, 40 * EL, 16 * EL) {
            return Err(HwError::Config(format!(
                "MoeUnit<{W}, {EL} slots> built for port_bits = {}, e_max = {}",
                cfg.port_bits, cfg.e_max
            )));
        }
        fn k<const N: usize>(v: u64) -> Constant<Bits<N>> {
            Constant::new(v.to_bits())
        }
        let (l, g, p, cm) = (cfg.lanes, cfg.groups(), cfg.port_bytes(), cfg.row_beats());
        // A row's beat index is below `cm`, so the RAM addresses' `row << log2(cm) | beat` add nothing.
        assert!(cm.is_power_of_two());
        let nr = cfg.k_max - 1;
        // Cycles from the exponentials to the normalizer: the later of the rounds
        // and Σ_e p, plus one, so that both delays are at least a register.
        let rounds_lat = nr * TopkRound::<EL, ZB, PB>::latency(cfg.e_max);
        let q_at = rounds_lat.max(AddTree16Pipe::<PB>::latency(cfg.e_max)) + 1;
        // Cycles from a_valid to o_valid: round 0, x1, the exponentials, rounds and
        // normalizer delay, d, the reciprocal, the weights, o.
        let tail_lat = TopkRound::<EL, ZB, TB>::latency(cfg.e_max)
            + 1
            + ExpUnit::<TB>::LATENCY
            + q_at
            + 1
            + DIV_STAGES
            + MulRoundSat16Pipe::LATENCY
            + 1;
        assert!(tail_lat + 2 < 256);
        assert!(tail_lat / 3 + 2 < OUT_DEPTH, "the output FIFO covers the tail");
        assert!(RECORD_BYTES / p <= 4, "a record's beat is rb's two low bits");
        Ok(with_defaults!(Self {
            shell: Shell::new(&TABLE, cfg.hwinfo()),
            lanes: (0..l).map(|_| GateLane::new(g * cm)).collect(),
            posts: (0..l).map(PostLane::new).collect(),
            xbuf: SyncRam::read_ahead(2 * cm, W / 32),
            r0: TopkRound::new(0, cfg.e_max),
            exps: (0..cfg.e_max).map(ExpUnit::new).collect(),
            rounds: (1..cfg.k_max).map(|r| TopkRound::new(r, cfg.e_max)).collect(),
            divs: crate::many(DIV_STAGES),
            choices: (0..cfg.k_max).map(Choice::new).collect(),
            wq: crate::many(cfg.k_max),
            xd_z: SkewLine::new(ExpUnit::<TB>::LATENCY),
            xd_mask: SkewLine::new(ExpUnit::<TB>::LATENCY),
            xd_gt: SkewLine::new(ExpUnit::<TB>::LATENCY),
            xd_meta: SkewLine::new(ExpUnit::<TB>::LATENCY),
            xd_v: SkewLine::new(ExpUnit::<TB>::LATENCY),
            psum: AddTree16Pipe::new(cfg.e_max),
            sd: SkewLine::new(q_at - AddTree16Pipe::<PB>::latency(cfg.e_max)),
            qd_meta: SkewLine::new(q_at - rounds_lat),
            qd_v: SkewLine::new(q_at - rounds_lat),
            cd_meta: SkewLine::new(MulRoundSat16Pipe::LATENCY),
            cd_v: SkewLine::new(MulRoundSat16Pipe::LATENCY),
            ofifo: Fifo::with_read_copies(OUT_DEPTH, 8).trusting_pop(),
            dbase: SyncRam::new(cfg.e_max),
            post_tag: SkewLine::new(POST_DLY),
            lane_tag: SkewLine::new(GateLane::<W>::latency() - 2),
            zpack: Pack::new(l),
            tpack: Pack::new(l),
            ppack: Pack::new(cfg.e_max),
            ps: crate::many(cfg.k_max),
            sk: crate::many(cfg.k_max),
            rec_chain: crate::many(cfg.k_max),
            drop_chain: crate::many(cfg.k_max),
            loads: crate::many(cfg.e_max),
            ld_ge: crate::many(cfg.e_max),
            ld_eq: crate::many(cfg.e_max),
            ld_hit: crate::many(cfg.e_max),
            full_e: crate::many(cfg.e_max),
            sels: crate::many(cfg.k_max),
            hit_in: crate::many(cfg.e_max),
            cd_hit: (0..cfg.e_max).map(|_| SkewLine::new(MulRoundSat16Pipe::LATENCY)).collect(),
            hits: crate::many(cfg.e_max),
            c_beat_ones: Constant::new(Bits::<W>::mask()),
            c_logp: k(p.trailing_zeros() as u64),
            c_pmask: k(p as u64 - 1),
            c_pmask32: k(p as u64 - 1),
            c_logcm: k(cm.trailing_zeros() as u64),
            c_wones: Constant::new(Bits::<W>::mask()),
            c_slot_at: (0..ZB.div_ceil(W)).map(|i| k((i * W) as u64)).collect(),
            bias_hot: (0..ZB.div_ceil(W)).map(|_| DFF::default()).collect(),
            recv_hot: (0..l).map(|_| DFF::default()).collect(),
            rw_we: (0..l).map(|_| DFF::default()).collect(),
            _bias_slots: ZB.div_ceil(W),
            c_rb2: k(RB2 as u64),
            c_hmax: k(cfg.h_max as u64),
            c_emax: k(cfg.e_max as u64),
            c_tb_last: k(cfg.e_max as u64 - 1),
            c_mlat: k(MulU32Pipe::LATENCY as u64),
            c_mlat_m1: k(MulU32Pipe::LATENCY as u64 - 1),
            c_kmax: k(cfg.k_max as u64),
            c_tlim: k(T_LIMIT as u64),
            c_lanes: k(l as u64),
            c_depth: k(OUT_DEPTH as u64),
            c_depth_m1: k(OUT_DEPTH as u64 - 1),
            c_flush: k(tail_lat as u64 + 2),
            c_nb: k((RECORD_BYTES / p) as u64),
            rb_at: (0..W / 32).map(|_| Kept::default()).collect(),
            c_wb1: k(W as u64),
            c_wb2: k(2 * W as u64),
            c_wb3: k(3 * W as u64),
            c_sl: (0..W / 32).map(|i| Constant::new(Bits::<W>::from(0xFFFF_FFFFu64) << (32 * i) as u64)).collect(),
            _wsl: W / 32,
            c_rem0: k(1 << 13),
            c_strb: k(0xF),
            c_ones: Constant::new(Bits::<S>::mask()),
            c_gstart: (0..g).map(|i| k((i * l) as u64)).collect(),
            c_gp1: (0..g).map(|i| k(i as u64 + 1)).collect(),
            c_hot1: Constant::new(1u64.into()),
            c_gz: (0..g).map(|i| k((32 * i * l) as u64)).collect(),
            c_gt: (0..g).map(|i| k((40 * i * l) as u64)).collect(),
            c_i: (0..cfg.k_max).map(|i| k(i as u64)).collect(),
            k_act: (0..cfg.k_max).map(|_| DFF::default()).collect(),
            c_e: (0..cfg.e_max).map(|e| k(e as u64)).collect(),
            c_meta_tok: k(META_TOK as u64),
            c_rb: k(RB as u64),
            _lanes: l,
            _groups: g,
            _emax: cfg.e_max,
            _kmax: cfg.k_max,
            _rounds: nr,
            _last_lo: nr.saturating_sub(1),
            _last_hi: nr,
            .. vitis, now, run, cap_mul, tb_on, tb_i, tb_addr, use_sk, beats, groups, emask, phase, idle_f, bad_args, bad_t, bad_h, bad_e, bad_k, bad_rel, fm_sh, fm_a, fm_b, bad_form, groups_of, recv_cnt,
            recv_rows, w_in, e_m1, bias_beats, recv_grp, in_w, w_cp, b_end, bias_m1, rw_wa, rw_wd, sp_w, sp_x, sp_addr, sp_beats, sp_rows, sp_pitch, rx, row_end, row_end_cp, beats_m2, one_beat, bias_bus, bias_nx, in_bias, cap_a, cap_b, cap_num, cap_lo, cap_hi, cap_hi1, cap_hs, cap_rem, cap_q, cap_den, cap_dm1, cap_i, cap_pe, cap_me, cap_de, cap_r2,
            cap_dv, cap_lt, cap_fix, cap, cap_bad, cap_m1, ct, cg, cc, g_at, cgoff, go, go_g, go_t, go_r, at_tok, in_run, run_cp, cc_last, cg_last, tok_last, ahead_nz, groups_m2, one_group, pending, room, t_m1, more, ct_last, t_m2, ahead, row_in, ct2, beats_m1, groups_m1, tok_end, flush, flushed, s1_valid, s1_first, s1_last, s1_g, s1_goff, s1_lastg,
            s1_tok, s2_valid, s2_g, s2_goff, s2_lastg, s2_tok, s3_valid, s3_g, s3_lastg, s3_tok, post_v,
            s4_valid, s4_vc, s4_fin, s4_hot, s4_lastg, s4_tok, mz, mt, zplace, tplace, coll_z, coll_t, a_valid, a_z, a_t, a_tok, sel0, x1_valid, x1_z,
            x1_t, x1_mask, x1_gt, x1_meta, x1_tmax, r_meta, r_valid, q_meta, q_valid, cw_meta, cw_valid, cw_v1, d_valid, d_l, d_meta, s_load, dropped, drop_n, o_valid, o_rec,
            o_tok, tokens_out, out_done, o_occ, wstate, w_idle_cp, w_rec_cp, w_send, ws_dp, ws_dw, ws_sp, ws_ws, stats_go, w_beats_lo, w_beats_hi, w_bcat, w_dsel, w_beat0, w_beat1, w_beat2, w_beat3, pop_lo, pop_hi, pop_sl, pop_id, w_ids, w_slots, w_left, w_none, route_ptr, d_shift, w_tok, w_addr, d_lo, d_hi1, d_sum, d_hi, d_hi_p1, w_word,
            w_stats, rb, rb_last, si, si_end, si_z, si_1, si_oh, e_p1, stats_done, xmask, lane_off
        }))
    }
}

impl<const W: usize, const S: usize, const EL: usize, const ZB: usize, const TB: usize, const PB: usize> Logic
    for MoeUnit<W, S, EL, ZB, TB, PB>
{
    #[hdl_gen]
    fn update(&mut self) {
        #[rustfmt::skip]
        dff_setup!(
            self, vitis.ap_clk, tb_on, tb_i, tb_addr, use_sk, beats, groups, emask, phase, bad_args, bad_t, bad_h, bad_e, bad_k, bad_rel, fm_sh, fm_a, fm_b, bad_form, recv_cnt, row_end, beats_m2, one_beat,
            recv_rows, w_in, e_m1, bias_beats, recv_grp, in_w, b_end, bias_m1, rw_wa, rw_wd, sp_w, sp_x, sp_addr, sp_beats, sp_rows, sp_pitch, bias_bus, in_bias, cap_a, cap_b, cap_num, cap_lo, cap_hi, cap_hi1, cap_rem, cap_q, cap_den, cap_dm1, cap_i, cap_pe, cap_lt, cap_fix, cap, cap_bad, cap_m1, ct, cg, cc, g_at, cgoff, at_tok, in_run, cc_last, cg_last, ahead_nz, groups_m2, one_group, pending, room, t_m1, more, ct_last, t_m2, ahead, row_in, ct2, beats_m1, groups_m1, flush, flushed, s1_valid, s1_first, s1_last,
            s1_g, s1_goff, s1_lastg, s1_tok, s2_valid, s2_g, s2_goff, s2_lastg, s2_tok, s3_valid, s3_g,
            s3_lastg, s3_tok, post_v, s4_valid, s4_hot, s4_lastg, s4_tok, coll_z, coll_t, a_valid, a_z, a_t, a_tok,
            x1_valid, x1_z, x1_t, x1_mask, x1_gt, x1_meta, x1_tmax, d_valid, d_l, d_meta, dropped, drop_n, o_valid, o_rec, o_tok, tokens_out, out_done,
            wstate, w_send, ws_dp, ws_dw, ws_sp, ws_ws, stats_go, w_beats_lo, w_beats_hi, w_ids, w_slots, w_left, w_none, route_ptr, w_tok, w_addr, d_sum, d_hi, d_hi_p1, w_word, w_stats, rb, rb_last, si, si_end, si_z, si_1, si_oh, e_p1, stats_done, xmask, s_load
        );
        #[rustfmt::skip]
        clock!(
            self, vitis.ap_clk, cap_mul, dbase, xbuf, lane_tag, post_tag, r0, xd_z, xd_mask, xd_gt, xd_meta, xd_v, psum, sd,
            qd_meta, qd_v, cd_meta, cd_v, ofifo, o_occ, w_idle_cp, w_rec_cp, d_shift, cap_me, cap_de, idle_f, run_cp, go_r, w_cp, s4_vc, s4_fin, row_end_cp, cap_dv
        );
        for i in 0..self._bias_slots {
            self.bias_hot[i].clock.next = self.vitis.ap_clk.val();
            self.bias_hot[i].d.next = self.bias_hot[i].q.val();
        }
        for j in 0..self._lanes {
            self.recv_hot[j].clock.next = self.vitis.ap_clk.val();
            self.recv_hot[j].d.next = self.recv_hot[j].q.val();
            self.rw_we[j].clock.next = self.vitis.ap_clk.val();
        }
        // ---------------- Shell ----------------
        VitisPorts::<W, S>::link(&mut self.vitis, &mut self.shell.vitis);
        for i in 0..TABLE.words() {
            self.now.words[i].next = self.shell.args[i].val();
            self.run.words[i].next = self.shell.run[i].val();
        }
        self.shell.done.next = self.phase.q.val() == Phase::Done;
        self.shell.fail.next = false;
        self.shell.span_load.next = false;
        self.shell.span_resume.next = false;
        // The span loaded next, from registers (see `sp_w`): the bias, the
        // gate weights, the tokens.
        self.shell.span_addr.next = self.sp_addr.q.val();
        self.shell.span_beats.next = self.sp_beats.q.val();
        self.shell.span_rows.next = self.sp_rows.q.val();
        self.shell.span_pitch.next = self.sp_pitch.q.val();
        self.sp_addr.d.next = self.run.wg.val();
        self.sp_beats.d.next = self.beats.q.val();
        self.sp_rows.d.next = self.run.e.val();
        self.sp_pitch.d.next = self.run.ldw.val();
        if self.run.use_bias.val() & !self.sp_w.q.val() {
            self.sp_addr.d.next = self.run.bias.val();
            self.sp_beats.d.next = self.bias_beats.q.val();
            self.sp_rows.d.next = 1.into();
        }
        if self.sp_x.q.val() {
            self.sp_addr.d.next = self.run.x.val();
            self.sp_rows.d.next = self.run.t.val();
            self.sp_pitch.d.next = self.run.ldx.val();
        }
        // x rows go into the double buffer: row r may load once token r − 2 is
        // issued. In `BiasWait` and `WWait` the span's rows are all issued.
        self.shell.span_go.next = self.in_bias.q.val()
            | self.in_w.q.val()
            | (self.run_cp.q.val().get_bit(2) & (self.shell.span_row.val() < self.ct2.q.val()));
        self.shell.ar_req.next = false;
        self.shell.ar_req_addr.next = 0.into();
        self.shell.ar_req_len.next = 0.into();
        // Lane groups for E experts: ceil(E / lanes), from the group start constants.
        self.groups_of.next = 1.into();
        for g in 0..self._groups {
            if self.c_gstart[g].val() < self.now.e.val() {
                self.groups_of.next = self.c_gp1[g].val();
            }
        }
        // Refuse what the unit cannot run or the map rules out (docs/moe.md);
        // the host checks first, this keeps a bad register write from
        // corrupting anything. SMULT is a positive int32 with |t| < 2^38 for
        // every |logit| ≤ 2^31: SMULT < 2^(7+SSHIFT). DPITCH is checked once
        // the capacity is known (CapCheck), still before any traffic.
        self.bad_t.d.next = (self.now.t.val() == 0) | (self.now.t.val() > self.c_tlim.val());
        self.bad_h.d.next = (self.now.h.val() == 0) | (self.now.h.val() > self.c_hmax.val());
        self.bad_e.d.next = (self.now.e.val() == 0) | (self.now.e.val() > self.c_emax.val());
        self.bad_k.d.next = (self.now.k.val() == 0) | (self.now.k.val() > self.c_kmax.val());
        self.bad_rel.d.next =
            (self.now.k.val() > self.now.e.val()) | (self.now.capacity.val() & (self.now.cf.val() == 0));
        self.bad_args.d.next =
            self.bad_t.q.val() | self.bad_h.q.val() | self.bad_e.q.val() | self.bad_k.q.val() | self.bad_rel.q.val();
        // The run's forms, checked in `CapCheck` (see `fm_sh`).
        self.fm_sh.d.next = (self.run.smult.val() >> 7) >> (self.run.sshift.val() & 7);
        self.fm_a.d.next = self.run.bad_shift.val()
            | (self.run.smult.val() == 0)
            | self.run.smult.val().get_bit(31)
            | (((self.run.ldx.val() | self.run.ldw.val() | self.run.dpitch.val()) & self.c_pmask32.val()) != 0);
        self.fm_b.d.next = (self.run.ldx.val() < self.run.h.val()) | (self.run.ldw.val() < self.run.h.val());
        self.bad_form.d.next = self.fm_a.q.val()
            | self.fm_b.q.val()
            | ((self.fm_sh.q.val() >> bit_cast::<32, 6>(self.run.sshift.val() & 0x38)) != 0);

        // ---------------- Phase machine and read requests ----------------
        self.cap_mul.a.next = self.cap_a.q.val();
        self.cap_mul.b.next = self.cap_b.q.val();
        // The dispatch row table: entry e = DISPATCH + e·DPITCH, one a cycle from ap_start.
        self.dbase.port.we.next = self.tb_on.q.val();
        self.dbase.port.waddr.next = self.tb_i.q.val();
        self.dbase.port.wdata.next = self.tb_addr.q.val();
        if self.tb_on.q.val() {
            self.tb_i.d.next = self.tb_i.q.val() + 1;
            self.tb_addr.d.next = self.tb_addr.q.val() + bit_cast::<64, 32>(self.run.dpitch.val());
            if self.tb_i.q.val() == self.c_tb_last.val() {
                self.tb_on.d.next = false;
            }
        }
        self.cap_r2.next = (self.cap_rem.q.val() << 1) | bit_cast::<32, 1>(self.cap_num.q.val().get_bit(63).into());
        // The capacity phases' counter and loads, on their flags (each is set
        // only in its phase, see `cap_pe`): no decode of `phase` enables them.
        // `cap_i` counts in every cycle; each phase is entered with it zero.
        self.cap_i.d.next = self.cap_i.q.val() + 1;
        self.cap_den.d.next = self.run.e.val() << 16;
        self.cap_dm1.d.next = (self.run.e.val() << 16) - 1;
        if self.cap_pe.q.val() {
            self.cap_a.d.next = self.run.cf.val();
            self.cap_b.d.next = self.cap_mul.p.val().get_bits::<32>(0);
            self.cap_i.d.next = 0.into();
        }
        self.cap_lo.d.next =
            bit_cast::<33, 32>(self.cap_mul.p.val().get_bits::<32>(0)) + bit_cast::<33, 32>(self.cap_dm1.q.val());
        self.cap_hi.d.next = self.cap_mul.p.val().get_bits::<32>(32);
        self.cap_hi1.d.next = self.cap_mul.p.val().get_bits::<32>(32) + 1;
        self.cap_hs.next = self.cap_hi.q.val();
        if self.cap_lo.q.val().get_bit(32) {
            self.cap_hs.next = self.cap_hi1.q.val();
        }
        if self.cap_me.q.val().get_bit(0) {
            // `cap_rem` and `cap_q` clear below, on copy 1.
            self.cap_num.d.next = (bit_cast::<64, 32>(self.cap_hs.val()) << 32)
                | bit_cast::<64, 32>(self.cap_lo.q.val().get_bits::<32>(0));
            self.cap_i.d.next = 0.into();
        }
        // What a run starts from, loaded in every idle cycle (so on `start`'s
        // too) on the copies of `idle_f`: nothing reads these registers in
        // `Idle`, and the dispatch table's entry 0 written meanwhile is the
        // one the run writes first.
        if self.idle_f.q.val().get_bit(0) {
            self.beats.d.next = bit_cast::<16, 32>((self.now.h.val() + self.c_pmask32.val()) >> self.c_logp.val());
            self.xmask.d.next = self.c_beat_ones.val();
            if (self.now.h.val() & self.c_pmask32.val()) != 0 {
                self.xmask.d.next = !(self.c_beat_ones.val() << ((self.now.h.val() & self.c_pmask32.val()) << 3));
            }
            self.t_m1.d.next = self.now.t.val() - 1;
        }
        if self.idle_f.q.val().get_bit(1) {
            self.groups.d.next = self.groups_of.val();
            self.groups_m1.d.next = self.groups_of.val() - 1;
            self.emask.d.next = (bits::<EL>(1) << bit_cast::<16, 32>(self.now.e.val())) - 1;
            self.recv_cnt.d.next = 0.into();
            self.recv_rows.d.next = 0.into();
            self.w_in.d.next = false;
            for j in 0..self._lanes {
                self.recv_hot[j].d.next = false;
            }
            self.recv_hot[0].d.next = true;
            self.recv_grp.d.next = 0.into();
            self.cap_i.d.next = 0.into();
            for i in 0..self._bias_slots {
                self.bias_hot[i].d.next = false;
            }
            self.bias_hot[0].d.next = true;
            self.cap_a.d.next = self.now.t.val();
            self.cap_b.d.next = self.now.k.val();
            self.sp_w.d.next = false;
            self.sp_x.d.next = false;
        }
        if self.idle_f.q.val().get_bit(2) {
            self.use_sk.d.next = self.now.topk_softmax.val() | self.now.renormalize.val();
            self.tb_on.d.next = true;
            self.tb_i.d.next = 0.into();
            self.tb_addr.d.next = self.now.dispatch.val();
            self.route_ptr.d.next = self.now.route.val();
        }
        match self.phase.q.val() {
            Phase::Idle => {
                if self.shell.start.val() {
                    self.phase.d.next = Phase::CapPrep;
                    if self.bad_args.q.val() {
                        self.shell.fail.next = true;
                        self.phase.d.next = Phase::Done;
                    }
                }
            }
            Phase::CapPrep => {
                // T·k leaves the multiplier pipeline LATENCY cycles after its
                // operands (the loads on `cap_pe` are below).
                if self.cap_pe.q.val() {
                    self.phase.d.next = Phase::CapMul;
                }
            }
            Phase::CapMul => {
                // ceil(CF·T·k / (E·2^16)) = floor((CF·T·k + E·2^16 − 1) / (E·2^16)),
                // the add registered on the way (`cap_lo`): LATENCY + 1 counts.
                if self.cap_me.q.val().get_bit(0) {
                    self.phase.d.next = Phase::CapDiv;
                }
            }
            Phase::CapDiv => {
                // The division's shifts are below, on `cap_dv`.
                if self.cap_de.q.val().get_bit(0) {
                    self.phase.d.next = Phase::CapMin;
                }
            }
            Phase::CapMin => {
                self.phase.d.next = Phase::CapCmp;
            }
            Phase::CapCmp => {
                self.phase.d.next = Phase::CapCheck;
            }
            Phase::CapCheck => {
                // The span registers hold the gate weights'; with FLAGS.bias the
                // bias's (ceil(4E / beat) beats into the bias bus), which comes first.
                self.shell.span_load.next = true;
                self.phase.d.next = Phase::WReq;
                self.in_w.d.next = true;
                if self.run.use_bias.val() {
                    self.phase.d.next = Phase::BiasReq;
                    self.in_bias.d.next = true;
                    self.in_w.d.next = false;
                }
                if self.cap_bad.q.val() | self.bad_form.q.val() {
                    self.shell.span_load.next = false;
                    self.shell.fail.next = true;
                    self.phase.d.next = Phase::Done;
                    self.in_bias.d.next = false;
                    self.in_w.d.next = false;
                }
            }
            Phase::BiasReq => {
                if self.shell.span_done.val() {
                    self.phase.d.next = Phase::BiasWait;
                }
            }
            Phase::BiasWait => {
                if self.b_end.q.val() {
                    self.recv_cnt.d.next = 0.into();
                    self.shell.span_load.next = true;
                    self.phase.d.next = Phase::WReq;
                    self.in_bias.d.next = false;
                    self.in_w.d.next = true;
                }
            }
            Phase::WReq => {
                if self.shell.span_done.val() {
                    self.phase.d.next = Phase::WWait;
                }
            }
            Phase::WWait => {
                if self.w_in.q.val() {
                    self.recv_cnt.d.next = 0.into();
                    self.recv_rows.d.next = 0.into();
                    self.shell.span_load.next = true;
                    self.phase.d.next = Phase::Run;
                    self.in_run.d.next = true;
                    self.in_w.d.next = false;
                }
            }
            Phase::Run => {
                if self.stats_go.q.val() {
                    self.phase.d.next = Phase::Stats;
                    self.in_run.d.next = false;
                }
            }
            Phase::Stats => {
                if self.stats_done.q.val() {
                    self.phase.d.next = Phase::Finish;
                }
            }
            Phase::Finish => {
                if self.shell.writes_done.val() {
                    self.phase.d.next = Phase::Done;
                }
            }
            Phase::Done => {
                self.phase.d.next = Phase::Idle;
            }
            _ => {
                self.phase.d.next = Phase::Idle;
            }
        }
        if self.cap_dv.q.val().get_bit(0) {
            self.cap_num.d.next = self.cap_num.q.val() << 1;
            self.cap_rem.d.next = self.cap_r2.val();
            if self.cap_r2.val() >= self.cap_den.q.val() {
                self.cap_rem.d.next = self.cap_r2.val() - self.cap_den.q.val();
            }
        }
        if self.cap_dv.q.val().get_bit(1) {
            self.cap_q.d.next =
                (self.cap_q.q.val() << 1) | bit_cast::<64, 1>((self.cap_r2.val() >= self.cap_den.q.val()).into());
        }
        // Bounded by T (an expert takes a token at most once), T when unlimited.
        self.cap_lt.d.next = self.cap_q.q.val() < bit_cast::<64, 32>(self.run.t.val());
        self.cap_fix.d.next = self.cap_de.q.val().get_bit(0);
        if self.cap_de.q.val().get_bit(0) {
            self.cap.d.next = self.cap_q.q.val().get_bits::<32>(0);
        }
        if self.cap_fix.q.val() & !(self.run.capacity.val() & self.cap_lt.q.val()) {
            self.cap.d.next = self.run.t.val();
        }
        // `CapMul`'s last cycle, on copy 1: the division's remainder and quotient.
        if self.cap_me.q.val().get_bit(1) {
            self.cap_rem.d.next = 0.into();
            self.cap_q.d.next = 0.into();
        }
        // The capacity phases' last cycles, a cycle ahead: each of these phases
        // is entered with `cap_i = 0` and left only at its last count (or by the
        // reset), so `cap_i` one short of it now means the last count next.
        self.cap_pe.d.next = (self.phase.q.val() == Phase::CapPrep)
            & (self.cap_i.q.val() == self.c_mlat_m1.val())
            & self.vitis.ap_rst_n.val();
        self.cap_me.d.next = (self.phase.q.val() == Phase::CapMul)
            & (self.cap_i.q.val() == self.c_mlat.val())
            & self.vitis.ap_rst_n.val();
        self.cap_de.d.next =
            (self.phase.q.val() == Phase::CapDiv) & (self.cap_i.q.val() == 63) & self.vitis.ap_rst_n.val();
        self.cap_dv.d.next = (self.cap_dv.q.val().get_bit(0) | self.cap_me.q.val().get_bit(0))
            & !self.cap_de.q.val().get_bit(0)
            & self.vitis.ap_rst_n.val();
        self.cap_bad.d.next = bit_cast::<64, 32>(self.run.dpitch.val()) < (bit_cast::<64, 32>(self.cap.q.val()) << 2);
        // The next span's: after the bias's, the gate weights'; after theirs, the tokens'.
        if self.shell.span_load.val() {
            if self.run.use_bias.val() & !self.sp_w.q.val() {
                self.sp_w.d.next = true;
            } else {
                self.sp_x.d.next = true;
            }
        }
        // The statistics writer's start (see `stats_go`): set once, for a cycle.
        self.stats_go.d.next = self.run_cp.q.val().get_bit(2)
            & self.out_done.q.val()
            & !self.o_occ.any.val()
            & self.w_idle_cp.q.val().get_bit(0)
            & !self.stats_go.q.val()
            & self.vitis.ap_rst_n.val();
        // `Idle` (see `idle_f`): left on `start`, entered after `Done` and on the reset.
        self.idle_f.d.next = self.idle_f.q.val().get_bit(0) & !self.shell.start.val();
        if (self.phase.q.val() == Phase::Done) | !self.vitis.ap_rst_n.val() {
            self.idle_f.d.next = true;
        }
        if self.stats_go.q.val() {
            self.si.d.next = 0.into();
            self.si_z.d.next = true;
            self.si_1.d.next = false;
            self.si_oh.d.next = 0.into();
            self.si_end.d.next = false;
            self.stats_done.d.next = false;
            self.wstate.d.next = WriterState::SPrep;
        }

        // What `Run` starts from, loaded in every cycle of `WReq` and `WWait`
        // (see `w_cp`): nothing reads these registers before `Run`.
        if self.w_cp.q.val().get_bit(0) {
            self.cc.d.next = 0.into();
            self.cc_last.d.next = self.one_beat.q.val();
            self.g_at.d.next = 0.into();
            self.cg.d.next = 0.into();
            self.cg_last.d.next = self.one_group.q.val();
            self.cgoff.d.next = 0.into();
            self.at_tok.d.next = true;
        }
        if self.w_cp.q.val().get_bit(1) {
            self.ct.d.next = 0.into();
            self.ct_last.d.next = self.t_m1.q.val() == 0;
            self.ct2.d.next = 2.into();
            self.more.d.next = true;
            self.ahead.d.next = 0.into();
            self.ahead_nz.d.next = false;
            self.pending.d.next = 0.into();
            self.tokens_out.d.next = 0.into();
        }

        // ---------------- Read-data receiver ----------------
        self.rx.next = self.vitis.m_axi_gmem.rvalid.val();
        // `beats` less one and two, each a cycle behind the one before (`beats`
        // loads in `Idle`, the first beat comes many cycles after `start`): the
        // add, shift and decrement from the argument into `beats_m1` in one
        // cycle were near 165 MHz in four seeds of five (docs/timing.md).
        self.beats_m1.d.next = self.beats.q.val() - 1;
        self.beats_m2.d.next = self.beats_m1.q.val() - 1;
        self.one_beat.d.next = self.beats_m1.q.val() == 0;
        self.row_end.d.next = self.recv_cnt.q.val() == self.beats_m1.q.val();
        if self.rx.val() {
            self.row_end.d.next = self.recv_cnt.q.val() == self.beats_m2.q.val();
            if self.row_end.q.val() {
                self.row_end.d.next = self.one_beat.q.val();
            }
        }
        self.bias_nx.next = self.bias_bus.q.val();
        for i in 0..self._bias_slots {
            if self.bias_hot[i].q.val() & self.in_bias.q.val() {
                self.bias_nx.next = (self.bias_bus.q.val()
                    & !(bit_cast::<ZB, W>(self.c_wones.val()) << self.c_slot_at[i].val()))
                    | (bit_cast::<ZB, W>(self.vitis.m_axi_gmem.rdata.val()) << self.c_slot_at[i].val());
            }
        }
        // Outside the bias phases `bias_nx` is the bus.
        if self.rx.val() {
            self.bias_bus.d.next = self.bias_nx.val();
        }
        if self.rx.val() & self.in_bias.q.val() {
            self.bias_hot[0].d.next = false;
            for i in 1..self._bias_slots {
                self.bias_hot[i].d.next = self.bias_hot[i - 1].q.val();
            }
        }
        if self.rx.val() & self.in_bias.q.val() {
            self.recv_cnt.d.next = self.recv_cnt.q.val() + 1;
        }
        self.bias_m1.d.next = self.bias_beats.q.val() - 1;
        self.b_end.d.next = self.recv_cnt.q.val() == self.bias_beats.q.val();
        if self.rx.val() & self.in_bias.q.val() {
            self.b_end.d.next = self.recv_cnt.q.val() == self.bias_m1.q.val();
        }
        if self.rx.val() & self.in_w.q.val() {
            self.recv_cnt.d.next = self.recv_cnt.q.val() + 1;
            if self.row_end_cp.q.val().get_bit(1) {
                self.recv_cnt.d.next = 0.into();
                self.recv_rows.d.next = self.recv_rows.q.val() + 1;
                self.w_in.d.next = self.recv_rows.q.val() == self.e_m1.q.val();
                // The next lane; after the last, the next group's first.
                for j in 1..self._lanes {
                    self.recv_hot[j].d.next = self.recv_hot[j - 1].q.val();
                }
                for last in (self._lanes - 1)..self._lanes {
                    self.recv_hot[0].d.next = self.recv_hot[last].q.val();
                    if self.recv_hot[last].q.val() {
                        self.recv_grp.d.next = self.recv_grp.q.val() + 1;
                    }
                }
            }
        }
        // The gate RAMs' write, a cycle after the beat (see `rw_we`).
        self.rw_wa.d.next = (self.recv_grp.q.val() << self.c_logcm.val()) | self.recv_cnt.q.val();
        self.rw_wd.d.next = self.vitis.m_axi_gmem.rdata.val();
        for j in 0..self._lanes {
            self.rw_we[j].d.next =
                self.rx.val() & self.in_w.q.val() & self.recv_hot[j].q.val() & self.vitis.ap_rst_n.val();
            self.lanes[j].clock.next = self.vitis.ap_clk.val();
            self.lanes[j].ram_port.we.next = self.rw_we[j].q.val();
            self.lanes[j].ram_port.waddr.next = self.rw_wa.q.val();
            self.lanes[j].ram_port.wdata.next = self.rw_wd.q.val();
            self.lanes[j].ram_port.raddr.next = self.g_at.q.val();
            self.lanes[j].x.next = self.xbuf.rdata.val();
            self.lanes[j].valid.next = self.s1_valid.q.val();
            self.lanes[j].first.next = self.s1_first.q.val();
            self.lanes[j].last.next = self.s1_last.q.val();
        }
        self.xbuf.port.we.next = self.rx.val() & self.run_cp.q.val().get_bit(0);
        self.xbuf.port.waddr.next =
            (bit_cast::<16, 1>(self.recv_rows.q.val().get_bit(0).into()) << self.c_logcm.val()) | self.recv_cnt.q.val();
        // Zero X's row padding: W's padding then multiplies zeros.
        self.xbuf.port.wdata.next = self.vitis.m_axi_gmem.rdata.val();
        if self.row_end_cp.q.val().get_bit(0) {
            self.xbuf.port.wdata.next = self.vitis.m_axi_gmem.rdata.val() & self.xmask.q.val();
        }
        if self.rx.val() & self.run_cp.q.val().get_bit(0) {
            self.recv_cnt.d.next = self.recv_cnt.q.val() + 1;
            if self.row_end_cp.q.val().get_bit(1) {
                self.recv_cnt.d.next = 0.into();
                self.recv_rows.d.next = self.recv_rows.q.val() + 1;
            }
        }

        // ---------------- Gate projection: one beat of every lane per cycle ----------------
        // A token starts only when the output FIFO can take it and every token ahead.
        self.go.next = self.go_r.q.val().get_bit(0);
        self.go_g.next = self.go_r.q.val().get_bit(1);
        self.go_t.next = self.go_r.q.val().get_bit(2);
        self.tok_last.next = self.cc_last.q.val() & self.cg_last.q.val();
        self.groups_m2.d.next = self.groups_m1.q.val() - 1;
        self.one_group.d.next = self.groups_m1.q.val() == 0;
        self.s1_valid.d.next = self.go.val();
        self.s1_first.d.next = self.cc.q.val() == 0;
        self.s1_last.d.next = self.cc_last.q.val();
        self.s1_g.d.next = self.cg.q.val();
        self.s1_goff.d.next = self.cgoff.q.val();
        self.s1_lastg.d.next = self.cg_last.q.val();
        self.s1_tok.d.next = self.ct.q.val();
        if self.go.val() {
            self.at_tok.d.next = self.tok_last.val();
            self.cc.d.next = self.cc.q.val() + 1;
            self.g_at.d.next = self.g_at.q.val() + 1;
            self.cc_last.d.next = self.cc.q.val() == self.beats_m2.q.val();
            if self.cc_last.q.val() {
                self.cc.d.next = 0.into();
                self.g_at.d.next = (self.cg.q.val() + 1) << self.c_logcm.val();
                self.cc_last.d.next = self.one_beat.q.val();
                if self.cg_last.q.val() {
                    self.g_at.d.next = 0.into();
                }
            }
        }
        if self.go_g.val() & self.cc_last.q.val() {
            self.cg.d.next = self.cg.q.val() + 1;
            self.cg_last.d.next = self.cg.q.val() == self.groups_m2.q.val();
            self.cgoff.d.next = self.cgoff.q.val() + self.c_lanes.val();
            if self.cg_last.q.val() {
                self.cg.d.next = 0.into();
                self.cg_last.d.next = self.one_group.q.val();
                self.cgoff.d.next = 0.into();
                self.ct.d.next = self.ct.q.val() + 1;
                self.ct_last.d.next = self.ct.q.val() == self.t_m2.q.val();
                self.ct2.d.next = self.ct2.q.val() + 1;
            }
        }
        self.s2_valid.d.next = self.s1_valid.q.val() & self.s1_last.q.val();
        self.s2_g.d.next = self.s1_g.q.val();
        self.s2_goff.d.next = self.s1_goff.q.val();
        self.s2_lastg.d.next = self.s1_lastg.q.val();
        self.s2_tok.d.next = self.s1_tok.q.val();
        // s3 meets the lanes' logits: the dot products' pipeline lies between.
        self.lane_tag.din.next = bit_cast::<66, 1>(self.s2_valid.q.val().into())
            | (bit_cast::<66, 16>(self.s2_g.q.val()) << 1)
            | (bit_cast::<66, 16>(self.s2_goff.q.val()) << 17)
            | (bit_cast::<66, 1>(self.s2_lastg.q.val().into()) << 33)
            | (bit_cast::<66, 32>(self.s2_tok.q.val()) << 34);
        self.s3_valid.d.next = self.lane_tag.dout.val().get_bit(0);
        self.s3_g.d.next = self.lane_tag.dout.val().get_bits::<16>(1);
        self.s3_lastg.d.next = self.lane_tag.dout.val().get_bit(33);
        self.s3_tok.d.next = self.lane_tag.dout.val().get_bits::<32>(34);
        self.post_tag.din.next = bit_cast::<49, 16>(self.s3_g.q.val())
            | (bit_cast::<49, 1>(self.s3_lastg.q.val().into()) << 16)
            | (bit_cast::<49, 32>(self.s3_tok.q.val()) << 17);
        self.post_v.d.next = (self.post_v.q.val() << 1) | bit_cast::<POST_DLY, 1>(self.s3_valid.q.val().into());
        for top in (POST_DLY - 1)..POST_DLY {
            self.s4_valid.d.next = self.post_v.q.val().get_bit(top);
        }
        self.s4_hot.d.next = self.c_hot1.val() << self.post_tag.dout.val().get_bits::<16>(0);
        self.s4_lastg.d.next = self.post_tag.dout.val().get_bit(16);
        self.s4_tok.d.next = self.post_tag.dout.val().get_bits::<32>(17);
        for j in 0..self._lanes {
            self.posts[j].clock.next = self.vitis.ap_clk.val();
            self.posts[j].res.next = self.lanes[j].res.val();
            self.posts[j].bias.next = self.bias_bus.q.val();
            self.posts[j].use_bias.next = self.run.use_bias.val();
            // A cycle ahead of s3: the lanes register their bias word's select from it.
            self.posts[j].boff.next = self.lane_tag.dout.val().get_bits::<16>(17);
            self.posts[j].smult.next = self.run.smult.val();
            self.posts[j].sshift.next = self.run.sshift.val();
        }
        for j in 0..self._lanes {
            self.zpack.lanes[j].next = self.posts[j].z_o.val();
            self.tpack.lanes[j].next = self.posts[j].t_o.val();
        }
        // Collect the group into the token's logit vector; group 0 starts a new
        // one. The slots are disjoint, so each bit is one AND-OR of its group's flag.
        self.zplace.next = 0.into();
        self.tplace.next = 0.into();
        for g in 0..self._groups {
            if self.s4_hot.q.val().get_bit(g) {
                self.zplace.next = self.zplace.val() | (self.zpack.out.val() << self.c_gz[g].val());
                self.tplace.next = self.tplace.val() | (self.tpack.out.val() << self.c_gt[g].val());
            }
        }
        self.mz.next = self.coll_z.q.val() | self.zplace.val();
        self.mt.next = self.coll_t.q.val() | self.tplace.val();
        if self.s4_hot.q.val().get_bit(0) {
            self.mz.next = self.zplace.val();
            self.mt.next = self.tplace.val();
        }
        self.a_valid.d.next = false;
        if self.s4_vc.q.val().get_bit(0) {
            self.coll_z.d.next = self.mz.val();
        }
        if self.s4_vc.q.val().get_bit(1) {
            self.coll_t.d.next = self.mt.val();
        }
        if self.s4_fin.q.val().get_bit(0) {
            self.a_z.d.next = self.mz.val();
            self.a_tok.d.next = self.s4_tok.q.val();
        }
        if self.s4_fin.q.val().get_bit(1) {
            self.a_valid.d.next = true;
            self.a_t.d.next = self.mt.val();
        }

        // ---------------- Tail: one token per cycle ----------------
        // Round 0 finds the top-1 expert, whose t is the maximum (t is monotone in z).
        self.r0.z.next = self.a_z.q.val();
        self.r0.aux.next = self.a_t.q.val();
        self.r0.mask.next = self.emask.q.val();
        self.r0.meta.next = bit_cast::<MB, 32>(self.a_tok.q.val()) << self.c_meta_tok.val();
        self.r0.valid.next = self.a_valid.q.val();
        self.r0.gt.next = 0.into();
        // Round 0's winner's t, selected from registers into a register.
        self.sel0.next = self.r0.meta_o.val().get_bits::<8>(0);
        self.x1_valid.d.next = self.r0.valid_o.val();
        self.x1_z.d.next = self.r0.z_o.val();
        self.x1_t.d.next = self.r0.aux_o.val();
        self.x1_mask.d.next = self.r0.mask_o.val();
        self.x1_gt.d.next = self.r0.gt_o.val();
        self.x1_meta.d.next = self.r0.meta_o.val();
        self.x1_tmax.d.next = signed_cast(self.r0.aux_o.val().get_bits::<40>(self.sel0.val().index() * 40));
        // The exponentials (ExpUnit::LATENCY stages), the token's buses beside them.
        for e in 0..self._emax {
            self.exps[e].clock.next = self.vitis.ap_clk.val();
            self.exps[e].t.next = self.x1_t.q.val();
            self.exps[e].tmax.next = self.x1_tmax.q.val();
            self.exps[e].experts.next = bit_cast::<16, 32>(self.run.e.val());
        }
        self.xd_z.din.next = self.x1_z.q.val();
        self.xd_mask.din.next = self.x1_mask.q.val();
        self.xd_gt.din.next = self.x1_gt.q.val();
        self.xd_meta.din.next = self.x1_meta.q.val();
        self.xd_v.din.next = bit_cast::<1, 1>(self.x1_valid.q.val().into());
        for e in 0..self._emax {
            self.ppack.lanes[e].next = self.exps[e].p.val();
        }
        // Σ_e p: an adder tree, registered every level.
        self.psum.x.next = self.ppack.out.val();
        self.sd.din.next = self.psum.s.val();
        for r in 0..self._rounds {
            self.rounds[r].clock.next = self.vitis.ap_clk.val();
        }
        for r in 0..self._rounds.min(1) {
            self.rounds[r].z.next = self.xd_z.dout.val();
            self.rounds[r].aux.next = self.ppack.out.val();
            self.rounds[r].mask.next = self.xd_mask.dout.val();
            self.rounds[r].gt.next = self.xd_gt.dout.val();
            self.rounds[r].meta.next = self.xd_meta.dout.val();
            self.rounds[r].valid.next = self.xd_v.dout.val().any();
        }
        for r in 1..self._rounds {
            self.rounds[r].z.next = self.rounds[r - 1].z_o.val();
            self.rounds[r].aux.next = self.rounds[r - 1].aux_o.val();
            self.rounds[r].mask.next = self.rounds[r - 1].mask_o.val();
            self.rounds[r].gt.next = self.rounds[r - 1].gt_o.val();
            self.rounds[r].meta.next = self.rounds[r - 1].meta_o.val();
            self.rounds[r].valid.next = self.rounds[r - 1].valid_o.val();
        }
        self.r_meta.next = self.xd_meta.dout.val();
        self.r_valid.next = self.xd_v.dout.val().any();
        for last in self._last_lo..self._last_hi {
            self.r_meta.next = self.rounds[last].meta_o.val();
            self.r_valid.next = self.rounds[last].valid_o.val();
        }
        self.qd_meta.din.next = self.r_meta.val();
        self.qd_v.din.next = bit_cast::<1, 1>(self.r_valid.val().into());
        self.q_meta.next = self.qd_meta.dout.val();
        self.q_valid.next = self.qd_v.dout.val().any();
        for i in 0..self._kmax {
            self.k_act[i].clock.next = self.vitis.ap_clk.val();
            self.k_act[i].d.next = self.c_i[i].val() < self.run.k.val();
        }
        // Normalizer: all E exponentials, or the k chosen ones.
        for i in 0..self._kmax {
            self.ps[i].next = self.q_meta.val().get_bits::<32>(64 + i * 16) & 0xFFFF;
        }
        self.sk[0].next = self.ps[0].val();
        for i in 1..self._kmax {
            self.sk[i].next = self.sk[i - 1].val();
            if self.k_act[i].q.val() {
                self.sk[i].next = self.sk[i - 1].val() + self.ps[i].val();
            }
        }
        self.d_valid.d.next = self.q_valid.val();
        self.d_meta.d.next = self.q_meta.val();
        self.d_l.d.next = self.sd.dout.val();
        if self.use_sk.q.val() {
            for last in (self._kmax - 1)..self._kmax {
                self.d_l.d.next = self.sk[last].val();
            }
        }
        for s in 0..DIV_STAGES {
            self.divs[s].clock.next = self.vitis.ap_clk.val();
        }
        self.divs[0].rem.next = self.c_rem0.val();
        self.divs[0].q.next = 0.into();
        self.divs[0].l.next = self.d_l.q.val();
        self.divs[0].meta.next = self.d_meta.q.val();
        self.divs[0].valid.next = self.d_valid.q.val();
        for s in 1..DIV_STAGES {
            self.divs[s].rem.next = self.divs[s - 1].rem_o.val();
            self.divs[s].q.next = self.divs[s - 1].q_o.val();
            self.divs[s].l.next = self.divs[s - 1].l_o.val();
            self.divs[s].meta.next = self.divs[s - 1].meta_o.val();
            self.divs[s].valid.next = self.divs[s - 1].valid_o.val();
        }
        // Weights (MulRoundSat16Pipe::LATENCY stages after the reciprocal), then
        // slots and load counters of the k choices.
        for last in (DIV_STAGES - 1)..DIV_STAGES {
            for i in 0..self._kmax {
                self.wq[i].clock.next = self.vitis.ap_clk.val();
                self.wq[i].p.next = self.divs[last].meta_o.val().get_bits::<16>(64 + i * 16);
                self.wq[i].r.next = self.divs[last].q_o.val();
            }
            self.cw_meta.next = self.divs[last].meta_o.val();
            self.cw_valid.next = self.divs[last].valid_o.val();
        }
        self.cd_meta.din.next = bit_cast::<96, 64>(self.cw_meta.val().get_bits::<64>(0))
            | (bit_cast::<96, 32>(self.cw_meta.val().get_bits::<32>(self.c_meta_tok.val().index())) << 64);
        self.cd_v.din.next = bit_cast::<1, 1>(self.cw_valid.val().into());
        self.cw_v1.next = bit_cast::<1, 1>(self.cw_valid.val().into());
        for e in 0..self._emax {
            self.hit_in[e].next = 0.into();
            for i in 0..self._kmax {
                if self.k_act[i].q.val() & (self.cw_meta.val().get_bits::<8>(i * 8) == self.c_e[e].val()) {
                    self.hit_in[e].next = self.cw_v1.val();
                }
            }
            self.cd_hit[e].clock.next = self.vitis.ap_clk.val();
            self.cd_hit[e].din.next = self.hit_in[e].val();
        }
        // Each expert's load against the capacity (see `ld_ge`).
        self.cap_m1.d.next = self.cap.q.val() - 1;
        for e in 0..self._emax {
            self.full_e[e].next = self.ld_ge[e].q.val() | (self.ld_hit[e].q.val() & self.ld_eq[e].q.val());
        }
        for i in 0..self._kmax {
            self.sels[i].next = self.cd_meta.dout.val().get_bits::<8>(i * 8);
            self.choices[i].w.next = self.wq[i].w.val();
            self.choices[i].sel.next = self.sels[i].val();
            self.choices[i].full.next = false;
            for e in 0..self._emax {
                if self.sels[i].val() == self.c_e[e].val() {
                    self.choices[i].full.next = self.full_e[e].val();
                }
            }
            self.choices[i].active.next = self.cd_v.dout.val().any() & self.k_act[i].q.val();
        }
        self.o_valid.d.next = self.cd_v.dout.val().any();
        self.o_tok.d.next = self.cd_meta.dout.val().get_bits::<32>(64);
        // Each choice reads its expert's counter.
        for i in 0..self._kmax {
            self.choices[i].ld.next = 0.into();
            for e in 0..self._emax {
                if self.sels[i].val() == self.c_e[e].val() {
                    self.choices[i].ld.next = self.loads[e].q.val();
                }
            }
        }
        self.rec_chain[0].next = self.choices[0].rec.val();
        self.drop_chain[0].next = bit_cast::<32, 1>(self.choices[0].drop.val().into());
        for i in 1..self._kmax {
            self.rec_chain[i].next = self.rec_chain[i - 1].val() | self.choices[i].rec.val();
            self.drop_chain[i].next = self.drop_chain[i - 1].val();
            if self.choices[i].drop.val() {
                self.drop_chain[i].next = self.drop_chain[i - 1].val() + 1;
            }
        }
        // Chosen experts are distinct, so each counter gains at most 1 a token.
        for e in 0..self._emax {
            self.hits[e].next = 0.into();
            if self.cd_hit[e].dout.val().any() {
                self.hits[e].next = 1.into();
            }
            self.loads[e].clock.next = self.vitis.ap_clk.val();
            self.loads[e].d.next = self.loads[e].q.val() + self.hits[e].val();
            self.ld_ge[e].clock.next = self.vitis.ap_clk.val();
            self.ld_eq[e].clock.next = self.vitis.ap_clk.val();
            self.ld_hit[e].clock.next = self.vitis.ap_clk.val();
            self.ld_ge[e].d.next = self.loads[e].q.val() >= self.cap.q.val();
            self.ld_eq[e].d.next = self.loads[e].q.val() == self.cap_m1.q.val();
            self.ld_hit[e].d.next = self.hits[e].val().get_bit(0);
        }
        self.dropped.d.next = self.dropped.q.val() + self.drop_n.q.val();
        for last in (self._kmax - 1)..self._kmax {
            self.drop_n.d.next = self.drop_chain[last].val();
            self.o_rec.d.next = self.rec_chain[last].val();
        }
        // Each run's statistics start from zero. This comes after the accumulation
        // above so that it wins (an earlier clear was overwritten, and a second run
        // on the same unit counted on from the first).
        if self.cap_de.q.val().get_bit(1) {
            for e in 0..self._emax {
                self.loads[e].d.next = 0.into();
            }
            self.dropped.d.next = 0.into();
            self.drop_n.d.next = 0.into();
        }
        self.ofifo.reset.next = !self.vitis.ap_rst_n.val();
        self.ofifo.push.next = self.o_valid.q.val() & self.flushed.q.val();
        self.ofifo.din.next =
            bit_cast::<OB, RB>(self.o_rec.q.val()) | (bit_cast::<OB, 32>(self.o_tok.q.val()) << self.c_rb.val());
        if self.o_valid.q.val() {
            self.tokens_out.d.next = self.tokens_out.q.val() + 1;
        }
        self.out_done.d.next = (self.tokens_out.q.val() == self.run.t.val()) & self.run_cp.q.val().get_bit(2);
        self.e_p1.d.next = self.run.e.val() + 1;
        self.e_m1.d.next = self.run.e.val() - 1;
        self.bias_beats.d.next =
            bit_cast::<16, 32>(((self.run.e.val() << 2) + self.c_pmask32.val()) >> self.c_logp.val());
        self.room.d.next = self.pending.q.val() < self.c_depth_m1.val();
        // The last beat of a token's last group: ct moves on.
        self.tok_end.next = self.go_t.val() & self.tok_last.val();
        self.t_m2.d.next = self.t_m1.q.val() - 1;
        if self.tok_end.val() & self.ct_last.q.val() {
            self.more.d.next = false;
        }
        self.row_in.d.next = self.rx.val() & self.run_cp.q.val().get_bit(0) & self.row_end_cp.q.val().get_bit(1);
        if self.row_in.q.val() & !self.tok_end.val() {
            self.ahead.d.next = self.ahead.q.val() + 1;
        }
        if !self.row_in.q.val() & self.tok_end.val() {
            self.ahead.d.next = self.ahead.q.val() - 1;
        }
        // `ahead_nz` is next cycle's count ≠ 0, that count being
        // `ahead + row_in − tok_end` plus a row ending now.
        if self.run_cp.q.val().get_bit(2) {
            self.ahead_nz.d.next = (self.rx.val() & self.row_end_cp.q.val().get_bit(1))
                | (self.row_in.q.val() & !self.tok_end.val())
                | (self.ahead.q.val() > 1)
                | ((self.ahead.q.val() == 1) & (self.row_in.q.val() | !self.tok_end.val()));
        }
        self.flushed.d.next = self.flush.q.val() == 0;
        if self.flush.q.val() != 0 {
            self.flush.d.next = self.flush.q.val() - 1;
        }

        // ---------------- Writer ----------------
        self.ofifo.pop.next = false;
        // The dispatch row of the current choice (w_ids[7:0]) is read a cycle
        // ahead; when DPrep moves on to the next choice it reads that one's.
        // `d_shift` is `DPrep & !w_none`, kept (see its field).
        self.dbase.port.raddr.next = bit_cast::<16, 8>(self.w_ids.q.val().get_bits::<8>(0));
        if self.d_shift.q.val().get_bit(0) {
            self.dbase.port.raddr.next = bit_cast::<16, 8>(self.w_ids.q.val().get_bits::<8>(8));
            self.w_ids.d.next = self.w_ids.q.val() >> 8;
            self.w_left.d.next = self.w_left.q.val() - 1;
            self.w_none.d.next = self.w_left.q.val() == 1;
        }
        if self.d_shift.q.val().get_bit(1) {
            self.w_slots.d.next = self.w_slots.q.val() >> 32;
        }
        // The record burst: a beat taken moves the one-hot beat on (`Rec`, on
        // copy 1 of `w_rec_cp`); the pop below starts it at beat 0.
        self.w_bcat.next = (bit_cast::<RB, RB2>(self.w_beats_hi.q.val()) << self.c_rb2.val())
            | bit_cast::<RB, RB2>(self.w_beats_lo.q.val());
        if self.w_rec_cp.q.val().get_bit(1) & self.shell.wr_beat.val() {
            self.rb.d.next = self.rb.q.val() + 1;
            self.rb_last.d.next = self.rb.q.val() == self.c_nb.val() - 2;
        }
        self.w_beat0.next = self.w_bcat.val().get_bits::<W>(0);
        self.w_beat1.next = bit_cast::<W, RB>(self.w_bcat.val() >> self.c_wb1.val());
        self.w_beat2.next = bit_cast::<W, RB>(self.w_bcat.val() >> self.c_wb2.val());
        self.w_beat3.next = bit_cast::<W, RB>(self.w_bcat.val() >> self.c_wb3.val());
        self.w_dsel.next = 0.into();
        for i in 0..self._wsl {
            if !self.rb_at[i].q.val().get_bit(1) & !self.rb_at[i].q.val().get_bit(0) {
                self.w_dsel.next = self.w_dsel.val() | (self.w_beat0.val() & self.c_sl[i].val());
            }
            if !self.rb_at[i].q.val().get_bit(1) & self.rb_at[i].q.val().get_bit(0) {
                self.w_dsel.next = self.w_dsel.val() | (self.w_beat1.val() & self.c_sl[i].val());
            }
            if self.rb_at[i].q.val().get_bit(1) & !self.rb_at[i].q.val().get_bit(0) {
                self.w_dsel.next = self.w_dsel.val() | (self.w_beat2.val() & self.c_sl[i].val());
            }
            if self.rb_at[i].q.val().get_bit(1) & self.rb_at[i].q.val().get_bit(0) {
                self.w_dsel.next = self.w_dsel.val() | (self.w_beat3.val() & self.c_sl[i].val());
            }
        }
        // The idle pop, its loads split among the copies of `w_idle_cp`.
        self.pop_lo.next = self.w_idle_cp.q.val().get_bit(1) & self.o_occ.any.val() & self.run_cp.q.val().get_bit(1);
        self.pop_hi.next = self.w_idle_cp.q.val().get_bit(2) & self.o_occ.any.val() & self.run_cp.q.val().get_bit(1);
        self.pop_sl.next = self.w_idle_cp.q.val().get_bit(3) & self.o_occ.any.val() & self.run_cp.q.val().get_bit(1);
        self.pop_id.next = self.w_idle_cp.q.val().get_bit(4) & self.o_occ.any.val() & self.run_cp.q.val().get_bit(1);
        if self.pop_lo.val() {
            self.w_beats_lo.d.next = self.ofifo.dout.val().get_bits::<RB2>(0);
        }
        if self.pop_hi.val() {
            self.w_beats_hi.d.next = self.ofifo.dout.val().get_bits::<RB2>(self.c_rb2.val().index());
        }
        if self.pop_sl.val() {
            self.w_slots.d.next = self.ofifo.dout.val().get_bits::<256>(256);
        }
        if self.pop_id.val() {
            self.w_ids.d.next = self.ofifo.dout.val().get_bits::<64>(0);
            self.w_addr.d.next = self.route_ptr.q.val();
            self.route_ptr.d.next = self.route_ptr.q.val() + 64;
        }
        if self.w_idle_cp.q.val().get_bit(0) & self.o_occ.any.val() & self.run_cp.q.val().get_bit(1) {
            self.ofifo.pop.next = true;
            self.w_left.d.next = bit_cast::<8, 32>(self.run.k.val());
            self.w_none.d.next = false;
            self.w_tok.d.next = self.ofifo.dout.val().get_bits::<32>(self.c_rb.val().index());
            self.rb.d.next = 0.into();
            self.rb_last.d.next = self.c_nb.val() == 1;
            self.wstate.d.next = WriterState::Rec;
        }
        for i in 0..self._wsl {
            self.rb_at[i].clock.next = self.vitis.ap_clk.val();
            self.rb_at[i].d.next = self.rb.d.val().get_bits::<2>(0);
        }
        self.d_lo.next = bit_cast::<35, 34>(self.dbase.rdata.val().get_bits::<34>(0))
            + (bit_cast::<35, 32>(self.w_slots.q.val().get_bits::<32>(0)) << 2);
        self.d_hi1.next = self.dbase.rdata.val().get_bits::<30>(34) + 1;
        self.d_sum.d.next = self.d_lo.val();
        self.d_hi.d.next = self.dbase.rdata.val().get_bits::<30>(34);
        self.d_hi_p1.d.next = self.d_hi1.val();
        self.lane_off.next = self.w_addr.q.val() & self.c_pmask.val();
        self.s_load.d.next = 0.into();
        for e in 0..self._emax {
            if self.si_oh.q.val().get_bit(e) {
                self.s_load.d.next = self.loads[e].q.val();
            }
        }
        self.shell.wr_send.next = self.w_send.q.val();
        self.shell.wr_addr.next = self.w_addr.q.val() & !self.c_pmask.val();
        self.shell.wr_len.next = 0.into();
        self.shell.wr_data.next =
            bit_cast::<W, 32>(self.w_word.q.val()) << (bit_cast::<16, 64>(self.lane_off.val()) << 3);
        self.shell.wr_strb.next = self.c_strb.val() << bit_cast::<16, 64>(self.lane_off.val());
        self.shell.wr_last.next = true;
        if self.w_rec_cp.q.val().get_bit(0) {
            // The 64-byte record as one burst of full beats.
            self.shell.wr_addr.next = self.w_addr.q.val();
            self.shell.wr_len.next = self.c_nb.val() - 1;
            self.shell.wr_data.next = self.w_dsel.val();
            self.shell.wr_strb.next = self.c_ones.val();
            self.shell.wr_last.next = self.rb_last.q.val();
        }
        // The states, on their flags (`Idle`: the pop above, on `w_idle_cp`).
        if self.w_rec_cp.q.val().get_bit(2) & self.shell.wr_fire.val() {
            // The burst above, on `w_rec_cp`.
            self.wstate.d.next = WriterState::DPrep;
            if self.c_nb.val() == 1 {
                self.wstate.d.next = WriterState::DWait;
            }
        }
        if self.ws_dp.q.val() {
            // Dispatch entry of the current choice: DISPATCH[expert][slot] = token;
            // its row address was read from `dbase` and summed (`d_sum`) since
            // (d_shift moves on).
            if self.w_none.q.val() {
                self.wstate.d.next = WriterState::Idle;
            } else if !self.w_slots.q.val().get_bit(31) {
                self.w_addr.d.next = (bit_cast::<64, 30>(self.d_hi.q.val()) << 34)
                    | bit_cast::<64, 34>(self.d_sum.q.val().get_bits::<34>(0));
                if self.d_sum.q.val().get_bit(34) {
                    self.w_addr.d.next = (bit_cast::<64, 30>(self.d_hi_p1.q.val()) << 34)
                        | bit_cast::<64, 34>(self.d_sum.q.val().get_bits::<34>(0));
                }
                self.w_word.d.next = self.w_tok.q.val();
                self.w_stats.d.next = false;
                self.wstate.d.next = WriterState::WSend;
            } else {
                // A dropped choice (no slot): the next one's sum takes a cycle.
                self.wstate.d.next = WriterState::DWait;
            }
        }
        if self.ws_dw.q.val() {
            self.wstate.d.next = WriterState::DPrep;
        }
        if self.ws_sp.q.val() {
            // Statistics: dropped, capacity, load[0..E).
            if self.si_end.q.val() {
                self.stats_done.d.next = true;
                self.wstate.d.next = WriterState::Idle;
            } else {
                self.w_addr.d.next = self.run.stats.val() + (bit_cast::<64, 32>(self.si.q.val()) << 2);
                self.w_word.d.next = self.s_load.q.val();
                if self.si_z.q.val() {
                    self.w_word.d.next = self.dropped.q.val();
                }
                if self.si_1.q.val() {
                    self.w_word.d.next = self.cap.q.val();
                }
                self.w_stats.d.next = true;
                self.wstate.d.next = WriterState::WSend;
            }
        }
        if self.ws_ws.q.val() & self.shell.wr_fire.val() {
            if self.w_stats.q.val() {
                self.si.d.next = self.si.q.val() + 1;
                self.si_z.d.next = false;
                self.si_1.d.next = self.si_z.q.val();
                self.si_oh.d.next = (self.si_oh.q.val() << 1) | bit_cast::<EL, 1>(self.si_z.q.val().into());
                self.si_end.d.next = self.si.q.val() == self.e_p1.q.val();
                self.wstate.d.next = WriterState::SPrep;
            } else {
                self.wstate.d.next = WriterState::DPrep;
            }
        }

        // After the writer, which drives the pop.
        self.o_occ.clear.next = !self.vitis.ap_rst_n.val();
        self.o_occ.push.next = self.ofifo.push.val();
        self.o_occ.pop.next = self.ofifo.pop.val();
        if self.go_t.val() & self.at_tok.q.val() & !self.ofifo.pop.val() {
            self.pending.d.next = self.pending.q.val() + 1;
        }
        if !(self.go_t.val() & self.at_tok.q.val()) & self.ofifo.pop.val() {
            self.pending.d.next = self.pending.q.val() - 1;
        }

        if !self.vitis.ap_rst_n.val() {
            self.phase.d.next = Phase::Idle;
            self.in_bias.d.next = false;
            self.in_w.d.next = false;
            self.wstate.d.next = WriterState::Idle;
            self.a_valid.d.next = false;
            self.s1_valid.d.next = false;
            self.s2_valid.d.next = false;
            self.s3_valid.d.next = false;
            self.s4_valid.d.next = false;
            self.post_v.d.next = 0.into();
            self.flush.d.next = self.c_flush.val();
            self.flushed.d.next = false;
            self.at_tok.d.next = true;
            self.ahead_nz.d.next = false;
            self.row_in.d.next = false;
            self.in_run.d.next = false;
        }
        // The writer's kept decodes, from `wstate`'s next value (after the reset).
        self.w_idle_cp.d.next = self.wstate.d.val() == WriterState::Idle;
        self.w_rec_cp.d.next = self.wstate.d.val() == WriterState::Rec;
        self.ws_dp.d.next = self.wstate.d.val() == WriterState::DPrep;
        self.ws_dw.d.next = self.wstate.d.val() == WriterState::DWait;
        self.ws_sp.d.next = self.wstate.d.val() == WriterState::SPrep;
        self.ws_ws.d.next = self.wstate.d.val() == WriterState::WSend;
        // `in_run`'s and s4's copies, from their next values (after the reset).
        self.run_cp.d.next = self.in_run.d.val();
        // `in_run`'s register, not its next value: it rises a cycle before a
        // row can make `ahead_nz` (whose next value holds outside `Run`), and
        // falls on `stats_go`, once `more` is clear, so `go` is the same, and
        // `stats_go` (fan-out 49) is off `go_r`'s input (−1.3 ns, docs/timing.md).
        self.go_r.d.next = self.in_run.q.val()
            & self.more.d.val()
            & self.ahead_nz.d.val()
            & (!self.at_tok.d.val() | self.room.d.val());
        self.w_cp.d.next = self.in_w.d.val();
        self.row_end_cp.d.next = self.row_end.d.val();
        self.s4_vc.d.next = self.s4_valid.d.val();
        self.s4_fin.d.next = self.s4_valid.d.val() & self.s4_lastg.d.val();
        self.w_send.d.next = (self.wstate.d.val() == WriterState::Rec) | (self.wstate.d.val() == WriterState::WSend);
        self.d_shift.d.next = (self.wstate.d.val() == WriterState::DPrep) & !self.w_none.d.val();
        // The x buffer's read address `ct[0] · 2^logcm + cc`, a cycle ahead
        // (it keeps copies of it, one per 32 bits of the row).
        self.xbuf.port.raddr.next =
            (bit_cast::<16, 1>(self.ct.d.val().get_bit(0).into()) << self.c_logcm.val()) | self.cc.d.val();
    }
}

// The instantiated slot counts must be `EXPERT_SLOTS` (macro arguments are literals).
const _: () =
    assert!(EXPERT_SLOTS.len() == 3 && EXPERT_SLOTS[0] == 16 && EXPERT_SLOTS[1] == 64 && EXPERT_SLOTS[2] == 256);
crate::vitis_unit!(MoeUnit<EL, ZB, TB, PB>, MoeConfig, [128, 256, 512], expert_slots [16, 64, 256]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_unit_generates() {
        let v = verilog(&MoeConfig::small()).unwrap();
        assert!(v.contains("module ferrite_moe_e12_k8_l4_p128("));
    }
}
