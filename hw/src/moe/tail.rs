//! The router's sub-blocks: gate-projection lanes, the logit post-processing,
//! the top-k rounds, the exponentials, the reciprocal pipeline and the
//! per-choice assignment. Everything after the gate lanes takes one token per
//! cycle (II = 1): each block is one pipeline stage with no stall input; the
//! top only admits a token when the output FIFO has room for it.
//!
//! Per-expert vectors travel as packed buses of `EL` expert slots
//! ([`MoeConfig::expert_slots`](super::MoeConfig::expert_slots), the fewest
//! that hold `e_max`): `ZB = 32·EL` bits of int32 logits, `TB = 40·EL` of
//! log2-domain values, `PB = 16·EL` of Q1.14 exponentials. They are const
//! parameters because rust-hdl's widths are types; sizing them for the largest
//! unit made every unit pay for 256 experts in synthesis and simulation.
use crate::blocks::{
    ArgMaxPipe, Carry, DotI8Pipe, Exp2PipeU, OneHotPick, PairCmp, PairWin, RamPort, ScaleRoundPipe, SkewLine, SyncRam,
    PAIR_MAX,
};
use crate::clock;
use rust_hdl::prelude::*;

/// Per-token metadata through the tail: ids (8×8 bits @0), chosen exponentials
/// (8×16 bits @64), token index (32 bits @192), Σ_e p (32 bits @224).
pub const MB: usize = 256;
pub const META_P: usize = 64;
pub const META_TOK: usize = 192;
pub const META_SUM: usize = 224;
/// A token's route record (64 bytes).
pub const RB: usize = 512;
/// Adder levels a stage of the gate lanes' x·w tree: one, as the attention
/// lanes' q·k (two levels after the products' registers were 2.1–2.5 ns of
/// logic, `xw.r0 → r2` −1.3 ns, docs/timing.md).
const XW_LEVELS_PER_STAGE: usize = 1;

/// One expert lane of the gate projection: its slice of the gate weights (the
/// rows of experts `lane, lane + lanes, ...`, one beat per RAM word) and a
/// beat-wide int8 dot product accumulated over the beats of a row.
///
/// Timing: `valid/first/last` arrive with the RAM data (the cycle after the
/// top presents `raddr`); the dot product is a pipeline ([`DotI8Pipe`]:
/// products registered, then the adder tree registered every level) with
/// the flags delayed beside it, then accumulated; `res` holds the finished
/// logit [`GateLane::latency`] cycles after the row's last beat arrived.
#[derive(LogicBlock)]
pub struct GateLane<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub ram_port: RamPort<W>,
    /// The token's beat matching this cycle's RAM data.
    pub x: Signal<In, Bits<W>>,
    pub valid: Signal<In, Bit>,
    pub first: Signal<In, Bit>,
    pub last: Signal<In, Bit>,
    pub res: Signal<Out, Bits<32>>,
    ram: SyncRam<W>,
    xw: DotI8Pipe<W>,
    /// valid, first, last (bits 0, 1, 2) beside the dot product.
    flags: SkewLine<3>,
    v2: Signal<Local, Bit>,
    f2: Signal<Local, Bit>,
    l2: Signal<Local, Bit>,
    acc: DFF<Signed<32>>,
    acc_new: Signal<Local, Signed<32>>,
    res_r: DFF<Bits<32>>,
}

impl<const W: usize> GateLane<W> {
    pub fn new(depth: usize) -> Self {
        with_defaults!(Self {
            ram: SyncRam::new(depth),
            xw: DotI8Pipe::new(W / 8, XW_LEVELS_PER_STAGE),
            flags: SkewLine::new(DotI8Pipe::<W>::latency(W / 8, XW_LEVELS_PER_STAGE)),
            .. clock, ram_port, x, valid, first, last, res, v2, f2, l2, acc, acc_new, res_r
        })
    }

    /// Cycles from a row's last beat (with its flags) to its logit on `res`.
    pub fn latency() -> usize {
        DotI8Pipe::<W>::latency(W / 8, XW_LEVELS_PER_STAGE) + 1
    }
}

