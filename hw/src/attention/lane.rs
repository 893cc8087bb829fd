//! One query lane of the attention unit: its query row, the score pipeline,
//! the online-softmax state (m, l, o[d]) and the finalizer (divider, output row).
//!
//! Timing, for a step issued by the top in cycle c, with L =
//! [`ScaleRoundPipe::LATENCY`] and D = [`DotI8Pipe::latency`]`(d, 1)` − 1 +
//! `K_REGS` (the K row's register `kb` before the products) + `S_REGS`
//! (`sdot`, s before the scale): S1 (end of c+D) has s = q·k (a pipelined
//! adder tree, then `sdot`); S2 (end of c+D+L) has
//! t = round(s·Ms/2^Ss); S3a (end of c+D+L+1) compares e with m; S3b (end of
//! c+D+L+2) updates m and latches δ and, from u = t − 256·m, the first stage of 2^u
//! ([`Exp2PipeC`]: table value, shift); S3c (end of c+D+L+3) latches p = 2^u.
//! In cycle c+[`v_at`] an unmasked step (p, δ and the V row the top presents
//! then) enters the lane's backlog, a FIFO; S4 drains it at one step a
//! cycle: X registers the head, Y latches p·v, Z updates l ([`RescaleAcc`])
//! and o ([`RescaleRow`], which holds Y's products too, and does all this
//! [`RescaleRow::DELAY`] cycles after l: its inputs pass through registers,
//! its products a second register in the fabric; its snapshot is as late, and
//! the serializer starts 33 cycles after it). A step whose maximum rose (δ > 0) holds X and Y for two
//! more cycles, in which Z registers the rescaled l and o before adding, so
//! the l/o loop is one carry chain; the backlog absorbs those cycles (the
//! lane runs up to that many cycles behind the steps, `idle` says when it has
//! caught up), and `room` tells the top to stop issuing while it is too full
//! to take every step already in flight. Without a backlog, l and o hold a
//! step from cycle c+`v_at`+4. Each stage holds at most one wide carry chain:
//! m, l and o are loops, so each has a cycle of its own.
//!
//! The finalizer works on a snapshot: `div_start` copies l into the divider's
//! divisor `dl` and o into the serializer's shift register `os`, so the next
//! block's steps may overwrite l and o while it divides and serializes. The
//! divider takes one quotient bit per cycle (33 cycles), its compare and
//! subtract one 41-bit carry chain. Each cycle of `ser_v` moves the pair
//! `os[0]`, `os[1]` into [`MulRound16Pipe`] and shifts `os` down by two; the
//! pair's Q16 values enter `r32` [`MulRound16Pipe::LATENCY`] cycles later and
//! its int8 values enter `r8` another [`RequantPipe::LATENCY`] cycles later
//! ([`SER_LAT`] in all), steered by `ser_v` delayed alongside.
use crate::blocks::{
    Copies, DotI8Pipe, Exp2PipeC, Fifo, Kept, MulRound16Pipe, Occupancy, PairShiftRow, RequantPipe, RescaleAcc,
    RescaleRow, RowBacklog, ScaleRoundPipe, ShrReg, SkewLine,
};
use rust_hdl::prelude::*;

/// Widest output row: 128 Q16 values.
pub const ROW32_BITS: usize = 4096;
/// Widest int8 output row.
pub const ROW8_BITS: usize = 1024;
/// Adder levels a stage of the q·k tree: one, so S1's stages hold one short carry chain each.
const QK_LEVELS_PER_STAGE: usize = 1;
/// Registers of the K row in the lane (`kb`) before the q·k products: the
/// flow folds `kb` into the MULT18X18Ds' input registers, so the top's K
/// row register (loaded from the K FIFO's LUT-RAM read) is a fabric register
/// with one load, not d multipliers' inputs across the die (8.2 ns of routing).
const K_REGS: usize = 1;
/// Registers of s between the q·k tree's root and the scale's multipliers
/// (`sdot`): the flow folds `sdot` into the MULT18X18Ds' input registers, so
/// the root's add ends at a fabric register (it ended at four multipliers'
/// inputs: 18 endpoints, −1.1 to −1.7 ns of mostly routing).
const S_REGS: usize = 1;
/// The cycle after a step's issue in which it enters the backlog with its V row (see the module doc).
pub const fn v_at(d: usize) -> usize {
    DotI8Pipe::<8>::latency(d, QK_LEVELS_PER_STAGE) - 1 + K_REGS + S_REGS + ScaleRoundPipe::LATENCY + 4
}
/// Entries of the backlog: room for every step in flight when `room` falls
/// (`v_at` + 5 of them, see [`room_below`]) and 8 more.
pub const fn backlog_depth(d: usize) -> usize {
    (v_at(d) + 13).next_power_of_two()
}
/// `room` holds while the backlog has fewer entries than this. The top reads
/// it through two registers (the lane's and its AND over lanes), so a step it
/// issues on `room` enters the backlog up to `v_at` + 4 cycles after the
/// count was taken, each of those cycles pushing at most one step.
pub const fn room_below(d: usize) -> usize {
    backlog_depth(d) - v_at(d) - 5
}
/// Cycles from a pair's `ser_v` cycle to the cycle in which it enters `r8`
/// (the last of a row's pairs is in `r8` after cycle `d/2 − 1 + SER_LAT` of `ser_v`'s run).
pub const SER_LAT: usize = MulRound16Pipe::LATENCY + RequantPipe::LATENCY;
/// Fields of a backlog entry's `meta` word above p (bits 0..16): δ (6 bits),
/// the block's first step, δ ≠ 0.
const META_D: usize = 16;
const META_FIRST: usize = 22;
const META_RISE: usize = 23;

