//! One query lane of the attention unit: its query row, the score pipeline,
//! the online-softmax state (m, l, o[d]) and the finalizer (divider, output row).
//!
//! Timing, for a step issued by the top in cycle c, with L =
//! [`ScaleRoundPipe::LATENCY`] and D = [`DotI8Pipe::latency`]`(d, 1)` − 1: S1
//! (end of c+D) has s = q·k (a pipelined adder tree); S2 (end of c+D+L) has
//! t = round(s·Ms/2^Ss); S3a (end of c+D+L+1) updates m; S3b (end of
//! c+D+L+2) latches δ and, from u = t − 256·m, the first stage of 2^u
//! ([`Exp2Pipe`]: table value, shift); S3c (end of c+D+L+3) latches p = 2^u;
//! S4a (end of c+[`v_at`]) latches p·v with the V row the top presents in cycle
//! c+`v_at`; S4b (end of c+D+L+5) updates l and o, which hold the step from
//! cycle c+[`done_at`]. Each stage holds at most one wide carry chain: m, l
//! and o are loops, so each has a cycle of its own.
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
    DotI8Pipe, Exp2Pipe, MulRound16Pipe, PairShiftRow, RequantPipe, RoundShiftAdd, ScaleRoundPipe, ShrReg, SkewLine,
};
use rust_hdl::prelude::*;

/// Widest output row: 128 Q16 values.
pub const ROW32_BITS: usize = 4096;
/// Widest int8 output row.
pub const ROW8_BITS: usize = 1024;
/// Adder levels a stage of the q·k tree: one, so S1's stages hold one short carry chain each.
const QK_LEVELS_PER_STAGE: usize = 1;
/// The cycle after a step's issue in which S4a reads its V row (see the module doc).
pub const fn v_at(d: usize) -> usize {
    DotI8Pipe::<8>::latency(d, QK_LEVELS_PER_STAGE) - 1 + ScaleRoundPipe::LATENCY + 4
}
/// The first cycle after a step's issue in which l and o hold it.
pub const fn done_at(d: usize) -> usize {
    v_at(d) + 2
}
/// Cycles from a pair's `ser_v` cycle to the cycle in which it enters `r8`
/// (the last of a row's pairs is in `r8` after cycle `d/2 − 1 + SER_LAT` of `ser_v`'s run).
pub const SER_LAT: usize = MulRound16Pipe::LATENCY + RequantPipe::LATENCY;

#[derive(LogicBlock)]
pub struct Lane<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub q_we: Signal<In, Bit>,
    /// The beat holding the query row, at bit `q_sh`.
    pub q_row: Signal<In, Bits<W>>,
    pub q_sh: Signal<In, Bits<32>>,
    /// Index of this lane's query within its head (for the causal mask).
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
    qk: DotI8Pipe<W>,
    /// The step's flags when `qk` has its s.
    f1: SkewLine<3>,
    flags0: Signal<Local, Bits<3>>,
    /// The flags of `f1` when `scale` has the step's t.
    f2: SkewLine<3>,
    scale: ScaleRoundPipe,
    mask0: Signal<Local, Bit>,
    e: Signal<Local, Signed<32>>,
    m: DFF<Signed<32>>,
    t3: DFF<Signed<40>>,
    mn3: DFF<Signed<32>>,
    mo3: DFF<Signed<32>>,
    f3: DFF<Bits<3>>,
    m_new: Signal<Local, Signed<32>>,
    delta: Signal<Local, Signed<32>>,
    m40: Signal<Local, Signed<40>>,
    u: Signal<Local, Signed<40>>,
    delta_bits: Signal<Local, Bits<32>>,
    d3: DFF<Bits<6>>,
    upd3: DFF<Bit>,
    first3: DFF<Bit>,
    /// S3b's `u` enters here; its first stage is S3b's register, `p` (= p3) S3c's.
    exp2: Exp2Pipe,
    d3c: DFF<Bits<6>>,
    upd3c: DFF<Bit>,
    first3c: DFF<Bit>,
    p4: DFF<Bits<16>>,
    upd4: DFF<Bit>,
    /// The rounding decode of δ for the `RoundShiftAdd`s (bit δ − 1, and the
    /// bits below it), registered in S4a once for the lane: decoded in every
    /// instance, 17 of them in a d = 16 lane, it cost 6 000 LUT4s.
    hot4: DFF<Bits<64>>,
    lo4: DFF<Bits<64>>,
    c_ones: Constant<Bits<64>>,
    first4: DFF<Bit>,
    l: DFF<Signed<48>>,
    l_rs: RoundShiftAdd<48>,
    o: Vec<DFF<Signed<48>>>,
    o_rs: Vec<RoundShiftAdd<48>>,
    pv: Vec<DFF<Signed<32>>>,
    div_cnt: DFF<Bits<6>>,
    dl: DFF<Bits<40>>,
    rem: DFF<Bits<40>>,
    quo: DFF<Bits<40>>,
    rem_sh: Signal<Local, Bits<40>>,
    rem_sub: Signal<Local, Bits<41>>,
    os: Vec<DFF<Signed<48>>>,
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
    _d: usize,
    _dm2: usize,
}