impl<const W: usize> Logic for GateLane<W> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, acc, res_r);
        clock!(self, clock, ram, xw, flags);
        RamPort::<W>::link(&mut self.ram_port, &mut self.ram.port);
        self.xw.a.next = self.x.val();
        self.xw.b.next = self.ram.rdata.val();
        self.flags.din.next = bit_cast::<3, 1>(self.valid.val().into())
            | (bit_cast::<3, 1>(self.first.val().into()) << 1)
            | (bit_cast::<3, 1>(self.last.val().into()) << 2);
        self.v2.next = self.flags.dout.val().get_bit(0);
        self.f2.next = self.flags.dout.val().get_bit(1);
        self.l2.next = self.flags.dout.val().get_bit(2);
        // Integer addition wraps like the model's int32 accumulator.
        self.acc_new.next = self.acc.q.val() + self.xw.dot.val();
        if self.f2.val() {
            self.acc_new.next = self.xw.dot.val();
        }
        if self.v2.val() {
            self.acc.d.next = self.acc_new.val();
            if self.l2.val() {
                self.res_r.d.next = unsigned_cast(self.acc_new.val());
            }
        }
        self.res.next = self.res_r.q.val();
    }
}

/// Lane `j`'s logit post-processing, a pipeline of [`POST_LATENCY`] stages:
/// the lane's bias word is selected and registered with `res`; `z = dot +
/// bias[e]` (wrapping) is registered; then `t = round(z · SMULT / 2^SSHIFT)`
/// ([`ScaleRoundPipe`]) with `z` delayed alongside. In one cycle this was the
/// unit's critical path (docs/timing.md). The top packs the lanes' results
/// side by side into the group's slice of the logit vectors.
#[derive(LogicBlock)]
pub struct PostLane<const ZB: usize> {
    pub clock: Signal<In, Clock>,
    pub res: Signal<In, Bits<32>>,
    pub bias: Signal<In, Bits<ZB>>,
    /// FLAGS.bias: else the bias word is zero (the bus holds a past run's).
    pub use_bias: Signal<In, Bit>,
    /// The group's first expert (`g · lanes`), a cycle before `res`: the
    /// lane's word index and its range check are registered from it, so that
    /// the bias word's select follows no add or compare (`off → bias_r`,
    /// 7.5 ns of routing at fan-out 32, docs/timing.md).
    pub boff: Signal<In, Bits<16>>,
    pub smult: Signal<In, Bits<32>>,
    pub sshift: Signal<In, Bits<6>>,
    pub z_o: Signal<Out, Bits<32>>,
    pub t_o: Signal<Out, Bits<40>>,
    /// The lane's expert (`boff + j`) before and after its register, and its
    /// word's bit offset in `bias`: a multiple of 32 by construction, so the
    /// select is a word mux, not a bit shifter.
    off_nx: Signal<Local, Bits<16>>,
    off: DFF<Bits<16>>,
    off_bit: Signal<Local, Bits<16>>,
    /// FLAGS.bias and the expert within the bus's slots, registered with `off`.
    off_ok: DFF<Bit>,
    res_r: DFF<Bits<32>>,
    bias_r: DFF<Bits<32>>,
    zr: DFF<Bits<32>>,
    z_dly: SkewLine<32>,
    scale: ScaleRoundPipe,
    c_j: Constant<Bits<16>>,
    c_top: Constant<Bits<16>>,
}

/// Cycles from a [`PostLane`]'s `res` to its `z_o` and `t_o`.
pub const POST_LATENCY: usize = 2 + ScaleRoundPipe::LATENCY;

impl<const ZB: usize> PostLane<ZB> {
    pub fn new(j: usize) -> Self {
        let k = |v: usize| Constant::new((v as u64).to_bits());
        with_defaults!(Self {
            z_dly: SkewLine::new(ScaleRoundPipe::LATENCY),
            c_j: k(j),
            c_top: k(ZB / 32 - 1),
            .. clock, res, bias, use_bias, boff, smult, sshift, z_o, t_o, off_nx, off, off_bit, off_ok, res_r, bias_r, zr, scale
        })
    }
}

