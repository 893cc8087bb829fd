//! rust-hdl generator of the GEMM unit: a Vitis RTL kernel whose controller
//! tiles any M×N×K problem over the systolic array.
//!
//! Dataflow, per block of `rows` output rows (`i0`):
//! 1. load the A panel (rows `i0..i0+rows`, all K bytes) into one beat-wide RAM
//!    per array row;
//! 2. for every block of `cols` columns (`j0`), stream B row by row (one beat
//!    per k, in flight up to `read_fifo_depth` reads), feeding one k-step per
//!    cycle into the array; the A byte comes from the panel RAMs;
//! 3. finished tiles leave the array row by row into an output FIFO while the
//!    next tile already computes; the writer applies bias/ReLU/requantize and
//!    writes one beat per output row.
//!
//! The bias vector, when enabled, is loaded once at the start.
use super::array::{ColFeed, PeRow, RowFeed};
use super::epilogue::EpilogueLane;
use super::regs::{Args, TABLE};
use super::GemmConfig;
use crate::blocks::{Copies, Fifo, Kept, MulU32Pipe, Occupancy, Pack, RequantPipe, SyncRam};
use crate::shell::{Shell, VitisPorts};
use crate::HwError;
use crate::{clock, dff_setup};
use rust_hdl::prelude::*;

/// The GEMM unit's top level. Port names are the Vitis RTL-kernel names
/// (see [`crate::vitis::ports`]); `W` is the memory data width, `S = W / 8`.
#[derive(LogicBlock)]
pub struct GemmUnit<const W: usize, const S: usize> {
    pub vitis: VitisPorts<W, S>,

    shell: Shell<W, S>,
    /// The arguments as written (read on the start cycle) and as latched for the run.
    now: Args,
    run: Args,
    feeds: Vec<RowFeed<W>>,
    cols: Vec<ColFeed>,
    rows: Vec<PeRow<W>>,
    /// The PEs' clear, `!ap_rst_n` a cycle late: taken from the top-level input itself, it made
    /// the whole array's logic input-dependent, which Verilator evaluates on each `eval` of a cycle.
    array_clear: DFF<Bit>,
    lanes: Vec<EpilogueLane>,
    bias_ram: SyncRam<W>,
    /// B beats, read in eight slices, each at a kept copy of the read pointer
    /// (one pointer fanned out to every LUT-RAM cell, docs/timing.md); popped
    /// only by `f_go`, which waits for `b_has`, so it trusts its pops.
    bfifo: Fifo<W>,
    ofifo: Fifo<W>,
    ometa: Fifo<64>,
    /// Per tile in the array: `i0`, `j0` and the block's rows inside M; popped
    /// by a tile's last row leaving the array, long after its push, so it
    /// trusts its pops (the pointer compare was on a critical path).
    tiles: Fifo<96>,
    row_mul: MulU32Pipe,
    /// The shell's `idle`, four times: three enable a third of the run's
    /// counters each, which load in every idle cycle (one phase decode enabled
    /// all 400, docs/timing.md), the fourth selects the first span's arguments.
    idle: Copies<4>,

    // Derived from the arguments at ap_start.
    row_beats: DFF<Bits<16>>,