impl<const W: usize> Lane<W> {
    pub fn new(d: usize) -> Self {
        assert!(d.is_power_of_two() && (2..=128).contains(&d) && 8 * d <= W);
        with_defaults!(Self {
            qk: DotI8Pipe::new(d, QK_LEVELS_PER_STAGE),
            f1: SkewLine::new(DotI8Pipe::<8>::latency(d, QK_LEVELS_PER_STAGE)),
            o: crate::many(d),
            o_rs: crate::many(d),
            pv: crate::many(d),
            os: crate::many(d),
            sh32: SkewLine::new(MulRound16Pipe::LATENCY),
            sh8: SkewLine::new(RequantPipe::LATENCY),
            f2: SkewLine::new(ScaleRoundPipe::LATENCY),
            r32: PairShiftRow::new(d),
            r8: PairShiftRow::new(d),
            c_ones: Constant::new(u64::MAX.to_bits()),
            _d: d,
            _dm2: d - 2,
            .. clock, q_we, q_row, q_sh, q_idx, causal, st_valid, st_first, st_j, k_row, v_row, smult, sshift, div_start,
            div_busy, ser_v, omult, oshift, row32, row8, qrow, flags0, scale, mask0, e, m, t3, mn3,
            mo3, f3, m_new, delta, m40, u, delta_bits, d3, upd3, first3, exp2, d3c, upd3c, first3c, p4, upd4, hot4, lo4, first4, l, l_rs,
            div_cnt, dl, rem, quo, rem_sh, rem_sub, mulr, mulr_o, rq, rq_o
        })
    }
}