impl<const ZB: usize> Logic for PostLane<ZB> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, off, off_ok, res_r, bias_r, zr);
        clock!(self, clock, scale, z_dly);
        self.off_nx.next = self.boff.val() + self.c_j.val();
        self.off.d.next = self.off_nx.val();
        // Experts past the bus's slots only exist in a partial last group: never read past it.
        self.off_ok.d.next = self.use_bias.val() & (self.off_nx.val() <= self.c_top.val());
        self.off_bit.next = self.off.q.val() << 5;
        self.res_r.d.next = self.res.val();
        self.bias_r.d.next = 0.into();
        if self.off_ok.q.val() {
            self.bias_r.d.next = self.bias.val().get_bits::<32>(self.off_bit.val().index());
        }
        self.zr.d.next = self.res_r.q.val() + self.bias_r.q.val();
        self.scale.x.next = signed_cast(self.zr.q.val());
        self.scale.mult.next = self.smult.val();
        self.scale.shift.next = self.sshift.val();
        self.z_dly.din.next = self.zr.q.val();
        self.z_o.next = self.z_dly.dout.val();
        self.t_o.next = unsigned_cast(self.scale.y.val());
    }
}

/// Expert `e`'s exponential, a pipeline of [`ExpUnit::LATENCY`] stages:
/// `u = t[e] − t_max` registered (the most negative value for `e ≥ E`, whose
/// exponential is zero), then `p = exp2_fixed(u)` in Q1.14 ([`Exp2PipeU`]: the
/// attention unit's LUT and shift, registered between them).
#[derive(LogicBlock)]
pub struct ExpUnit<const TB: usize> {
    pub clock: Signal<In, Clock>,
    pub t: Signal<In, Bits<TB>>,
    pub tmax: Signal<In, Signed<40>>,
    /// E, steady for the run.
    pub experts: Signal<In, Bits<16>>,
    pub p: Signal<Out, Bits<16>>,
    /// `t[e] − t_max`, and `u` before its register (in [`Exp2PipeU`]): the
    /// copies of the LUT index load `d`'s low bits, not `u`'s, so that the
    /// `e < E` select is not in front of them.
    d: Signal<Local, Bits<40>>,
    u: Signal<Local, Bits<40>>,
    /// `e < E`, registered: the compare in front of the select fanned out to
    /// `u`'s 40 bits (`→ exps[*].exp.p`, −1.04 ns, docs/timing.md).
    live: DFF<Bit>,
    exp: Exp2PipeU,
    c_e: Constant<Bits<16>>,
    c_t: Constant<Bits<16>>,
    c_floor: Constant<Bits<40>>,
}

impl<const TB: usize> ExpUnit<TB> {
    pub const LATENCY: usize = Exp2PipeU::LATENCY;

    pub fn new(e: usize) -> Self {
        let k = |v: usize| Constant::new((v as u64).to_bits());
        with_defaults!(Self {
            c_e: k(e),
            c_t: k(40 * e),
            c_floor: Constant::new((1u64 << 39).to_bits()),
            .. clock, t, tmax, experts, p, d, u, live, exp
        })
    }
}

impl<const TB: usize> Logic for ExpUnit<TB> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, live);
        self.exp.clock.next = self.clock.val();
        self.live.d.next = self.c_e.val() < self.experts.val();
        self.d.next = unsigned_cast(signed_cast(self.t.val().get_bits::<40>(self.c_t.val().index())) - self.tmax.val());
        self.u.next = self.c_floor.val();
        if self.live.q.val() {
            self.u.next = self.d.val();
        }
        self.exp.u.next = signed_cast(self.u.val());
        self.exp.ul.next = self.d.val().get_bits::<8>(0);
        self.p.next = self.exp.p.val();
    }
}

