//! The Vitis kernel shell every unit sits in: the AXI4-Lite control slave
//! ([`Control`]), the arguments latched for a run, the CYCLES/HWINFO/STATUS
//! words, the AXI4 master's read-address issuer (4 KiB-safe bursts), its
//! write handshake and response count, and the interrupt. A unit's top level
//! holds the Vitis ports as one [`VitisPorts`] interface, links it to its
//! [`Shell`] and keeps only its controller and datapath.
//!
//! Interfaces rather than a macro that writes the port list: rust-hdl flattens
//! an interface into the same ports (`vitis$s_axi_control$awvalid`, renamed to
//! the Vitis `s_axi_control_awvalid` by [`crate::vitis::rename_top`]), and a linked
//! interface connects each top-level port straight to the shell instance
//! (`.s_axi_control_awvalid(s_axi_control_awvalid)`), where wiring the ports by
//! hand, as a generated port list would, copies each through a `reg` in the
//! top's `always @(*)` (ferrite_gemm_2x2_p128's top module: 1,338 lines, 1,468
//! before). `LogicLink::link` is also an ordinary statement inside `update`,
//! where a macro cannot be expanded.
use crate::blocks::{Copies, Occupancy};
use crate::control::Control;
use crate::dff_setup;
use crate::regmap::{Table, CTRL_ADDR_BITS, STATUS_WORDS};
use crate::vitis::GMEM_ADDR_BITS;
use rust_hdl::prelude::*;

/// Flip-flops holding `idle`: one for the cycle count and the unit, three for the run words.
const IDLE_COPIES: usize = 4;

/// The `s_axi_control` AXI4-Lite slave, as the kernel sees it.
#[derive(LogicInterface, Default)]
pub struct AxiLiteSlave {
    pub awvalid: Signal<In, Bit>,
    pub awready: Signal<Out, Bit>,
    pub awaddr: Signal<In, Bits<CTRL_ADDR_BITS>>,
    pub wvalid: Signal<In, Bit>,
    pub wready: Signal<Out, Bit>,
    pub wdata: Signal<In, Bits<32>>,
    pub wstrb: Signal<In, Bits<4>>,
    pub bvalid: Signal<Out, Bit>,
    pub bready: Signal<In, Bit>,
    pub bresp: Signal<Out, Bits<2>>,
    pub arvalid: Signal<In, Bit>,
    pub arready: Signal<Out, Bit>,
    pub araddr: Signal<In, Bits<CTRL_ADDR_BITS>>,
    pub rvalid: Signal<Out, Bit>,
    pub rready: Signal<In, Bit>,
    pub rdata: Signal<Out, Bits<32>>,
    pub rresp: Signal<Out, Bits<2>>,
}

/// The `m_axi_gmem` AXI4 master (single ID, INCR bursts), `W` data bits, `S = W / 8`.
#[derive(LogicInterface, Default)]
pub struct AxiMaster<const W: usize, const S: usize> {
    pub awvalid: Signal<Out, Bit>,
    pub awready: Signal<In, Bit>,
    pub awaddr: Signal<Out, Bits<GMEM_ADDR_BITS>>,
    pub awlen: Signal<Out, Bits<8>>,
    pub awsize: Signal<Out, Bits<3>>,
    pub awburst: Signal<Out, Bits<2>>,
    pub wvalid: Signal<Out, Bit>,
    pub wready: Signal<In, Bit>,
    pub wdata: Signal<Out, Bits<W>>,
    pub wstrb: Signal<Out, Bits<S>>,
    pub wlast: Signal<Out, Bit>,
    pub bvalid: Signal<In, Bit>,
    pub bready: Signal<Out, Bit>,
    pub bresp: Signal<In, Bits<2>>,
    pub arvalid: Signal<Out, Bit>,
    pub arready: Signal<In, Bit>,
    pub araddr: Signal<Out, Bits<GMEM_ADDR_BITS>>,
    pub arlen: Signal<Out, Bits<8>>,
    pub arsize: Signal<Out, Bits<3>>,
    pub arburst: Signal<Out, Bits<2>>,
    pub rvalid: Signal<In, Bit>,
    pub rready: Signal<Out, Bit>,
    pub rdata: Signal<In, Bits<W>>,
    pub rlast: Signal<In, Bit>,
    pub rresp: Signal<In, Bits<2>>,
}

