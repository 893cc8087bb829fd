//! rust-hdl generator of the streaming attention unit (Vitis RTL kernel).
//!
//! Per (batch·head) and per block of `lanes` queries: load the block's Q rows
//! into the lanes, stream K and V once (alternating bursts of `CHUNK` beats of K
//! and of V at the same offsets, one key per step broadcast to every lane),
//! then divide, serialize and write each lane's output row. On-chip state is
//! the lanes' q/m/l/o registers and step backlogs, and two FIFOs: nothing
//! grows with N.
use super::config::KV_BURST_BEATS;
use super::lane::{v_at, Lane, ROW32_BITS, ROW8_BITS, SER_LAT};
use super::regs::{Args, TABLE};
use super::AttentionConfig;
use crate::blocks::{Copies, Fifo, Kept, MulU32Pipe, RowDelay, RowPick, ShrReg};
use crate::clock;
use crate::dff_setup;
use crate::shell::{Shell, VitisPorts};
use crate::HwError;
use rust_hdl::prelude::*;

/// Beats per K (and per V) burst.
const CHUNK: u64 = KV_BURST_BEATS as u64;
// A burst's advance of `k_addr`/`v_addr` is a 12-bit add (`k_lo`): at most 128-byte beats.
const _: () = assert!(CHUNK * 128 < 4096);
/// Width of `last_pipe`: a block's last step, one bit per cycle since its
/// issue; bit `lane::v_at(d) + 2` is set once it is in the lanes' backlogs
/// and their registered `idle` counts it (bits above stay clear).
const LAST_PIPE: usize = 32;

#[derive(LogicBlock)]
pub struct AttentionUnit<const W: usize, const S: usize> {
    pub vitis: VitisPorts<W, S>,

    shell: Shell<W, S>,
    /// The arguments as written (read on the start cycle) and as latched for the run.
    now: Args,
    run: Args,
    lanes: Vec<Lane<W>>,
    kst: KvStream<W>,
    vst: KvStream<W>,
    mul_q: MulU32Pipe,
    mul_kv: MulU32Pipe,
    mul_o: MulU32Pipe,
    /// Cycles left in `HeadWait` (the head's `h · stride` products settle):
    /// it counts down there and takes the full wait in every other phase,
    /// so only that phase's decode stands before it (it loaded on the three
    /// ways into `HeadWait`).
    hwait: DFF<Bits<4>>,
    /// The launch checks of `bad_args`, in registered parts (`Check`, `Check2`).
    bad_t: DFF<Bit>,
    bad_c: DFF<Bit>,
    /// `bad_t`'s terms, registered every cycle from the arguments as written
    /// (steady three cycles before `start`, so in `Check` they are the run's):
    /// `bad_t` is their OR, not a zero check behind the run registers' routing.
    bz_hd: DFF<Bit>,
    bz_sq: DFF<Bit>,
    bz_sm: DFF<Bit>,
    bz_om: DFF<Bit>,
    bz_st: DFF<Bit>,
    /// The 32-bit zero tests under `bz_hd`, `bz_sq`, `bz_sm`, `bz_om`,
    /// registered a cycle before them (HEADS, HPB, SEQ_Q, SEQ_KV, SMULT,
    /// OMULT): the argument registers' routing and a zero test and an OR
    /// in one cycle were −0.5 to −0.8 ns. Still the start cycle's arguments in `Check`.
    za: DFF<Bits<6>>,
    /// `bad_c`'s terms (the three head-stride compares), registered every
    /// cycle from the arguments as written, as `bz_*`: on the run registers
    /// the INT8 flag (fan-out 449) stood before the O compare (−1.26 ns).
    bc_q: DFF<Bit>,
    bc_kv: DFF<Bit>,
    bc_o: DFF<Bit>,
    sm_r: DFF<Bits<64>>,
    th_r: DFF<Bits<64>>,
    bad_r: DFF<Bit>,
    /// The KVLEN word as read, and whether it is read for the launch check
    /// (`KvCheckTest` next) or for the head (`KvTest`).
    kv_word_r: DFF<Bits<32>>,
    /// Entry `b`'s KVLEN word's byte offset in the read beat, registered
    /// from `b` (which changes at least two cycles before the word arrives):
    /// the word's select and checks follow no logic on `b`.
    kv_sel: DFF<Bits<32>>,
    /// The KVLEN word's address for `b` and for `b + 1`, registered every
    /// cycle: `KvAddr` loads `k_addr` from the first, or from the second
    /// after `KvCheckTest` (`kva_n`), whose `in_kct` moves `b` as `KvAddr`
    /// reads it. The 64-bit add from `b` into `k_addr` was −0.1 to −0.71 ns.
    kv_wa0: DFF<Bits<64>>,
    kv_wa1: DFF<Bits<64>>,
    /// `b + 1`, registered every cycle (`b` holds from `KvWait` to `KvCheckTest`).
    b_p1: DFF<Bits<32>>,
    kva_n: DFF<Bit>,
    /// `kv_word_r` is 0, above SEQ_KV, or either (for `KvCheckTest`'s
    /// branch), registered every cycle from it: `KvCmp` waits the cycle.
    /// Compared as it was read (the beat's words against SEQ_KV, picked by
    /// entry) they were −0.6 to −1.65 ns on every placement.
    kv_zero: DFF<Bit>,
    kv_over: DFF<Bit>,
    kv_bad: DFF<Bit>,
    /// `bh + HPB` and whether it reaches HEADS (the key-count check's end),
    /// registered every cycle: `bh` changes at least three cycles before the
    /// next `KvCheckTest` reads them (a KVLEN read lies between).
    bh_nx: DFF<Bits<33>>,
    bh_end: DFF<Bit>,
    kv_chk: DFF<Bit>,
    /// A block's queries: `SEQ_Q − q0`, then how many (`lv_r`), its end and its Q span's end.
    qleft: DFF<Bits<32>>,
    lv_r: DFF<Bits<32>>,
    qsp: DFF<Bits<32>>,
    qend: DFF<Bits<32>>,
    qspan: DFF<Bits<32>>,
    /// The block is its head's last (`SEQ_Q − q0 ≤ lanes`), the head is the
    /// entry's last (`hb = HPB − 1`) and the run's (`h = HEADS − 1`): flags
    /// for `Next`, from registers of `HPB − 1` and `HEADS − 1`, so that its
    /// enables of h, hb and b follow no add or compare.
    q_last: DFF<Bit>,
    hb_last: DFF<Bit>,
    h_last: DFF<Bit>,
    hpb_m1: DFF<Bits<32>>,
    heads_m1: DFF<Bits<32>>,