    phase: DFF<Phase>,
    // Read-address generator.
    i0: DFF<Bits<32>>,
    rows_valid: DFF<Bits<32>>,
    /// Rows of A in the block after this one, and whether this block is the
    /// last (`i0 + rows ≥ M`): registered from `i0` and M every cycle, since
    /// `i0` changes only at a block's end and they are read at the next one.
    next_rows: DFF<Bits<32>>,
    /// Rows of A from `i0` on (M − `i0`), and from the next block on.
    m_left: DFF<Bits<32>>,
    m_rest: DFF<Bits<32>>,
    last_block: DFF<Bit>,
    /// Rows of A in the first block, from M as written.
    first_rows: DFF<Bits<32>>,
    /// The rows of the next span the shell loads or resumes, one register (no
    /// select behind `span_rows`; the select of `rows_valid`, `first_rows` and
    /// `next_rows` into the shell's `ld_rows`/`ld_more` was the GEMM's critical
    /// path, docs/timing.md): in `Idle`, `Finish` and `Done` the first
    /// span's (1 for the bias vector), in `BiasReq`/`BiasWait` the A panel's
    /// first block, from `AReq` to `BDrain` the next block's (`next_rows`,
    /// steady long before a block's end). Eight
    /// bits: a block has at most 64 rows, so `ld_more` is an 8-input OR.
    sp_rows: DFF<Bits<8>>,
    /// The beats of a row of A and of the bias vector, from K and N as written.
    /// Registered every cycle from the arguments, as `refuse` is, so that the
    /// start cycle's span arguments are selects of registers (the add and
    /// compare behind them were the GEMM's critical path).
    a_beats: DFF<Bits<16>>,
    b_beats: DFF<Bits<16>>,
    /// The first column of the next column block of B (`j0 + cols`), so its
    /// address is a mask of a register, not an add in the issue cycle.
    bj1: DFF<Bits<32>>,
    /// Every column block of B has been requested (`j0 ≥ N`).
    bj_done: DFF<Bit>,
    /// The phase is `BStream`, as a flag set and cleared with it: the B read issue
    /// (whose enables fan out to `bk`, `bj1`, `baddr`) decodes no phase.
    in_bs: DFF<Bit>,
    bk: DFF<Bits<32>>,
    /// `bk` is the last k (`bk == K − 1`), kept a cycle ahead as `f_last` is.
    bk_last: DFF<Bit>,
    /// The next B read's address. Its add of LDB is split at bit 32 and done a
    /// read ahead: `b_nlo` holds the low half plus LDB with its carry, so a
    /// step loads the low half from it and the high half, or the high half
    /// plus one, by a flip-flop (the carry out of the add selecting 32 bits in
    /// the same cycle was the last carry path, docs/timing.md). Whenever
    /// `baddr` loads, `b_nlo` loads its low half plus LDB.
    baddr: DFF<Bits<64>>,
    b_nlo: DFF<Bits<33>>,
    /// `b_nlo` plus LDB (a step), and the low half of the address a column
    /// block starts at plus LDB (`bnext`, or B at the last block's end).
    b_ss: Signal<Local, Bits<33>>,
    b_vs: Signal<Local, Bits<33>>,
    /// The next column block's first address (`B + j0`, `j0` = `bj1` masked to
    /// the beat), registered from `bj1`, which is steady for a cycle at least
    /// before each column block's end (below); added as `baddr` is, with B's
    /// high half plus one (`b_hi1`) registered, since B is steady for the run.
    bnext: DFF<Bits<64>>,
    bn_lo: Signal<Local, Bits<33>>,
    b_hi1: DFF<Bits<32>>,
    /// B's low half plus LDB, from the arguments as written (`b_ld_now`, for
    /// the run's first `b_nlo`) and as run (`b_ld_run`, for the last column
    /// block's end), registered every cycle: both are steady long before they
    /// are read, so `b_nlo`'s input selects registers, not carry chains.
    b_ld_now: DFF<Bits<33>>,
    b_ld_run: DFF<Bits<33>>,
    /// `bj1 ≥ N − cols`, registered from `bj1` as `bnext` is.
    bj1_ge: DFF<Bit>,
    /// B reads in flight plus B FIFO entries, counted as reads are issued and
    /// entries popped (a beat arriving moves a read from one to the other).
    b_occ: DFF<Bits<16>>,
    /// A B read may issue this cycle if the AR slot is free: the phase streams B
    /// (`in_bs`), not every column block is requested (`bj_done`), and the B
    /// FIFO has room for one more read by last cycle's `b_occ` with one slot
    /// to spare (a read issued last cycle is not in it). Decided a cycle ahead
    /// from those flags' next values, so the issue's enables fan out from
    /// flip-flops and the slot: three copies, one each for the counters
    /// (`b_issue`), the address (`b_issue_a`) and `b_occ` with the request
    /// (`b_issue_o`); one flip-flop was a net of fan-out 77–100. With K = 1
    /// every read ends a column block, and a read is not issued in the cycle
    /// after one that did (K = 1 tiles end `c_gap` ≥ 2 cycles apart anyway),
    /// so that `bnext` and `bj1_ge` have a cycle to follow `bj1`.
    b_want: Copies<3>,
    b_issue: Signal<Local, Bit>,
    b_issue_a: Signal<Local, Bit>,
    b_issue_o: Signal<Local, Bit>,
    /// The A panel is in (`AWait` ends).
    aw_go: Signal<Local, Bit>,
    /// `bj1` is past N (the column block being issued is the last), kept as
    /// `bj1` moves (from `bj1_ge`) and N ≤ cols (`nb_one`), latched at start,
    /// so `b_want` reads a flag, not a 32-bit compare.
    bj1_end: DFF<Bit>,
    n_mc: DFF<Bits<32>>,
    nb_one: DFF<Bit>,
    b_recv: Signal<Local, Bit>,
    // Read-data receiver.
    recv_cnt: DFF<Bits<16>>,
    /// The beats of a row of A less two, and of the bias vector: latched at start
    /// so the receiver's compares read registers.
    row_beats_m2: DFF<Bits<16>>,
    bias_beats: DFF<Bits<16>>,
    /// `recv_cnt` is a row of A's last beat (`recv_cnt == row_beats − 1`),
    /// kept a cycle ahead as `recv_cnt` moves: the row's end (which resets
    /// `recv_cnt` and moves `a_sel`, fan-out 21) reads a flip-flop, not a
    /// 16-bit compare (docs/timing.md). `row_one`: a row is one beat.
    a_last: DFF<Bit>,
    row_one: DFF<Bit>,
    /// `recv_cnt + 1 == row_beats − 1`: `a_last` after a beat that is not the last.
    a_next_last: Signal<Local, Bit>,
    recv_row: DFF<Bits<32>>,
    /// The phase receives A (`AReq` or `AWait`), and which feeder's RAM takes
    /// the row now arriving (one-hot, `recv_row == r`): flags set and moved
    /// with the phase and the rows, so the RAMs' write enables decode neither
    /// the phase nor `recv_row` (that decode was the GEMM's critical path).
    in_a: DFF<Bit>,
    a_sel: Vec<DFF<Bit>>,
    /// Read data, registered before the A-panel and bias RAMs' writes, with
    /// each row's write enable and a kept copy of its address (`recv_cnt`
    /// addressing every row's RAM cells and the bias RAM's was a net of
    /// fan-out 137, the decode of the bias phases one of 47, docs/timing.md):
    /// the RAMs are read no sooner than a B read's round trip later.
    a_wd: DFF<Bits<W>>,
    a_we: Vec<DFF<Bit>>,
    a_wa: Vec<Kept<16>>,
    bi_we: DFF<Bit>,
    /// The phase is `BiasReq` or `BiasWait`: a flag set by the start that enters
    /// `BiasReq` and cleared by `BiasWait`'s exit, so the bias receive (into the
    /// RAM's write port) decodes no phase (decoded from the next phase, it
    /// was the end of the start's path through the phase machine).
    in_bias: DFF<Bit>,
    bi_wa: Kept<16>,
    bias_rx: Signal<Local, Bit>,
    // Feeder.
    fk: DFF<Bits<32>>,
    fj0: DFF<Bits<32>>,
    feed_done: DFF<Bit>,
    /// `feed_done` again, two kept copies: the two halves of `BDrain`'s exit
    /// loads (one flip-flop was a net of fan-out 134, docs/timing.md).
    fd_cp: Copies<2>,
    since_last: DFF<Bits<16>>,
    promised: DFF<Bits<16>>,
    // The feeder's gate `f_go` reads only registers (it fans out to the B FIFO,
    // `fk`, `fj0`, `promised` and the array inputs): these flags are computed a
    // cycle ahead.
    /// `fk` is the tile's last k-step (`fk == K − 1`).
    f_last: DFF<Bit>,
    /// K − 2 and K = 1, latched at start, to update `f_last`.
    k_m2: DFF<Bits<32>>,
    k_one: DFF<Bit>,
    /// K = 1 and N ≤ cols, registered every cycle from the arguments as
    /// written (as `refuse` is), for the idle cycles' loads of `k_one`,
    /// `bk_last`, `nb_one` and `bj1_end`: no 32-bit compare behind them.
    k_is1: DFF<Bit>,
    n_le_c: DFF<Bit>,
    /// `since_last ≥ c_gap`.
    gap_ok: DFF<Bit>,
    /// A tile may end: `gap_ok`, and the output FIFO has room for another
    /// tile's rows as of last cycle (its count plus `promised` only grows when
    /// a tile ends, and the next tile can end no sooner than `c_gap ≥ 2`
    /// cycles later, so last cycle's answer is never too optimistic). One
    /// flip-flop for both, three copies (one per gate below), so each gate is
    /// one LUT of four flip-flops: the gate feeds the B FIFO's next read
    /// pointer (docs/timing.md).
    end_ok: Copies<3>,
    /// The output FIFO's count plus `promised`, kept as tiles end, rows are
    /// dropped (past M) and popped, so `room` is one compare with a constant.
    o_occ: DFF<Bits<16>>,
    /// Output FIFO depth less a tile's rows: `room` while `o_occ` is at most this.
    c_room: Constant<Bits<16>>,
    /// This cycle's decrease of `o_occ`: a row dropped (past M) and a row
    /// popped last cycle (`o_occ` counts both a cycle late: `room` errs on
    /// the safe side, and the drop's compare behind the tile FIFO's read is
    /// off this path), registered a cycle ahead, and `c_rows` less it; and
    /// `c_rows` less this cycle's decrease of `promised` (a row captured).
    o_dn: DFF<Bits<16>>,
    o_rdn: DFF<Bits<16>>,
    p_rdn: DFF<Bits<16>>,
    /// `o_occ` and `promised` after this cycle without and with a tile's
    /// rows promised, each one add of registers: the tile's end (`f_end2`, a
    /// gate of the feeder's flags) only selects one.
    o_nup: Signal<Local, Bits<16>>,
    o_yup: Signal<Local, Bits<16>>,
    p_nup: Signal<Local, Bits<16>>,
    p_yup: Signal<Local, Bits<16>>,
    /// `Finish` may end: everything written, registered in `Finish` (each
    /// condition, once true there, stays true), so the phase's exit compares
    /// nothing.
    fin_ok: DFF<Bit>,
    f_go: Signal<Local, Bit>,
    /// `f_go & f_last` (a tile's last k-step), as two gates of their own on
    /// their own copies of `room`: with `f_go` they were one net of fan-out
    /// 128 (docs/timing.md). `f_end` moves the feeder's column block,
    /// `f_end2` the gap, the tile FIFO and the output FIFO's count.
    f_end: Signal<Local, Bit>,
    f_end2: Signal<Local, Bit>,
    /// A tile's `i0`, `fj0` and rows, pushed into `tiles` a cycle after its
    /// last k-step (the FIFO's 96-bit write enables on a flip-flop).
    t_push: DFF<Bit>,
    t_din: DFF<Bits<96>>,
    /// The phase streams B (`BStream` or `BDrain`), as a flag set and cleared
    /// with the phase, so the feeder's gate decodes no state.
    in_b: DFF<Bit>,
    /// `in_b & !feed_done`, a kept copy for each of the feeder's three gates.
    feed_on: Copies<3>,
    /// Whether the B FIFO holds a beat, as a flag: the feeder's gate reads it.
    b_has: Occupancy,
    /// This tile is the last column block (`fj0 + cols ≥ N`, i.e. `f_left ≤
    /// cols`), from `f_left` a cycle after it changes: tiles end at least
    /// `c_gap ≥ 2` cycles apart.
    f_fin: DFF<Bit>,
    /// Columns of B left from `fj0` (N − fj0), kept so the tile's column count
    /// needs no subtraction.
    f_left: DFF<Bits<32>>,
    s1_valid: DFF<Bit>,
    s1_last: DFF<Bit>,
    /// The A byte's index in its beat, a kept copy per row of feeds (one
    /// register selecting every row's byte was a net of fan-out 197).
    s1_sel: Vec<Kept<8>>,
    /// The B FIFO's head beat as read, and the bit offset of this column
    /// block's bytes in it (`fj0` within the beat): the byte select follows the
    /// register, so the FIFO read is all that lies in front of it.
    s1_b: DFF<Bits<W>>,
    s1_sh: DFF<Bits<16>>,
    s1_col: Signal<Local, Bits<W>>,
    /// Byte lane `c` of `s1_b` lies inside N (`N − fj0 > c`): the column feeds
    /// zero the others (a registered enable per column, from two small compares).
    s1_en: Vec<DFF<Bit>>,
    // Capture.
    /// The column feeds' bytes as the first row's B bus.
    bpack: Pack<8, W>,
    rchain: Vec<Signal<Local, Bits<W>>>,
    ichain: Vec<Signal<Local, Bits<32>>>,
    cchain: Vec<Signal<Local, Bit>>,
    any_cap: Signal<Local, Bit>,
    /// The captured row's index in its tile.
    cap_idx: Signal<Local, Bits<32>>,
    /// The tile FIFO's head, registered every cycle, so the capture's M check
    /// and row add do not follow the LUT-RAM read (one path, docs/timing.md).
    /// It is current when read: a tile's first row is captured four cycles
    /// or more after its push (`t_push`, then the rows' `cap_p`/`cap_q`/`cap_r`)
    /// and the next tile's two or more after the pop at its last row (tiles
    /// end `c_gap` = max(rows, cols) + 1 cycles apart, rows leave a cycle apart).
    t_head: DFF<Bits<96>>,
    /// A finished row, registered before the output FIFO push: the `tiles`
    /// read, the row index and the M check get a cycle of their own.
    cap_v: DFF<Bit>,
    /// The row lies inside M (it is pushed).
    cap_ok: DFF<Bit>,
    cap_d: DFF<Bits<W>>,
    /// The output row's index and `j0`, as `ometa` holds them.
    cap_m: DFF<Bits<64>>,
    /// Whether the output FIFO holds a row, as a flag: the writer's pop enables
    /// its row registers.
    o_has: Occupancy,
    // Writer.
    wstate: DFF<WriterState>,
    /// The writer is in `Idle`, as a flag set and cleared with it: the output
    /// FIFO's pop (into `o_occ` and the row registers' enables) decodes no state.
    w_idle: DFF<Bit>,
    /// `w_idle` again, twice, for the pop's two gates: the FIFOs' read side
    /// and `o_occ`, and the row's registers (one gate fanned out to 176).
    w_idle_cp: Copies<2>,
    pop_row: Signal<Local, Bit>,
    w_data: DFF<Bits<W>>,
    w_i: DFF<Bits<32>>,
    w_j0: DFF<Bits<32>>,
    w_addr: DFF<Bits<64>>,
    /// The row's address less `w_i · LDC`, which `row_mul` computes meanwhile:
    /// C plus `w_coff`, split at bit 32 as `baddr` is (C's high half plus
    /// one in `c_hi1`).
    w_base: DFF<Bits<64>>,
    wb_lo: Signal<Local, Bits<33>>,
    c_hi1: DFF<Bits<32>>,
    /// The row's byte offset from C's row start (`w_j0` bytes with requant,
    /// else 4·`w_j0`, masked to the beat) and within the beat, registered in
    /// `Fetch`: `Bias` and `Pack` add and shift by registers, not by a select
    /// of shifts of `w_j0`.
    w_coff: DFF<Bits<32>>,
    w_boff: DFF<Bits<16>>,
    /// The writer is in `Send`, as a flag set and cleared with it: the shell's
    /// write request decodes no state.
    w_send: DFF<Bit>,
    /// The writer is in `Pack`, as two kept flags set with it: the beat's and
    /// the strobes' loads (144 enables on a decode of `wstate`).
    w_pack: Copies<2>,
    /// The writer is in `Fetch`, `Bias`, `Wait`: flags from the next state,
    /// for those states' loads (one decode of `wstate` enabled 226 bits).
    ws_fetch: DFF<Bit>,
    ws_bias: DFF<Bit>,
    ws_wait: DFF<Bit>,
    /// `ws_bias` again, a kept copy per epilogue lane for its `en_add` (one
    /// decode of `wstate` enabled 152 bits, docs/timing.md).
    w_add: Vec<Kept<1>>,
    /// Cycles spent in `Wait`, and its last (registered from FLAGS.requant):
    /// a row waits for the requantizer only when it is requantized, else for
    /// the row address's product (the int32 result is ready a cycle after `Bias`).
    w_wait: DFF<Bits<4>>,
    w_wend: DFF<Bits<4>>,
    /// The strobe mask's shift, `lanes − 4·cols` (`lanes − cols` with requant)
    /// for the row's columns inside N, loaded in `Wait` from `w_short` and
    /// `w_shn`, so the mask only shifts (the subtract and the shift in one
    /// cycle were the GEMM's critical path; the compare, subtract and select
    /// in one cycle were again, docs/timing.md).
    w_sh: DFF<Bits<8>>,
    /// N − `w_j0`, registered in `Fetch`; from it, registered every cycle,
    /// whether the row is short (`w_left < cols`) and a short row's shift.
    w_left: DFF<Bits<32>>,
    w_short: DFF<Bit>,
    w_shn: DFF<Bits<8>>,
    w_beat: DFF<Bits<W>>,
    /// The row's strobes before their shift to its offset in the beat, from
    /// `w_sh` in `Wait`, so `Pack` only shifts.
    w_mask: DFF<Bits<S>>,
    w_strb: DFF<Bits<S>>,
    bias_row: Signal<Local, Bits<W>>,
    /// The column offset of the row the writer pops next: the output FIFO's
    /// head, or the row pushed into it this cycle when it is empty. The bias
    /// RAM reads it a cycle before the pop (`Idle` pops the row it saw at the
    /// head or in the push the cycle before), so the bias word is in `w_bias`
    /// in `Fetch` and the lanes add it into a register of their own (`pre`)
    /// there; `Bias` only moves that sum into the requantizer's input
    /// register (the add between the block RAM and the multipliers was the
    /// GEMM's critical path, docs/timing.md).
    b_j0: Signal<Local, Bits<32>>,
    /// The lane select of the word read, registered beside the RAM's read.
    b_off: DFF<Bits<16>>,
    /// The row's bias lanes, registered so the bias RAM's read (its clock-to-out
    /// is most of a cycle) and the lane add have a cycle each.
    w_bias: DFF<Bits<W>>,
    /// The epilogue lanes' int32 and int8 results, packed as lanes of a beat.
    p32: Pack<32, W>,
    p8: Pack<8, W>,
    /// The beat before its shift: `p8` with requant, else `p32`, a quarter of
    /// the bits (`c_quarter`) on each of four kept copies of the flag (one
    /// argument bit selected 197 bits, docs/timing.md).
    w_src: Signal<Local, Bits<W>>,
    rq_cp: Copies<4>,
    c_quarter: Vec<Constant<Bits<W>>>,