#[derive(LogicBlock)]
pub struct Lane<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub q_we: Signal<In, Bit>,
    /// The beat holding the query row, at bit `q_sh`.
    pub q_row: Signal<In, Bits<W>>,
    pub q_sh: Signal<In, Bits<32>>,
    /// Index of this lane's query within its head (for the causal mask),
    /// steady from a block's first step to a cycle after its last.
    pub q_idx: Signal<In, Bits<32>>,
    pub causal: Signal<In, Bit>,
    pub st_valid: Signal<In, Bit>,
    pub st_first: Signal<In, Bit>,
    pub st_j: Signal<In, Bits<32>>,
    pub k_row: Signal<In, Bits<W>>,
    /// V row of the step now in S4.
    pub v_row: Signal<In, Bits<W>>,
    pub smult: Signal<In, Bits<32>>,
    pub sshift: Signal<In, Bits<6>>,
    /// Empty the backlog and S4 (held by the top after `ap_rst_n` until no
    /// step of an aborted run is left in S1–S3).
    pub reset: Signal<In, Bit>,
    /// The backlog and S4 hold no step: l and o hold every step issued
    /// before the last `v_at` + 1 cycles.
    pub idle: Signal<Out, Bit>,
    /// The backlog can take every step the top may have in flight (registered).
    pub room: Signal<Out, Bit>,
    /// Snapshot l and o (they hold the block's last step) and start the divider.
    pub div_start: Signal<In, Bit>,
    pub div_busy: Signal<Out, Bit>,
    /// Serialize: the pair at the head of `os` enters the output pipeline, `os` shifts by two.
    pub ser_v: Signal<In, Bit>,
    pub omult: Signal<In, Bits<32>>,
    pub oshift: Signal<In, Bits<6>>,
    /// The Q16 output row.
    pub row32: Signal<Out, Bits<ROW32_BITS>>,
    /// The int8 output row.
    pub row8: Signal<Out, Bits<ROW8_BITS>>,
    /// The query row: `q_row >> q_sh` on `q_we` edges.
    qrow: ShrReg<W>,
    /// In a unit of two lanes or more, `qrow` a cycle later, loaded every
    /// cycle, as the products' input register. Folded into the multipliers
    /// with `qrow` itself, `q_we` is their enable: one net to 16 MULT18X18Ds,
    /// which at two lanes spread over the die's DSP rows (`in_q → qk.r0`,
    /// 6–8 ns of routing; at one lane it never limited, and the register
    /// re-rolled that unit's placement 9 MHz lower on the mean, docs/timing.md).
    /// The query is loaded cycles before a block's first step reaches the products.
    qa: Vec<DFF<Bits<W>>>,
    /// `q_idx` registered in the lane: the mask's compare follows no route
    /// from the top's `q0` (−0.81 ns).
    q_idx_r: DFF<Bits<32>>,
    /// The K row, a cycle after `k_row` ([`K_REGS`]).
    kb: DFF<Bits<W>>,
    qk: DotI8Pipe<W>,
    sdot: DFF<Signed<32>>,
    /// The step's flags when `sdot` has its s.
    f1: SkewLine<3>,
    flags0: Signal<Local, Bits<3>>,
    /// The flags of `f1` when `scale` has the step's t.
    f2: SkewLine<3>,
    scale: ScaleRoundPipe,
    mask0: Signal<Local, Bit>,
    e: Signal<Local, Signed<32>>,
    /// The running max, updated in S3b: in S3a it holds m before the step
    /// ahead (the one in `t3`), which takes that step's e if `mt_r`. S3a
    /// registers e's compare (with the first flag: `ga3`, `gb3`) and
    /// difference (`da3`, `db3`) against both, the step ahead's e and m;
    /// S3b picks by `mt_r`, one LUT. Picking in S3a put two carry chains and
    /// a select in one path, which synthesis built at 3.1 or 4.4 ns of logic
    /// from one netlist to the next (−2.6 ns, att19's step 3). Each compare
    /// is the sign of its own subtraction (`na`, `nb`: e within ±2^30, as
    /// |t| < 2^38, so it does not wrap): as `e > x` synthesis shared the
    /// difference's carry chain and added an equality tree (3.8 ns, −1.7).
    m: DFF<Signed<32>>,
    /// The step's t.
    t3: DFF<Signed<40>>,
    ga3: DFF<Bit>,
    gb3: DFF<Bit>,
    da3: DFF<Signed<32>>,
    db3: DFF<Signed<32>>,
    f3: DFF<Bits<3>>,
    /// `t3`'s e, as a signed signal (a part-select compares unsigned in Verilog).
    e3: Signal<Local, Signed<32>>,
    na: Signal<Local, Signed<32>>,
    nb: Signal<Local, Signed<32>>,
    /// S3b: whether the step is above m before it (`first` or e > m), e − m,
    /// and whether m takes its e (`mt`: `gt` on an unmasked step; `mt_r`
    /// for the next step's pick).
    gt: Signal<Local, Bit>,
    diff: Signal<Local, Signed<32>>,
    mt: Signal<Local, Bit>,
    mt_r: DFF<Bit>,
    diff_bits: Signal<Local, Bits<32>>,
    u_bits: Signal<Local, Bits<40>>,
    delta_bits: Signal<Local, Bits<32>>,
    d3: DFF<Bits<32>>,
    upd3: DFF<Bit>,
    first3: DFF<Bit>,
    /// S3b's `u` enters here; its first stage is S3b's register, `p` (= p3)
    /// S3c's. Its LUT planes read u's low byte (`t3`'s) from four kept
    /// copies loaded beside `t3` (`t3l`).
    exp2: Exp2PipeC,
    t3l: Vec<Kept<8>>,
    d3c: DFF<Bits<6>>,
    /// `d3c ≠ 0`, registered beside it from `d3` (the flow merges both into
    /// the backlog's write port, where the OR after the clamp was a LUT
    /// level more in front of the LUT RAM).
    rise3c: DFF<Bit>,
    upd3c: DFF<Bit>,
    first3c: DFF<Bit>,
    /// The backlog: each unmasked step's V row (8·d bits; on `adv` its head
    /// enters X's row), and its p, δ, first flag and δ ≠ 0 (`meta`, see `META_*`).
    v_log: RowBacklog<W>,
    meta_fifo: Fifo<32>,
    /// Whether the backlog holds a step, as a flip-flop from its push and
    /// taken pop: `idle` reads it, not the FIFO's pointer compare (from the
    /// write pointer through `empty` into the top's `snap_r` was the unit's
    /// worst path at two seeds of six, docs/timing.md).
    m_occ: Occupancy,
    meta_in: Signal<Local, Bits<32>>,
    c_room: Constant<Bits<16>>,
    c_meta_d: Constant<Bits<8>>,
    c_meta_first: Constant<Bits<8>>,
    c_meta_rise: Constant<Bits<8>>,
    room_r: DFF<Bit>,
    /// S4 moves this cycle (not `hold`): X takes the backlog's head, Y X's step.
    /// Registered (`!hold & !hold2` as they will be) on kept copies: 0 for
    /// `hold`, l and `adv_d`, 1 for the backlog's pops (the V row's
    /// register), 2 for X and Y, 3 for l's copy of the decodes. As the NOR of
    /// `hold` and `hold2` it fanned out to 310 loads (−0.6 ns into l).
    adv_k: Copies<4>,
    adv: Signal<Local, Bit>,
    /// X: the backlog's head step (its V row in `v_log`).
    xval: DFF<Bit>,
    xp: DFF<Bits<16>>,
    xd: DFF<Bits<6>>,
    xfirst: DFF<Bit>,
    xrise: DFF<Bit>,
    /// Y: p·v[x] (in `o_row`), p and the rounding decode of δ for the accumulators (bit
    /// δ − 1, and the bits below it), once for the lane: decoded in every
    /// instance, 17 of them in a d = 16 lane, it cost 6 000 LUT4s.
    yval: DFF<Bit>,
    yp: DFF<Bits<16>>,
    yfirst: DFF<Bit>,
    /// The decodes in kept copies: `hot_copies(d)` for the o accumulators
    /// (`RescaleRow`: each bit of one register fed all 17 AND-OR trees, 6–7 ns
    /// of routing), the last for l; loaded alike from `hot_nx`, `lo_nx`.
    hot_k: Vec<Kept<64>>,
    lo_k: Vec<Kept<64>>,
    hot_nx: Signal<Local, Bits<64>>,
    lo_nx: Signal<Local, Bits<64>>,
    /// `adv` and `xd` [`RescaleRow::DELAY`] = 2 cycles late (bit 1 of
    /// `adv_d`, `xd2`): the o accumulators' copies of the decodes load with
    /// the row's delayed controls, l's with `adv`, `xd`.
    adv_d: DFF<Bits<2>>,
    xd1: DFF<Bits<6>>,
    xd2: DFF<Bits<6>>,
    hot_nx2: Signal<Local, Bits<64>>,
    lo_nx2: Signal<Local, Bits<64>>,
    c_ones: Constant<Bits<64>>,
    /// Y's step rose (δ > 0) and is being rescaled this cycle (`hold`, the
    /// rescale's first cycle) or the next (`hold2`, its second): X and Y hold,
    /// Z adds it after `hold2`.
    hold: DFF<Bit>,
    hold2: DFF<Bit>,
    /// Z: l, and o[x] with Y's products and the finalizer's snapshot `os`.
    l_acc: RescaleAcc<48>,
    o_row: RescaleRow<W>,
    div_cnt: DFF<Bits<6>>,
    /// `div_cnt` ≠ 0 and `div_cnt` = 33, kept as it moves (registered from
    /// its next value): `div_busy` and the first step's dividend bit are flags.
    div_nz: DFF<Bit>,
    div_first: DFF<Bit>,
    dl: DFF<Bits<40>>,
    rem: DFF<Bits<40>>,
    quo: DFF<Bits<40>>,
    /// `quo`'s low 32 bits a cycle late, loaded every cycle: the
    /// serializer's multipliers' `r`. The flow folds it into their input
    /// registers, which `quo` itself (cleared on `div_start`, enabled while
    /// dividing) could not be; `quo` is final a cycle before `ser_v`.
    quo_m: DFF<Bits<32>>,
    rem_sh: Signal<Local, Bits<40>>,
    rem_sub: Signal<Local, Bits<41>>,
    mulr: MulRound16Pipe,
    mulr_o: MulRound16Pipe,
    rq: RequantPipe,
    rq_o: RequantPipe,
    /// `ser_v` when `mulr` has the pair's Q16 values, and when `rq` has its int8 values.
    sh32: SkewLine<1>,
    sh8: SkewLine<1>,
    /// The output rows, filled a pair per cycle from the top (written on
    /// those cycles only: as `DFF`s, simulators copied them every cycle).
    r32: PairShiftRow<32, ROW32_BITS>,
    r8: PairShiftRow<8, ROW8_BITS>,
    /// `hot_copies(d)`: the index of l's copy of the decodes.
    _hot_l: usize,
}