    phase: DFF<Phase>,
    h: DFF<Bits<32>>,
    /// `h` a cycle late, loaded every cycle: the head products' operand. The
    /// flow folds it into the MULT18X18Ds' input registers, which took `h`'s
    /// enable (a `phase` decode, fan-out 64) while they held `h` itself.
    hm: DFF<Bits<32>>,
    hb: DFF<Bits<32>>,
    b: DFF<Bits<32>>,
    qh: DFF<Bits<64>>,
    kh: DFF<Bits<64>>,
    vh: DFF<Bits<64>>,
    oh: DFF<Bits<64>>,
    nkv: DFF<Bits<32>>,
    /// `b · HPB` during the key-count check: the first head of entry `b`.
    bh: DFF<Bits<32>>,
    bad_zero: Signal<Local, Bit>,
    bad_cmp: Signal<Local, Bit>,
    o_row_log: Signal<Local, Bits<16>>,
    kv_word: Signal<Local, Bits<32>>,
    /// The next K and V burst addresses (the head's base plus the offset streamed so far).
    k_addr: DFF<Bits<64>>,
    v_addr: DFF<Bits<64>>,
    /// Their bits from 12 up plus one (`+ 0x1000`, registered every cycle: a
    /// burst's advance comes three cycles at least after the last change),
    /// and the advance's low 13 bits: a burst is at most `CHUNK` · 128 bytes,
    /// under 4 KiB, so the advance is a 12-bit add whose carry selects the
    /// high bits or these (the 64-bit carry chain was 3.1–3.5 ns). The add
    /// is registered every cycle too, from `kv_len` (the K burst's length,
    /// which `kv_last` takes on the K request and which holds, as the
    /// addresses do, until the V request a cycle or more later): from
    /// `kv_last` through the add into the carry's select of 52 bits was
    /// near the limit in five seeds of six (docs/timing.md).
    k_up: DFF<Bits<64>>,
    v_up: DFF<Bits<64>>,
    k_lo: DFF<Bits<13>>,
    v_lo: DFF<Bits<13>>,
    c_hi52: Constant<Bits<64>>,
    c_page: Constant<Bits<64>>,
    q0: DFF<Bits<32>>,
    lv: DFF<Bits<32>>,
    nk: DFF<Bits<32>>,
    qs: Signal<Local, Bits<32>>,
    /// The block's Q beats not yet in, counted down from the span's beats:
    /// `q_nl` compares it with constants (an up-count compared with the
    /// total took an add and a 16-bit compare of two registers).
    qr: DFF<Bits<16>>,
    /// Every Q beat of the block is in (`qr = 0`), kept as `qr` moves
    /// (from `qr = 1`), so that the cycle entering `Stream` compares nothing.
    q_in: DFF<Bit>,
    /// The next Q beat is the block's last (`qr = 1`), kept as `qr` moves,
    /// so that `sst` and `q_in` compare nothing.
    q_nl: DFF<Bit>,
    /// The block's Q span is requested (`span_done` in `QReq`), registered:
    /// `QReq` ends on a register, not on the shell's AND of its state, a
    /// cycle later (the Q beats come later still).
    sd_r: DFF<Bit>,
    q_rx: Signal<Local, Bit>,
    /// The phase is `QReq` or `QWait` (set in `BlockInit`, cleared when the
    /// stream starts), so that the Q beats' enables decode no phase.
    in_q: DFF<Bit>,
    /// The phase is `BlockInit` (set on the one way into it): its loads (the
    /// Q beat counters, `lv`, `nk`) decode no `phase` (`phase → qr`, fan-out 69).
    in_bi: DFF<Bit>,
    /// Per lane: the beat of the block's Q span that holds its row (`q_lb`,
    /// registered from `qs` every cycle: `q0` changes three cycles at least
    /// before `BlockInit`), the beats still to come before it (`q_dc`,
    /// loaded in `BlockInit`, counted down per beat) and whether the next
    /// beat is it (`q_sel`, kept as `q_dc` moves); and the row's bit offset
    /// in that beat (`q_shr`), registered from `qs` as well.
    q_lb: Vec<DFF<Bits<32>>>,
    q_dc: Vec<DFF<Bits<32>>>,
    q_sel: Vec<DFF<Bit>>,
    q_shr: Vec<DFF<Bits<32>>>,
    /// The phase is `QWait`, as a flag set and cleared with it, so that its
    /// exit (which loads the K/V stream's registers) decodes no phase; and the
    /// stream's K/V beats, registered from `nk` (set in `BlockInit`, two
    /// cycles at least before `QWait` ends).
    in_qw: DFF<Bit>,
    /// The phase is `QReq` or `Done`, as flags set and cleared with it: the
    /// shell's span start and the control slave's `core_done` decode no
    /// `phase` (`phase → shell.gen`, `phase → ctrl.ap_done`/`isr`, −0.16 to
    /// −0.40 ns, docs/timing.md).
    in_qr: DFF<Bit>,
    at_done: DFF<Bit>,
    /// `Finish` ends on flags: `last_pipe` is zero (registered from its next
    /// value) and the finalizer is idle (`fin_idle_nx`, registered); the
    /// compare and the decode of `fin` in front of `phase` were −0.92 and
    /// −0.45 ns (docs/timing.md).
    lp_zero: DFF<Bit>,
    fin_idle: DFF<Bit>,
    kv_rem0: DFF<Bits<32>>,
    /// The phase is `Stream` (set and cleared with it), `KvAddr` or `KvReq`
    /// (registered from the next phase): the K/V and KVLEN requests and the
    /// wide loads they make decode no phase.
    in_st: DFF<Bit>,
    /// The phase is `Next` (set with it, for its loads of q0, h, hb, b).
    in_nx: DFF<Bit>,
    /// The phase is `HeadInit` (its loads of the head bases, q0 and nkv) or
    /// `KvTest` (nkv): flags set on the one way into each, so those 320
    /// enables decode no `phase`.
    in_hi: DFF<Bit>,
    in_kt: DFF<Bit>,
    /// The phase is `Check` (its clears of h, hb, b, bh) or `KvCheckTest`
    /// (its loads of b, bh): flags set on the one way into each phase, so
    /// those 128 enables decode no `phase`.
    in_ck: DFF<Bit>,
    in_kct: DFF<Bit>,
    /// `in_qw & q_in` (the stream starts: 230 loads) in kept copies: 0 for
    /// the control (phase, flags, counters), 1 for `k_addr`/`v_addr`, 2 for
    /// `kv_rem`.
    sst: Copies<3>,
    /// The finalizer is idle and stays idle next cycle (for `snap_r`):
    /// `fin.d == Idle` from `Idle` alone, so it sees no write handshake (the
    /// last beat's AWREADY came through five LUT levels into `snap_r` and
    /// `go_r`); a snapshot waits a cycle more when the finalizer's last write
    /// is taken in the cycle before.
    fin_idle_nx: Signal<Local, Bit>,
    /// A block's last step may go (for `go_r`): the finalizer is idle as for
    /// `fin_idle_nx`, or is sending the block's last beat, taken or not. That
    /// step's parameters go to `p_*`, which the finalizer reads only at the
    /// snapshot, and the snapshot (after the drain) waits for `fin_idle_nx`.
    fin_free: Signal<Local, Bit>,
    kva: DFF<Bit>,
    kvr: DFF<Bit>,
    /// Kept copies of `kv_turn`: the request address's low and high halves
    /// select `v_addr` or `k_addr` on copies 0 and 1, its length and the
    /// issue decisions on copy 2, so the shell's AR registers see registers.
    tv: Copies<3>,
    /// A K burst may be requested this cycle if the AR slot is free
    /// (`kv_age` = 3, `kv_rem` ≠ 0, both streams' room), registered a cycle
    /// ahead from the streams' next `room` and `kv_nz` (`kv_rem` ≠ 0, which
    /// holds for three cycles before a K request).
    k_ok: DFF<Bit>,
    kv_nz: DFF<Bit>,
    kiss: Signal<Local, Bit>,
    viss: Signal<Local, Bit>,
    // K/V read requests.
    kv_rem: DFF<Bits<32>>,
    kv_turn: DFF<Bit>,
    kv_last: DFF<Bits<16>>,
    /// The next burst length `min(CHUNK, kv_rem, beats to the 4 KiB page end of
    /// K and of V)`, three registered stages behind `k_addr`, `v_addr` (the
    /// streams' `page`) and `kv_rem`; `kv_age` counts the cycles since those
    /// changed (3: `kv_len` is current).
    kv_remc: DFF<Bits<16>>,
    kv_pg: DFF<Bits<16>>,
    kv_remc2: DFF<Bits<16>>,
    kv_len: DFF<Bits<16>>,
    kv_age: DFF<Bits<2>>,
    /// The same, less one (the AXI length), beside them; 0 for the KVLEN read.
    kv_pg_m1: DFF<Bits<16>>,
    kv_rc2_m1: DFF<Bits<16>>,
    kv_lm1: DFF<Bits<16>>,
    kv_last_m1: DFF<Bits<16>>,
    /// The K/V burst now arriving is V's.
    recv_v: DFF<Bit>,
    kv_rx: Signal<Local, Bit>,
    // Steps.
    j: DFF<Bits<32>>,
    rib: DFF<Bits<16>>,
    /// `rib` is the beat's last row (`rib + 1` = rows per beat), kept as `rib`
    /// moves: the K/V pops and `rib`'s wrap follow a flag, not an add and compare.
    rib_last: DFF<Bit>,
    go: Signal<Local, Bit>,
    /// `go`, registered from the next values of its terms, on kept copies:
    /// the step's own registers and the finalizer hand-over (0), the FIFO
    /// pops (1), `j` and `st_valid` (2).
    go_r: Copies<3>,
    go_p: Signal<Local, Bit>,
    go_j: Signal<Local, Bit>,
    /// Step `j` is the block's last (`j + 1 == nk`), kept a step ahead.
    is_last: DFF<Bit>,
    /// `nk − 2` (registered from `nk`, set in `BlockInit`): `jl`'s start.
    nk_m2: DFF<Bits<32>>,
    /// `nk − 2 − j`, counted down as `j` steps; `j_eq` (`jl == 0`, i.e.
    /// `j == nk − 2`) and `jl1` (`jl == 1`) are kept as it moves, so
    /// `is_last` and `go_r` see no compare and `j_eq` takes `jl1` on a step
    /// (a 32-bit compare of two registers fed it before). `nk_is1..3`:
    /// `nk` = 1, 2, 3, registered, for the stream start.
    jl: DFF<Bits<32>>,
    jl1: DFF<Bit>,
    j_eq: DFF<Bit>,
    nk_is1: DFF<Bit>,
    nk_is2: DFF<Bit>,
    nk_is3: DFF<Bit>,
    st_valid: DFF<Bit>,
    st_first: DFF<Bit>,
    st_j: DFF<Bits<32>>,
    /// The step's K row, picked out of the FIFO's head beat every cycle.
    k_row: ShrReg<W>,
    /// V rows, delayed to the lanes' S4a (a step's V row in cycle c + `v_at(d)`).
    v_dly: RowDelay<W>,
    last_pipe: DFF<Bits<LAST_PIPE>>,
    /// The block's last step is in the backlogs: the finalizer starts once
    /// every lane has caught up (`all_idle`, registered from the lanes).
    drain: DFF<Bit>,
    all_idle: DFF<Bit>,
    /// Every lane's backlog has room for the steps in flight (registered).
    all_room: DFF<Bit>,
    /// The finalizer snapshots the lanes' l and o (their `div_start`):
    /// registered from the next values of `drain`, `all_idle` and `fin`, on
    /// two kept copies (the top's loads, the lanes' 800 snapshot enables).
    snap: Signal<Local, Bit>,
    snap_r: Copies<2>,
    /// Cycles after `ap_rst_n` in which steps of an aborted run may still
    /// leave S3: the lanes' backlogs are held empty (`lane_rst`) meanwhile.
    flush: DFF<Bits<8>>,
    lane_rst: DFF<Bit>,
    c_flush: Constant<Bits<8>>,
    // Finalize and write (block parameters handed over at the block's last step).
    fin: DFF<Fin>,
    /// The block's parameters for the finalizer are taken the cycle after its
    /// last step (two kept copies of `go & is_last`; they change in `Next`
    /// at the earliest, and the finalizer reads them after the drain).
    p_take: Copies<2>,
    p_q0: DFF<Bits<32>>,
    p_lv: DFF<Bits<32>>,
    p_oh: DFF<Bits<64>>,
    f_q0: DFF<Bits<32>>,
    f_lv: DFF<Bits<32>>,
    f_oh: DFF<Bits<64>>,
    fx: DFF<Bits<16>>,
    /// `fx` is one short of the serializer's end (registered in `Ser`).
    fxe: DFF<Bit>,
    /// A kept copy of `wi` for `wrow`'s select.
    w_sel: Kept<32>,
    /// The lanes' `ser_v`: the first d/2 cycles of `Fin::Ser`.
    ser_v: DFF<Bit>,
    wi: DFF<Bits<32>>,
    wb: DFF<Bits<16>>,
    w_addr: DFF<Bits<64>>,
    w_beat: DFF<Bits<W>>,
    w_strb: DFF<Bits<S>>,
    /// The row being written (registered in `WRow`): its byte offset in O's
    /// head, its data (shifted down a beat per beat sent), beats, base address,
    /// offset within a beat and byte strobe.
    w_rb: DFF<Bits<32>>,
    wrow: RowPick<ROW32_BITS, ROW8_BITS>,
    /// The finalizer is in `WRow` (`w_load`: `wrow` loads) or `WPrep`
    /// (`w_shift`: `wrow` shifts past the beat taken): flags set with the
    /// state, so the wide row's enables decode nothing. `wb_last`, `wi_last`:
    /// the beat is the row's last, the row the block's (registered in `WPrep`).
    w_load: DFF<Bit>,
    /// `w_load` and `w_shift` in four kept copies (registered from their next
    /// values), each enabling a quarter of `wrow`'s row: one flip-flop drove
    /// its 388 enables (`w_load → wrow`, 5.8 ns of routing).
    wl_k: Copies<4>,
    wsh_k: Copies<4>,
    /// Set with `w_load` on `Ser`'s exit only: `wb` clears in the block's
    /// first `WRow` (`WPrep` reads it first; a row's last beat clears it
    /// otherwise), not on the state decode and `fxe` (−1.17 ns into its 16
    /// enables). On `w_load` itself it put `wb` among `wrow`'s 388 loads.
    wb_clr: DFF<Bit>,
    /// In `WRow2` (`w_load` a cycle late) and in `Idle`, as flags set and
    /// cleared with the state: `w_shift` (into `wrow`'s 388 enables) and
    /// `fin_idle_nx` (into `go_r` and `snap_r`) read them, not `fin`'s decodes
    /// (`fin → wsh_k`, fan-out 66, and `fin → go_r`, −0.26 to −0.39 ns).
    w_r2: DFF<Bit>,
    f_idle: DFF<Bit>,
    w_shift: DFF<Bit>,
    wb_last: DFF<Bit>,
    wi_last: DFF<Bit>,
    /// For them, `w_bpr − 1` and `wi ≥ f_lv − 1` (`wi + 1 ≥ f_lv`, `f_lv`
    /// being at least 1), registered every cycle (`w_bpr` is set in `WRow`,
    /// `f_lv` at the snapshot, and `wi` holds from `WRow` to `WPrep`): the
    /// add and compare in `WPrep` were −0.55 to −0.88 ns.
    w_bpr_m1: DFF<Bits<16>>,
    f_lv_m1: DFF<Bits<32>>,
    wi_ge: DFF<Bit>,
    /// `wb` + 1 and `wi` + 1 (registered in `WPrep`), and three copies of "in
    /// `WSend`" (registered from `w_shift`, itself and the write handshake): there
    /// `wb` and `wi` take the next beat's values every cycle, the same until
    /// the beat is sent, so their 48 loads (and `w_sel`'s) see neither the
    /// state decode nor `wready`; copy 2 is the shell's `wr_send` and
    /// `fin_free`'s term (`fin → shell.wr_out.count`, −0.64 ns, 15 endpoints).
    wb_p1: DFF<Bits<16>>,
    wi_p1: DFF<Bits<32>>,
    ws: Copies<3>,
    w_bpr: DFF<Bits<16>>,
    w_rowaddr: DFF<Bits<64>>,
    w_off: DFF<Bits<16>>,
    w_strb_r: DFF<Bits<S>>,
    row_bytes_log: Signal<Local, Bits<16>>,
    row_byte: Signal<Local, Bits<32>>,
    beats_per_row: Signal<Local, Bits<16>>,