/// The Vitis RTL kernel's ports, as the unit's top level declares them and
/// hands them to its [`Shell`] with one `link` (exported without the `vitis`
/// prefix by [`crate::vitis::rename_top`]).
#[derive(LogicInterface, Default)]
pub struct VitisPorts<const W: usize, const S: usize> {
    pub ap_clk: Signal<In, Clock>,
    /// Active low, synchronous.
    pub ap_rst_n: Signal<In, Bit>,
    pub interrupt: Signal<Out, Bit>,
    pub s_axi_control: AxiLiteSlave,
    pub m_axi_gmem: AxiMaster<W, S>,
}

/// The shell. The unit drives `done` and `fail`, reads `idle`, its arguments
/// from `args` (as written, for the start cycle) and `run` (latched at `start`),
/// reads `m_axi_gmem`'s R channel itself, and asks for reads and writes here:
///
/// - a *span*: `span_load` sets `span_rows` rows of `span_beats` beats each,
///   the first at `span_addr`, the next ones `span_pitch` bytes apart
///   (`span_resume` starts `span_rows` more rows where the last span ended);
///   while `span_go`, the shell issues its bursts, cut at 4 KiB pages;
///   `span_row` counts the rows issued, `span_done` says all are. Load and
///   resume only once the last span is done: both are applied a cycle later
///   (`span_done` is low meanwhile), and a burst is issued the cycle after
///   `span_go` and a free slot decided it, at most every other cycle;
/// - or one burst of its own: `ar_req` with `ar_req_addr`, `ar_req_len`,
///   while `slot_free` and no span is going (`span_done`); a request waits
///   in a second AR register while the first is taken, so `slot_free` is a
///   flip-flop;
/// - a write: hold `wr_send` with the address, length, data, strobes and
///   `wr_last` until `wr_fire`; `wr_beat` marks each data beat taken.
///   `writes_done` says every write issued this run has its response.
#[derive(LogicBlock)]
pub struct Shell<const W: usize, const S: usize> {
    pub vitis: VitisPorts<W, S>,
    /// One-cycle pulse: the unit starts a run.
    pub start: Signal<Out, Bit>,
    pub args: Vec<Signal<Out, Bits<32>>>,
    pub run: Vec<Signal<Out, Bits<32>>>,
    /// No run is going: a flip-flop, cleared by `start`, set the cycle after
    /// `done` (the unit is back in its idle state then), and `idle_next`, its
    /// value after this edge, for a unit to keep [`Copies`] of.
    pub idle: Signal<Out, Bit>,
    pub idle_next: Signal<Out, Bit>,
    /// One-cycle pulse: the run is complete.
    pub done: Signal<In, Bit>,
    /// Sets STATUS bit 0: the unit refused the arguments or saw bad data.
    pub fail: Signal<In, Bit>,
    pub slot_free: Signal<Out, Bit>,
    pub span_load: Signal<In, Bit>,
    pub span_resume: Signal<In, Bit>,
    pub span_addr: Signal<In, Bits<64>>,
    pub span_beats: Signal<In, Bits<16>>,
    pub span_rows: Signal<In, Bits<32>>,
    pub span_pitch: Signal<In, Bits<32>>,
    pub span_go: Signal<In, Bit>,
    pub span_row: Signal<Out, Bits<32>>,
    pub span_done: Signal<Out, Bit>,
    pub ar_req: Signal<In, Bit>,
    pub ar_req_addr: Signal<In, Bits<64>>,
    pub ar_req_len: Signal<In, Bits<8>>,
    pub wr_send: Signal<In, Bit>,
    pub wr_addr: Signal<In, Bits<64>>,
    pub wr_len: Signal<In, Bits<8>>,
    pub wr_data: Signal<In, Bits<W>>,
    pub wr_strb: Signal<In, Bits<S>>,
    pub wr_last: Signal<In, Bit>,
    pub wr_beat: Signal<Out, Bit>,
    pub wr_fire: Signal<Out, Bit>,
    pub writes_done: Signal<Out, Bit>,
    ctrl: Control,
    /// The control slave's `idle`: copy 0 for the cycle count and the unit,
    /// the others for the run words, which load while idle (not at `start`, whose
    /// decode fanned out to every run bit, docs/timing.md).
    idle_cp: Copies<IDLE_COPIES>,
    run_regs: Vec<DFF<Bits<32>>>,
    run_en: Vec<Signal<Local, Bit>>,
    err: DFF<Bit>,
    cycles: DFF<Bits<64>>,
    ar_valid: DFF<Bit>,
    ar_addr: DFF<Bits<64>>,
    ar_len: DFF<Bits<8>>,
    /// The second AR register: a request made while `ar_*` waits for
    /// `arready`. Requests are taken while it is empty, so `slot_free` is
    /// `!sk_valid` (it was `!ar_valid | arready`, and the path from there
    /// through the GEMM's B read issue was its critical path). Three copies:
    /// for the requesters, for `sk_addr`'s and `sk_len`'s 72 enables, and for
    /// the AR register's 72 selects.
    sk_valid: Copies<3>,
    sk_addr: DFF<Bits<64>>,
    sk_len: DFF<Bits<8>>,
    /// A request this cycle (`ar_req` or the span reader's) and its address and length.
    push: Signal<Local, Bit>,
    push_addr: Signal<Local, Bits<64>>,
    push_len: Signal<Local, Bits<8>>,
    /// The AR register is empty or handing its request over this cycle.
    head_free: Signal<Local, Bit>,
    rd_addr: DFF<Bits<64>>,
    rd_rem: DFF<Bits<16>>,
    row_beats: DFF<Bits<16>>,
    pitch: DFF<Bits<32>>,
    row: DFF<Bits<32>>,
    /// Rows of the span still to start, and whether there are any: a flag
    /// kept beside the count, so the issue decision reads a register instead of
    /// comparing `row` with the span's rows.
    left: DFF<Bits<32>>,
    more: DFF<Bit>,
    // The span reader's next addresses, kept ready beside `rd_addr` so that a
    // burst's update only selects (two 64-bit adds and a select there were the
    // GEMM unit's critical path, docs/timing.md): `row_nx` the next row's
    // start, `pg_nx` the page after `rd_addr`'s, `to_pg` the beats from
    // `rd_addr` to its page's end.
    row_nx: DFF<Bits<64>>,
    pg_nx: DFF<Bits<64>>,
    to_pg: DFF<Bits<16>>,
    /// The span reader in two stages (docs/timing.md): a cycle *decides* to
    /// issue a burst (`dec`, into this one register), the next one *issues* it
    /// (`gen`: loads the AR register and advances the address registers). So
    /// the enables of the wide registers come from a flip-flop, not from the
    /// unit's `span_go` and the AR handshake. The cycle that issues decides
    /// nothing (its registers are not yet advanced): at most a burst every
    /// other cycle, which the R channel's one beat a cycle hides for bursts
    /// of two beats or more. Three copies (the AR request; the read address
    /// registers; the row registers): one flag enabled all 300 (docs/timing.md).
    gen: Copies<3>,
    dec: Signal<Local, Bit>,
    /// This burst ends its row (`rd_rem ≤ to_pg`), registered: the registers
    /// it reads changed at least a cycle before any issue (a span applied
    /// decides nothing in its first cycle, so no select by `ld` stands in front
    /// of the compare). Copies as `gen`'s.
    row_last: Copies<3>,
    /// `span_load` and its arguments, registered (the arguments every cycle,
    /// so only `ld` depends on `span_load`) and applied the next cycle (the
    /// first row's `to_pg` with it; its `row_nx` and `pg_nx` a cycle later, on
    /// `ld_p`); likewise `span_resume` (`rs`), which sets only the rows.
    /// `ld` in three copies (the unit's `span_done` and the decision; the read
    /// address registers; the row registers): one flag enabled 325 loads.
    ld: Copies<3>,
    rs: DFF<Bit>,
    /// `ld` a cycle later, when the first row's successor and page load
    /// (`ld_row_nx`, `ld_pg_nx`: registered sums of `ld_addr`, whose 64-bit
    /// adds in front of a select were the GEMM's critical path). Nothing reads
    /// `row_nx` or `pg_nx` before: a span applied decides no burst.
    ld_p: DFF<Bit>,
    ld_addr: DFF<Bits<64>>,
    ld_beats: DFF<Bits<16>>,
    ld_rows: DFF<Bits<32>>,
    ld_pitch: DFF<Bits<32>>,
    ld_more: DFF<Bit>,
    /// The beats from `span_addr` to its page's end, registered every cycle
    /// beside `ld_addr` (a subtract of the address's low twelve bits): the
    /// page-end compare below and the first row's `to_pg` read a register.
    ld_to_pg: DFF<Bits<16>>,
    /// The next row's successor, page and beats to its page's end, from
    /// `row_nx` (a row's last burst); `ld_row_nx`, `ld_pg_nx` are the first
    /// row's, registered from `ld_addr` (a select by `ld` in front of the
    /// adders was the GEMM's critical path).
    at_row_nx: Signal<Local, Bits<64>>,
    at_pg_nx: Signal<Local, Bits<64>>,
    at_to_pg: Signal<Local, Bits<16>>,
    ld_row_nx: DFF<Bits<64>>,
    ld_pg_nx: DFF<Bits<64>>,
    /// The burst's AXI length (beats less one), `rd_rem − 1` on a row's last
    /// burst, else `to_pg − 1`: both registered every cycle, a cycle behind
    /// their sources as `row_last` is (current in the issuing cycle for the
    /// same reason), so the AR length selects registers and subtracts
    /// nothing (`to_pg` → the subtract → `ar_len` was a critical path,
    /// docs/timing.md).
    rem_m1: DFF<Bits<8>>,
    pg_m1: DFF<Bits<8>>,
    aw_done: DFF<Bit>,
    w_done: DFF<Bit>,
    /// Writes issued and not yet answered (none at every run's end, so nothing
    /// is cleared at `start`); `writes_done` is its flag, a flip-flop.
    wr_out: Occupancy,
    c_logp: Constant<Bits<16>>,
    c_page: Constant<Bits<64>>,
    c_page_lo: Constant<Bits<64>>,
    c_page_beats: Constant<Bits<16>>,
    c_hwinfo: Constant<Bits<32>>,
    _n_args: usize,
    _third: usize,
    _two_thirds: usize,
}