    // Generation-time parameters.
    c_logp: Constant<Bits<16>>,
    /// The smallest C pitch that holds a row: N·4 bytes, or N with FLAGS.requant.
    ldc_min: DFF<Bits<64>>,
    /// The arguments as written are refused (docs/gemm.md): registered from
    /// them every cycle, two stages (the sizes' and the pitches' checks, and
    /// `ldc_min`, then their OR with the C pitch's compare). The control slave
    /// takes at least three cycles per AXI4-Lite write, so the argument
    /// registers are steady for three cycles before the write of `ap_start`
    /// can start a run.
    refuse: DFF<Bit>,
    /// A size is 0 (`bad_zero`), K past the buffers (`bad_size`), N past the
    /// bias RAM (`bad_bias`): three registers, so none stands behind
    /// another's compares.
    bad_zero: DFF<Bit>,
    bad_size: DFF<Bit>,
    bad_bias: DFF<Bit>,
    /// A pitch off the beat (`bad_pitch`), or shorter than its row
    /// (`bad_ld`): two registers, the compares' carry chains beside the
    /// reduction (one register for both was a critical path, docs/timing.md).
    bad_pitch: DFF<Bit>,
    bad_ld: DFF<Bit>,
    /// QSHIFT is out of range: a register of its own beside `bad_size` (its
    /// compare behind `bad_size`'s OR was a critical path, docs/timing.md).
    bad_shift: DFF<Bit>,
    /// `BiasWait` ends: every beat of the bias vector is in, registered in
    /// `BiasWait` (a one-cycle flag), so the exit's loads decode no phase.
    bias_in: DFF<Bit>,
    c_pmask: Constant<Bits<64>>,
    /// The byte offsets in a beat that a tile's int32 row can start at: `j0` is a
    /// multiple of `cols`, so the low bits of `4·j0` are known zero (none set
    /// when a row fills the beat).
    c_rmask: Constant<Bits<64>>,
    /// Likewise for a tile's first byte of B: `fj0` is a multiple of `cols`.
    c_bmask: Constant<Bits<64>>,
    c_rows: Constant<Bits<32>>,
    /// The bits a row count up to `rows` can have: `recv_row` and `rows_valid`
    /// are compared in these only (a 32-bit compare into the A-to-B transition's
    /// enables was the GEMM's critical path).
    c_rowbits: Constant<Bits<32>>,
    c_cols: Constant<Bits<32>>,
    c_gap: Constant<Bits<16>>,
    c_gap1: Constant<Bits<16>>,
    /// The B reads in flight or buffered that still leave a slot for a read issued
    /// last cycle: the read FIFO's depth less one.
    c_rspare: Constant<Bits<16>>,
    c_ofifo: Constant<Bits<16>>,
    c_kmax: Constant<Bits<32>>,
    /// The bits a k-step index can have (k < K ≤ k_max): the last-step compares
    /// (`fk`, `bk` against `k_m2`) look at these only.
    c_kbits: Constant<Bits<32>>,
    c_nmax: Constant<Bits<32>>,
    c_lanes: Constant<Bits<8>>,
    /// `w_sh` for a row of `cols` columns: `lanes − 4·cols`, `lanes − cols`.
    c_sh32: Constant<Bits<8>>,
    c_sh8: Constant<Bits<8>>,
    /// Each column's index, for its lane enable.
    c_col: Vec<Constant<Bits<8>>>,
    c_ones: Constant<Bits<S>>,
    c_wait_rq: Constant<Bits<4>>,
    c_wait_mul: Constant<Bits<4>>,
    _rows: usize,
    _cols: usize,
}

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum Phase {
    Idle,
    BiasReq,
    BiasWait,
    AReq,
    AWait,
    BStream,
    BDrain,
    Finish,
    Done,
}

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum WriterState {
    Idle,
    /// The lanes add the row's bias word (read before the pop) into `pre`.
    Fetch,
    Bias,
    /// The requantizer pipeline (and the row address multiply) run.
    Wait,
    Pack,
    Send,
}