    c_logp: Constant<Bits<16>>,
    c_pmask: Constant<Bits<64>>,
    c_pmask32: Constant<Bits<32>>,
    c_logd: Constant<Bits<16>>,
    c_logd8: Constant<Bits<16>>,
    c_rpb: Constant<Bits<16>>,
    c_lanes: Constant<Bits<32>>,
    c_half_m1: Constant<Bits<16>>,
    c_ser_end: Constant<Bits<16>>,
    c_ser_end_m1: Constant<Bits<16>>,
    c_rpb_m2: Constant<Bits<16>>,
    c_sel_mask: Constant<Bits<32>>,
    c_rib_mask: Constant<Bits<16>>,
    ar_lo: Signal<Local, Bits<64>>,
    ar_hi: Signal<Local, Bits<64>>,
    c_lo32: Constant<Bits<64>>,
    c_chunk: Constant<Bits<16>>,
    c_sbytes: Constant<Bits<16>>,
    c_ones: Constant<Bits<S>>,
    c_lane_off: Vec<Constant<Bits<32>>>,
    c_lane_idx: Vec<Constant<Bits<32>>>,
    c_lp_mask: Constant<Bits<LAST_PIPE>>,
    c_mul_wait: Constant<Bits<4>>,
    c_ones64: Constant<Bits<64>>,
    /// Lanes after the first read the controller's flags and `st_j` from kept
    /// copies of their own, registered from the originals' next values (so on
    /// the same cycles) and placed by each lane: at two lanes one `ser_v` fed
    /// 1 180 loads in both lanes, one `in_q` both lanes' query registers
    /// (docs/timing.md). Lane 0 reads the originals, so a 1-lane unit is
    /// unchanged. `feed` bits: 0 `in_q`, 1 `st_valid`, 2 `st_first`, 3
    /// `lane_rst`, 4 the divider start (`snap_r` 1), 5 `ser_v`.
    feed: Vec<Kept<6>>,
    feed_j: Vec<Kept<32>>,
    _lanes: usize,
    /// `v_at(d) + 3`: `last_pipe`'s bits in use.
    _lp: usize,
}

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum Phase {
    Idle,
    /// The launch checks (`bad_args` in three registered steps) on the latched arguments.
    Check,
    Check2,
    Check3,
    /// With FLAGS.kvlen, every batch entry's key count is read (`KvReq`,
    /// `KvWait`) and checked before anything is written, so a bad one refuses
    /// the whole launch.
    KvCheckTest,
    HeadWait,
    HeadInit,
    /// The KVLEN word's address into `k_addr`, so that `KvReq`'s request is a register.
    KvAddr,
    KvReq,
    KvWait,
    /// The word's checks are registered (a cycle per KVLEN read).
    KvCmp,
    KvTest,
    BlockPre1,
    BlockPre2,
    BlockPre3,
    BlockInit,
    QReq,
    QWait,
    Stream,
    Next,
    Finish,
    Done,
}

/// The finalizer, which runs beside the next block's Q load and K/V prefetch.
#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum Fin {
    Idle,
    Div,
    Ser,
    /// Register the row `wi` (its lane's output, its offset), then its address and strobe.
    WRow,
    WRow2,
    WPrep,
    WSend,
}

impl<const W: usize, const S: usize> AttentionUnit<W, S> {
    pub fn new(cfg: &AttentionConfig) -> Result<Self, HwError> {
        cfg.validate()?;
        if cfg.port_bits != W || W / 8 != S {
            return Err(HwError::Config(format!("AttentionUnit<{W}> built for port_bits = {}", cfg.port_bits)));
        }
        fn k<const N: usize>(v: u64) -> Bits<N> {
            v.to_bits()
        }
        let (l, d, p) = (cfg.lanes, cfg.head_dim as u64, cfg.port_bytes() as u64);
        let logd = d.trailing_zeros() as u64;
        Ok(with_defaults!(Self {
            shell: Shell::new(&TABLE, cfg.hwinfo()),
            lanes: (0..l).map(|_| Lane::new(cfg.head_dim, l > 1)).collect(),
            kst: KvStream::new(cfg.read_fifo_depth, cfg.port_bytes()),
            vst: KvStream::new(cfg.read_fifo_depth, cfg.port_bytes()),
            v_dly: RowDelay::new(v_at(cfg.head_dim) + 1),
            c_lp_mask: Constant::new(k((1u64 << (v_at(cfg.head_dim) + 3)) - 1)),
            _lp: v_at(cfg.head_dim) + 3,
            c_flush: Constant::new(k(v_at(cfg.head_dim) as u64 + 2)),
            wrow: RowPick::new(l, W, 32 * d as usize, 4),
            c_mul_wait: Constant::new(k(MulU32Pipe::LATENCY as u64)),
            c_ones64: Constant::new(Bits::<64>::mask()),
            c_logp: Constant::new(k(p.trailing_zeros() as u64)),
            c_pmask: Constant::new(k(p - 1)),
            c_pmask32: Constant::new(k(p - 1)),
            c_logd: Constant::new(k(logd)),
            c_logd8: Constant::new(k(logd + 3)),
            c_rpb: Constant::new(k(p / d)),
            c_lanes: Constant::new(k(l as u64)),
            c_half_m1: Constant::new(k(d / 2 - 1)),
            c_ser_end: Constant::new(k(d / 2 - 1 + SER_LAT as u64)),
            c_ser_end_m1: Constant::new(k(d / 2 - 2 + SER_LAT as u64)),
            c_rpb_m2: Constant::new(k((p / d).wrapping_sub(2) & 0xffff)),
            c_sel_mask: Constant::new(k(if l == 1 { 0 } else { 0xffff_ffff })),
            c_rib_mask: Constant::new(k(if p == d { 0 } else { 0xffff })),
            c_lo32: Constant::new(k(0xffff_ffff)),
            c_hi52: Constant::new(k(!0xfff)),
            c_page: Constant::new(k(0x1000)),
            q_lb: (0..l).map(|_| Default::default()).collect(),
            q_dc: (0..l).map(|_| Default::default()).collect(),
            q_sel: (0..l).map(|_| Default::default()).collect(),
            q_shr: (0..l).map(|_| Default::default()).collect(),
            c_chunk: Constant::new(k(CHUNK)),
            c_sbytes: Constant::new(k(S as u64)),
            c_ones: Constant::new(Bits::<S>::mask()),
            c_lane_off: (0..l).map(|i| Constant::new(k(i as u64 * d))).collect(),
            c_lane_idx: (0..l).map(|i| Constant::new(k(i as u64))).collect(),
            feed: (1..l).map(|_| Default::default()).collect(),
            feed_j: (1..l).map(|_| Default::default()).collect(),
            _lanes: l,
            .. vitis, now, run, mul_q, mul_kv, mul_o, hwait, bad_t, bad_c, bz_hd, bz_sq, bz_sm, bz_om, bz_st, za, bc_q, bc_kv, bc_o, sm_r, th_r, bad_r, kv_word_r, kv_sel, kv_wa0, kv_wa1, b_p1, kva_n, kv_zero, kv_over,
            kv_bad, bh_nx, bh_end, kv_chk, qleft, lv_r, in_hi, in_kt, q_nl, sd_r, jl, jl1, j_eq, nk_is1, nk_is2, nk_is3,
            qsp, qend, qspan, q_last, hb_last, h_last, hpb_m1, heads_m1, phase, h, hm, hb, b, qh, kh, vh, oh, nkv, bh, bad_zero, bad_cmp, o_row_log,
            kv_word, k_addr, v_addr, k_up, v_up, k_lo, v_lo, q0, lv, nk, qs, qr, q_in, q_rx, in_q, in_bi, in_qw, in_qr, at_done, lp_zero, fin_idle, kv_rem0, kv_rem,
            in_st, in_nx, in_ck, in_kct, sst, fin_idle_nx, fin_free, kva, kvr, tv, k_ok, kv_nz, kiss, viss, kv_pg_m1, kv_rc2_m1, kv_lm1, kv_last_m1, nk_m2, p_take, fxe, w_sel, ar_lo, ar_hi,
            kv_remc, kv_pg, kv_remc2, kv_len, kv_age, is_last,
            kv_turn, kv_last, recv_v, kv_rx, j, rib, rib_last,
            go, go_r, go_p, go_j, st_valid, st_first, st_j, k_row, w_load, wl_k, wsh_k, wb_clr, w_r2, f_idle, w_shift, wb_last, wi_last, w_bpr_m1, f_lv_m1, wi_ge, last_pipe, drain, all_idle, all_room, snap, snap_r, flush, lane_rst, fin, p_q0, p_lv, p_oh, f_q0, f_lv, f_oh, fx, ser_v, wi,
            wb, w_addr, w_beat, w_strb, w_rb, w_bpr, w_rowaddr, w_off, w_strb_r, row_bytes_log,
            row_byte, beats_per_row, wb_p1, wi_p1, ws
        }))
    }
}