/// Copies of the rounding decodes for a lane's o accumulators.
const fn hot_copies(d: usize) -> usize {
    if d < 4 {
        d
    } else {
        4
    }
}

impl<const W: usize> Lane<W> {
    /// A lane of head dimension `d`; `query_reg`: the products' own query register (`qa`).
    pub fn new(d: usize, query_reg: bool) -> Self {
        assert!(d.is_power_of_two() && (2..=128).contains(&d) && 8 * d <= W);
        with_defaults!(Self {
            qk: DotI8Pipe::new(d, QK_LEVELS_PER_STAGE),
            t3l: crate::many(4),
            f1: SkewLine::new(DotI8Pipe::<8>::latency(d, QK_LEVELS_PER_STAGE) + K_REGS + S_REGS),
            o_row: RescaleRow::new(d, hot_copies(d)),
            hot_k: crate::many(hot_copies(d) + 1),
            lo_k: crate::many(hot_copies(d) + 1),
            v_log: RowBacklog::new(8 * d, backlog_depth(d)),
            meta_fifo: Fifo::with_read_copies(backlog_depth(d), 4).pointers_per_slice(),
            sh32: SkewLine::new(MulRound16Pipe::LATENCY),
            sh8: SkewLine::new(RequantPipe::LATENCY),
            f2: SkewLine::new(ScaleRoundPipe::LATENCY),
            r32: PairShiftRow::new(d),
            r8: PairShiftRow::new(d),
            c_ones: Constant::new(u64::MAX.to_bits()),
            _hot_l: hot_copies(d),
            qa: (0..usize::from(query_reg)).map(|_| Default::default()).collect(),
            c_room: Constant::new((room_below(d) as u64).to_bits()),
            c_meta_d: Constant::new((META_D as u64).to_bits()),
            c_meta_first: Constant::new((META_FIRST as u64).to_bits()),
            c_meta_rise: Constant::new((META_RISE as u64).to_bits()),
            .. clock, q_we, q_row, q_sh, q_idx, causal, st_valid, st_first, st_j, k_row, v_row, smult, sshift, reset,
            idle, room, div_start, div_busy, ser_v, omult, oshift, row32, row8, qrow, q_idx_r, kb, sdot, flags0, scale, mask0, e, m, t3,
            ga3, gb3, da3, db3, f3, e3, na, nb, gt, diff, mt, mt_r, diff_bits, u_bits, delta_bits, d3, upd3, first3, exp2, d3c, rise3c, upd3c, first3c, meta_in,
            m_occ, room_r, adv_k, adv, xval, xp, xd, xfirst, xrise, yval, yp, yfirst, hot_nx, lo_nx, adv_d, xd1, xd2, hot_nx2, lo_nx2, hold, hold2, l_acc, div_cnt, div_nz, div_first, dl, rem,
            quo, quo_m, rem_sh, rem_sub, mulr, mulr_o, rq, rq_o
        })
    }
}