impl<const W: usize> Logic for Lane<W> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, m, t3, mn3, mo3, f3, d3, upd3, first3, d3c, upd3c, first3c, p4, upd4, hot4, lo4, first4, l,
            div_cnt, dl, rem, quo
        );
        for x in 0..self._d {
            self.o[x].clock.next = self.clock.val();
            self.o[x].d.next = self.o[x].q.val();
            self.pv[x].clock.next = self.clock.val();
            self.os[x].clock.next = self.clock.val();
            self.os[x].d.next = self.os[x].q.val();
        }
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
        self.qk.b.next = self.k_row.val();
        // Flags through the pipeline: bit0 valid, bit1 first, bit2 masked.
        self.mask0.next = self.causal.val() & (self.st_j.val() > self.q_idx.val());
        self.flags0.next = bit_cast::<3, 1>(self.st_valid.val().into())
            | (bit_cast::<3, 1>(self.st_first.val().into()) << 1)
            | (bit_cast::<3, 1>(self.mask0.val().into()) << 2);
        self.f1.din.next = self.flags0.val();

        // S2: t = round(s · Ms / 2^Ss), log2 domain with 8 fraction bits, pipelined.
        self.scale.x.next = self.qk.dot.val();
        self.scale.mult.next = self.smult.val();
        self.scale.shift.next = self.sshift.val();
        self.f2.din.next = self.f1.dout.val();

        // S3a: running max on the integer grid (its own loop, alone in the cycle).
        self.e.next = self.scale.y.val().get_bits::<32>(8);
        self.m_new.next = self.m.q.val();
        if self.f2.dout.val().get_bit(1) | (self.e.val() > self.m.q.val()) {
            self.m_new.next = self.e.val();
        }
        if self.f2.dout.val().get_bit(0) & !self.f2.dout.val().get_bit(2) {
            self.m.d.next = self.m_new.val();
        }
        self.t3.d.next = self.scale.y.val();
        self.mn3.d.next = self.m_new.val();
        self.mo3.d.next = self.m.q.val();
        self.f3.d.next = self.f2.dout.val();

        // S3b: u = t − 256·m, δ = m_new − m_old.
        self.delta.next = self.mn3.q.val() - self.mo3.q.val();
        // Widen through a signed 40-bit local: Verilog sign-extends only signed operands.
        self.m40.next = signed_bit_cast::<40, 32>(self.mn3.q.val());
        self.u.next = self.t3.q.val() - signed_cast(unsigned_cast(self.m40.val()) << 8);
        self.exp2.clock.next = self.clock.val();
        self.exp2.u.next = self.u.val();
        self.upd3.d.next = self.f3.q.val().get_bit(0) & !self.f3.q.val().get_bit(2);
        self.first3.d.next = self.f3.q.val().get_bit(1);
        self.delta_bits.next = unsigned_cast(self.delta.val());
        self.d3.d.next = self.delta_bits.val().get_bits::<6>(0);
        // δ > 62 as a signed int32, by reductions rather than a comparator carry chain.
        if !self.delta_bits.val().get_bit(31)
            & (self.delta_bits.val().get_bits::<25>(6).any() | self.delta_bits.val().get_bits::<6>(0).all())
        {
            self.d3.d.next = 62.into();
        }
        if self.f3.q.val().get_bit(1) {
            self.d3.d.next = 0.into();
        }

        // S3c: p = 2^u (`exp2`'s second stage).
        self.d3c.d.next = self.d3.q.val();
        self.upd3c.d.next = self.upd3.q.val();
        self.first3c.d.next = self.first3.q.val();

        // S4a: p · v[x] registered, with the V row the top presents now.
        self.p4.d.next = self.exp2.p.val();
        self.upd4.d.next = self.upd3c.q.val();
        // δ ≤ 62 here (S3b clamps it), as the shifters take it.
        self.hot4.d.next = (bits::<64>(1) << self.d3c.q.val()) >> 1;
        self.lo4.d.next = !(self.c_ones.val() << self.d3c.q.val()) >> 1;
        self.first4.d.next = self.first3c.q.val();
        for x in 0..self._d {
            self.pv[x].d.next = signed_cast(self.exp2.p.val())
                * signed_bit_cast::<16, 8>(signed_cast(self.v_row.val().get_bits::<8>(x * 8)));
        }

        // S4b: l = rnd(l / 2^δ) + p, o[x] = rnd(o[x] / 2^δ) + p·v[x].
        // δ enters the `RoundShiftAdd`s in S4a; each registers its own copy.
        self.l_rs.clock.next = self.clock.val();
        self.l_rs.x.next = self.l.q.val();
        self.l_rs.sh.next = self.d3c.q.val();
        self.l_rs.hot.next = self.hot4.q.val();
        self.l_rs.lo.next = self.lo4.q.val();
        self.l_rs.a.next = signed_bit_cast::<48, 16>(signed_cast(self.p4.q.val()));
        if self.upd4.q.val() {
            self.l.d.next = self.l_rs.y.val();
            if self.first4.q.val() {
                self.l.d.next = signed_bit_cast::<48, 16>(signed_cast(self.p4.q.val()));
            }
        }
        for x in 0..self._d {
            self.o_rs[x].x.next = self.o[x].q.val();
            self.o_rs[x].clock.next = self.clock.val();
            self.o_rs[x].sh.next = self.d3c.q.val();
            self.o_rs[x].hot.next = self.hot4.q.val();
            self.o_rs[x].lo.next = self.lo4.q.val();
            self.o_rs[x].a.next = signed_bit_cast::<48, 32>(self.pv[x].q.val());
            if self.upd4.q.val() {
                self.o[x].d.next = self.o_rs[x].y.val();
                if self.first4.q.val() {
                    self.o[x].d.next = signed_bit_cast::<48, 32>(self.pv[x].q.val());
                }
            }
        }

        // Finalize: r = floor(2^32 / l) by 33 restoring steps on the snapshot `dl`;
        // the compare is the borrow of the one 41-bit subtraction.
        self.div_busy.next = self.div_cnt.q.val() != 0;
        self.rem_sh.next = self.rem.q.val() << 1;
        if self.div_cnt.q.val() == 33 {
            self.rem_sh.next = (self.rem.q.val() << 1) | 1;
        }
        self.rem_sub.next = bit_cast::<41, 40>(self.rem_sh.val()) - bit_cast::<41, 40>(self.dl.q.val());
        if self.div_start.val() {
            self.div_cnt.d.next = 33.into();
            self.dl.d.next = bit_cast::<40, 48>(unsigned_cast(self.l.q.val()));
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
        for x in 0..self._d {
            if self.div_start.val() {
                self.os[x].d.next = self.o[x].q.val();
            }
        }
        for x in 0..self._dm2 {
            if !self.div_start.val() & self.ser_v.val() {
                self.os[x].d.next = self.os[x + 2].q.val();
            }
        }
        self.mulr.o.next = self.os[0].q.val();
        self.mulr_o.o.next = self.os[1].q.val();
        self.mulr.r.next = self.quo.q.val().get_bits::<32>(0);
        self.mulr_o.r.next = self.quo.q.val().get_bits::<32>(0);
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