impl<const W: usize, const S: usize> Logic for AttentionUnit<W, S> {
    #[hdl_gen]
    fn update(&mut self) {
        #[rustfmt::skip]
        dff_setup!(
            self, vitis.ap_clk, hwait, bad_t, bad_c, bz_hd, bz_sq, bz_sm, bz_om, bz_st, za, bc_q, bc_kv, bc_o, sm_r, th_r, bad_r, kv_word_r, kv_sel, kv_wa0, kv_wa1, b_p1, kva_n,
            kv_zero, kv_over, kv_bad, bh_nx, bh_end, kv_chk, in_hi, in_kt, q_nl, sd_r, jl, jl1, j_eq, nk_is1, nk_is2, nk_is3,
            qleft, lv_r, qsp, qend, qspan,
            q_last, hb_last, h_last, hpb_m1, heads_m1,
            phase, h, hm, hb, b, qh, kh, vh, oh, nkv, bh, q0, lv, nk, qr, q_in, k_addr, v_addr, k_up, v_up, k_lo, v_lo, in_qw, in_qr, at_done, lp_zero, fin_idle, kv_rem0, kv_rem,
            kv_remc, kv_pg, kv_remc2, kv_len, kv_age, is_last,
            kv_turn, kv_last, recv_v, j, rib, rib_last, st_valid, st_first, st_j, last_pipe, drain, all_idle, all_room, flush,
            lane_rst, fin,
            p_q0, p_lv, p_oh, f_q0, f_lv, f_oh, fx, ser_v, wi, wb, w_addr, w_beat, w_strb, w_load, wb_clr, w_r2, f_idle, w_shift, wb_last,
            wi_last, w_bpr_m1, f_lv_m1, wi_ge, wb_p1, wi_p1,
            w_rb, w_bpr, w_rowaddr, w_off, w_strb_r,
            in_q, in_bi, in_st, in_nx, in_ck, in_kct, kva, kvr, k_ok, kv_nz, kv_pg_m1, kv_rc2_m1, kv_lm1, kv_last_m1, nk_m2, fxe
        );
        #[rustfmt::skip]
        clock!(self, vitis.ap_clk, tv, p_take, w_sel, snap_r, go_r, sst, ws, wl_k, wsh_k);
        // ---------------- Shell ----------------
        VitisPorts::<W, S>::link(&mut self.vitis, &mut self.shell.vitis);
        for i in 0..TABLE.words() {
            self.now.words[i].next = self.shell.args[i].val();
            self.run.words[i].next = self.shell.run[i].val();
        }
        self.shell.done.next = self.at_done.q.val();
        self.shell.fail.next = false;

        self.hpb_m1.d.next = self.run.hpb.val() - 1;
        self.bh_nx.d.next = bit_cast::<33, 32>(self.bh.q.val()) + bit_cast::<33, 32>(self.run.hpb.val());
        self.bh_end.d.next = self.bh_nx.q.val() >= bit_cast::<33, 32>(self.run.heads.val());
        self.heads_m1.d.next = self.run.heads.val() - 1;
        self.mul_q.clock.next = self.vitis.ap_clk.val();
        self.mul_kv.clock.next = self.vitis.ap_clk.val();
        self.mul_o.clock.next = self.vitis.ap_clk.val();
        self.hm.d.next = self.h.q.val();
        self.mul_q.a.next = self.hm.q.val();
        self.mul_q.b.next = self.run.q_stride.val();
        self.mul_kv.a.next = self.hm.q.val();
        self.mul_kv.b.next = self.run.kv_stride.val();
        self.mul_o.a.next = self.hm.q.val();
        self.mul_o.b.next = self.run.o_stride.val();
        // Entry `b`'s KVLEN word, a part-select of the beat (a shift of the
        // whole beat costs simulators a wide shift every cycle).
        self.kv_word.next = self.vitis.m_axi_gmem.rdata.val().get_bits::<32>(self.kv_sel.q.val().index() * 8);
        self.kv_sel.d.next = (self.b.q.val() << 2) & self.c_pmask32.val();
        self.kv_zero.d.next = self.kv_word_r.q.val() == 0;
        self.kv_over.d.next = self.kv_word_r.q.val() > self.run.seq_kv.val();
        self.kv_bad.d.next = (self.kv_word_r.q.val() == 0) | (self.kv_word_r.q.val() > self.run.seq_kv.val());
        self.qs.next = self.q0.q.val() << self.c_logd.val();
        // A block's Q rows: one span from its first beat.
        self.shell.span_load.next = false;
        self.shell.span_resume.next = false;
        self.shell.span_addr.next = self.qh.q.val() + (bit_cast::<64, 32>(self.qs.val()) & !self.c_pmask.val());
        self.shell.span_beats.next = bit_cast::<16, 32>(self.qspan.q.val() >> self.c_logp.val());
        self.shell.span_rows.next = 1.into();
        self.shell.span_pitch.next = 0.into();
        self.shell.span_go.next = self.in_qr.q.val();
        self.q_rx.next = self.vitis.m_axi_gmem.rvalid.val() & self.in_q.q.val();
        self.kv_rx.next = self.vitis.m_axi_gmem.rvalid.val() & self.in_st.q.val();
        // K/V bursts: the same length for K and V, never crossing a page in either.
        // Q spans aside, the unit's reads are K/V bursts and the KVLEN word.
        // The request's address and length are registers selected by kept
        // copies of `kv_turn` (the KVLEN read's address is in `k_addr`, its
        // length 0 in `kv_lm1`, with `kv_turn` clear); a K burst is requested
        // on `k_ok`, its V burst the cycle the slot is free after it.
        self.ar_lo.next = self.k_addr.q.val() & self.c_lo32.val();
        if self.tv.q.val().get_bit(0) {
            self.ar_lo.next = self.v_addr.q.val() & self.c_lo32.val();
        }
        self.ar_hi.next = self.k_addr.q.val() & !self.c_lo32.val();
        if self.tv.q.val().get_bit(1) {
            self.ar_hi.next = self.v_addr.q.val() & !self.c_lo32.val();
        }
        self.shell.ar_req_addr.next = self.ar_hi.val() | self.ar_lo.val();
        self.shell.ar_req_len.next = self.kv_lm1.q.val().get_bits::<8>(0);
        if self.tv.q.val().get_bit(2) {
            self.shell.ar_req_len.next = self.kv_last_m1.q.val().get_bits::<8>(0);
        }
        self.kiss.next =
            self.shell.slot_free.val() & self.in_st.q.val() & !self.tv.q.val().get_bit(2) & self.k_ok.q.val();
        self.viss.next = self.shell.slot_free.val() & self.in_st.q.val() & self.tv.q.val().get_bit(2);
        self.shell.ar_req.next = self.kiss.val() | self.viss.val() | (self.kvr.q.val() & self.shell.slot_free.val());
        self.k_ok.d.next = self.in_st.q.val()
            & !self.kv_turn.q.val()
            & self.kv_age.q.val().get_bit(1)
            & self.kv_nz.q.val()
            & self.kst.room_nx.val()
            & self.vst.room_nx.val();
        self.kv_nz.d.next = self.kv_rem.q.val() != 0;
        self.kst.addr.next = self.k_addr.q.val();
        self.vst.addr.next = self.v_addr.q.val();
        self.kv_remc.d.next = self.c_chunk.val();
        if self.kv_rem.q.val() < bit_cast::<32, 16>(self.c_chunk.val()) {
            self.kv_remc.d.next = bit_cast::<16, 32>(self.kv_rem.q.val());
        }
        self.kv_pg.d.next = self.kst.page.val();
        self.kv_pg_m1.d.next = self.kst.page_m1.val();
        if self.vst.page.val() < self.kst.page.val() {
            self.kv_pg.d.next = self.vst.page.val();
            self.kv_pg_m1.d.next = self.vst.page_m1.val();
        }
        self.kv_remc2.d.next = self.kv_remc.q.val();
        self.kv_rc2_m1.d.next = self.kv_remc.q.val() - 1;
        self.kv_len.d.next = self.kv_remc2.q.val();
        self.kv_lm1.d.next = self.kv_rc2_m1.q.val();
        if self.kv_pg.q.val() < self.kv_remc2.q.val() {
            self.kv_len.d.next = self.kv_pg.q.val();
            self.kv_lm1.d.next = self.kv_pg_m1.q.val();
        }
        if self.kva.q.val() | self.kvr.q.val() {
            self.kv_lm1.d.next = 0.into();
        }
        if self.kv_age.q.val() != 3 {
            self.kv_age.d.next = self.kv_age.q.val() + 1;
        }
        self.kst.issue.next = 0.into();
        self.vst.issue.next = 0.into();
        self.kst.issue_m1.next = bits::<16>(0xffff);
        self.vst.issue_m1.next = bits::<16>(0xffff);

        // Steps wait until the previous block's last step has reached the
        // finalizer, which snapshots l and o then (the lanes' `div_start`), and
        // while a lane's backlog is too full; a block's last step also waits
        // for the previous block's rows to be written.
        // Registered in `go_r` from its terms' next values (at the end).
        self.go.next = self.go_r.q.val().get_bit(0);
        self.go_p.next = self.go_r.q.val().get_bit(1);
        self.go_j.next = self.go_r.q.val().get_bit(2);
        // ---------------- Output rows ----------------
        self.wrow.clock.next = self.vitis.ap_clk.val();
        self.wrow.load.next = self.wl_k.q.val();
        self.wrow.shift.next = self.wsh_k.q.val();
        self.w_load.d.next = false;
        self.wb_clr.d.next = false;
        // With one lane every row is row 0 (`wi` < lanes): the select is 0.
        self.wrow.sel.next = self.w_sel.q.val() & self.c_sel_mask.val();
        self.wrow.out8.next = self.run.out8.val();
        // Bytes per output row: d·4 (Q16) or d (int8), as a power of two.
        self.row_bytes_log.next = self.c_logd.val() + 2;
        if self.run.out8.val() {
            self.row_bytes_log.next = self.c_logd.val();
        }
        self.row_byte.next = (self.f_q0.q.val() + self.wi.q.val()) << self.row_bytes_log.val();
        self.beats_per_row.next = 1.into();
        if self.row_bytes_log.val() > self.c_logp.val() {
            self.beats_per_row.next = bits::<16>(1) << (self.row_bytes_log.val() - self.c_logp.val());
        }

        // What the unit refuses at start (STATUS bit 0, no memory traffic),
        // as AttentionProblem::validate_for and the host's layout checks do:
        // docs/attention.md. Multipliers are positive int32; |t| < 2^38 is
        // d·SMULT < 2^(24+SSHIFT); head strides are beat multiples that hold a head.
        // Checked on the latched arguments in `Check` and `Check2`, registered in parts.
        self.o_row_log.next = self.c_logd.val() + 2;
        if self.now.out8.val() {
            self.o_row_log.next = self.c_logd.val();
        }
        self.za.d.next = bit_cast::<6, 1>((self.now.heads.val() == 0).into())
            | (bit_cast::<6, 1>((self.now.hpb.val() == 0).into()) << 1)
            | (bit_cast::<6, 1>((self.now.seq_q.val() == 0).into()) << 2)
            | (bit_cast::<6, 1>((self.now.seq_kv.val() == 0).into()) << 3)
            | (bit_cast::<6, 1>((self.now.smult.val() == 0).into()) << 4)
            | (bit_cast::<6, 1>((self.now.omult.val() == 0).into()) << 5);
        self.bz_hd.d.next = self.za.q.val().get_bits::<2>(0).any();
        self.bz_sq.d.next = self.za.q.val().get_bits::<2>(2).any();
        self.bz_sm.d.next = self.now.bad_shift.val() | self.za.q.val().get_bit(4) | self.now.smult.val().get_bit(31);
        self.bz_om.d.next = self.now.out8.val() & (self.za.q.val().get_bit(5) | self.now.omult.val().get_bit(31));
        self.bz_st.d.next =
            (bit_cast::<64, 32>(self.now.q_stride.val() | self.now.kv_stride.val() | self.now.o_stride.val())
                & self.c_pmask.val())
                != 0;
        self.bad_zero.next =
            self.bz_hd.q.val() | self.bz_sq.q.val() | self.bz_sm.q.val() | self.bz_om.q.val() | self.bz_st.q.val();
        self.bc_q.d.next = bit_cast::<64, 32>(self.now.q_stride.val())
            < (bit_cast::<64, 32>(self.now.seq_q.val()) << self.c_logd.val());
        self.bc_kv.d.next = bit_cast::<64, 32>(self.now.kv_stride.val())
            < (bit_cast::<64, 32>(self.now.seq_kv.val()) << self.c_logd.val());
        self.bc_o.d.next = bit_cast::<64, 32>(self.now.o_stride.val())
            < (bit_cast::<64, 32>(self.now.seq_q.val()) << self.o_row_log.val());
        self.bad_cmp.next = self.bc_q.q.val() | self.bc_kv.q.val() | self.bc_o.q.val();

        // ---------------- Phase machine ----------------
        self.in_bi.d.next = false;
        self.kva.d.next = false;
        self.kva_n.d.next = false;
        self.in_ck.d.next = false;
        self.in_kct.d.next = false;
        self.in_hi.d.next = false;
        self.in_kt.d.next = false;
        self.at_done.d.next = false;
        self.hwait.d.next = self.c_mul_wait.val();
        self.sd_r.d.next = self.shell.span_done.val() & self.in_q.q.val() & !self.in_qw.q.val();
        match self.phase.q.val() {
            Phase::Idle => {
                if self.shell.start.val() {
                    self.phase.d.next = Phase::Check;
                    self.in_ck.d.next = true;
                }
            }
            // h, hb, b and bh clear in this phase (on `in_ck`, after the
            // match) rather than on `start` (whose decode enabled their 128
            // bits): the head products settle in `HeadWait`, the KVLEN word is
            // read from `KvAddr` on.
            // Its loads (the launch checks' first registers) are on `in_ck`.
            Phase::Check => {
                self.phase.d.next = Phase::Check2;
            }
            Phase::Check2 => {
                // ((SMULT·d) >> 24) >> SSHIFT is not zero: a bit at or above SSHIFT.
                self.bad_r.d.next =
                    self.bad_t.q.val() | self.bad_c.q.val() | ((self.sm_r.q.val() & self.th_r.q.val()) != 0);
                self.phase.d.next = Phase::Check3;
            }
            Phase::Check3 => {
                self.phase.d.next = Phase::HeadWait;
                if self.run.use_kvlen.val() {
                    self.kv_chk.d.next = true;
                    self.phase.d.next = Phase::KvAddr;
                    self.kva.d.next = true;
                }
                if self.bad_r.q.val() {
                    self.shell.fail.next = true;
                    self.phase.d.next = Phase::Done;
                    self.at_done.d.next = true;
                    self.kva.d.next = false;
                }
            }
            // b and bh move on `in_kct` (after the match).
            Phase::KvCheckTest => {
                self.phase.d.next = Phase::KvAddr;
                self.kva.d.next = true;
                self.kva_n.d.next = true;
                if self.bh_end.q.val() {
                    self.kv_chk.d.next = false;
                    self.phase.d.next = Phase::HeadWait;
                    self.kva.d.next = false;
                }
                if self.kv_bad.q.val() {
                    self.shell.fail.next = true;
                    self.phase.d.next = Phase::Done;
                    self.at_done.d.next = true;
                    self.kva.d.next = false;
                }
            }
            Phase::HeadWait => {
                // h changed on entry; `MulU32Pipe::LATENCY` cycles later the products hold it.
                self.hwait.d.next = self.hwait.q.val() - 1;
                if self.hwait.q.val() == 0 {
                    self.phase.d.next = Phase::HeadInit;
                    self.in_hi.d.next = true;
                }
            }
            // Its loads are on `in_hi` (after the match).
            Phase::HeadInit => {
                self.phase.d.next = Phase::BlockPre1;
                if self.run.use_kvlen.val() {
                    self.phase.d.next = Phase::KvAddr;
                    self.kva.d.next = true;
                }
            }
            // `k_addr` takes the KVLEN word's address (after the match, on `kva`).
            Phase::KvAddr => {
                self.phase.d.next = Phase::KvReq;
                self.kvr.d.next = true;
            }
            Phase::KvReq => {
                // Requested on `kvr` above.
                if self.shell.slot_free.val() {
                    self.phase.d.next = Phase::KvWait;
                    self.kvr.d.next = false;
                }
            }
            Phase::KvWait => {
                if self.vitis.m_axi_gmem.rvalid.val() {
                    self.kv_word_r.d.next = self.kv_word.val();
                    self.phase.d.next = Phase::KvCmp;
                }
            }
            // `kv_zero`, `kv_over`, `kv_bad` take the word's checks.
            Phase::KvCmp => {
                self.phase.d.next = Phase::KvTest;
                self.in_kt.d.next = true;
                if self.kv_chk.q.val() {
                    self.phase.d.next = Phase::KvCheckTest;
                    self.in_kt.d.next = false;
                    self.in_kct.d.next = true;
                }
            }
            // Checked in KvCheckTest; clamped again (on `in_kt`, after the
            // match) only in case KVLEN changed during the run, so the unit still finishes.
            Phase::KvTest => {
                if self.kv_bad.q.val() {
                    self.shell.fail.next = true;
                }
                self.phase.d.next = Phase::BlockPre1;
            }
            // The block's query count `min(lanes, SEQ_Q − q0)`, its end and Q span, a carry chain per cycle.
            Phase::BlockPre1 => {
                self.qleft.d.next = self.run.seq_q.val() - self.q0.q.val();
                self.hb_last.d.next = self.hb.q.val() == self.hpb_m1.q.val();
                self.h_last.d.next = self.h.q.val() == self.heads_m1.q.val();
                self.qsp.d.next = (self.qs.val() & self.c_pmask32.val()) + self.c_pmask32.val();
                self.phase.d.next = Phase::BlockPre2;
            }
            Phase::BlockPre2 => {
                self.q_last.d.next = self.qleft.q.val() <= self.c_lanes.val();
                self.lv_r.d.next = self.c_lanes.val();
                if self.qleft.q.val() < self.c_lanes.val() {
                    self.lv_r.d.next = self.qleft.q.val();
                }
                self.phase.d.next = Phase::BlockPre3;
            }
            Phase::BlockPre3 => {
                self.qend.d.next = self.q0.q.val() + self.lv_r.q.val();
                self.qspan.d.next = self.qsp.q.val() + (self.lv_r.q.val() << self.c_logd.val());
                self.phase.d.next = Phase::BlockInit;
                self.in_bi.d.next = true;
            }
            // Its loads are on `in_bi` (after the match).
            Phase::BlockInit => {
                self.phase.d.next = Phase::QReq;
                self.in_qr.d.next = true;
            }
            Phase::QReq => {
                if self.sd_r.q.val() {
                    self.phase.d.next = Phase::QWait;
                    self.in_qr.d.next = false;
                    self.in_qw.d.next = true;
                }
            }
            // `QWait` ends after the match, on flags.
            Phase::QWait => {}
            // K/V requests are made after the match (`kiss`, `viss`).
            Phase::Stream => {
                if self.go.val() & self.is_last.q.val() {
                    self.phase.d.next = Phase::Next;
                }
            }
            Phase::Next => {
                // Next block, next head, or finish: the next Q load and K/V
                // prefetch overlap this block's finalization (q0, h, hb, b
                // move after the match, on `in_nx`).
                self.phase.d.next = Phase::BlockPre1;
                if self.q_last.q.val() {
                    self.phase.d.next = Phase::HeadWait;
                    if self.h_last.q.val() {
                        self.phase.d.next = Phase::Finish;
                    }
                }
            }
            Phase::Finish => {
                if self.fin_idle.q.val() & self.lp_zero.q.val() & !self.drain.q.val() & self.shell.writes_done.val() {
                    self.phase.d.next = Phase::Done;
                    self.at_done.d.next = true;
                }
            }
            Phase::Done => {
                self.phase.d.next = Phase::Idle;
            }
            _ => {
                self.phase.d.next = Phase::Idle;
            }
        }
        if self.in_bi.q.val() {
            self.lv.d.next = self.lv_r.q.val();
            self.nk.d.next = self.nkv.q.val();
            if self.run.causal.val() & (self.qend.q.val() < self.nkv.q.val()) {
                self.nk.d.next = self.qend.q.val();
            }
            self.shell.span_load.next = true;
            self.qr.d.next = self.shell.span_beats.val();
            self.q_in.d.next = false;
            self.in_q.d.next = true;
        }
        self.k_up.d.next = (self.k_addr.q.val() & self.c_hi52.val()) + self.c_page.val();
        self.v_up.d.next = (self.v_addr.q.val() & self.c_hi52.val()) + self.c_page.val();
        self.k_lo.d.next = bit_cast::<13, 12>(self.k_addr.q.val().get_bits::<12>(0))
            + bit_cast::<13, 16>(self.kv_len.q.val() << self.c_logp.val());
        self.v_lo.d.next = bit_cast::<13, 12>(self.v_addr.q.val().get_bits::<12>(0))
            + bit_cast::<13, 16>(self.kv_len.q.val() << self.c_logp.val());
        // K/V requests in `Stream` (the room registers are last cycle's: no
        // burst was issued then; a V burst came at least `kv_age` = 3 cycles
        // ago, and each K one before it).
        if self.kiss.val() {
            self.kv_last.d.next = self.kv_len.q.val();
            self.kv_last_m1.d.next = self.kv_lm1.q.val();
            self.kst.issue.next = self.kv_len.q.val();
            self.kst.issue_m1.next = self.kv_lm1.q.val();
            self.kv_turn.d.next = true;
        }
        if self.viss.val() {
            self.vst.issue.next = self.kv_last.q.val();
            self.vst.issue_m1.next = self.kv_last_m1.q.val();
            self.k_addr.d.next =
                (self.k_addr.q.val() & self.c_hi52.val()) | bit_cast::<64, 12>(self.k_lo.q.val().get_bits::<12>(0));
            if self.k_lo.q.val().get_bit(12) {
                self.k_addr.d.next = self.k_up.q.val() | bit_cast::<64, 12>(self.k_lo.q.val().get_bits::<12>(0));
            }
            self.v_addr.d.next =
                (self.v_addr.q.val() & self.c_hi52.val()) | bit_cast::<64, 12>(self.v_lo.q.val().get_bits::<12>(0));
            if self.v_lo.q.val().get_bit(12) {
                self.v_addr.d.next = self.v_up.q.val() | bit_cast::<64, 12>(self.v_lo.q.val().get_bits::<12>(0));
            }
            self.kv_age.d.next = 0.into();
            self.kv_rem.d.next = self.kv_rem.q.val() - bit_cast::<32, 16>(self.kv_last.q.val());
            self.kv_turn.d.next = false;
        }
        // The KVLEN word's address, for `KvReq`'s request (`kv_turn` clear).
        self.kv_wa0.d.next = self.run.kvlen.val() + (bit_cast::<64, 32>(self.b.q.val() << 2) & !self.c_pmask.val());
        self.b_p1.d.next = self.b.q.val() + 1;
        self.kv_wa1.d.next = self.run.kvlen.val() + (bit_cast::<64, 32>(self.b_p1.q.val() << 2) & !self.c_pmask.val());
        if self.kva.q.val() {
            self.k_addr.d.next = self.kv_wa0.q.val();
            if self.kva_n.q.val() {
                self.k_addr.d.next = self.kv_wa1.q.val();
            }
            self.kv_turn.d.next = false;
        }
        if self.go.val() & self.is_last.q.val() {
            self.in_st.d.next = false;
        }
        if self.in_ck.q.val() {
            self.bad_t.d.next = self.bad_zero.val();
            self.bad_c.d.next = self.bad_cmp.val();
            self.sm_r.d.next = (bit_cast::<64, 32>(self.run.smult.val()) << self.c_logd.val()) >> 24;
            self.th_r.d.next = self.c_ones64.val() << bit_cast::<64, 6>(self.run.sshift.val());
            self.h.d.next = 0.into();
            self.hb.d.next = 0.into();
            self.b.d.next = 0.into();
            self.bh.d.next = 0.into();
        }
        if self.in_hi.q.val() {
            self.qh.d.next = self.run.q.val() + self.mul_q.p.val();
            self.kh.d.next = self.run.k.val() + self.mul_kv.p.val();
            self.vh.d.next = self.run.v.val() + self.mul_kv.p.val();
            self.oh.d.next = self.run.o.val() + self.mul_o.p.val();
            self.q0.d.next = 0.into();
            self.nkv.d.next = self.run.seq_kv.val();
        }
        if self.in_kt.q.val() {
            self.nkv.d.next = self.kv_word_r.q.val();
            if self.kv_over.q.val() {
                self.nkv.d.next = self.run.seq_kv.val();
            }
            if self.kv_zero.q.val() {
                self.nkv.d.next = 1.into();
            }
        }
        if self.in_kct.q.val() {
            self.b.d.next = self.b.q.val() + 1;
            self.bh.d.next = self.bh_nx.q.val().get_bits::<32>(0);
            if self.bh_end.q.val() {
                self.b.d.next = 0.into();
            }
        }
        // `Next` (the cycle after a block's last step): the next block or head.
        self.in_nx.d.next = self.go.val() & self.is_last.q.val();
        if self.in_nx.q.val() {
            self.q0.d.next = self.q0.q.val() + self.c_lanes.val();
            if self.q_last.q.val() {
                self.h.d.next = self.h.q.val() + 1;
                self.hb.d.next = self.hb.q.val() + 1;
                if self.hb_last.q.val() {
                    self.hb.d.next = 0.into();
                    self.b.d.next = self.b.q.val() + 1;
                }
            }
        }
        self.p_take.d.next = self.go.val() & self.is_last.q.val();
        if self.p_take.q.val().get_bit(0) {
            self.p_q0.d.next = self.q0.q.val();
            self.p_lv.d.next = self.lv.q.val();
        }
        if self.p_take.q.val().get_bit(1) {
            self.p_oh.d.next = self.oh.q.val();
        }
        // The block's Q rows are in: its K/V stream starts.
        self.kv_rem0.d.next = ((self.nk.q.val() << self.c_logd.val()) + self.c_pmask32.val()) >> self.c_logp.val();
        if self.sst.q.val().get_bit(1) {
            self.k_addr.d.next = self.kh.q.val();
            self.v_addr.d.next = self.vh.q.val();
        }
        if self.sst.q.val().get_bit(2) {
            self.kv_rem.d.next = self.kv_rem0.q.val();
        }
        if self.sst.q.val().get_bit(0) {
            self.kv_age.d.next = 0.into();
            self.is_last.d.next = self.nk_is1.q.val();
            self.kv_turn.d.next = false;
            self.recv_v.d.next = false;
            self.j.d.next = 0.into();
            self.rib.d.next = 0.into();
            self.rib_last.d.next = self.c_rpb.val() == 1;
            self.phase.d.next = Phase::Stream;
            self.in_qw.d.next = false;
            self.in_q.d.next = false;
            self.in_st.d.next = true;
        }

        // ---------------- Finalizer: divide, serialize, write the block's rows ----------------
        // It snapshots l and o once the block's last step is in the backlogs and
        // every lane has caught up; it is idle then (a block's last step waits for it).
        self.snap.next = self.snap_r.q.val().get_bit(0);
        match self.fin.q.val() {
            Fin::Idle => {
                if self.snap.val() {
                    self.f_q0.d.next = self.p_q0.q.val();
                    self.f_lv.d.next = self.p_lv.q.val();
                    self.f_oh.d.next = self.p_oh.q.val();
                    self.fin.d.next = Fin::Div;
                }
            }
            Fin::Div => {
                if !self.lanes[0].div_busy.val() {
                    self.fx.d.next = 0.into();
                    self.fxe.d.next = false;
                    self.ser_v.d.next = true;
                    self.fin.d.next = Fin::Ser;
                }
            }
            Fin::Ser => {
                self.fx.d.next = self.fx.q.val() + 1;
                self.fxe.d.next = self.fx.q.val() == self.c_ser_end_m1.val();
                if self.fx.q.val() == self.c_half_m1.val() {
                    self.ser_v.d.next = false;
                }
                // The last pair's int8 values enter the lanes' r8 in this cycle (`fx` = `c_ser_end`).
                if self.fxe.q.val() {
                    self.wi.d.next = 0.into();
                    self.fin.d.next = Fin::WRow;
                    self.w_load.d.next = true;
                    self.wb_clr.d.next = true;
                }
            }
            Fin::WRow => {
                // Row `f_q0 + wi` of the block's head: its byte offset and its lane's
                // output, selected in `wrow` (an OR of rows gated by lane made simulators
                // copy every lane's row every cycle).
                self.w_rb.d.next = self.row_byte.val();
                self.w_bpr.d.next = self.beats_per_row.val();
                self.fin.d.next = Fin::WRow2;
            }
            Fin::WRow2 => {
                self.w_rowaddr.d.next =
                    self.f_oh.q.val() + (bit_cast::<64, 32>(self.w_rb.q.val()) & !self.c_pmask.val());
                self.w_off.d.next = bit_cast::<16, 32>(self.w_rb.q.val() & self.c_pmask32.val());
                self.w_strb_r.d.next = self.c_ones.val();
                if self.row_bytes_log.val() < self.c_logp.val() {
                    self.w_strb_r.d.next = (self.c_ones.val()
                        >> (self.c_sbytes.val() - (bits::<16>(1) << self.row_bytes_log.val())))
                        << bit_cast::<16, 32>(self.w_rb.q.val() & self.c_pmask32.val());
                }
                self.fin.d.next = Fin::WPrep;
            }
            Fin::WPrep => {
                // Beat `wb` of the row: the bottom of `wrow`, placed at the row's offset in the beat.
                self.w_addr.d.next =
                    self.w_rowaddr.q.val() + (bit_cast::<64, 16>(self.wb.q.val()) << self.c_logp.val());
                self.w_beat.d.next = bit_cast::<W, ROW32_BITS>(self.wrow.q.val()) << (self.w_off.q.val() << 3);
                self.w_strb.d.next = self.w_strb_r.q.val();
                self.wb_last.d.next = self.wb.q.val() >= self.w_bpr_m1.q.val();
                self.wi_last.d.next = self.wi_ge.q.val();
                self.wb_p1.d.next = self.wb.q.val() + 1;
                self.wi_p1.d.next = self.wi.q.val() + 1;
                self.fin.d.next = Fin::WSend;
            }
            Fin::WSend => {
                if self.shell.wr_fire.val() {
                    if !self.wb_last.q.val() {
                        self.fin.d.next = Fin::WPrep;
                    } else if self.wi_last.q.val() {
                        self.fin.d.next = Fin::Idle;
                    } else {
                        self.fin.d.next = Fin::WRow;
                        self.w_load.d.next = true;
                    }
                }
            }
            _ => {
                self.fin.d.next = Fin::Idle;
            }
        }

        self.w_bpr_m1.d.next = self.w_bpr.q.val() - 1;
        self.f_lv_m1.d.next = self.f_lv.q.val() - 1;
        self.wi_ge.d.next = self.wi.q.val() >= self.f_lv_m1.q.val();
        if self.wb_clr.q.val() {
            self.wb.d.next = 0.into();
        }
        // The next beat's `wb`, `wi`, taken in every `WSend` cycle (see `ws`).
        // `w_shift` is "in `WPrep`" and `ws` "in `WSend`" (each set on entering
        // the state, cleared on reset): from them rather than `fin`'s decodes
        // (`fin → ws.q0`, −0.45 ns through the `WPrep` decode's 244 loads).
        self.ws.d.next = self.vitis.ap_rst_n.val()
            & (self.w_shift.q.val() | (self.ws.q.val().get_bit(0) & !self.shell.wr_fire.val()));
        if self.ws.q.val().get_bit(0) {
            self.wb.d.next = self.wb_p1.q.val();
            if self.wb_last.q.val() {
                self.wb.d.next = 0.into();
            }
        }
        if self.ws.q.val().get_bit(1) & self.wb_last.q.val() {
            self.wi.d.next = self.wi_p1.q.val();
        }

        // ---------------- K/V receive ----------------
        self.kst.clock.next = self.vitis.ap_clk.val();
        self.vst.clock.next = self.vitis.ap_clk.val();
        self.kst.reset.next = !self.vitis.ap_rst_n.val();
        self.vst.reset.next = !self.vitis.ap_rst_n.val();
        self.kst.din.next = self.vitis.m_axi_gmem.rdata.val();
        self.vst.din.next = self.vitis.m_axi_gmem.rdata.val();
        self.kst.push.next = self.kv_rx.val() & !self.recv_v.q.val();
        self.vst.push.next = self.kv_rx.val() & self.recv_v.q.val();
        if self.kv_rx.val() & self.vitis.m_axi_gmem.rlast.val() {
            self.recv_v.d.next = !self.recv_v.q.val();
        }
        // A block's first Q beat comes at least two cycles after `BlockInit`
        // sets `qr`, so `q_nl` is current for it.
        self.q_nl.d.next = self.qr.q.val() == 1;
        if self.q_rx.val() {
            self.qr.d.next = self.qr.q.val() - 1;
            self.q_in.d.next = self.q_nl.q.val();
            self.q_nl.d.next = self.qr.q.val() == 2;
        }

        // ---------------- Steps: one key per cycle to every lane ----------------
        self.kst.pop.next = false;
        self.vst.pop.next = false;
        self.st_valid.d.next = self.go_j.val();
        self.st_first.d.next = self.j.q.val() == 0;
        self.st_j.d.next = self.j.q.val();
        self.k_row.clock.next = self.vitis.ap_clk.val();
        self.k_row.en.next = true;
        self.k_row.d.next = self.kst.dout.val();
        // With one row per beat `rib` is 0 whenever a step reads it (the rows' shift is 0).
        self.k_row.sh.next = (self.rib.q.val() & self.c_rib_mask.val()) << self.c_logd8.val();
        self.v_dly.clock.next = self.vitis.ap_clk.val();
        self.v_dly.din.next = self.vst.dout.val();
        self.v_dly.sh.next = (self.rib.q.val() & self.c_rib_mask.val()) << self.c_logd8.val();
        self.nk_m2.d.next = self.nk.q.val() - 2;
        self.nk_is1.d.next = self.nk.q.val() == 1;
        self.nk_is2.d.next = self.nk.q.val() == 2;
        self.nk_is3.d.next = self.nk.q.val() == 3;
        if self.go_j.val() {
            self.j.d.next = self.j.q.val() + 1;
            self.jl.d.next = self.jl.q.val() - 1;
            self.j_eq.d.next = self.jl1.q.val();
            self.jl1.d.next = self.jl.q.val() == 2;
        }
        // The stream starts (`j` clears above, in the phase machine's loads).
        if self.sst.q.val().get_bit(0) {
            self.jl.d.next = self.nk_m2.q.val();
            self.j_eq.d.next = self.nk_is2.q.val();
            self.jl1.d.next = self.nk_is3.q.val();
        }
        if self.go.val() {
            self.rib.d.next = self.rib.q.val() + 1;
            self.rib_last.d.next = self.rib.q.val() == self.c_rpb_m2.val();
            self.is_last.d.next = self.j_eq.q.val();
            if self.rib_last.q.val() | self.is_last.q.val() {
                self.rib.d.next = 0.into();
                self.rib_last.d.next = self.c_rpb.val() == 1;
            }
        }
        if self.go_p.val() & (self.rib_last.q.val() | self.is_last.q.val()) {
            self.kst.pop.next = true;
            self.vst.pop.next = true;
        }
        self.last_pipe.d.next = ((self.last_pipe.q.val() << 1)
            | bit_cast::<LAST_PIPE, 1>((self.go.val() & self.is_last.q.val()).into()))
            & self.c_lp_mask.val();
        for top in (self._lp - 1)..self._lp {
            if self.last_pipe.q.val().get_bit(top) {
                self.drain.d.next = true;
            }
        }
        if self.snap.val() {
            self.drain.d.next = false;
        }
        self.all_idle.d.next = true;
        self.all_room.d.next = true;
        for i in 0..self._lanes {
            if !self.lanes[i].idle.val() {
                self.all_idle.d.next = false;
            }
            if !self.lanes[i].room.val() {
                self.all_room.d.next = false;
            }
        }
        if self.flush.q.val() != 0 {
            self.flush.d.next = self.flush.q.val() - 1;
        }
        self.lane_rst.d.next = self.flush.q.val() != 0;

        // ---------------- Lanes ----------------
        for i in 0..self._lanes {
            self.q_lb[i].clock.next = self.vitis.ap_clk.val();
            self.q_dc[i].clock.next = self.vitis.ap_clk.val();
            self.q_sel[i].clock.next = self.vitis.ap_clk.val();
            self.q_shr[i].clock.next = self.vitis.ap_clk.val();
            self.q_dc[i].d.next = self.q_dc[i].q.val();
            self.q_sel[i].d.next = self.q_sel[i].q.val();
            self.q_lb[i].d.next = ((self.qs.val() + self.c_lane_off[i].val()) >> self.c_logp.val())
                - (self.qs.val() >> self.c_logp.val());
            self.q_shr[i].d.next = ((self.qs.val() + self.c_lane_off[i].val()) & self.c_pmask32.val()) << 3;
            if self.in_bi.q.val() {
                self.q_dc[i].d.next = self.q_lb[i].q.val();
                self.q_sel[i].d.next = self.q_lb[i].q.val() == 0;
            }
            if self.q_rx.val() {
                self.q_dc[i].d.next = self.q_dc[i].q.val() - 1;
                self.q_sel[i].d.next = self.q_dc[i].q.val() == 1;
            }
            self.lanes[i].clock.next = self.vitis.ap_clk.val();
            self.lanes[i].q_we.next = self.q_rx.val() & self.q_sel[i].q.val();
            self.lanes[i].q_row.next = self.vitis.m_axi_gmem.rdata.val();
            self.lanes[i].q_sh.next = self.q_shr[i].q.val();
            self.lanes[i].q_idx.next = self.q0.q.val() + self.c_lane_idx[i].val();
            self.lanes[i].causal.next = self.run.causal.val();
            self.lanes[i].st_valid.next = self.st_valid.q.val();
            self.lanes[i].st_first.next = self.st_first.q.val();
            self.lanes[i].st_j.next = self.st_j.q.val();
            self.lanes[i].k_row.next = self.k_row.q.val();
            self.lanes[i].v_row.next = self.v_dly.dout.val();
            self.lanes[i].smult.next = self.run.smult.val();
            self.lanes[i].sshift.next = self.run.sshift.val();
            self.lanes[i].reset.next = self.lane_rst.q.val();
            self.lanes[i].div_start.next = self.snap_r.q.val().get_bit(1);
            self.lanes[i].ser_v.next = self.ser_v.q.val();
            self.lanes[i].omult.next = self.run.omult.val();
            self.lanes[i].oshift.next = self.run.oshift.val();
            self.wrow.rows[i].next = self.lanes[i].row32.val();
            self.wrow.rows8[i].next = self.lanes[i].row8.val();
        }

        self.shell.wr_send.next = self.ws.q.val().get_bit(2);
        self.shell.wr_addr.next = self.w_addr.q.val();
        self.shell.wr_len.next = 0.into();
        self.shell.wr_data.next = self.w_beat.q.val();
        self.shell.wr_strb.next = self.w_strb.q.val();
        self.shell.wr_last.next = true;

        if !self.vitis.ap_rst_n.val() {
            self.phase.d.next = Phase::Idle;
            self.in_qw.d.next = false;
            self.in_qr.d.next = false;
            self.at_done.d.next = false;
            self.fin.d.next = Fin::Idle;
            self.last_pipe.d.next = 0.into();
            self.drain.d.next = false;
            self.w_load.d.next = false;
            self.wb_clr.d.next = false;
            self.flush.d.next = self.c_flush.val();
            self.lane_rst.d.next = true;
            self.ser_v.d.next = false;
            self.in_q.d.next = false;
            self.in_st.d.next = false;
            self.kva.d.next = false;
            self.kvr.d.next = false;
            self.in_nx.d.next = false;
            self.in_ck.d.next = false;
            self.in_bi.d.next = false;
            self.in_kct.d.next = false;
            self.in_hi.d.next = false;
            self.in_kt.d.next = false;
        }
        self.wl_k.d.next = self.w_load.d.val();
        // `WPrep` follows `WRow2`, and `WSend` on a beat taken that is not the row's last.
        self.w_r2.d.next = self.vitis.ap_rst_n.val() & self.w_load.q.val();
        self.w_shift.d.next = self.vitis.ap_rst_n.val()
            & (self.w_r2.q.val() | (self.ws.q.val().get_bit(2) & self.shell.wr_fire.val() & !self.wb_last.q.val()));
        self.fin_idle_nx.next = (self.f_idle.q.val() & !self.snap.val()) | !self.vitis.ap_rst_n.val();
        // `Idle` is left on the snapshot and entered on the block's last beat taken.
        self.f_idle.d.next = self.fin_idle_nx.val()
            | (self.ws.q.val().get_bit(2) & self.shell.wr_fire.val() & self.wb_last.q.val() & self.wi_last.q.val());
        self.wsh_k.d.next = self.w_shift.d.val();
        self.fin_idle.d.next = self.fin_idle_nx.val();
        self.lp_zero.d.next = self.last_pipe.d.val() == 0;
        self.fin_free.next =
            self.fin_idle_nx.val() | (self.ws.q.val().get_bit(2) & self.wb_last.q.val() & self.wi_last.q.val());
        self.go_r.d.next = self.in_st.d.val()
            & self.kst.any_nx.val()
            & self.vst.any_nx.val()
            & (self.last_pipe.d.val() == 0)
            & !self.drain.d.val()
            & self.all_room.d.val()
            & (!self.is_last.d.val() | self.fin_free.val());
        self.tv.d.next = self.kv_turn.d.val();
        // `in_qw & q_in` next cycle, from `in_qw` as it is (no phase decode:
        // a stream whose Q beats are all in as `QWait` begins starts a cycle
        // later than `in_qw.d & q_in.d` would start it).
        self.sst.d.next = self.vitis.ap_rst_n.val()
            & !self.sst.q.val().get_bit(0)
            & self.in_qw.q.val()
            & ((self.q_rx.val() & self.q_nl.q.val()) | (!self.q_rx.val() & self.q_in.q.val()));
        self.w_sel.d.next = self.wi.d.val();
        self.snap_r.d.next = self.drain.d.val() & self.all_idle.d.val() & self.fin_idle_nx.val();
        for i in 1..self._lanes {
            self.feed[i - 1].clock.next = self.vitis.ap_clk.val();
            self.feed_j[i - 1].clock.next = self.vitis.ap_clk.val();
            self.feed[i - 1].d.next = bit_cast::<6, 1>(self.in_q.d.val().into())
                | (bit_cast::<6, 1>(self.st_valid.d.val().into()) << 1)
                | (bit_cast::<6, 1>(self.st_first.d.val().into()) << 2)
                | (bit_cast::<6, 1>(self.lane_rst.d.val().into()) << 3)
                | (bit_cast::<6, 1>(self.snap_r.d.val().into()) << 4)
                | (bit_cast::<6, 1>(self.ser_v.d.val().into()) << 5);
            self.feed_j[i - 1].d.next = self.st_j.d.val();
            self.lanes[i].q_we.next =
                self.vitis.m_axi_gmem.rvalid.val() & self.feed[i - 1].q.val().get_bit(0) & self.q_sel[i].q.val();
            self.lanes[i].st_valid.next = self.feed[i - 1].q.val().get_bit(1);
            self.lanes[i].st_first.next = self.feed[i - 1].q.val().get_bit(2);
            self.lanes[i].reset.next = self.feed[i - 1].q.val().get_bit(3);
            self.lanes[i].div_start.next = self.feed[i - 1].q.val().get_bit(4);
            self.lanes[i].ser_v.next = self.feed[i - 1].q.val().get_bit(5);
            self.lanes[i].st_j.next = self.feed_j[i - 1].q.val();
        }
    }
}