impl<const W: usize> Logic for Lane<W> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, q_idx_r, kb, sdot, m, t3, ga3, gb3, da3, db3, f3, mt_r, d3, upd3, first3, d3c, rise3c, upd3c,
            first3c, room_r, xval, xp, xd, xfirst, xrise, yval, yp, yfirst, adv_d, xd1, xd2, hold, hold2, div_cnt,
            div_nz, div_first, dl, rem, quo, quo_m
        );
        self.scale.clock.next = self.clock.val();
        self.qk.clock.next = self.clock.val();
        self.f1.clock.next = self.clock.val();
        self.f2.clock.next = self.clock.val();
        self.mulr.clock.next = self.clock.val();
        self.mulr_o.clock.next = self.clock.val();
        self.rq.clock.next = self.clock.val();
        self.rq_o.clock.next = self.clock.val();
        self.sh32.clock.next = self.clock.val();
        self.sh8.clock.next = self.clock.val();
        self.qrow.clock.next = self.clock.val();
        self.qrow.en.next = self.q_we.val();
        self.qrow.d.next = self.q_row.val();
        self.qrow.sh.next = bit_cast::<16, 32>(self.q_sh.val());

        // S1: s = q · k over d int8 pairs, by a pipelined adder tree.
        self.qk.a.next = self.qrow.q.val();
        for i in 0..self.qa.len() {
            self.qa[i].clock.next = self.clock.val();
            self.qa[i].d.next = self.qrow.q.val();
            self.qk.a.next = self.qa[i].q.val();
        }
        self.kb.d.next = self.k_row.val();
        self.qk.b.next = self.kb.q.val();
        // Flags through the pipeline: bit0 valid, bit1 first, bit2 masked.
        self.q_idx_r.d.next = self.q_idx.val();
        self.mask0.next = self.causal.val() & (self.st_j.val() > self.q_idx_r.q.val());
        self.flags0.next = bit_cast::<3, 1>(self.st_valid.val().into())
            | (bit_cast::<3, 1>(self.st_first.val().into()) << 1)
            | (bit_cast::<3, 1>(self.mask0.val().into()) << 2);
        self.f1.din.next = self.flags0.val();

        // S2: t = round(s · Ms / 2^Ss), log2 domain with 8 fraction bits, pipelined.
        self.sdot.d.next = self.qk.dot.val();
        self.scale.x.next = self.sdot.q.val();
        self.scale.mult.next = self.smult.val();
        self.scale.shift.next = self.sshift.val();
        self.f2.din.next = self.f1.dout.val();

        // S3a: e > m before the step and e − m, m being the step ahead's e
        // (`a`) or m (`b`), all four registered for S3b's pick.
        self.e.next = self.scale.y.val().get_bits::<32>(8);
        self.e3.next = self.t3.q.val().get_bits::<32>(8);
        self.na.next = self.e3.val() - self.e.val();
        self.nb.next = self.m.q.val() - self.e.val();
        self.ga3.d.next = self.f2.dout.val().get_bit(1) | self.na.val().get_bit(31);
        self.gb3.d.next = self.f2.dout.val().get_bit(1) | self.nb.val().get_bit(31);
        self.da3.d.next = self.e.val() - self.e3.val();
        self.db3.d.next = self.e.val() - self.m.q.val();
        self.t3.d.next = self.scale.y.val();
        for c in 0..4 {
            self.t3l[c].clock.next = self.clock.val();
            self.t3l[c].d.next = unsigned_cast(self.scale.y.val().get_bits::<8>(0));
        }
        self.f3.d.next = self.f2.dout.val();

        // S3b: m takes the step's e; u = t − 256·m_new, δ = m_new − m_old,
        // from `diff` = e − m_old (e = t[39:8]): m_new is e (`gt`: δ is
        // it, u is t's low byte) or m_old (δ is 0, u is t − 256·m_old, whose
        // low byte is t's).
        self.gt.next = self.gb3.q.val();
        self.diff.next = self.db3.q.val();
        if self.mt_r.q.val() {
            self.gt.next = self.ga3.q.val();
            self.diff.next = self.da3.q.val();
        }
        self.mt.next = self.gt.val() & self.f3.q.val().get_bit(0) & !self.f3.q.val().get_bit(2);
        self.mt_r.d.next = self.mt.val();
        if self.mt.val() {
            self.m.d.next = self.e3.val();
        }
        self.diff_bits.next = unsigned_cast(self.diff.val());
        self.u_bits.next = bit_cast::<40, 8>(unsigned_cast(self.t3.q.val().get_bits::<8>(0)));
        self.delta_bits.next = 0.into();
        if self.gt.val() {
            self.delta_bits.next = self.diff_bits.val();
        } else {
            self.u_bits.next = self.u_bits.val() | (bit_cast::<40, 32>(self.diff_bits.val()) << 8);
        }
        self.exp2.clock.next = self.clock.val();
        self.exp2.u.next = signed_cast(self.u_bits.val());
        self.exp2.ul.next = bit_cast::<32, 8>(self.t3l[0].q.val())
            | (bit_cast::<32, 8>(self.t3l[1].q.val()) << 8)
            | (bit_cast::<32, 8>(self.t3l[2].q.val()) << 16)
            | (bit_cast::<32, 8>(self.t3l[3].q.val()) << 24);
        self.upd3.d.next = self.f3.q.val().get_bit(0) & !self.f3.q.val().get_bit(2);
        self.first3.d.next = self.f3.q.val().get_bit(1);
        self.d3.d.next = self.delta_bits.val();

        // S3c: p = 2^u (`exp2`'s second stage); δ clamped to 62 (δ > 62 as a
        // signed int32, by reductions rather than a comparator carry chain),
        // 0 on a block's first step: the subtraction and the clamp are a
        // cycle each.
        self.d3c.d.next = self.d3.q.val().get_bits::<6>(0);
        if !self.d3.q.val().get_bit(31)
            & (self.d3.q.val().get_bits::<25>(6).any() | self.d3.q.val().get_bits::<6>(0).all())
        {
            self.d3c.d.next = 62.into();
        }
        // The clamp is 62 or δ's low bits, non-zero iff those are or δ ≥ 64.
        self.rise3c.d.next = !self.first3.q.val()
            & (self.d3.q.val().get_bits::<6>(0).any()
                | (!self.d3.q.val().get_bit(31) & self.d3.q.val().get_bits::<25>(6).any()));
        if self.first3.q.val() {
            self.d3c.d.next = 0.into();
        }
        self.upd3c.d.next = self.upd3.q.val();
        self.first3c.d.next = self.first3.q.val();

        // Into the backlog: the step with the V row the top presents now.
        self.v_log.clock.next = self.clock.val();
        self.meta_fifo.clock.next = self.clock.val();
        self.v_log.reset.next = self.reset.val();
        self.meta_fifo.reset.next = self.reset.val();
        self.v_log.push.next = self.upd3c.q.val();
        self.meta_fifo.push.next = self.upd3c.q.val();
        self.v_log.din.next = self.v_row.val();
        self.meta_in.next = bit_cast::<32, 16>(self.exp2.p.val())
            | (bit_cast::<32, 6>(self.d3c.q.val()) << self.c_meta_d.val())
            | (bit_cast::<32, 1>(self.first3c.q.val().into()) << self.c_meta_first.val())
            | (bit_cast::<32, 1>(self.rise3c.q.val().into()) << self.c_meta_rise.val());
        self.meta_fifo.din.next = self.meta_in.val();
        self.room_r.d.next = self.meta_fifo.count.val() < self.c_room.val();
        self.room.next = self.room_r.q.val();
        self.m_occ.clock.next = self.clock.val();
        self.m_occ.clear.next = self.reset.val();
        self.m_occ.push.next = self.upd3c.q.val();
        self.m_occ.pop.next = self.adv_k.q.val().get_bit(1) & self.m_occ.any.val();
        self.idle.next = !self.m_occ.any.val() & !self.xval.q.val() & !self.yval.q.val();

        // X: the head step, unless Y's step is being rescaled.
        self.adv_k.clock.next = self.clock.val();
        self.adv.next = self.adv_k.q.val().get_bit(0);
        self.adv_k.d.next =
            self.reset.val() | (!(self.adv.val() & self.xval.q.val() & self.xrise.q.val()) & !self.hold.q.val());
        self.v_log.pop.next = self.adv_k.q.val().get_bit(1);
        self.meta_fifo.pop.next = self.adv_k.q.val().get_bit(1);
        if self.adv_k.q.val().get_bit(2) {
            self.xval.d.next = !self.meta_fifo.empty.val();
            self.xp.d.next = self.meta_fifo.dout.val().get_bits::<16>(0);
            self.xd.d.next = self.meta_fifo.dout.val().get_bits::<6>(self.c_meta_d.val().index());
            self.xfirst.d.next = self.meta_fifo.dout.val().get_bit(self.c_meta_first.val().index());
            self.xrise.d.next = self.meta_fifo.dout.val().get_bit(self.c_meta_rise.val().index());
        }

        // Y: p · v[x], and δ's rounding decode (δ ≤ 62: S3b clamps it).
        if self.adv_k.q.val().get_bit(2) {
            self.yval.d.next = self.xval.q.val();
            self.yp.d.next = self.xp.q.val();
            self.yfirst.d.next = self.xfirst.q.val();
        }
        self.hot_nx.next = (bits::<64>(1) << self.xd.q.val()) >> 1;
        self.lo_nx.next = !(self.c_ones.val() << self.xd.q.val()) >> 1;
        self.adv_d.d.next = (self.adv_d.q.val() << 1) | bit_cast::<2, 1>(self.adv.val().into());
        self.xd1.d.next = self.xd.q.val();
        self.xd2.d.next = self.xd1.q.val();
        self.hot_nx2.next = (bits::<64>(1) << self.xd2.q.val()) >> 1;
        self.lo_nx2.next = !(self.c_ones.val() << self.xd2.q.val()) >> 1;
        for g in 0..self.hot_k.len() {
            self.hot_k[g].clock.next = self.clock.val();
            self.lo_k[g].clock.next = self.clock.val();
            self.hot_k[g].d.next = self.hot_k[g].q.val();
            self.lo_k[g].d.next = self.lo_k[g].q.val();
        }
        for g in 0..self._hot_l {
            if self.adv_d.q.val().get_bit(1) {
                self.hot_k[g].d.next = self.hot_nx2.val();
                self.lo_k[g].d.next = self.lo_nx2.val();
            }
        }
        for g in self._hot_l..self.hot_k.len() {
            if self.adv_k.q.val().get_bit(3) {
                self.hot_k[g].d.next = self.hot_nx.val();
                self.lo_k[g].d.next = self.lo_nx.val();
            }
        }
        self.hold.d.next = self.adv.val() & self.xval.q.val() & self.xrise.q.val();
        self.hold2.d.next = self.hold.q.val();
        if self.reset.val() {
            self.xval.d.next = false;
            self.yval.d.next = false;
            self.hold.d.next = false;
            self.hold2.d.next = false;
        }

        // Z: l = rnd(l / 2^δ) + p, o[x] = rnd(o[x] / 2^δ) + p·v[x] (l = p,
        // o[x] = p·v[x] on a block's first step); Y's step, once rescaled.
        self.l_acc.clock.next = self.clock.val();
        self.l_acc.load.next = self.adv.val();
        self.l_acc.sh.next = self.xd.q.val();
        for g in self._hot_l..self.hot_k.len() {
            self.l_acc.hot.next = self.hot_k[g].q.val();
            self.l_acc.lo.next = self.lo_k[g].q.val();
        }
        self.l_acc.hold.next = self.hold.q.val();
        self.l_acc.upd.next = self.yval.q.val() & self.adv.val();
        self.l_acc.first.next = self.yfirst.q.val();
        self.l_acc.a.next = signed_bit_cast::<48, 16>(signed_cast(self.yp.q.val()));
        self.o_row.clock.next = self.clock.val();
        self.o_row.load.next = self.adv.val();
        self.o_row.p.next = self.xp.q.val();
        self.o_row.v.next = self.v_log.q.val();
        self.o_row.sh.next = self.xd.q.val();
        for g in 0..self._hot_l {
            self.o_row.hot[g].next = self.hot_k[g].q.val();
            self.o_row.lo[g].next = self.lo_k[g].q.val();
        }
        self.o_row.hold.next = self.hold.q.val();
        self.o_row.upd.next = self.yval.q.val() & self.adv.val();
        self.o_row.first.next = self.yfirst.q.val();

        // Finalize: r = floor(2^32 / l) by 33 restoring steps on the snapshot `dl`;
        // the compare is the borrow of the one 41-bit subtraction.
        self.div_busy.next = self.div_nz.q.val();
        self.div_nz.d.next = self.div_start.val() | (self.div_cnt.q.val() > 1);
        self.div_first.d.next = self.div_start.val();
        self.rem_sh.next = self.rem.q.val() << 1;
        if self.div_first.q.val() {
            self.rem_sh.next = (self.rem.q.val() << 1) | 1;
        }
        self.rem_sub.next = bit_cast::<41, 40>(self.rem_sh.val()) - bit_cast::<41, 40>(self.dl.q.val());
        if self.div_start.val() {
            self.div_cnt.d.next = 33.into();
            self.dl.d.next = bit_cast::<40, 48>(unsigned_cast(self.l_acc.y.val()));
            self.rem.d.next = 0.into();
            self.quo.d.next = 0.into();
        } else if self.div_cnt.q.val() != 0 {
            self.div_cnt.d.next = self.div_cnt.q.val() - 1;
            self.quo.d.next = self.quo.q.val() << 1;
            self.rem.d.next = self.rem_sh.val();
            if !self.rem_sub.val().get_bit(40) {
                self.rem.d.next = self.rem_sub.val().get_bits::<40>(0);
                self.quo.d.next = (self.quo.q.val() << 1) | 1;
            }
        }
        // Serializer, two elements per cycle: the snapshot `os` shifts down by two
        // per `ser_v` cycle; its head pair → Q16 (`mulr`) → int8 (`rq`).
        self.o_row.snap.next = self.div_start.val();
        self.o_row.shift.next = self.ser_v.val();
        self.o_row.reset.next = self.reset.val();
        self.mulr.o.next = self.o_row.o0.val();
        self.mulr_o.o.next = self.o_row.o1.val();
        self.quo_m.d.next = self.quo.q.val().get_bits::<32>(0);
        self.mulr.r.next = self.quo_m.q.val();
        self.mulr_o.r.next = self.quo_m.q.val();
        self.sh32.din.next = self.ser_v.val().into();
        self.sh8.din.next = self.sh32.dout.val();
        self.rq.x.next = self.mulr.y.val();
        self.rq_o.x.next = self.mulr_o.y.val();
        self.rq.mult.next = self.omult.val();
        self.rq_o.mult.next = self.omult.val();
        self.rq.shift.next = self.oshift.val();
        self.rq_o.shift.next = self.oshift.val();
        self.r32.clock.next = self.clock.val();
        self.r32.en.next = self.sh32.dout.val().any();
        self.r32.lo.next = self.mulr.y.val();
        self.r32.hi.next = self.mulr_o.y.val();
        self.r8.clock.next = self.clock.val();
        self.r8.en.next = self.sh8.dout.val().any();
        self.r8.lo.next = self.rq.y.val();
        self.r8.hi.next = self.rq_o.y.val();
        self.row32.next = self.r32.q.val();
        self.row8.next = self.r8.q.val();
    }
}