impl<const W: usize, const S: usize> GemmUnit<W, S> {
    pub fn new(cfg: &GemmConfig) -> Result<Self, HwError> {
        cfg.validate()?;
        if cfg.port_bits != W || W / 8 != S {
            return Err(HwError::Config(format!("GemmUnit<{W}> built for port_bits = {}", cfg.port_bits)));
        }
        let (r, c, p) = (cfg.rows, cfg.cols, cfg.port_bytes());
        let ofifo = (4 * r).next_power_of_two();
        fn k<const N: usize>(v: u64) -> Bits<N> {
            v.to_bits()
        }
        Ok(with_defaults!(Self {
            shell: Shell::new(&TABLE, cfg.hwinfo()),
            feeds: (0..r).map(|row| RowFeed::new(row, cfg.k_max / p)).collect(),
            a_sel: crate::many(r),
            s1_sel: (0..r).map(|_| Kept::default()).collect(),
            a_we: crate::many(r),
            a_wa: (0..r).map(|_| Kept::default()).collect(),
            cols: (0..c).map(ColFeed::new).collect(),
            rows: (0..r).map(|row| PeRow::new(row, c)).collect(),
            lanes: crate::many(c),
            bias_ram: SyncRam::new(cfg.n_max * 4 / p),
            bfifo: Fifo::with_read_copies(cfg.read_fifo_depth, 8).trusting_pop(),
            ofifo: Fifo::new(ofifo),
            ometa: Fifo::new(ofifo),
            tiles: Fifo::with_read_copies(4, 3).trusting_pop(),
            bpack: Pack::new(c),
            rchain: crate::many(r),
            ichain: crate::many(r),
            cchain: crate::many(r),
            p32: Pack::new(c),
            p8: Pack::new(c),
            c_quarter: (0..4).map(|i| Constant::new(Bits::<W>::mask() >> ((W - W / 4) as u64) << ((i * W / 4) as u64))).collect(),
            c_logp: Constant::new(k(p.trailing_zeros() as u64)),
            c_pmask: Constant::new(k(p as u64 - 1)),
            c_rmask: Constant::new(k((p as u64 - 1) & !(4 * c as u64 - 1))),
            c_bmask: Constant::new(k((p as u64 - 1) & !(c as u64 - 1))),
            c_rows: Constant::new(k(r as u64)),
            c_rowbits: Constant::new(k((r as u64 + 1).next_power_of_two() - 1)),
            c_cols: Constant::new(k(c as u64)),
            // Consecutive tiles' `last` steps must be this many cycles apart so a
            // row's results are captured before the next tile overwrites them.
            c_gap: Constant::new(k((r.max(c) + 1) as u64)),
            c_gap1: Constant::new(k(r.max(c) as u64)),
            c_rspare: Constant::new(k(cfg.read_fifo_depth as u64 - 1)),
            c_ofifo: Constant::new(k(ofifo as u64)),
            c_room: Constant::new(k((ofifo - r) as u64)),
            c_kmax: Constant::new(k(cfg.k_max as u64)),
            c_kbits: Constant::new(k((cfg.k_max as u64).next_power_of_two() - 1)),
            c_nmax: Constant::new(k(cfg.n_max as u64)),
            c_lanes: Constant::new(k(S as u64)),
            c_sh32: Constant::new(k((S - 4 * c) as u64)),
            c_sh8: Constant::new(k((S - c) as u64)),
            c_col: (0..c).map(|col| Constant::new(k(col as u64))).collect(),
            s1_en: (0..c).map(|_| DFF::default()).collect(),
            w_add: (0..c).map(|_| Kept::default()).collect(),
            c_ones: Constant::new(Bits::<S>::mask()),
            // `Wait` lasts until the int8 results are out; the row product is ready before.
            c_wait_rq: Constant::new(k(RequantPipe::LATENCY.max(MulU32Pipe::LATENCY) as u64 - 1)),
            c_wait_mul: Constant::new(k(const {
                assert!(MulU32Pipe::LATENCY >= 2, "`w_sh` loads in `Wait`'s first cycle, `w_mask` in its second");
                MulU32Pipe::LATENCY as u64 - 1
            })),
            _rows: r,
            _cols: c,
            .. vitis, now, run, row_mul, idle, row_beats, phase, i0,
            rows_valid, next_rows, m_left, m_rest, last_block, first_rows, sp_rows, a_beats, b_beats, bj1, bj_done, in_bs, bk, bk_last, baddr, b_nlo, b_ss, b_vs, bnext, bn_lo, b_hi1, b_ld_now, b_ld_run, bj1_ge, b_occ,
            b_want, b_issue, b_issue_a, b_issue_o, aw_go, bj1_end, n_mc, nb_one, b_recv, recv_cnt, row_beats_m2, bias_beats, a_last, row_one, a_next_last, recv_row, fk, fj0, feed_done, since_last,
            promised, f_last, k_m2, k_one, k_is1, n_le_c, gap_ok, end_ok, o_occ, o_dn, o_rdn, p_rdn, o_nup, o_yup, p_nup, p_yup, fin_ok, f_go, f_end, f_end2, t_push, t_din, in_a, in_b, o_has, b_has, f_fin, f_left, s1_valid, s1_last, s1_b, s1_sh, s1_col, any_cap,
            cap_idx, t_head, cap_v, cap_ok, cap_d, cap_m, wstate, w_data, w_i, w_j0, w_addr, w_base, wb_lo, c_hi1, w_coff, w_boff, w_send, w_wait, w_wend, w_sh, w_left, w_short, w_shn,
            w_beat, w_mask, w_strb, bias_row, b_j0, b_off, w_bias, ldc_min, refuse, bad_zero, bad_size, bad_bias, bad_pitch, bad_ld, bad_shift, w_idle, w_idle_cp, pop_row, bias_in, array_clear, a_wd, bi_we, in_bias, bi_wa, bias_rx, fd_cp, w_pack, w_src, rq_cp, feed_on, ws_fetch, ws_bias, ws_wait
        }))
    }
}