/// One of the K and V streams: its FIFO, the beats of the bursts issued for
/// it that have not arrived yet (`issue` adds a burst's, `push` takes one
/// off), and, registered, its `room` for another burst (FIFO entries plus
/// beats in flight, `occ`, registered two cycles before, plus `CHUNK`, at most
/// the FIFO's depth: the top issues a K burst at least four cycles after the
/// last V one, so `occ` counts every burst issued) and its `page`: the beats
/// from `addr` to the end of its 4 KiB page.
#[derive(LogicBlock)]
struct KvStream<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub addr: Signal<In, Bits<64>>,
    pub issue: Signal<In, Bits<16>>,
    /// `issue − 1` (the top has it in registers beside the lengths).
    pub issue_m1: Signal<In, Bits<16>>,
    pub push: Signal<In, Bit>,
    pub din: Signal<In, Bits<W>>,
    pub pop: Signal<In, Bit>,
    pub dout: Signal<Out, Bits<W>>,
    pub empty: Signal<Out, Bit>,
    pub room: Signal<Out, Bit>,
    /// `room` next cycle (its register's input).
    pub room_nx: Signal<Out, Bit>,
    pub page: Signal<Out, Bits<16>>,
    /// `page − 1` (at least one beat to the page's end, the address being beat-aligned).
    pub page_m1: Signal<Out, Bits<16>>,
    fifo: Fifo<W>,
    /// `empty` next cycle (the negation of `has`'s input).
    pub any_nx: Signal<Out, Bit>,
    /// Whether the FIFO holds anything, as a register (`empty` is its
    /// negation; `has_n` counts the entries, as `Occupancy` does): the step
    /// gate reads no pointer compare, and its next value is `any_nx`.
    has: DFF<Bit>,
    has_n: DFF<Bits<16>>,
    /// `issue`, registered: it is counted in `inflight` a cycle later, so the
    /// request decision reaches no adder (a room check reads `occ` two cycles
    /// after, and no burst is issued in the three cycles before a K request).
    iss_r: DFF<Bits<16>>,
    /// `issue_m1` registered beside it, and `inflight` plus either: a
    /// beat's arrival (AXI `rvalid`, 55–63 loads) selects one, rather than
    /// entering a three-operand add (−0.8 ns, 15 endpoints).
    iss_m1: DFF<Bits<16>>,
    inf_a: Signal<Local, Bits<16>>,
    inf_p: Signal<Local, Bits<16>>,
    /// `page − 1` is `(4095 − addr[11:0]) >> log2(port bytes)` for a
    /// beat-aligned address: a complement, where subtracting 1 from `page`
    /// was a second carry chain after the first (−0.78 ns).
    page_m1_r: DFF<Bits<16>>,
    inflight: DFF<Bits<16>>,
    /// `occ` is `cnt` a cycle late: FIFO entries plus beats in flight, which
    /// moves by the bursts issued less the rows popped (`iss_r`, or
    /// `iss_m1` on a pop, as `inflight`'s arrival), where adding the FIFO's
    /// pointer difference to `inflight` was −1.07 ns.
    cnt: DFF<Bits<16>>,
    occ: DFF<Bits<16>>,
    room_r: DFF<Bit>,
    page_r: DFF<Bits<16>>,
    c_logp: Constant<Bits<16>>,
    /// The FIFO's depth less `CHUNK`: the most `occ` may be for another burst.
    c_room_max: Constant<Bits<16>>,
}