/// One round of top-k, a pipeline of [`TopkRound::latency`] stages (two once
/// e_max ≥ 2): the largest valid logit, ties to the lower expert index; the
/// winner is masked out for the next round and recorded in the metadata with
/// its exponential (`aux`'s, or 1.0 for the first round, which is the
/// maximum). `aux` rides along unchanged. From 2 to [`PAIR_MAX`] experts, the
/// first round compares every pair of logits into a register ([`PairCmp`]),
/// which rides along as `gt` (z is the same in every round), and each round
/// finds its winner one-hot from those bits and its mask ([`PairWin`]): the
/// first round in its second stage, the others in their first, their second
/// picking index and exponential by the one-hot ([`OneHotPick`]). The tree's
/// 32-bit compares and node selects in every round were the router's critical
/// paths (docs/timing.md). Otherwise a comparator tree over `e_max` experts
/// ([`ArgMaxPipe`]), registered after its first `ceil(levels / 2)` levels,
/// carries the exponential with its node.
#[derive(LogicBlock)]
pub struct TopkRound<const EL: usize, const ZB: usize, const AB: usize> {
    pub clock: Signal<In, Clock>,
    pub z: Signal<In, Bits<ZB>>,
    pub aux: Signal<In, Bits<AB>>,
    pub mask: Signal<In, Bits<EL>>,
    pub meta: Signal<In, Bits<MB>>,
    pub valid: Signal<In, Bit>,
    /// [`PairCmp`]'s bits from the round before (the first round makes its own).
    pub gt: Signal<In, Bits<32>>,
    pub z_o: Signal<Out, Bits<ZB>>,
    pub aux_o: Signal<Out, Bits<AB>>,
    pub mask_o: Signal<Out, Bits<EL>>,
    pub meta_o: Signal<Out, Bits<MB>>,
    pub valid_o: Signal<Out, Bit>,
    pub gt_o: Signal<Out, Bits<32>>,
    /// The wide buses the round passes on unchanged (z, aux) and the
    /// metadata, beside the tree's stages; their `s` as the last stage sees them.
    zc: Carry<ZB>,
    auxc: Carry<AB>,
    metac: Carry<MB>,
    maskr: DFF<Bits<EL>>,
    metar: DFF<Bits<MB>>,
    validr: DFF<Bit>,
    /// The token's narrow buses beside the tree's cut, and as the second stage sees them.
    mask1: DFF<Bits<EL>>,
    valid1: DFF<Bit>,
    masks: Signal<Local, Bits<EL>>,
    valids: Signal<Local, Bit>,
    tree: ArgMaxPipe<ZB, EL, AB>,
    /// The pairwise mode: the compares, `gt` beside the stages, the winner
    /// (registered after a later round's first stage) and its pick.
    cmp: PairCmp<ZB>,
    gtc: Carry<32>,
    gts: Signal<Local, Bits<32>>,
    win: PairWin<EL>,
    ohr: DFF<Bits<EL>>,
    ohs: Signal<Local, Bits<EL>>,
    pick: OneHotPick<EL, AB>,
    clr: Signal<Local, Bits<EL>>,
    sel: Signal<Local, Bits<8>>,
    psel: Signal<Local, Bits<16>>,
    c_sel_sh: Constant<Bits<16>>,
    c_p_sh: Constant<Bits<16>>,
    c_first: Constant<Bit>,
    c_pairs: Constant<Bit>,
    c_one: Constant<Bits<16>>,
    _has_cut: usize,
}

impl<const EL: usize, const ZB: usize, const AB: usize> TopkRound<EL, ZB, AB> {
    /// Whether a round over `e_max` experts compares pairs (else the tree).
    fn pairs(e_max: usize) -> bool {
        (2..=PAIR_MAX).contains(&e_max)
    }

    /// The tree level after which a round over `e_max` experts is registered
    /// (0: none); 1 or 2 for the pairwise mode's experts, its two stages.
    fn cut_level(e_max: usize) -> usize {
        let levels = e_max.next_power_of_two().trailing_zeros() as usize;
        levels.div_ceil(2)
    }

    /// Cycles from a round's inputs to its outputs.
    pub fn latency(e_max: usize) -> usize {
        1 + usize::from(Self::cut_level(e_max) > 0)
    }

    /// Round `round` (0-based) over `e_max` experts.
    pub fn new(round: usize, e_max: usize) -> Self {
        assert!((1..=EL).contains(&e_max) && round < 8);
        let (cl, pairs) = (Self::cut_level(e_max), Self::pairs(e_max));
        // The mode not taken gets one lane: no logic.
        let (nt, np) = if pairs { (1, e_max) } else { (e_max, 1) };
        let k = |v: usize| Constant::new((v as u64).to_bits());
        with_defaults!(Self {
            tree: ArgMaxPipe::new(nt, if pairs { 0 } else { cl }),
            cmp: PairCmp::new(np),
            gtc: Carry::new(true),
            win: PairWin::new(np),
            pick: OneHotPick::new(np),
            zc: Carry::new(cl > 0),
            auxc: Carry::new(cl > 0),
            metac: Carry::new(cl > 0),
            c_sel_sh: k(8 * round),
            c_p_sh: k(META_P + 16 * round),
            c_first: Constant::new(round == 0),
            c_pairs: Constant::new(pairs),
            c_one: k(1 << crate::numerics::EXP2_ONE_BITS),
            _has_cut: usize::from(cl > 0),
            .. clock, z, aux, mask, meta, valid, gt, z_o, aux_o, mask_o, meta_o, valid_o, gt_o, maskr, metar, validr,
            mask1, valid1, masks, valids, gts, ohr, ohs, clr, sel, psel
        })
    }
}