impl<const W: usize, const S: usize> Shell<W, S> {
    /// The shell of a unit with register table `table` and HWINFO word `hwinfo`.
    pub fn new(table: &Table, hwinfo: u32) -> Self {
        let n = table.words();
        with_defaults!(Self {
            args: crate::many(n),
            run: crate::many(n),
            ctrl: Control::new(n, STATUS_WORDS),
            run_regs: crate::many(n),
            c_logp: Constant::new((S.trailing_zeros() as u64).to_bits()),
            c_page: Constant::new(4096u64.to_bits()),
            c_page_lo: Constant::new(4095u64.to_bits()),
            c_page_beats: Constant::new(((4096 / S) as u64).to_bits()),
            c_hwinfo: Constant::new((hwinfo as u64).to_bits()),
            _n_args: n,
            _third: n / 3,
            _two_thirds: 2 * n / 3,
            run_en: crate::many(n),
            .. vitis, start, idle, idle_next, idle_cp, done, fail, slot_free, span_load, span_resume, span_addr, span_beats, span_rows,
            span_pitch, span_go, span_row, span_done, ar_req, ar_req_addr, ar_req_len, wr_send, wr_addr, wr_len,
            wr_data, wr_strb, wr_last, wr_beat, wr_fire, writes_done, err, cycles, ar_valid, ar_addr, ar_len, rd_addr,
            rd_rem, row_beats, pitch, row, left, more, row_nx, pg_nx, to_pg, gen, dec, row_last, ld, rs, ld_p, ld_addr, ld_beats,
            ld_rows, ld_pitch, ld_more, ld_to_pg, at_row_nx, at_pg_nx, at_to_pg, ld_row_nx, ld_pg_nx, rem_m1, pg_m1, aw_done, w_done, wr_out,
            sk_valid, sk_addr, sk_len, push, push_addr, push_len, head_free
        })
    }