impl<const W: usize> KvStream<W> {
    fn new(depth: usize, port_bytes: usize) -> Self {
        let k = |v: u64| Constant::new(v.to_bits());
        with_defaults!(Self {
            fifo: Fifo::with_read_copies(depth, 16).trusting_pop(),
            c_logp: k(port_bytes.trailing_zeros() as u64),
            c_room_max: k(depth as u64 - CHUNK),
            .. clock, reset, addr, issue, issue_m1, push, din, pop, dout, empty, room, room_nx, page, page_m1, any_nx, has, has_n, iss_r, iss_m1, inf_a, inf_p, page_m1_r,
            inflight, cnt, occ, room_r, page_r
        })
    }
}

impl<const W: usize> Logic for KvStream<W> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, has, has_n, iss_r, iss_m1, page_m1_r, inflight, cnt, occ, room_r, page_r);
        self.fifo.clock.next = self.clock.val();
        self.fifo.reset.next = self.reset.val();
        self.fifo.din.next = self.din.val();
        self.fifo.push.next = self.push.val();
        self.fifo.pop.next = self.pop.val();
        if self.push.val() & !self.pop.val() {
            self.has_n.d.next = self.has_n.q.val() + 1;
        }
        if !self.push.val() & self.pop.val() {
            self.has_n.d.next = self.has_n.q.val() - 1;
        }
        self.any_nx.next = !self.reset.val()
            & (self.push.val() | (self.has_n.q.val() > 1) | ((self.has_n.q.val() == 1) & !self.pop.val()));
        self.has.d.next = self.any_nx.val();
        self.dout.next = self.fifo.dout.val();
        self.empty.next = !self.has.q.val();
        self.iss_r.d.next = self.issue.val();
        self.iss_m1.d.next = self.issue_m1.val();
        self.inf_a.next = self.inflight.q.val() + self.iss_r.q.val();
        self.inf_p.next = self.inflight.q.val() + self.iss_m1.q.val();
        self.inflight.d.next = self.inf_a.val();
        if self.push.val() {
            self.inflight.d.next = self.inf_p.val();
        }
        self.cnt.d.next = self.cnt.q.val() + self.iss_r.q.val();
        if self.pop.val() {
            self.cnt.d.next = self.cnt.q.val() + self.iss_m1.q.val();
        }
        self.occ.d.next = self.cnt.q.val();
        self.room_nx.next = self.occ.q.val() <= self.c_room_max.val();
        self.room_r.d.next = self.room_nx.val();
        self.page_r.d.next =
            (bits::<16>(4096) - bit_cast::<16, 12>(self.addr.val().get_bits::<12>(0))) >> self.c_logp.val();
        self.page_m1_r.d.next = bit_cast::<16, 12>(!self.addr.val().get_bits::<12>(0)) >> self.c_logp.val();
        self.room.next = self.room_r.q.val();
        self.page.next = self.page_r.q.val();
        self.page_m1.next = self.page_m1_r.q.val();
        if self.reset.val() {
            self.has_n.d.next = 0.into();
            self.iss_r.d.next = 0.into();
            self.iss_m1.d.next = bits::<16>(0xffff);
            self.inflight.d.next = 0.into();
            self.cnt.d.next = 0.into();
        }
    }
}

crate::vitis_unit!(AttentionUnit, AttentionConfig, [128, 256, 512, 1024]);