impl<const EL: usize, const ZB: usize, const AB: usize> Logic for TopkRound<EL, ZB, AB> {
    #[hdl_gen]
    fn update(&mut self) {
        // Every register below is assigned once, unconditionally: without
        // dff_setup's hold (`d = q`) each is written once per cycle, where a hold
        // and an assignment made simulators zero and copy the 256-bit metadata.
        clock!(self, clock, maskr, metar, validr, mask1, valid1, ohr, tree, zc, auxc, metac, gtc);
        self.tree.z.next = self.z.val();
        self.tree.mask.next = self.mask.val();
        self.tree.pay.next = self.aux.val();
        self.zc.d.next = self.z.val();
        self.auxc.d.next = self.aux.val();
        self.metac.d.next = self.meta.val();
        // The narrow buses as the stage after the cut sees them.
        self.mask1.d.next = self.mask.val();
        self.valid1.d.next = self.valid.val();
        self.masks.next = self.mask.val();
        self.valids.next = self.valid.val();
        for _c in 0..self._has_cut {
            self.masks.next = self.mask1.q.val();
            self.valids.next = self.valid1.q.val();
        }
        // Pairs: the first round compares, and finds its winner a stage
        // later; the others find theirs from the bits carried to them.
        self.cmp.z.next = self.z.val();
        self.gts.next = self.gt.val();
        self.win.gt.next = self.gt.val();
        self.win.mask.next = self.mask.val();
        if self.c_first.val() {
            self.gts.next = self.cmp.gt.val();
            self.win.gt.next = self.gtc.s.val();
            self.win.mask.next = self.mask1.q.val();
        }
        self.gtc.d.next = self.gts.val();
        self.ohr.d.next = self.win.oh.val();
        self.ohs.next = self.ohr.q.val();
        if self.c_first.val() {
            self.ohs.next = self.win.oh.val();
        }
        self.pick.oh.next = self.ohs.val();
        self.pick.pay.next = self.auxc.s.val();
        self.sel.next = self.tree.sel.val();
        self.psel.next = self.tree.pay_sel.val();
        self.clr.next = bits::<EL>(1) << self.tree.sel.val();
        if self.c_pairs.val() {
            self.sel.next = self.pick.sel.val();
            self.psel.next = self.pick.pay_sel.val();
            self.clr.next = self.ohs.val();
        }
        if self.c_first.val() {
            self.psel.next = self.c_one.val();
        }
        self.maskr.d.next = self.masks.val() & !self.clr.val();
        self.metar.d.next = self.metac.s.val()
            | (bit_cast::<MB, 8>(self.sel.val()) << self.c_sel_sh.val())
            | (bit_cast::<MB, 16>(self.psel.val()) << self.c_p_sh.val());
        self.validr.d.next = self.valids.val();
        self.z_o.next = self.zc.q.val();
        self.aux_o.next = self.auxc.q.val();
        self.mask_o.next = self.maskr.q.val();
        self.meta_o.next = self.metar.q.val();
        self.valid_o.next = self.validr.q.val();
        self.gt_o.next = self.gtc.q.val();
    }
}

/// One step of the reciprocal `r = floor(2^40 / L)` (one pipeline stage):
/// restoring division, one quotient bit per stage, 27 stages from `rem = 2^13`.
#[derive(LogicBlock, Default)]
pub struct DivStage {
    pub clock: Signal<In, Clock>,
    pub rem: Signal<In, Bits<32>>,
    pub q: Signal<In, Bits<32>>,
    pub l: Signal<In, Bits<32>>,
    pub meta: Signal<In, Bits<MB>>,
    pub valid: Signal<In, Bit>,
    pub rem_o: Signal<Out, Bits<32>>,
    pub q_o: Signal<Out, Bits<32>>,
    pub l_o: Signal<Out, Bits<32>>,
    pub meta_o: Signal<Out, Bits<MB>>,
    pub valid_o: Signal<Out, Bit>,
    r2: Signal<Local, Bits<32>>,
    remr: DFF<Bits<32>>,
    qr: DFF<Bits<32>>,
    lr: DFF<Bits<32>>,
    metar: DFF<Bits<MB>>,
    validr: DFF<Bit>,
}