    /// Argument and status words the control slave was built with.
    pub fn words(&self) -> (usize, usize) {
        (self.ctrl.args.len(), self.ctrl.status.len())
    }
}

impl<const W: usize, const S: usize> Logic for Shell<W, S> {
    #[hdl_gen]
    fn update(&mut self) {
        #[rustfmt::skip]
        dff_setup!(
            self, vitis.ap_clk, err, cycles, ar_valid, ar_addr, ar_len, rd_addr, rd_rem, row_beats, pitch, row, left, more,
            row_nx, pg_nx, to_pg, rs, ld_p, ld_addr, ld_beats, ld_rows, ld_pitch, ld_more, ld_to_pg, ld_row_nx, ld_pg_nx,
            rem_m1, pg_m1, aw_done, w_done,
            sk_addr, sk_len
        );
        self.sk_valid.clock.next = self.vitis.ap_clk.val();
        self.gen.clock.next = self.vitis.ap_clk.val();
        self.ld.clock.next = self.vitis.ap_clk.val();
        self.row_last.clock.next = self.vitis.ap_clk.val();
        self.idle_cp.clock.next = self.vitis.ap_clk.val();
        self.wr_out.clock.next = self.vitis.ap_clk.val();
        AxiLiteSlave::link(&mut self.vitis.s_axi_control, &mut self.ctrl.s_axi_control);
        self.ctrl.clock.next = self.vitis.ap_clk.val();
        self.ctrl.rst_n.next = self.vitis.ap_rst_n.val();
        self.vitis.interrupt.next = self.ctrl.interrupt.val();
        self.idle.next = self.idle_cp.q.val().get_bit(0);
        self.idle_next.next = self.ctrl.idle_next.val();
        self.idle_cp.d.next = self.ctrl.idle_next.val();
        self.ctrl.core_done.next = self.done.val();
        self.start.next = self.ctrl.start.val();
        // Copies 1, 2 and 3 enable a third of the run words each.
        for i in 0..self._third {
            self.run_en[i].next = self.idle_cp.q.val().get_bit(1);
        }
        for i in self._third..self._two_thirds {
            self.run_en[i].next = self.idle_cp.q.val().get_bit(2);
        }
        for i in self._two_thirds..self._n_args {
            self.run_en[i].next = self.idle_cp.q.val().get_bit(3);
        }
        for i in 0..self._n_args {
            self.run_regs[i].clock.next = self.vitis.ap_clk.val();
            self.run_regs[i].d.next = self.run_regs[i].q.val();
            if self.run_en[i].val() {
                self.run_regs[i].d.next = self.ctrl.args[i].val();
            }
            self.args[i].next = self.ctrl.args[i].val();
            self.run[i].next = self.run_regs[i].q.val();
        }
        self.ctrl.status[0].next = self.cycles.q.val().get_bits::<32>(0);
        self.ctrl.status[1].next = self.cycles.q.val().get_bits::<32>(32);
        self.ctrl.status[2].next = self.c_hwinfo.val();
        self.ctrl.status[3].next = bit_cast::<32, 1>(self.err.q.val().into());
        if !self.idle_cp.q.val().get_bit(0) {
            self.cycles.d.next = self.cycles.q.val() + 1;
        }
        if self.vitis.m_axi_gmem.rvalid.val() & (self.vitis.m_axi_gmem.rresp.val() != 0) {
            self.err.d.next = true;
        }
        if self.vitis.m_axi_gmem.bvalid.val() & (self.vitis.m_axi_gmem.bresp.val() != 0) {
            self.err.d.next = true;
        }
        if self.ctrl.start.val() {
            self.cycles.d.next = 1.into();
            self.err.d.next = false;
        }
        if self.fail.val() {
            self.err.d.next = true;
        }

        // Reads: a request on AR and one waiting behind it.
        self.vitis.m_axi_gmem.arvalid.next = self.ar_valid.q.val();
        self.vitis.m_axi_gmem.araddr.next = self.ar_addr.q.val();
        self.vitis.m_axi_gmem.arlen.next = self.ar_len.q.val();
        self.vitis.m_axi_gmem.arsize.next = self.c_logp.val().get_bits::<3>(0);
        self.vitis.m_axi_gmem.arburst.next = 1.into();
        self.vitis.m_axi_gmem.rready.next = true;
        self.slot_free.next = !self.sk_valid.q.val().get_bit(0);
        // Bursts end at the row's end or at the 4 KiB page's (AXI bursts must
        // not cross one), so the next read address is `row_nx` or `pg_nx`.
        self.rem_m1.d.next = bit_cast::<8, 16>(self.rd_rem.q.val() - 1);
        self.pg_m1.d.next = bit_cast::<8, 16>(self.to_pg.q.val() - 1);
        self.span_row.next = self.row.q.val();
        self.span_done.next = !self.gen.q.val().get_bit(0)
            & !self.ld.q.val().get_bit(0)
            & !self.rs.q.val()
            & !self.sk_valid.q.val().get_bit(0)
            & !self.more.q.val();
        // `span_load` is applied a cycle late, from registers.
        self.ld.d.next = self.span_load.val() & self.vitis.ap_rst_n.val();
        self.rs.d.next = self.span_resume.val();
        self.ld_addr.d.next = self.span_addr.val();
        self.ld_beats.d.next = self.span_beats.val();
        self.ld_rows.d.next = self.span_rows.val();
        self.ld_pitch.d.next = self.span_pitch.val();
        self.ld_more.d.next = self.span_rows.val() != 0;
        self.ld_to_pg.d.next =
            (bits::<16>(4096) - bit_cast::<16, 12>(self.span_addr.val().get_bits::<12>(0))) >> self.c_logp.val();
        // The row the reader starts next, after this one: its successor, the
        // page after its start's and the beats to that page's end; and, when a
        // span is applied, its first row's successor and page.
        self.at_row_nx.next = self.row_nx.q.val() + bit_cast::<64, 32>(self.pitch.q.val());
        self.at_pg_nx.next = (self.row_nx.q.val() | self.c_page_lo.val()) + 1;
        self.at_to_pg.next =
            (bits::<16>(4096) - bit_cast::<16, 12>(self.row_nx.q.val().get_bits::<12>(0))) >> self.c_logp.val();
        self.ld_p.d.next = self.ld.q.val().get_bit(2) & self.vitis.ap_rst_n.val();
        self.ld_row_nx.d.next = self.ld_addr.q.val() + bit_cast::<64, 32>(self.ld_pitch.q.val());
        self.ld_pg_nx.d.next = (self.ld_addr.q.val() | self.c_page_lo.val()) + 1;
        self.row_last.d.next = self.rd_rem.q.val() <= self.to_pg.q.val();
        // Decide: a burst is due, the second AR register is free next cycle (no
        // burst of the unit's own is requested while a span goes) and the span reader's
        // registers are current (not the issuing cycle, nor the cycle a span is
        // applied in; when a span is resumed, its rows' flag comes from `ld_more`).
        self.dec.next = self.span_go.val()
            & !self.sk_valid.q.val().get_bit(0)
            & !self.gen.q.val().get_bit(0)
            & !self.ld.q.val().get_bit(0)
            & ((self.more.q.val() & !self.rs.q.val()) | (self.ld_more.q.val() & self.rs.q.val()));
        self.gen.d.next = self.dec.val() & self.vitis.ap_rst_n.val();
        // Issue what the last cycle decided.
        self.push.next = self.gen.q.val().get_bit(0) | self.ar_req.val();
        self.push_addr.next = self.ar_req_addr.val();
        self.push_len.next = self.ar_req_len.val();
        if self.gen.q.val().get_bit(0) {
            self.push_addr.next = self.rd_addr.q.val();
            self.push_len.next = self.pg_m1.q.val();
            if self.row_last.q.val().get_bit(0) {
                self.push_len.next = self.rem_m1.q.val();
            }
        }
        if self.gen.q.val().get_bit(1) {
            self.rd_addr.d.next = self.pg_nx.q.val();
            self.pg_nx.d.next = self.pg_nx.q.val() + self.c_page.val();
            self.to_pg.d.next = self.c_page_beats.val();
            self.rd_rem.d.next = self.rd_rem.q.val() - self.to_pg.q.val();
            if self.row_last.q.val().get_bit(1) {
                // The row's last burst: the next row follows.
                self.rd_addr.d.next = self.row_nx.q.val();
                self.pg_nx.d.next = self.at_pg_nx.val();
                self.to_pg.d.next = self.at_to_pg.val();
                self.rd_rem.d.next = self.row_beats.q.val();
            }
        }
        if self.gen.q.val().get_bit(2) & self.row_last.q.val().get_bit(2) {
            self.row.d.next = self.row.q.val() + 1;
            self.left.d.next = self.left.q.val() - 1;
            self.more.d.next = self.left.q.val() != 1;
            self.row_nx.d.next = self.at_row_nx.val();
        }
        // The AR register takes the waiting request, else this cycle's; a request
        // that finds it busy waits. The empty second register loads every cycle, so
        // only `sk_valid` depends on the handshake.
        self.head_free.next = !self.ar_valid.q.val() | self.vitis.m_axi_gmem.arready.val();
        if self.head_free.val() {
            self.ar_valid.d.next = self.sk_valid.q.val().get_bit(0) | self.push.val();
            self.ar_addr.d.next = self.push_addr.val();
            self.ar_len.d.next = self.push_len.val();
            if self.sk_valid.q.val().get_bit(2) {
                self.ar_addr.d.next = self.sk_addr.q.val();
                self.ar_len.d.next = self.sk_len.q.val();
            }
        }
        self.sk_valid.d.next =
            self.vitis.ap_rst_n.val() & !self.head_free.val() & (self.sk_valid.q.val().get_bit(0) | self.push.val());
        if !self.sk_valid.q.val().get_bit(1) {
            self.sk_addr.d.next = self.push_addr.val();
            self.sk_len.d.next = self.push_len.val();
        }
        if self.ld.q.val().get_bit(1) {
            self.rd_addr.d.next = self.ld_addr.q.val();
            self.rd_rem.d.next = self.ld_beats.q.val();
            self.row_beats.d.next = self.ld_beats.q.val();
            self.pitch.d.next = self.ld_pitch.q.val();
            self.to_pg.d.next = self.ld_to_pg.q.val();
        }
        if self.ld_p.q.val() {
            self.row_nx.d.next = self.ld_row_nx.q.val();
            self.pg_nx.d.next = self.ld_pg_nx.q.val();
        }
        if self.ld.q.val().get_bit(2) | self.rs.q.val() {
            self.row.d.next = 0.into();
            self.left.d.next = self.ld_rows.q.val();
            self.more.d.next = self.ld_more.q.val();
        }

        // Writes: address and data handshakes complete in either order.
        self.vitis.m_axi_gmem.awvalid.next = self.wr_send.val() & !self.aw_done.q.val();
        self.vitis.m_axi_gmem.awaddr.next = self.wr_addr.val();
        self.vitis.m_axi_gmem.awlen.next = self.wr_len.val();
        self.vitis.m_axi_gmem.awsize.next = self.c_logp.val().get_bits::<3>(0);
        self.vitis.m_axi_gmem.awburst.next = 1.into();
        self.vitis.m_axi_gmem.wvalid.next = self.wr_send.val() & !self.w_done.q.val();
        self.vitis.m_axi_gmem.wdata.next = self.wr_data.val();
        self.vitis.m_axi_gmem.wstrb.next = self.wr_strb.val();
        self.vitis.m_axi_gmem.wlast.next = self.wr_last.val();
        self.vitis.m_axi_gmem.bready.next = true;
        self.wr_beat.next = self.wr_send.val() & !self.w_done.q.val() & self.vitis.m_axi_gmem.wready.val();
        if self.wr_send.val() & self.vitis.m_axi_gmem.awready.val() {
            self.aw_done.d.next = true;
        }
        if self.wr_beat.val() & self.wr_last.val() {
            self.w_done.d.next = true;
        }
        self.wr_fire.next = self.wr_send.val()
            & (self.aw_done.q.val() | self.vitis.m_axi_gmem.awready.val())
            & (self.w_done.q.val() | (self.vitis.m_axi_gmem.wready.val() & self.wr_last.val()));
        if self.wr_fire.val() {
            self.aw_done.d.next = false;
            self.w_done.d.next = false;
        }
        self.wr_out.clear.next = !self.vitis.ap_rst_n.val();
        self.wr_out.push.next = self.wr_fire.val();
        self.wr_out.pop.next = self.vitis.m_axi_gmem.bvalid.val();
        self.writes_done.next = !self.wr_out.any.val();

        if !self.vitis.ap_rst_n.val() {
            self.ar_valid.d.next = false;
            self.more.d.next = false;
            self.rs.d.next = false;
            self.aw_done.d.next = false;
            self.w_done.d.next = false;
        }
    }
}