impl<const W: usize, const S: usize> Logic for GemmUnit<W, S> {
    #[hdl_gen]
    fn update(&mut self) {
        #[rustfmt::skip]
        dff_setup!(
            self, vitis.ap_clk, row_beats, phase, i0, rows_valid, next_rows, m_left, m_rest, last_block, first_rows, sp_rows, a_beats,
            b_beats, bj1, bj_done, in_bs, bj1_end, n_mc, nb_one,
            bk, bk_last, baddr, b_nlo, bnext, b_hi1, b_ld_now, b_ld_run, bj1_ge, b_occ, recv_cnt, row_beats_m2, bias_beats, a_last, row_one, recv_row, fk, fj0, feed_done,
            since_last, promised, f_last, k_m2, k_one, k_is1, n_le_c, gap_ok, o_occ, o_dn, o_rdn, p_rdn, fin_ok, ws_fetch, ws_bias, ws_wait, t_push, t_din, in_a, in_b, f_fin, s1_valid, s1_last, s1_b, s1_sh, wstate, w_data,
            w_i, w_j0, w_addr, w_base, c_hi1, w_coff, w_boff, w_send, w_wait, w_wend, w_sh, w_left, w_short, w_shn, w_beat, w_mask, w_strb, b_off, w_bias, t_head, cap_v, cap_ok, cap_d, cap_m,
            f_left, ldc_min, refuse, bad_zero, bad_size, bad_bias, bad_pitch, bad_ld, bad_shift, w_idle, bias_in, array_clear, a_wd, bi_we, in_bias
        );
        #[rustfmt::skip]
        clock!(
            self, vitis.ap_clk, bias_ram, bfifo, b_has, tiles, ofifo, ometa, row_mul, o_has, idle, end_ok, w_idle_cp, b_want, bi_wa,
            fd_cp, w_pack, rq_cp, feed_on
        );
        for r in 0..self._rows {
            self.a_sel[r].clock.next = self.vitis.ap_clk.val();
            self.a_sel[r].d.next = self.a_sel[r].q.val();
            self.a_we[r].clock.next = self.vitis.ap_clk.val();
            self.a_wa[r].clock.next = self.vitis.ap_clk.val();
        }
        // ---------------- Shell ----------------
        self.array_clear.d.next = !self.vitis.ap_rst_n.val();
        VitisPorts::<W, S>::link(&mut self.vitis, &mut self.shell.vitis);
        for i in 0..TABLE.words() {
            self.now.words[i].next = self.shell.args[i].val();
            self.run.words[i].next = self.shell.run[i].val();
        }
        self.shell.done.next = self.phase.q.val() == Phase::Done;
        self.shell.fail.next = false;
        self.shell.span_load.next = false;
        self.shell.span_resume.next = false;
        self.shell.span_addr.next = self.run.a.val();
        self.shell.span_beats.next = self.row_beats.q.val();
        self.shell.span_rows.next = bit_cast::<32, 8>(self.sp_rows.q.val());
        // The first span's rows (two cycles behind the arguments as written, as
        // `refuse`) in `Idle` and the phases that lead to it.
        self.sp_rows.d.next = self.first_rows.q.val().get_bits::<8>(0);
        if self.now.use_bias.val() {
            self.sp_rows.d.next = 1.into();
        }
        self.shell.span_pitch.next = self.run.lda.val();
        self.shell.span_go.next = (self.phase.q.val() == Phase::BiasReq) | (self.phase.q.val() == Phase::AReq);
        // Rows of A in the first block (M as written), and, a stage each from
        // `m_left`, in the block after this one and whether this one is the last.
        self.first_rows.d.next = self.c_rows.val();
        if self.now.m.val() < self.c_rows.val() {
            self.first_rows.d.next = self.now.m.val();
        }
        self.a_beats.d.next =
            bit_cast::<16, 32>((self.now.k.val() + bit_cast::<32, 64>(self.c_pmask.val())) >> self.c_logp.val());
        self.b_beats.d.next =
            bit_cast::<16, 32>(((self.now.n.val() << 2) + bit_cast::<32, 64>(self.c_pmask.val())) >> self.c_logp.val());
        self.m_rest.d.next = self.m_left.q.val() - self.c_rows.val();
        self.last_block.d.next = self.m_left.q.val() <= self.c_rows.val();
        self.next_rows.d.next = self.c_rows.val();
        if self.m_rest.q.val() < self.c_rows.val() {
            self.next_rows.d.next = self.m_rest.q.val();
        }
        self.row_beats_m2.d.next = self.row_beats.q.val() - 2;
        self.row_one.d.next = self.row_beats.q.val() == 1;
        self.a_next_last.next = self.recv_cnt.q.val() == self.row_beats_m2.q.val();
        self.shell.ar_req.next = false;
        self.shell.ar_req_addr.next = self.baddr.q.val();
        self.shell.ar_req_len.next = 0.into();

        self.ldc_min.d.next = bit_cast::<64, 32>(self.now.n.val()) << 2;
        if self.now.requant.val() {
            self.ldc_min.d.next = bit_cast::<64, 32>(self.now.n.val());
        }
        // Refuse what the buffers cannot hold and what the map rules out
        // (docs/gemm.md); the host checks first, this keeps a bad register
        // write from corrupting anything.
        self.bad_zero.d.next = (self.now.m.val() == 0) | (self.now.n.val() == 0) | (self.now.k.val() == 0);
        self.bad_size.d.next = self.now.k.val() > self.c_kmax.val();
        self.bad_bias.d.next = self.now.use_bias.val() & (self.now.n.val() > self.c_nmax.val());
        self.bad_shift.d.next = self.now.bad_shift.val();
        self.bad_pitch.d.next = (bit_cast::<64, 32>(self.now.lda.val() | self.now.ldb.val() | self.now.ldc.val())
            & self.c_pmask.val())
            != 0;
        self.bad_ld.d.next = (self.now.lda.val() < self.now.k.val()) | (self.now.ldb.val() < self.now.n.val());
        self.refuse.d.next = self.bad_zero.q.val()
            | self.bad_size.q.val()
            | self.bad_bias.q.val()
            | self.bad_pitch.q.val()
            | self.bad_ld.q.val()
            | self.bad_shift.q.val()
            | (bit_cast::<64, 32>(self.now.ldc.val()) < self.ldc_min.q.val());
        self.bias_in.d.next = (self.phase.q.val() == Phase::BiasWait)
            & (self.recv_cnt.q.val() == self.bias_beats.q.val())
            & !self.bias_in.q.val();
        // ---------------- Phase machine and read requests ----------------
        self.aw_go.next = (self.phase.q.val() == Phase::AWait)
            & (((self.recv_row.q.val() ^ self.rows_valid.q.val()) & self.c_rowbits.val()) == 0);
        // The run's counters, loaded from the arguments as written in every idle
        // cycle, not only the start's (nothing reads them while idle), on the
        // shell's `idle` flip-flop, copied: three copies share them (docs/timing.md).
        self.idle.d.next = self.shell.idle_next.val();
        if self.idle.q.val().get_bit(0) {
            self.row_beats.d.next = self.a_beats.q.val();
            self.bias_beats.d.next = self.b_beats.q.val();
            self.i0.d.next = 0.into();
            self.m_left.d.next = self.now.m.val();
            self.rows_valid.d.next = self.first_rows.q.val();
            self.recv_cnt.d.next = 0.into();
            self.a_last.d.next = self.a_beats.q.val() == 1;
            self.recv_row.d.next = 0.into();
            self.since_last.d.next = self.c_gap.val();
            self.gap_ok.d.next = true;
            self.promised.d.next = 0.into();
            self.o_occ.d.next = 0.into();
            self.b_occ.d.next = 0.into();
        }
        self.k_is1.d.next = self.now.k.val() == 1;
        self.n_le_c.d.next = self.now.n.val() <= self.c_cols.val();
        if self.idle.q.val().get_bit(1) {
            // The B stream's counters start here and are left so by each
            // stream's end (below), so entering BStream sets none of them.
            self.bk.d.next = 0.into();
            self.bk_last.d.next = self.k_is1.q.val();
            self.bj1.d.next = self.c_cols.val();
            self.bj_done.d.next = false;
            self.baddr.d.next = self.now.b.val();
            self.b_nlo.d.next = self.b_ld_now.q.val();
            self.nb_one.d.next = self.n_le_c.q.val();
            self.bj1_end.d.next = self.n_le_c.q.val();
            self.n_mc.d.next = self.now.n.val() - self.c_cols.val();
            self.k_m2.d.next = self.now.k.val() - 2;
            self.k_one.d.next = self.k_is1.q.val();
        }
        if self.idle.q.val().get_bit(2) {
            self.fj0.d.next = 0.into();
            self.f_left.d.next = self.now.n.val();
            self.feed_done.d.next = false;
            for r in 0..self._rows {
                self.a_sel[r].d.next = false;
            }
            self.a_sel[0].d.next = true;
        }
        // The first span's arguments, whether or not the run starts: the shell
        // registers them every cycle, so only `span_load` waits on `start` (it
        // was the select of these muxes).
        if self.idle.q.val().get_bit(3) {
            self.shell.span_addr.next = self.now.a.val();
            self.shell.span_beats.next = self.a_beats.q.val();
            self.shell.span_pitch.next = self.now.lda.val();
            if self.now.use_bias.val() {
                // Bias first: ceil(4N / beat) beats into the bias RAM.
                self.shell.span_addr.next = self.now.bias.val();
                self.shell.span_beats.next = self.b_beats.q.val();
            }
        }
        match self.phase.q.val() {
            Phase::Idle => {
                if self.shell.start.val() {
                    self.in_a.d.next = true;
                    self.shell.span_load.next = true;
                    self.phase.d.next = Phase::AReq;
                    if self.now.use_bias.val() {
                        self.phase.d.next = Phase::BiasReq;
                        self.in_a.d.next = false;
                        self.in_bias.d.next = !self.refuse.q.val();
                    }
                    if self.refuse.q.val() {
                        self.shell.fail.next = true;
                        self.phase.d.next = Phase::Done;
                        self.in_a.d.next = false;
                    }
                }
            }
            Phase::BiasReq => {
                // BiasWait's span load: the first block of A.
                self.sp_rows.d.next = self.rows_valid.q.val().get_bits::<8>(0);
                if self.shell.span_done.val() {
                    self.phase.d.next = Phase::BiasWait;
                }
            }
            Phase::BiasWait => {
                self.sp_rows.d.next = self.rows_valid.q.val().get_bits::<8>(0);
                // The exit below, on `bias_in`.
            }
            Phase::AReq => {
                self.sp_rows.d.next = self.next_rows.q.val().get_bits::<8>(0);
                if self.shell.span_done.val() {
                    self.phase.d.next = Phase::AWait;
                }
            }
            Phase::AWait => {
                self.sp_rows.d.next = self.next_rows.q.val().get_bits::<8>(0);
                if self.aw_go.val() {
                    self.phase.d.next = Phase::BStream;
                    self.in_bs.d.next = true;
                    self.in_a.d.next = false;
                    self.in_b.d.next = true;
                }
            }
            Phase::BStream => {
                self.sp_rows.d.next = self.next_rows.q.val().get_bits::<8>(0);
                // The issue below, on `in_bs`.
            }
            Phase::BDrain => {
                self.sp_rows.d.next = self.next_rows.q.val().get_bits::<8>(0);
                // The exit below, on `feed_done` alone.
            }
            Phase::Finish => {
                self.fin_ok.d.next = self.tiles.empty.val()
                    & (self.promised.q.val() == 0)
                    & self.ofifo.empty.val()
                    & self.w_idle.q.val()
                    & self.shell.writes_done.val();
                if self.fin_ok.q.val() {
                    self.phase.d.next = Phase::Done;
                    self.fin_ok.d.next = false;
                }
            }
            Phase::Done => {
                self.phase.d.next = Phase::Idle;
            }
            _ => {
                self.phase.d.next = Phase::Idle;
            }
        }

        // `BiasWait`'s exit: then the A panel, from the first row.
        if self.bias_in.q.val() {
            self.in_bias.d.next = false;
            self.recv_cnt.d.next = 0.into();
            self.a_last.d.next = self.row_one.q.val();
            self.shell.span_load.next = true;
            self.phase.d.next = Phase::AReq;
            self.in_a.d.next = true;
        }
        // `BDrain`'s exit, on `feed_done` alone: it is set only in `BDrain` (the
        // last k-step needs the last B beat, which arrives after the AR handshake
        // that ends `BStream`) and cleared here, so the enables below decode no
        // phase (that decode was the GEMM's critical path, docs/timing.md).
        if self.fd_cp.q.val().get_bit(1) {
            // `fk` and `f_last` are 0 and `k_one` already: the tile that set
            // `feed_done` cleared them, and no k-step ran since.
            self.fj0.d.next = 0.into();
            self.f_left.d.next = self.run.n.val();
            self.feed_done.d.next = false;
            self.i0.d.next = self.i0.q.val() + self.c_rows.val();
            self.m_left.d.next = self.m_rest.q.val();
        }
        if self.fd_cp.q.val().get_bit(0) {
            self.recv_cnt.d.next = 0.into();
            self.a_last.d.next = self.row_one.q.val();
            self.recv_row.d.next = 0.into();
            // The next block's rows of A follow the last one's.
            self.shell.span_resume.next = true;
            self.rows_valid.d.next = self.next_rows.q.val();
            self.phase.d.next = Phase::AReq;
            self.in_a.d.next = true;
            for r in 0..self._rows {
                self.a_sel[r].d.next = false;
            }
            self.a_sel[0].d.next = true;
            self.in_b.d.next = false;
            if self.last_block.q.val() {
                self.phase.d.next = Phase::Finish;
                self.in_a.d.next = false;
            }
        }
        // ---------------- B read issue (BStream) ----------------
        self.b_issue.next = self.b_want.q.val().get_bit(0) & self.shell.slot_free.val();
        self.b_issue_a.next = self.b_want.q.val().get_bit(1) & self.shell.slot_free.val();
        self.b_issue_o.next = self.b_want.q.val().get_bit(2) & self.shell.slot_free.val();
        self.shell.ar_req.next = self.b_issue_o.val();
        self.b_hi1.d.next = self.run.b.val().get_bits::<32>(32) + 1;
        self.bn_lo.next = bit_cast::<33, 32>(self.run.b.val().get_bits::<32>(0))
            + bit_cast::<33, 32>(self.bj1.q.val() & bit_cast::<32, 64>(!self.c_pmask.val()));
        self.bnext.d.next = bit_cast::<64, 32>(self.bn_lo.val().get_bits::<32>(0))
            | (bit_cast::<64, 32>(self.run.b.val().get_bits::<32>(32)) << 32);
        if self.bn_lo.val().get_bit(32) {
            self.bnext.d.next =
                bit_cast::<64, 32>(self.bn_lo.val().get_bits::<32>(0)) | (bit_cast::<64, 32>(self.b_hi1.q.val()) << 32);
        }
        self.bj1_ge.d.next = self.bj1.q.val() >= self.n_mc.q.val();
        self.b_ss.next =
            bit_cast::<33, 32>(self.b_nlo.q.val().get_bits::<32>(0)) + bit_cast::<33, 32>(self.run.ldb.val());
        self.b_vs.next =
            bit_cast::<33, 32>(self.bnext.q.val().get_bits::<32>(0)) + bit_cast::<33, 32>(self.run.ldb.val());
        if self.bj1_end.q.val() {
            self.b_vs.next = self.b_ld_run.q.val();
        }
        self.b_ld_now.d.next =
            bit_cast::<33, 32>(self.now.b.val().get_bits::<32>(0)) + bit_cast::<33, 32>(self.now.ldb.val());
        self.b_ld_run.d.next =
            bit_cast::<33, 32>(self.run.b.val().get_bits::<32>(0)) + bit_cast::<33, 32>(self.run.ldb.val());
        if self.b_issue.val() {
            // One single-beat read per k: B[k][j0 .. j0+cols] sits in one beat.
            if self.bk_last.q.val() {
                self.bk.d.next = 0.into();
                self.bk_last.d.next = self.k_one.q.val();
                self.bj_done.d.next = self.bj1_end.q.val();
                // After the last column block the counters start over for the
                // next row block, so entering BStream sets none of them.
                if self.bj1_end.q.val() {
                    self.bj1.d.next = self.c_cols.val();
                    self.bj1_end.d.next = self.nb_one.q.val();
                } else {
                    self.bj1.d.next = self.bj1.q.val() + self.c_cols.val();
                    self.bj1_end.d.next = self.bj1_ge.q.val();
                }
            } else {
                self.bk.d.next = self.bk.q.val() + 1;
                self.bk_last.d.next = ((self.bk.q.val() ^ self.k_m2.q.val()) & self.c_kbits.val()) == 0;
            }
        }
        if self.b_issue_a.val() {
            if self.bk_last.q.val() {
                self.baddr.d.next = self.bnext.q.val();
                if self.bj1_end.q.val() {
                    self.baddr.d.next = self.run.b.val();
                }
                self.b_nlo.d.next = self.b_vs.val();
            } else {
                self.baddr.d.next = bit_cast::<64, 32>(self.b_nlo.q.val().get_bits::<32>(0))
                    | (bit_cast::<64, 32>(self.baddr.q.val().get_bits::<32>(32)) << 32);
                if self.b_nlo.q.val().get_bit(32) {
                    self.baddr.d.next = bit_cast::<64, 32>(self.b_nlo.q.val().get_bits::<32>(0))
                        | (bit_cast::<64, 32>(self.baddr.q.val().get_bits::<32>(32) + 1) << 32);
                }
                self.b_nlo.d.next = self.b_ss.val();
            }
        }
        if self.in_bs.q.val() & self.bj_done.q.val() & self.shell.slot_free.val() {
            self.bj_done.d.next = false;
            self.phase.d.next = Phase::BDrain;
            self.in_bs.d.next = false;
        }
        // Next cycle's `in_bs & !bj_done` (`bj_done` is clear when `aw_go` sets
        // `in_bs`, and set when the drain clears it), and the room.
        self.b_want.d.next = ((self.in_bs.q.val()
            & !self.bj_done.q.val()
            & !(self.b_issue.val() & self.bk_last.q.val() & self.bj1_end.q.val())
            & !(self.b_issue.val() & self.k_one.q.val()))
            | self.aw_go.val())
            & (self.b_occ.q.val() < self.c_rspare.val());

        // ---------------- Read-data receiver ----------------
        // `in_b` is set and cleared with BStream/BDrain: the same function, no phase decode.
        self.b_recv.next = self.vitis.m_axi_gmem.rvalid.val() & self.in_b.q.val();
        self.bias_rx.next = self.vitis.m_axi_gmem.rvalid.val() & self.in_bias.q.val();
        self.a_wd.d.next = self.vitis.m_axi_gmem.rdata.val();
        self.bi_we.d.next = self.bias_rx.val();
        self.bi_wa.d.next = self.recv_cnt.q.val();
        self.bias_ram.port.we.next = self.bi_we.q.val();
        self.bias_ram.port.waddr.next = self.bi_wa.q.val();
        self.bias_ram.port.wdata.next = self.a_wd.q.val();
        if self.bias_rx.val() {
            self.recv_cnt.d.next = self.recv_cnt.q.val() + 1;
            self.a_last.d.next = self.a_next_last.val();
        }
        if self.vitis.m_axi_gmem.rvalid.val() & self.in_a.q.val() {
            if self.a_last.q.val() {
                self.recv_cnt.d.next = 0.into();
                self.a_last.d.next = self.row_one.q.val();
                self.recv_row.d.next = self.recv_row.q.val() + 1;
                self.a_sel[0].d.next = false;
                for r in 1..self._rows {
                    self.a_sel[r].d.next = self.a_sel[r - 1].q.val();
                }
            } else {
                self.recv_cnt.d.next = self.recv_cnt.q.val() + 1;
                self.a_last.d.next = self.a_next_last.val();
            }
        }
        self.bfifo.reset.next = !self.vitis.ap_rst_n.val();
        self.bfifo.push.next = self.b_recv.val();
        self.bfifo.din.next = self.vitis.m_axi_gmem.rdata.val();

        // ---------------- Feeder: one k-step per cycle into the array ----------------
        self.f_go.next = self.feed_on.q.val().get_bit(0)
            & self.b_has.any.val()
            & (!self.f_last.q.val() | self.end_ok.q.val().get_bit(0));
        self.f_end.next = self.feed_on.q.val().get_bit(1)
            & self.b_has.any.val()
            & self.f_last.q.val()
            & self.end_ok.q.val().get_bit(1);
        self.f_end2.next = self.feed_on.q.val().get_bit(2)
            & self.b_has.any.val()
            & self.f_last.q.val()
            & self.end_ok.q.val().get_bit(2);
        self.bfifo.pop.next = self.f_go.val();
        self.b_has.clear.next = !self.vitis.ap_rst_n.val() | (self.phase.q.val() == Phase::Idle);
        self.b_has.push.next = self.b_recv.val();
        self.b_has.pop.next = self.f_go.val();
        self.f_fin.d.next = self.f_left.q.val() <= self.c_cols.val();
        if self.b_issue_o.val() & !self.f_go.val() {
            self.b_occ.d.next = self.b_occ.q.val() + 1;
        }
        if !self.b_issue_o.val() & self.f_go.val() {
            self.b_occ.d.next = self.b_occ.q.val() - 1;
        }
        self.s1_valid.d.next = self.f_go.val();
        self.s1_last.d.next = self.f_go.val() & self.f_last.q.val();
        self.s1_b.d.next = self.bfifo.dout.val();
        self.s1_sh.d.next = bit_cast::<16, 32>(self.fj0.q.val() & bit_cast::<32, 64>(self.c_bmask.val())) << 3;
        self.s1_col.next = self.s1_b.q.val() >> self.s1_sh.q.val();
        if self.since_last.q.val() < self.c_gap.val() {
            self.since_last.d.next = self.since_last.q.val() + 1;
        }
        // Whether `since_last` reaches the gap next cycle.
        self.gap_ok.d.next = self.since_last.q.val() >= self.c_gap1.val();
        self.tiles.reset.next = !self.vitis.ap_rst_n.val();
        self.t_push.d.next = self.f_end2.val();
        self.tiles.push.next = self.t_push.q.val();
        self.tiles.din.next = self.t_din.q.val();
        self.t_din.d.next = bit_cast::<96, 32>(self.i0.q.val())
            | (bit_cast::<96, 32>(self.fj0.q.val()) << 32)
            | (bit_cast::<96, 32>(self.rows_valid.q.val()) << 64);
        // Outside the B phases (`in_b`, a flag) the k-step starts over: no phase
        // decode on the enables of `fk` and `f_last` (it was the GEMM's critical
        // path, docs/timing.md). `k_one` is loaded in `Idle` from K as written
        // and `in_b` is set no sooner than `AWait`.
        if !self.in_b.q.val() {
            self.fk.d.next = 0.into();
            self.f_last.d.next = self.k_one.q.val();
        }
        if self.f_go.val() {
            if self.f_last.q.val() {
                self.fk.d.next = 0.into();
                self.f_last.d.next = self.k_one.q.val();
            } else {
                self.fk.d.next = self.fk.q.val() + 1;
                self.f_last.d.next = ((self.fk.q.val() ^ self.k_m2.q.val()) & self.c_kbits.val()) == 0;
            }
        }
        if self.f_end.val() {
            if self.f_fin.q.val() {
                self.feed_done.d.next = true;
            } else {
                self.fj0.d.next = self.fj0.q.val() + self.c_cols.val();
                self.f_left.d.next = self.f_left.q.val() - self.c_cols.val();
            }
        }
        if self.f_end2.val() {
            self.since_last.d.next = 0.into();
            self.gap_ok.d.next = false;
        }
        for r in 0..self._rows {
            self.feeds[r].clock.next = self.vitis.ap_clk.val();
            self.a_we[r].d.next = self.vitis.m_axi_gmem.rvalid.val() & self.in_a.q.val() & self.a_sel[r].q.val();
            self.a_wa[r].d.next = self.recv_cnt.q.val();
            self.feeds[r].ram_port.we.next = self.a_we[r].q.val();
            self.feeds[r].ram_port.waddr.next = self.a_wa[r].q.val();
            self.feeds[r].ram_port.wdata.next = self.a_wd.q.val();
            self.feeds[r].ram_port.raddr.next = bit_cast::<16, 32>(self.fk.q.val() >> self.c_logp.val());
            self.s1_sel[r].clock.next = self.vitis.ap_clk.val();
            self.s1_sel[r].d.next = bit_cast::<8, 32>(self.fk.q.val() & bit_cast::<32, 64>(self.c_pmask.val()));
            self.feeds[r].sel.next = self.s1_sel[r].q.val();
            self.feeds[r].valid_in.next = self.s1_valid.q.val();
            self.feeds[r].last_in.next = self.s1_last.q.val();
            self.rows[r].clock.next = self.vitis.ap_clk.val();
            self.rows[r].clear.next = self.array_clear.q.val();
            self.rows[r].a_in.a.next = self.feeds[r].a_out.a.val();
            self.rows[r].a_in.valid.next = self.feeds[r].a_out.valid.val();
            self.rows[r].a_in.last.next = self.feeds[r].a_out.last.val();
        }
        for c in 0..self._cols {
            // Columns of this tile inside N: the rest of the chunk is zeroed (cols ≤ 64).
            self.s1_en[c].clock.next = self.vitis.ap_clk.val();
            self.s1_en[c].d.next = (self.f_left.q.val().get_bits::<24>(8) != 0)
                | (self.f_left.q.val().get_bits::<8>(0) > self.c_col[c].val());
            self.cols[c].clock.next = self.vitis.ap_clk.val();
            self.cols[c].din.next = 0.into();
            if self.s1_en[c].q.val() {
                self.cols[c].din.next = self.s1_col.val().get_bits::<8>(c * 8);
            }
        }
        for c in 0..self._cols {
            self.bpack.lanes[c].next = self.cols[c].dout.val();
        }
        self.rows[0].b_in.next = self.bpack.out.val();
        for r in 1..self._rows {
            self.rows[r].b_in.next = self.rows[r - 1].b_out.val();
        }

        // ---------------- Capture finished rows into the output FIFO ----------------
        self.rchain[0].next = self.rows[0].res_sel.val();
        self.ichain[0].next = self.rows[0].idx_sel.val();
        self.cchain[0].next = self.rows[0].cap.val();
        for r in 1..self._rows {
            self.rchain[r].next = self.rchain[r - 1].val() | self.rows[r].res_sel.val();
            self.ichain[r].next = self.ichain[r - 1].val() | self.rows[r].idx_sel.val();
            self.cchain[r].next = self.cchain[r - 1].val() | self.rows[r].cap.val();
        }
        self.any_cap.next = false;
        self.tiles.pop.next = false;
        self.cap_idx.next = 0.into();
        for l in (self._rows - 1)..self._rows {
            self.any_cap.next = self.cchain[l].val();
            self.cap_idx.next = self.ichain[l].val();
            self.cap_d.d.next = self.rchain[l].val();
            self.tiles.pop.next = self.rows[l].cap.val();
        }
        self.cap_v.d.next = self.any_cap.val();
        self.t_head.d.next = self.tiles.dout.val();
        self.cap_ok.d.next = bit_cast::<16, 32>(self.cap_idx.val()) < self.t_head.q.val().get_bits::<16>(64);
        self.cap_m.d.next = bit_cast::<64, 32>(self.t_head.q.val().get_bits::<32>(0) + self.cap_idx.val())
            | (bit_cast::<64, 32>(self.t_head.q.val().get_bits::<32>(32)) << 32);
        self.ofifo.reset.next = !self.vitis.ap_rst_n.val();
        self.ometa.reset.next = !self.vitis.ap_rst_n.val();
        self.ofifo.push.next = self.cap_v.q.val() & self.cap_ok.q.val();
        self.ometa.push.next = self.cap_v.q.val() & self.cap_ok.q.val();
        self.ofifo.din.next = self.cap_d.q.val();
        self.ometa.din.next = self.cap_m.q.val();
        // A captured row stays promised until it is pushed (or dropped, past M).
        self.p_nup.next = self.promised.q.val();
        if self.cap_v.q.val() {
            self.p_nup.next = self.promised.q.val() - 1;
        }
        self.p_yup.next = self.promised.q.val() + self.p_rdn.q.val();
        self.promised.d.next = self.p_nup.val();
        if self.f_end2.val() {
            self.promised.d.next = self.p_yup.val();
        }

        // ---------------- Writer: epilogue and one beat per output row ----------------
        self.row_mul.a.next = self.w_i.q.val();
        self.row_mul.b.next = self.run.ldc.val();
        self.ofifo.pop.next = false;
        self.ometa.pop.next = false;
        self.b_j0.next = self.ometa.dout.val().get_bits::<32>(32);
        if self.ometa.empty.val() {
            self.b_j0.next = self.cap_m.q.val().get_bits::<32>(32);
        }
        self.bias_ram.port.raddr.next = bit_cast::<16, 32>((self.b_j0.val() << 2) >> self.c_logp.val());
        self.b_off.d.next = bit_cast::<16, 32>((self.b_j0.val() << 2) & bit_cast::<32, 64>(self.c_rmask.val())) << 3;
        self.bias_row.next = self.bias_ram.rdata.val() >> self.b_off.q.val();
        for c in 0..self._cols {
            self.lanes[c].clock.next = self.vitis.ap_clk.val();
            self.lanes[c].acc.next = self.w_data.q.val().get_bits::<32>(c * 32);
            self.lanes[c].bias.next = self.w_bias.q.val().get_bits::<32>(c * 32);
            self.lanes[c].use_bias.next = self.run.use_bias.val();
            self.lanes[c].relu.next = self.run.relu.val();
            self.lanes[c].mult.next = self.run.qmult.val();
            self.lanes[c].shift.next = self.run.qshift.val();
            self.w_add[c].clock.next = self.vitis.ap_clk.val();
            self.lanes[c].en_add.next = self.w_add[c].q.val().any();
        }
        for c in 0..self._cols {
            self.p32.lanes[c].next = self.lanes[c].out32.val();
            self.p8.lanes[c].next = self.lanes[c].out8.val();
        }
        self.shell.wr_send.next = self.w_send.q.val();
        // Every cycle: `w_sh` is steady from `Bias` to the next row's.
        self.w_mask.d.next = self.c_ones.val() >> self.w_sh.q.val();
        self.c_hi1.d.next = self.run.c.val().get_bits::<32>(32) + 1;
        self.wb_lo.next =
            bit_cast::<33, 32>(self.run.c.val().get_bits::<32>(0)) + bit_cast::<33, 32>(self.w_coff.q.val());
        self.shell.wr_addr.next = self.w_addr.q.val();
        self.shell.wr_len.next = 0.into();
        self.shell.wr_data.next = self.w_beat.q.val();
        self.shell.wr_strb.next = self.w_strb.q.val();
        self.shell.wr_last.next = true;
        // The bias RAM reads the next row's word the cycle before `Idle` pops it
        // (`b_j0`); the word is registered every cycle (no enable, so the flow
        // folds this register into the block RAM, docs/timing.md) and added by
        // the lanes in `Fetch`.
        self.w_bias.d.next = self.bias_row.val();
        if self.w_idle_cp.q.val().get_bit(0) & self.o_has.any.val() {
            self.ofifo.pop.next = true;
            self.ometa.pop.next = true;
            self.wstate.d.next = WriterState::Fetch;
            self.w_idle.d.next = false;
        }
        self.pop_row.next = self.w_idle_cp.q.val().get_bit(1) & self.o_has.any.val();
        if self.pop_row.val() {
            self.w_data.d.next = self.ofifo.dout.val();
            self.w_i.d.next = self.ometa.dout.val().get_bits::<32>(0);
            self.w_j0.d.next = self.ometa.dout.val().get_bits::<32>(32);
        }
        self.w_pack.d.next = false;
        self.rq_cp.d.next = self.run.requant.val();
        self.w_wend.d.next = self.c_wait_mul.val();
        if self.run.requant.val() {
            self.w_wend.d.next = self.c_wait_rq.val();
        }
        self.w_src.next = 0.into();
        for i in 0..4 {
            if self.rq_cp.q.val().get_bit(i) {
                self.w_src.next = self.w_src.val() | (self.p8.out.val() & self.c_quarter[i].val());
            } else {
                self.w_src.next = self.w_src.val() | (self.p32.out.val() & self.c_quarter[i].val());
            }
        }
        if self.w_pack.q.val().get_bit(0) {
            self.w_beat.d.next = self.w_src.val() << (self.w_boff.q.val() << 3);
        }
        if self.w_pack.q.val().get_bit(1) {
            self.w_strb.d.next = self.w_mask.q.val() << self.w_boff.q.val();
        }
        match self.wstate.q.val() {
            WriterState::Idle => {
                // The pop above, on `w_idle`.
            }
            WriterState::Fetch => {
                self.wstate.d.next = WriterState::Bias;
            }
            WriterState::Bias => {
                self.wstate.d.next = WriterState::Wait;
            }
            WriterState::Wait => {
                // The count and the exit below, on `ws_wait`.
            }
            WriterState::Pack => {
                // `w_j0` is a multiple of `cols`: its offset in the beat has known-zero bits.
                // The beat and strobes load on `w_pack`, below.
                self.wstate.d.next = WriterState::Send;
                self.w_send.d.next = true;
            }
            WriterState::Send => {
                // The exit below, on `w_send`.
            }
            _ => {
                self.wstate.d.next = WriterState::Idle;
                self.w_idle.d.next = true;
                self.w_send.d.next = false;
            }
        }
        // The loads of `Fetch`, `Bias` and `Wait`, on flags of those states.
        if self.ws_fetch.q.val() {
            self.w_left.d.next = self.run.n.val() - self.w_j0.q.val();
            self.w_coff.d.next = (self.w_j0.q.val() << 2) & bit_cast::<32, 64>(!self.c_pmask.val());
            self.w_boff.d.next = bit_cast::<16, 32>((self.w_j0.q.val() << 2) & bit_cast::<32, 64>(self.c_rmask.val()));
            if self.run.requant.val() {
                self.w_coff.d.next = self.w_j0.q.val() & bit_cast::<32, 64>(!self.c_pmask.val());
                self.w_boff.d.next = bit_cast::<16, 32>(self.w_j0.q.val() & bit_cast::<32, 64>(self.c_bmask.val()));
            }
        }
        if self.ws_bias.q.val() {
            self.w_wait.d.next = 0.into();
            // Lanes add bias / apply ReLU this cycle; the row address less w_i · LDC.
            self.w_base.d.next = bit_cast::<64, 32>(self.wb_lo.val().get_bits::<32>(0))
                | (bit_cast::<64, 32>(self.run.c.val().get_bits::<32>(32)) << 32);
            if self.wb_lo.val().get_bit(32) {
                self.w_base.d.next = bit_cast::<64, 32>(self.wb_lo.val().get_bits::<32>(0))
                    | (bit_cast::<64, 32>(self.c_hi1.q.val()) << 32);
            }
        }
        // Columns of the row inside N (fewer than `cols` ≤ lanes / 4 when
        // short, so eight bits hold them).
        self.w_short.d.next = self.w_left.q.val() < self.c_cols.val();
        self.w_shn.d.next = self.c_lanes.val() - (bit_cast::<8, 32>(self.w_left.q.val()) << 2);
        if self.run.requant.val() {
            self.w_shn.d.next = self.c_lanes.val() - bit_cast::<8, 32>(self.w_left.q.val());
        }
        // Every cycle of `Wait`: the last one's sum is the row's address; the
        // mask's shift is steady from the second (`Wait` lasts two cycles at
        // least, asserted in `new`, so `w_mask` is ready for `Pack`).
        if self.ws_wait.q.val() {
            self.w_wait.d.next = self.w_wait.q.val() + 1;
            if self.w_wait.q.val() == self.w_wend.q.val() {
                self.wstate.d.next = WriterState::Pack;
                self.w_pack.d.next = true;
            }
            self.w_addr.d.next = self.w_base.q.val() + self.row_mul.p.val();
            self.w_sh.d.next = self.c_sh32.val();
            if self.run.requant.val() {
                self.w_sh.d.next = self.c_sh8.val();
            }
            if self.w_short.q.val() {
                self.w_sh.d.next = self.w_shn.q.val();
            }
        }
        if self.w_send.q.val() & self.shell.wr_fire.val() {
            self.wstate.d.next = WriterState::Idle;
            self.w_idle.d.next = true;
            self.w_send.d.next = false;
        }

        self.o_has.clear.next = !self.vitis.ap_rst_n.val();
        self.o_has.push.next = self.ofifo.push.val();
        self.o_has.pop.next = self.ofifo.pop.val();
        self.o_nup.next = self.o_occ.q.val() - self.o_dn.q.val();
        self.o_yup.next = self.o_occ.q.val() + self.o_rdn.q.val();
        if self.phase.q.val() != Phase::Idle {
            self.o_occ.d.next = self.o_nup.val();
            if self.f_end2.val() {
                self.o_occ.d.next = self.o_yup.val();
            }
        }

        if !self.vitis.ap_rst_n.val() {
            self.phase.d.next = Phase::Idle;
            self.in_a.d.next = false;
            self.in_b.d.next = false;
            self.in_bs.d.next = false;
            self.b_want.d.next = false;
            self.f_last.d.next = false;
            self.feed_done.d.next = false;
            self.gap_ok.d.next = false;
            self.cap_v.d.next = false;
            self.t_push.d.next = false;
            self.wstate.d.next = WriterState::Idle;
            self.w_idle.d.next = true;
            self.w_send.d.next = false;
            self.w_pack.d.next = false;
            self.fin_ok.d.next = false;
            self.bias_in.d.next = false;
            self.in_bias.d.next = false;
        }
        self.w_idle_cp.d.next = self.w_idle.d.val();
        self.fd_cp.d.next = self.feed_done.d.val();
        self.feed_on.d.next = self.in_b.d.val() & !self.feed_done.d.val();
        self.end_ok.d.next =
            self.gap_ok.d.val() & self.vitis.ap_rst_n.val() & (self.o_occ.q.val() <= self.c_room.val());
        self.ws_fetch.d.next = self.wstate.d.val() == WriterState::Fetch;
        self.ws_bias.d.next = self.wstate.d.val() == WriterState::Bias;
        self.ws_wait.d.next = self.wstate.d.val() == WriterState::Wait;
        for c in 0..self._cols {
            self.w_add[c].d.next = bit_cast::<1, 1>(self.ws_bias.d.val().into());
        }
        self.o_dn.d.next = 0.into();
        if self.cap_v.q.val() & !self.cap_ok.q.val() {
            self.o_dn.d.next = 1.into();
        }
        if self.ofifo.pop.val() {
            self.o_dn.d.next = self.o_dn.d.val() + 1;
        }
        self.o_rdn.d.next = bit_cast::<16, 32>(self.c_rows.val()) - self.o_dn.d.val();
        self.p_rdn.d.next = bit_cast::<16, 32>(self.c_rows.val());
        if self.cap_v.d.val() {
            self.p_rdn.d.next = bit_cast::<16, 32>(self.c_rows.val()) - 1;
        }
    }
}

crate::vitis_unit!(GemmUnit, GemmConfig, [128, 256, 512, 1024]);