impl Logic for DivStage {
    #[hdl_gen]
    fn update(&mut self) {
        // `lr`, `metar` and `validr` are assigned once, unconditionally, without a
        // hold (`d = q`): the hold and the assignment made simulators zero and copy
        // the 256-bit metadata in each of the 27 stages.
        dff_setup!(self, clock, remr, qr);
        clock!(self, clock, lr, metar, validr);
        self.r2.next = self.rem.val() << 1;
        self.remr.d.next = self.r2.val();
        self.qr.d.next = self.q.val() << 1;
        if self.r2.val() >= self.l.val() {
            self.remr.d.next = self.r2.val() - self.l.val();
            self.qr.d.next = (self.q.val() << 1) | 1;
        }
        self.lr.d.next = self.l.val();
        self.metar.d.next = self.meta.val();
        self.validr.d.next = self.valid.val();
        self.rem_o.next = self.remr.q.val();
        self.q_o.next = self.qr.q.val();
        self.l_o.next = self.lr.q.val();
        self.meta_o.next = self.metar.q.val();
        self.valid_o.next = self.validr.q.val();
    }
}

/// Choice `i` of a token (combinational): its slot from its expert's running
/// load (`ld`; `full` when it has reached the capacity, a flag the top keeps
/// per expert: a 32-bit compare here followed the load's select, docs/timing.md),
/// and its fields placed in the route record. Its
/// weight `w` comes from a [`MulRoundSat16Pipe`](crate::blocks::MulRoundSat16Pipe)
/// the top runs ahead of it. The top reads the expert id `sel` from the
/// metadata and selects `ld` from its per-expert counters (an output `sel`
/// read back by the top would be a combinational loop between the two blocks
/// for Verilator).
#[derive(LogicBlock)]
pub struct Choice {
    pub w: Signal<In, Bits<16>>,
    pub sel: Signal<In, Bits<8>>,
    pub ld: Signal<In, Bits<32>>,
    pub full: Signal<In, Bit>,
    pub active: Signal<In, Bit>,
    pub drop: Signal<Out, Bit>,
    pub rec: Signal<Out, Bits<RB>>,
    /// Bit offsets of the choice's id, weight and slot in the record.
    _at: [usize; 3],
}

impl Choice {
    pub fn new(i: usize) -> Self {
        use super::config::{REC_IDS, REC_SLOTS, REC_WEIGHTS};
        let at = [8 * (REC_IDS + i), 8 * (REC_WEIGHTS + 2 * i), 8 * (REC_SLOTS + 4 * i)];
        assert!(at[0] + 8 <= at[1] && at[1] + 16 <= at[2] && at[2] + 32 <= RB);
        with_defaults!(Self {
            _at: at,
            .. w, sel, ld, full, active, drop, rec
        })
    }
}

impl Logic for Choice {
    fn update(&mut self) {
        let full = self.full.val();
        let slot = if full { u32::MAX.to_bits() } else { self.ld.val() };
        let active = self.active.val();
        self.drop.next = active & full;
        self.rec.next = if active {
            let [id, w, s] = self._at.map(|b| b as u64);
            (bit_cast::<RB, 8>(self.sel.val()) << id)
                | (bit_cast::<RB, 16>(self.w.val()) << w)
                | (bit_cast::<RB, 32>(slot) << s)
        } else {
            0.into()
        };
    }
    fn connect(&mut self) {
        self.drop.connect();
        self.rec.connect();
    }
    /// The record as one concatenation of the fields and zeros: placed by
    /// shifts and OR-ed, simulators executed three shifts and two ORs of the
    /// whole record every cycle.
    fn hdl(&self) -> Verilog {
        let [id, w, s] = self._at;
        let mut parts = Vec::new();
        let mut pos = 0;
        for (at, bits, field) in [(id, 8, "sel"), (w, 16, "w"), (s, 32, "slot")] {
            if at > pos {
                parts.push(format!("{}'d0", at - pos));
            }
            parts.push(field.to_string());
            pos = at + bits;
        }
        if pos < RB {
            parts.push(format!("{}'d0", RB - pos));
        }
        parts.reverse();
        Verilog::Custom(format!(
            "\
wire [31:0] slot = full ? 32'hffffffff : ld;
always @(*) drop = active & full;
always @(*) rec = active ? {{{}}} : {RB}'d0;",
            parts.join(", ")
        ))
    }
}
