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
use super::GemmConfig;
use crate::blocks::{Fifo, MulU32, SyncRam};
use crate::control::Control;
use crate::regmap::CTRL_ADDR_BITS;
use crate::vitis::PinLevel;
use crate::HwError;
use rust_hdl::prelude::*;

/// Argument words at 0x10.. (A, B, BIAS, C as lo/hi pairs; M N K LDA LDB LDC FLAGS QMULT QSHIFT).
const N_ARGS: usize = 17;
/// Status words after the arguments: CYCLES lo/hi, HWINFO, STATUS.
const N_STATUS: usize = 4;

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
    Bias,
    Mul,
    Round,
    Pack,
    Send,
}

/// The GEMM unit's top level. Port names are the Vitis RTL-kernel names
/// (see [`crate::vitis::ports`]); `W` is the memory data width, `S = W / 8`.
#[derive(LogicBlock)]
pub struct GemmUnit<const W: usize, const S: usize> {
    pub ap_clk: Signal<In, Clock>,
    pub ap_rst_n: Signal<In, Bit>,
    pub interrupt: Signal<Out, Bit>,
    pub s_axi_control_awvalid: Signal<In, Bit>,
    pub s_axi_control_awready: Signal<Out, Bit>,
    pub s_axi_control_awaddr: Signal<In, Bits<CTRL_ADDR_BITS>>,
    pub s_axi_control_wvalid: Signal<In, Bit>,
    pub s_axi_control_wready: Signal<Out, Bit>,
    pub s_axi_control_wdata: Signal<In, Bits<32>>,
    pub s_axi_control_wstrb: Signal<In, Bits<4>>,
    pub s_axi_control_bvalid: Signal<Out, Bit>,
    pub s_axi_control_bready: Signal<In, Bit>,
    pub s_axi_control_bresp: Signal<Out, Bits<2>>,
    pub s_axi_control_arvalid: Signal<In, Bit>,
    pub s_axi_control_arready: Signal<Out, Bit>,
    pub s_axi_control_araddr: Signal<In, Bits<CTRL_ADDR_BITS>>,
    pub s_axi_control_rvalid: Signal<Out, Bit>,
    pub s_axi_control_rready: Signal<In, Bit>,
    pub s_axi_control_rdata: Signal<Out, Bits<32>>,
    pub s_axi_control_rresp: Signal<Out, Bits<2>>,
    pub m_axi_gmem_awvalid: Signal<Out, Bit>,
    pub m_axi_gmem_awready: Signal<In, Bit>,
    pub m_axi_gmem_awaddr: Signal<Out, Bits<64>>,
    pub m_axi_gmem_awlen: Signal<Out, Bits<8>>,
    pub m_axi_gmem_awsize: Signal<Out, Bits<3>>,
    pub m_axi_gmem_awburst: Signal<Out, Bits<2>>,
    pub m_axi_gmem_wvalid: Signal<Out, Bit>,
    pub m_axi_gmem_wready: Signal<In, Bit>,
    pub m_axi_gmem_wdata: Signal<Out, Bits<W>>,
    pub m_axi_gmem_wstrb: Signal<Out, Bits<S>>,
    pub m_axi_gmem_wlast: Signal<Out, Bit>,
    pub m_axi_gmem_bvalid: Signal<In, Bit>,
    pub m_axi_gmem_bready: Signal<Out, Bit>,
    pub m_axi_gmem_bresp: Signal<In, Bits<2>>,
    pub m_axi_gmem_arvalid: Signal<Out, Bit>,
    pub m_axi_gmem_arready: Signal<In, Bit>,
    pub m_axi_gmem_araddr: Signal<Out, Bits<64>>,
    pub m_axi_gmem_arlen: Signal<Out, Bits<8>>,
    pub m_axi_gmem_arsize: Signal<Out, Bits<3>>,
    pub m_axi_gmem_arburst: Signal<Out, Bits<2>>,
    pub m_axi_gmem_rvalid: Signal<In, Bit>,
    pub m_axi_gmem_rready: Signal<Out, Bit>,
    pub m_axi_gmem_rdata: Signal<In, Bits<W>>,
    pub m_axi_gmem_rlast: Signal<In, Bit>,
    pub m_axi_gmem_rresp: Signal<In, Bits<2>>,

    ctrl: Control,
    feeds: Vec<RowFeed<W>>,
    cols: Vec<ColFeed<W>>,
    rows: Vec<PeRow<W>>,
    lanes: Vec<EpilogueLane<W>>,
    bias_ram: SyncRam<W>,
    bfifo: Fifo<W>,
    ofifo: Fifo<W>,
    ometa: Fifo<64>,
    tiles: Fifo<64>,
    row_mul: MulU32,

    // Run arguments, latched at ap_start.
    a_base: DFF<Bits<64>>,
    b_base: DFF<Bits<64>>,
    bias_base: DFF<Bits<64>>,
    c_base: DFF<Bits<64>>,
    m: DFF<Bits<32>>,
    n: DFF<Bits<32>>,
    k: DFF<Bits<32>>,
    lda: DFF<Bits<32>>,
    ldb: DFF<Bits<32>>,
    ldc: DFF<Bits<32>>,
    use_bias: DFF<Bit>,
    relu: DFF<Bit>,
    requant: DFF<Bit>,
    qmult: DFF<Bits<32>>,
    qshift: DFF<Bits<6>>,
    beats_per_row: DFF<Bits<16>>,

    phase: DFF<Phase>,
    status_err: DFF<Bit>,
    cycles: DFF<Bits<64>>,
    done_pulse: Signal<Local, Bit>,
    // Read-address generator.
    i0: DFF<Bits<32>>,
    rows_valid: DFF<Bits<32>>,
    row_addr: DFF<Bits<64>>,
    rd_addr: DFF<Bits<64>>,
    rd_rem: DFF<Bits<16>>,
    rd_row: DFF<Bits<32>>,
    ar_valid: DFF<Bit>,
    ar_addr: DFF<Bits<64>>,
    ar_len: DFF<Bits<8>>,
    burst: Signal<Local, Bits<16>>,
    to_page: Signal<Local, Bits<16>>,
    slot_free: Signal<Local, Bit>,
    bj0: DFF<Bits<32>>,
    bk: DFF<Bits<32>>,
    baddr: DFF<Bits<64>>,
    b_inflight: DFF<Bits<16>>,
    b_issue: Signal<Local, Bit>,
    b_recv: Signal<Local, Bit>,
    // Read-data receiver.
    recv_cnt: DFF<Bits<16>>,
    recv_row: DFF<Bits<32>>,
    // Feeder.
    fk: DFF<Bits<32>>,
    fj0: DFF<Bits<32>>,
    feed_done: DFF<Bit>,
    since_last: DFF<Bits<16>>,
    promised: DFF<Bits<16>>,
    f_is_last: Signal<Local, Bit>,
    f_go: Signal<Local, Bit>,
    f_cols: Signal<Local, Bits<32>>,
    s1_valid: DFF<Bit>,
    s1_last: DFF<Bit>,
    s1_sel: DFF<Bits<8>>,
    s1_b: DFF<Bits<W>>,
    // Capture.
    bchain: Vec<Signal<Local, Bits<W>>>,
    rchain: Vec<Signal<Local, Bits<W>>>,
    ichain: Vec<Signal<Local, Bits<32>>>,
    cchain: Vec<Signal<Local, Bit>>,
    any_cap: Signal<Local, Bit>,
    cap_row: Signal<Local, Bits<32>>,
    // Writer.
    wstate: DFF<WriterState>,
    w_data: DFF<Bits<W>>,
    w_i: DFF<Bits<32>>,
    w_j0: DFF<Bits<32>>,
    w_addr: DFF<Bits<64>>,
    w_cols: DFF<Bits<16>>,
    w_beat: DFF<Bits<W>>,
    w_strb: DFF<Bits<S>>,
    aw_done: DFF<Bit>,
    w_done: DFF<Bit>,
    wr_issued: DFF<Bits<32>>,
    wr_acked: DFF<Bits<32>>,
    bias_row: Signal<Local, Bits<W>>,
    p32: Vec<Signal<Local, Bits<W>>>,
    p8: Vec<Signal<Local, Bits<W>>>,
    w_col_cnt: Signal<Local, Bits<32>>,

    // Generation-time parameters.
    c_logp: Constant<Bits<16>>,
    c_pmask: Constant<Bits<64>>,
    c_rows: Constant<Bits<32>>,
    c_cols: Constant<Bits<32>>,
    c_gap: Constant<Bits<16>>,
    c_rfifo: Constant<Bits<16>>,
    c_ofifo: Constant<Bits<16>>,
    c_kmax: Constant<Bits<32>>,
    c_nmax: Constant<Bits<32>>,
    c_hwinfo: Constant<Bits<32>>,
    c_lanes: Constant<Bits<16>>,
    c_ones: Constant<Bits<S>>,
    _rows: usize,
    _cols: usize,
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
        Ok(Self {
            ap_clk: Default::default(),
            ap_rst_n: Default::default(),
            interrupt: Default::default(),
            s_axi_control_awvalid: Default::default(),
            s_axi_control_awready: Default::default(),
            s_axi_control_awaddr: Default::default(),
            s_axi_control_wvalid: Default::default(),
            s_axi_control_wready: Default::default(),
            s_axi_control_wdata: Default::default(),
            s_axi_control_wstrb: Default::default(),
            s_axi_control_bvalid: Default::default(),
            s_axi_control_bready: Default::default(),
            s_axi_control_bresp: Default::default(),
            s_axi_control_arvalid: Default::default(),
            s_axi_control_arready: Default::default(),
            s_axi_control_araddr: Default::default(),
            s_axi_control_rvalid: Default::default(),
            s_axi_control_rready: Default::default(),
            s_axi_control_rdata: Default::default(),
            s_axi_control_rresp: Default::default(),
            m_axi_gmem_awvalid: Default::default(),
            m_axi_gmem_awready: Default::default(),
            m_axi_gmem_awaddr: Default::default(),
            m_axi_gmem_awlen: Default::default(),
            m_axi_gmem_awsize: Default::default(),
            m_axi_gmem_awburst: Default::default(),
            m_axi_gmem_wvalid: Default::default(),
            m_axi_gmem_wready: Default::default(),
            m_axi_gmem_wdata: Default::default(),
            m_axi_gmem_wstrb: Default::default(),
            m_axi_gmem_wlast: Default::default(),
            m_axi_gmem_bvalid: Default::default(),
            m_axi_gmem_bready: Default::default(),
            m_axi_gmem_bresp: Default::default(),
            m_axi_gmem_arvalid: Default::default(),
            m_axi_gmem_arready: Default::default(),
            m_axi_gmem_araddr: Default::default(),
            m_axi_gmem_arlen: Default::default(),
            m_axi_gmem_arsize: Default::default(),
            m_axi_gmem_arburst: Default::default(),
            m_axi_gmem_rvalid: Default::default(),
            m_axi_gmem_rready: Default::default(),
            m_axi_gmem_rdata: Default::default(),
            m_axi_gmem_rlast: Default::default(),
            m_axi_gmem_rresp: Default::default(),
            ctrl: Control::new(N_ARGS, N_STATUS),
            feeds: (0..r).map(|row| RowFeed::new(row, cfg.k_max / p)).collect(),
            cols: (0..c).map(ColFeed::new).collect(),
            rows: (0..r).map(|row| PeRow::new(row, c)).collect(),
            lanes: (0..c).map(EpilogueLane::new).collect(),
            bias_ram: SyncRam::new(cfg.n_max * 4 / p),
            bfifo: Fifo::new(cfg.read_fifo_depth),
            ofifo: Fifo::new(ofifo),
            ometa: Fifo::new(ofifo),
            tiles: Fifo::new(4),
            row_mul: Default::default(),
            a_base: Default::default(),
            b_base: Default::default(),
            bias_base: Default::default(),
            c_base: Default::default(),
            m: Default::default(),
            n: Default::default(),
            k: Default::default(),
            lda: Default::default(),
            ldb: Default::default(),
            ldc: Default::default(),
            use_bias: Default::default(),
            relu: Default::default(),
            requant: Default::default(),
            qmult: Default::default(),
            qshift: Default::default(),
            beats_per_row: Default::default(),
            phase: Default::default(),
            status_err: Default::default(),
            cycles: Default::default(),
            done_pulse: Default::default(),
            i0: Default::default(),
            rows_valid: Default::default(),
            row_addr: Default::default(),
            rd_addr: Default::default(),
            rd_rem: Default::default(),
            rd_row: Default::default(),
            ar_valid: Default::default(),
            ar_addr: Default::default(),
            ar_len: Default::default(),
            burst: Default::default(),
            to_page: Default::default(),
            slot_free: Default::default(),
            bj0: Default::default(),
            bk: Default::default(),
            baddr: Default::default(),
            b_inflight: Default::default(),
            b_issue: Default::default(),
            b_recv: Default::default(),
            recv_cnt: Default::default(),
            recv_row: Default::default(),
            fk: Default::default(),
            fj0: Default::default(),
            feed_done: Default::default(),
            since_last: Default::default(),
            promised: Default::default(),
            f_is_last: Default::default(),
            f_go: Default::default(),
            f_cols: Default::default(),
            s1_valid: Default::default(),
            s1_last: Default::default(),
            s1_sel: Default::default(),
            s1_b: Default::default(),
            bchain: (0..c).map(|_| Default::default()).collect(),
            rchain: (0..r).map(|_| Default::default()).collect(),
            ichain: (0..r).map(|_| Default::default()).collect(),
            cchain: (0..r).map(|_| Default::default()).collect(),
            any_cap: Default::default(),
            cap_row: Default::default(),
            wstate: Default::default(),
            w_data: Default::default(),
            w_i: Default::default(),
            w_j0: Default::default(),
            w_addr: Default::default(),
            w_cols: Default::default(),
            w_beat: Default::default(),
            w_strb: Default::default(),
            aw_done: Default::default(),
            w_done: Default::default(),
            wr_issued: Default::default(),
            wr_acked: Default::default(),
            bias_row: Default::default(),
            p32: (0..c).map(|_| Default::default()).collect(),
            p8: (0..c).map(|_| Default::default()).collect(),
            w_col_cnt: Default::default(),
            c_logp: Constant::new(k(p.trailing_zeros() as u64)),
            c_pmask: Constant::new(k(p as u64 - 1)),
            c_rows: Constant::new(k(r as u64)),
            c_cols: Constant::new(k(c as u64)),
            // Consecutive tiles' `last` steps must be this many cycles apart so a
            // row's results are captured before the next tile overwrites them.
            c_gap: Constant::new(k((r.max(c) + 1) as u64)),
            c_rfifo: Constant::new(k(cfg.read_fifo_depth as u64)),
            c_ofifo: Constant::new(k(ofifo as u64)),
            c_kmax: Constant::new(k(cfg.k_max as u64)),
            c_nmax: Constant::new(k(cfg.n_max as u64)),
            c_hwinfo: Constant::new(k(cfg.hwinfo() as u64)),
            c_lanes: Constant::new(k(S as u64)),
            c_ones: Constant::new(Bits::<S>::mask()),
            _rows: r,
            _cols: c,
        })
    }
}

crate::impl_vitis_top!(GemmUnit);

impl<const W: usize, const S: usize> Logic for GemmUnit<W, S> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self,
            ap_clk,
            a_base,
            b_base,
            bias_base,
            c_base,
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            use_bias,
            relu,
            requant,
            qmult,
            qshift,
            beats_per_row,
            phase,
            status_err,
            cycles,
            i0,
            rows_valid,
            row_addr,
            rd_addr,
            rd_rem,
            rd_row,
            ar_valid,
            ar_addr,
            ar_len,
            bj0,
            bk,
            baddr,
            b_inflight,
            recv_cnt,
            recv_row,
            fk,
            fj0,
            feed_done,
            since_last,
            promised,
            s1_valid,
            s1_last,
            s1_sel,
            s1_b,
            wstate,
            w_data,
            w_i,
            w_j0,
            w_addr,
            w_cols,
            w_beat,
            w_strb,
            aw_done,
            w_done,
            wr_issued,
            wr_acked
        );
        // ---------------- Control slave ----------------
        self.done_pulse.next = self.phase.q.val() == Phase::Done;
        self.ctrl.clock.next = self.ap_clk.val();
        self.ctrl.rst_n.next = self.ap_rst_n.val();
        self.ctrl.awvalid.next = self.s_axi_control_awvalid.val();
        self.s_axi_control_awready.next = self.ctrl.awready.val();
        self.ctrl.awaddr.next = self.s_axi_control_awaddr.val();
        self.ctrl.wvalid.next = self.s_axi_control_wvalid.val();
        self.s_axi_control_wready.next = self.ctrl.wready.val();
        self.ctrl.wdata.next = self.s_axi_control_wdata.val();
        self.ctrl.wstrb.next = self.s_axi_control_wstrb.val();
        self.s_axi_control_bvalid.next = self.ctrl.bvalid.val();
        self.ctrl.bready.next = self.s_axi_control_bready.val();
        self.s_axi_control_bresp.next = self.ctrl.bresp.val();
        self.ctrl.arvalid.next = self.s_axi_control_arvalid.val();
        self.s_axi_control_arready.next = self.ctrl.arready.val();
        self.ctrl.araddr.next = self.s_axi_control_araddr.val();
        self.s_axi_control_rvalid.next = self.ctrl.rvalid.val();
        self.ctrl.rready.next = self.s_axi_control_rready.val();
        self.s_axi_control_rdata.next = self.ctrl.rdata.val();
        self.s_axi_control_rresp.next = self.ctrl.rresp.val();
        self.interrupt.next = self.ctrl.interrupt.val();
        self.ctrl.core_idle.next = self.phase.q.val() == Phase::Idle;
        self.ctrl.core_done.next = self.done_pulse.val();
        self.ctrl.status[0].next = self.cycles.q.val().get_bits::<32>(0);
        self.ctrl.status[1].next = self.cycles.q.val().get_bits::<32>(32);
        self.ctrl.status[2].next = self.c_hwinfo.val();
        self.ctrl.status[3].next = bit_cast::<32, 1>(self.status_err.q.val().into());

        // ---------------- Defaults ----------------
        self.m_axi_gmem_arvalid.next = self.ar_valid.q.val();
        self.m_axi_gmem_araddr.next = self.ar_addr.q.val();
        self.m_axi_gmem_arlen.next = self.ar_len.q.val();
        self.m_axi_gmem_arsize.next = self.c_logp.val().get_bits::<3>(0);
        self.m_axi_gmem_arburst.next = 1.into();
        self.m_axi_gmem_rready.next = true;
        self.m_axi_gmem_bready.next = true;
        self.slot_free.next = !self.ar_valid.q.val() | self.m_axi_gmem_arready.val();
        if self.slot_free.val() {
            self.ar_valid.d.next = false;
        }
        // Beats to the next 4 KiB page: AXI bursts must not cross one.
        self.to_page.next =
            (bits::<16>(4096) - bit_cast::<16, 12>(self.rd_addr.q.val().get_bits::<12>(0))) >> self.c_logp.val();
        self.burst.next = self.rd_rem.q.val();
        if self.to_page.val() < self.rd_rem.q.val() {
            self.burst.next = self.to_page.val();
        }
        if self.phase.q.val() != Phase::Idle {
            self.cycles.d.next = self.cycles.q.val() + 1;
        }
        if self.m_axi_gmem_rvalid.val() & (self.m_axi_gmem_rresp.val() != 0) {
            self.status_err.d.next = true;
        }
        if self.m_axi_gmem_bvalid.val() {
            self.wr_acked.d.next = self.wr_acked.q.val() + 1;
            if self.m_axi_gmem_bresp.val() != 0 {
                self.status_err.d.next = true;
            }
        }

        // ---------------- Phase machine and read-address generator ----------------
        self.b_issue.next = false;
        match self.phase.q.val() {
            Phase::Idle => {
                if self.ctrl.start.val() {
                    self.a_base.d.next = bit_cast::<64, 32>(self.ctrl.args[0].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[1].val()) << 32);
                    self.b_base.d.next = bit_cast::<64, 32>(self.ctrl.args[2].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[3].val()) << 32);
                    self.bias_base.d.next = bit_cast::<64, 32>(self.ctrl.args[4].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[5].val()) << 32);
                    self.c_base.d.next = bit_cast::<64, 32>(self.ctrl.args[6].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[7].val()) << 32);
                    self.m.d.next = self.ctrl.args[8].val();
                    self.n.d.next = self.ctrl.args[9].val();
                    self.k.d.next = self.ctrl.args[10].val();
                    self.lda.d.next = self.ctrl.args[11].val();
                    self.ldb.d.next = self.ctrl.args[12].val();
                    self.ldc.d.next = self.ctrl.args[13].val();
                    self.use_bias.d.next = self.ctrl.args[14].val().get_bit(0);
                    self.relu.d.next = self.ctrl.args[14].val().get_bit(1);
                    self.requant.d.next = self.ctrl.args[14].val().get_bit(2);
                    self.qmult.d.next = self.ctrl.args[15].val();
                    self.qshift.d.next = self.ctrl.args[16].val().get_bits::<6>(0);
                    self.beats_per_row.d.next = bit_cast::<16, 32>(
                        (self.ctrl.args[10].val() + bit_cast::<32, 64>(self.c_pmask.val())) >> self.c_logp.val(),
                    );
                    self.cycles.d.next = 1.into();
                    self.status_err.d.next = false;
                    self.i0.d.next = 0.into();
                    self.rows_valid.d.next = self.c_rows.val();
                    if self.ctrl.args[8].val() < self.c_rows.val() {
                        self.rows_valid.d.next = self.ctrl.args[8].val();
                    }
                    self.rd_row.d.next = 0.into();
                    self.recv_cnt.d.next = 0.into();
                    self.recv_row.d.next = 0.into();
                    self.since_last.d.next = self.c_gap.val();
                    self.promised.d.next = 0.into();
                    self.wr_issued.d.next = 0.into();
                    self.wr_acked.d.next = 0.into();
                    self.b_inflight.d.next = 0.into();
                    self.fk.d.next = 0.into();
                    self.fj0.d.next = 0.into();
                    self.feed_done.d.next = false;
                    self.row_addr.d.next = bit_cast::<64, 32>(self.ctrl.args[0].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[1].val()) << 32);
                    self.rd_addr.d.next = bit_cast::<64, 32>(self.ctrl.args[0].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[1].val()) << 32);
                    self.rd_rem.d.next = bit_cast::<16, 32>(
                        (self.ctrl.args[10].val() + bit_cast::<32, 64>(self.c_pmask.val())) >> self.c_logp.val(),
                    );
                    self.phase.d.next = Phase::AReq;
                    if self.ctrl.args[14].val().get_bit(0) {
                        // Bias first: ceil(4N / beat) beats into the bias RAM.
                        self.rd_addr.d.next = bit_cast::<64, 32>(self.ctrl.args[4].val())
                            | (bit_cast::<64, 32>(self.ctrl.args[5].val()) << 32);
                        self.rd_rem.d.next = bit_cast::<16, 32>(
                            ((self.ctrl.args[9].val() << 2) + bit_cast::<32, 64>(self.c_pmask.val()))
                                >> self.c_logp.val(),
                        );
                        self.phase.d.next = Phase::BiasReq;
                    }
                    // Refuse what the buffers cannot hold; the host checks first,
                    // this keeps a bad register write from corrupting anything.
                    if (self.ctrl.args[8].val() == 0)
                        | (self.ctrl.args[9].val() == 0)
                        | (self.ctrl.args[10].val() == 0)
                        | (self.ctrl.args[10].val() > self.c_kmax.val())
                        | (self.ctrl.args[14].val().get_bit(0) & (self.ctrl.args[9].val() > self.c_nmax.val()))
                    {
                        self.status_err.d.next = true;
                        self.phase.d.next = Phase::Done;
                    }
                }
            }
            Phase::BiasReq => {
                if self.slot_free.val() {
                    if self.rd_rem.q.val() != 0 {
                        self.ar_valid.d.next = true;
                        self.ar_addr.d.next = self.rd_addr.q.val();
                        self.ar_len.d.next = bit_cast::<8, 16>(self.burst.val() - 1);
                        self.rd_addr.d.next =
                            self.rd_addr.q.val() + (bit_cast::<64, 16>(self.burst.val()) << self.c_logp.val());
                        self.rd_rem.d.next = self.rd_rem.q.val() - self.burst.val();
                    } else {
                        self.phase.d.next = Phase::BiasWait;
                    }
                }
            }
            Phase::BiasWait => {
                if bit_cast::<32, 16>(self.recv_cnt.q.val())
                    == ((self.n.q.val() << 2) + bit_cast::<32, 64>(self.c_pmask.val())) >> self.c_logp.val()
                {
                    self.recv_cnt.d.next = 0.into();
                    self.rd_addr.d.next = self.row_addr.q.val();
                    self.rd_rem.d.next = self.beats_per_row.q.val();
                    self.phase.d.next = Phase::AReq;
                }
            }
            Phase::AReq => {
                if self.slot_free.val() {
                    if self.rd_row.q.val() < self.rows_valid.q.val() {
                        self.ar_valid.d.next = true;
                        self.ar_addr.d.next = self.rd_addr.q.val();
                        self.ar_len.d.next = bit_cast::<8, 16>(self.burst.val() - 1);
                        if self.burst.val() == self.rd_rem.q.val() {
                            self.rd_row.d.next = self.rd_row.q.val() + 1;
                            self.row_addr.d.next = self.row_addr.q.val() + bit_cast::<64, 32>(self.lda.q.val());
                            self.rd_addr.d.next = self.row_addr.q.val() + bit_cast::<64, 32>(self.lda.q.val());
                            self.rd_rem.d.next = self.beats_per_row.q.val();
                        } else {
                            self.rd_addr.d.next =
                                self.rd_addr.q.val() + (bit_cast::<64, 16>(self.burst.val()) << self.c_logp.val());
                            self.rd_rem.d.next = self.rd_rem.q.val() - self.burst.val();
                        }
                    } else {
                        self.phase.d.next = Phase::AWait;
                    }
                }
            }
            Phase::AWait => {
                if self.recv_row.q.val() == self.rows_valid.q.val() {
                    self.bj0.d.next = 0.into();
                    self.bk.d.next = 0.into();
                    self.baddr.d.next = self.b_base.q.val();
                    self.phase.d.next = Phase::BStream;
                }
            }
            Phase::BStream => {
                if self.slot_free.val() {
                    if self.bj0.q.val() >= self.n.q.val() {
                        self.phase.d.next = Phase::BDrain;
                    } else if (self.b_inflight.q.val() + self.bfifo.count.val()) < self.c_rfifo.val() {
                        // One single-beat read per k: B[k][j0 .. j0+cols] sits in one beat.
                        self.b_issue.next = true;
                        self.ar_valid.d.next = true;
                        self.ar_addr.d.next = self.baddr.q.val();
                        self.ar_len.d.next = 0.into();
                        if self.bk.q.val() == self.k.q.val() - 1 {
                            self.bk.d.next = 0.into();
                            self.bj0.d.next = self.bj0.q.val() + self.c_cols.val();
                            self.baddr.d.next = self.b_base.q.val()
                                + (bit_cast::<64, 32>(self.bj0.q.val() + self.c_cols.val()) & !self.c_pmask.val());
                        } else {
                            self.bk.d.next = self.bk.q.val() + 1;
                            self.baddr.d.next = self.baddr.q.val() + bit_cast::<64, 32>(self.ldb.q.val());
                        }
                    }
                }
            }
            Phase::BDrain => {
                if self.feed_done.q.val() {
                    self.i0.d.next = self.i0.q.val() + self.c_rows.val();
                    self.rd_row.d.next = 0.into();
                    self.recv_cnt.d.next = 0.into();
                    self.recv_row.d.next = 0.into();
                    self.rd_addr.d.next = self.row_addr.q.val();
                    self.rd_rem.d.next = self.beats_per_row.q.val();
                    self.fk.d.next = 0.into();
                    self.fj0.d.next = 0.into();
                    self.feed_done.d.next = false;
                    self.rows_valid.d.next = self.c_rows.val();
                    if (self.m.q.val() - self.i0.q.val() - self.c_rows.val()) < self.c_rows.val() {
                        self.rows_valid.d.next = self.m.q.val() - self.i0.q.val() - self.c_rows.val();
                    }
                    self.phase.d.next = Phase::AReq;
                    if (self.i0.q.val() + self.c_rows.val()) >= self.m.q.val() {
                        self.phase.d.next = Phase::Finish;
                    }
                }
            }
            Phase::Finish => {
                if self.tiles.empty.val()
                    & (self.promised.q.val() == 0)
                    & self.ofifo.empty.val()
                    & (self.wstate.q.val() == WriterState::Idle)
                    & (self.wr_issued.q.val() == self.wr_acked.q.val())
                {
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

        // ---------------- Read-data receiver ----------------
        self.b_recv.next = self.m_axi_gmem_rvalid.val()
            & ((self.phase.q.val() == Phase::BStream) | (self.phase.q.val() == Phase::BDrain));
        self.bias_ram.clock.next = self.ap_clk.val();
        self.bias_ram.we.next = self.m_axi_gmem_rvalid.val()
            & ((self.phase.q.val() == Phase::BiasReq) | (self.phase.q.val() == Phase::BiasWait));
        self.bias_ram.waddr.next = self.recv_cnt.q.val();
        self.bias_ram.wdata.next = self.m_axi_gmem_rdata.val();
        if self.bias_ram.we.val() {
            self.recv_cnt.d.next = self.recv_cnt.q.val() + 1;
        }
        if self.m_axi_gmem_rvalid.val() & ((self.phase.q.val() == Phase::AReq) | (self.phase.q.val() == Phase::AWait)) {
            if self.recv_cnt.q.val() == self.beats_per_row.q.val() - 1 {
                self.recv_cnt.d.next = 0.into();
                self.recv_row.d.next = self.recv_row.q.val() + 1;
            } else {
                self.recv_cnt.d.next = self.recv_cnt.q.val() + 1;
            }
        }
        self.bfifo.clock.next = self.ap_clk.val();
        self.bfifo.reset.next = !self.ap_rst_n.val();
        self.bfifo.push.next = self.b_recv.val();
        self.bfifo.din.next = self.m_axi_gmem_rdata.val();
        if self.b_issue.val() & !self.b_recv.val() {
            self.b_inflight.d.next = self.b_inflight.q.val() + 1;
        }
        if !self.b_issue.val() & self.b_recv.val() {
            self.b_inflight.d.next = self.b_inflight.q.val() - 1;
        }

        // ---------------- Feeder: one k-step per cycle into the array ----------------
        self.f_is_last.next = self.fk.q.val() == self.k.q.val() - 1;
        self.f_go.next = ((self.phase.q.val() == Phase::BStream) | (self.phase.q.val() == Phase::BDrain))
            & !self.feed_done.q.val()
            & !self.bfifo.empty.val()
            & (!self.f_is_last.val()
                | ((self.since_last.q.val() >= self.c_gap.val())
                    & ((self.ofifo.count.val() + self.promised.q.val() + bit_cast::<16, 32>(self.c_rows.val()))
                        <= self.c_ofifo.val())));
        self.bfifo.pop.next = self.f_go.val();
        // Columns of this tile inside N: the rest of the chunk is zeroed.
        self.f_cols.next = self.c_cols.val();
        if (self.n.q.val() - self.fj0.q.val()) < self.c_cols.val() {
            self.f_cols.next = self.n.q.val() - self.fj0.q.val();
        }
        self.s1_valid.d.next = self.f_go.val();
        self.s1_last.d.next = self.f_go.val() & self.f_is_last.val();
        self.s1_sel.d.next = bit_cast::<8, 32>(self.fk.q.val() & bit_cast::<32, 64>(self.c_pmask.val()));
        self.s1_b.d.next = (self.bfifo.dout.val()
            >> (bit_cast::<16, 32>(self.fj0.q.val() & bit_cast::<32, 64>(self.c_pmask.val())) << 3))
            & ((bits::<W>(1) << (self.f_cols.val() << 3)) - 1);
        if self.since_last.q.val() < self.c_gap.val() {
            self.since_last.d.next = self.since_last.q.val() + 1;
        }
        self.tiles.clock.next = self.ap_clk.val();
        self.tiles.reset.next = !self.ap_rst_n.val();
        self.tiles.push.next = self.f_go.val() & self.f_is_last.val();
        self.tiles.din.next = bit_cast::<64, 32>(self.i0.q.val()) | (bit_cast::<64, 32>(self.fj0.q.val()) << 32);
        if self.f_go.val() {
            if self.f_is_last.val() {
                self.fk.d.next = 0.into();
                self.since_last.d.next = 0.into();
                if (self.fj0.q.val() + self.c_cols.val()) >= self.n.q.val() {
                    self.feed_done.d.next = true;
                } else {
                    self.fj0.d.next = self.fj0.q.val() + self.c_cols.val();
                }
            } else {
                self.fk.d.next = self.fk.q.val() + 1;
            }
        }
        for r in 0..self._rows {
            self.feeds[r].clock.next = self.ap_clk.val();
            self.feeds[r].we.next = self.m_axi_gmem_rvalid.val()
                & ((self.phase.q.val() == Phase::AReq) | (self.phase.q.val() == Phase::AWait))
                & (self.recv_row.q.val().index() == r);
            self.feeds[r].waddr.next = self.recv_cnt.q.val();
            self.feeds[r].wdata.next = self.m_axi_gmem_rdata.val();
            self.feeds[r].raddr.next = bit_cast::<16, 32>(self.fk.q.val() >> self.c_logp.val());
            self.feeds[r].sel.next = self.s1_sel.q.val();
            self.feeds[r].valid_in.next = self.s1_valid.q.val();
            self.feeds[r].last_in.next = self.s1_last.q.val();
            self.rows[r].clock.next = self.ap_clk.val();
            self.rows[r].clear.next = !self.ap_rst_n.val();
            self.rows[r].a_in.next = self.feeds[r].a_out.val();
            self.rows[r].valid_in.next = self.feeds[r].valid_out.val();
            self.rows[r].last_in.next = self.feeds[r].last_out.val();
        }
        for c in 0..self._cols {
            self.cols[c].clock.next = self.ap_clk.val();
            self.cols[c].din.next = self.s1_b.q.val().get_bits::<8>(c * 8);
        }
        self.bchain[0].next = self.cols[0].placed.val();
        for c in 1..self._cols {
            self.bchain[c].next = self.bchain[c - 1].val() | self.cols[c].placed.val();
        }
        for l in (self._cols - 1)..self._cols {
            self.rows[0].b_in.next = self.bchain[l].val();
        }
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
        self.cap_row.next = 0.into();
        self.ofifo.din.next = 0.into();
        self.tiles.pop.next = false;
        for l in (self._rows - 1)..self._rows {
            self.any_cap.next = self.cchain[l].val();
            self.cap_row.next = self.tiles.dout.val().get_bits::<32>(0) + self.ichain[l].val();
            self.ofifo.din.next = self.rchain[l].val();
            self.tiles.pop.next = self.rows[l].cap.val();
        }
        self.ofifo.clock.next = self.ap_clk.val();
        self.ofifo.reset.next = !self.ap_rst_n.val();
        self.ometa.clock.next = self.ap_clk.val();
        self.ometa.reset.next = !self.ap_rst_n.val();
        self.ofifo.push.next = self.any_cap.val() & (self.cap_row.val() < self.m.q.val());
        self.ometa.push.next = self.any_cap.val() & (self.cap_row.val() < self.m.q.val());
        self.ometa.din.next = bit_cast::<64, 32>(self.cap_row.val())
            | (bit_cast::<64, 32>(self.tiles.dout.val().get_bits::<32>(32)) << 32);
        if self.f_go.val() & self.f_is_last.val() & !self.any_cap.val() {
            self.promised.d.next = self.promised.q.val() + bit_cast::<16, 32>(self.c_rows.val());
        }
        if !(self.f_go.val() & self.f_is_last.val()) & self.any_cap.val() {
            self.promised.d.next = self.promised.q.val() - 1;
        }
        if self.f_go.val() & self.f_is_last.val() & self.any_cap.val() {
            self.promised.d.next = self.promised.q.val() + bit_cast::<16, 32>(self.c_rows.val()) - 1;
        }

        // ---------------- Writer: epilogue and one beat per output row ----------------
        self.row_mul.a.next = self.w_i.q.val();
        self.row_mul.b.next = self.ldc.q.val();
        self.ofifo.pop.next = false;
        self.ometa.pop.next = false;
        self.bias_ram.raddr.next =
            bit_cast::<16, 32>((self.ometa.dout.val().get_bits::<32>(32) << 2) >> self.c_logp.val());
        self.bias_row.next = self.bias_ram.rdata.val()
            >> (bit_cast::<16, 32>((self.w_j0.q.val() << 2) & bit_cast::<32, 64>(self.c_pmask.val())) << 3);
        self.w_col_cnt.next = self.c_cols.val();
        if (self.n.q.val() - self.w_j0.q.val()) < self.c_cols.val() {
            self.w_col_cnt.next = self.n.q.val() - self.w_j0.q.val();
        }
        for c in 0..self._cols {
            self.lanes[c].clock.next = self.ap_clk.val();
            self.lanes[c].acc.next = self.w_data.q.val().get_bits::<32>(c * 32);
            self.lanes[c].bias.next = self.bias_row.val().get_bits::<32>(c * 32);
            self.lanes[c].use_bias.next = self.use_bias.q.val();
            self.lanes[c].relu.next = self.relu.q.val();
            self.lanes[c].mult.next = self.qmult.q.val();
            self.lanes[c].shift.next = self.qshift.q.val();
            self.lanes[c].en_add.next = self.wstate.q.val() == WriterState::Bias;
            self.lanes[c].en_mul.next = self.wstate.q.val() == WriterState::Mul;
            self.lanes[c].en_round.next = self.wstate.q.val() == WriterState::Round;
        }
        self.p32[0].next = self.lanes[0].out32.val();
        self.p8[0].next = self.lanes[0].out8.val();
        for c in 1..self._cols {
            self.p32[c].next = self.p32[c - 1].val() | self.lanes[c].out32.val();
            self.p8[c].next = self.p8[c - 1].val() | self.lanes[c].out8.val();
        }
        self.m_axi_gmem_awvalid.next = (self.wstate.q.val() == WriterState::Send) & !self.aw_done.q.val();
        self.m_axi_gmem_awaddr.next = self.w_addr.q.val();
        self.m_axi_gmem_awlen.next = 0.into();
        self.m_axi_gmem_awsize.next = self.c_logp.val().get_bits::<3>(0);
        self.m_axi_gmem_awburst.next = 1.into();
        self.m_axi_gmem_wvalid.next = (self.wstate.q.val() == WriterState::Send) & !self.w_done.q.val();
        self.m_axi_gmem_wdata.next = self.w_beat.q.val();
        self.m_axi_gmem_wstrb.next = self.w_strb.q.val();
        self.m_axi_gmem_wlast.next = true;
        match self.wstate.q.val() {
            WriterState::Idle => {
                if !self.ofifo.empty.val() {
                    self.ofifo.pop.next = true;
                    self.ometa.pop.next = true;
                    self.w_data.d.next = self.ofifo.dout.val();
                    self.w_i.d.next = self.ometa.dout.val().get_bits::<32>(0);
                    self.w_j0.d.next = self.ometa.dout.val().get_bits::<32>(32);
                    self.wstate.d.next = WriterState::Bias;
                }
            }
            WriterState::Bias => {
                // Lanes add bias / apply ReLU this cycle; compute the row address.
                self.w_addr.d.next = self.c_base.q.val()
                    + self.row_mul.p.val()
                    + (bit_cast::<64, 32>(self.w_j0.q.val() << 2) & !self.c_pmask.val());
                if self.requant.q.val() {
                    self.w_addr.d.next = self.c_base.q.val()
                        + self.row_mul.p.val()
                        + (bit_cast::<64, 32>(self.w_j0.q.val()) & !self.c_pmask.val());
                }
                self.w_cols.d.next = bit_cast::<16, 32>(self.w_col_cnt.val());
                self.wstate.d.next = WriterState::Mul;
            }
            WriterState::Mul => {
                self.wstate.d.next = WriterState::Round;
            }
            WriterState::Round => {
                self.wstate.d.next = WriterState::Pack;
            }
            WriterState::Pack => {
                for l in (self._cols - 1)..self._cols {
                    self.w_beat.d.next = self.p32[l].val()
                        << (bit_cast::<16, 32>((self.w_j0.q.val() << 2) & bit_cast::<32, 64>(self.c_pmask.val())) << 3);
                    if self.requant.q.val() {
                        self.w_beat.d.next = self.p8[l].val()
                            << (bit_cast::<16, 32>(self.w_j0.q.val() & bit_cast::<32, 64>(self.c_pmask.val())) << 3);
                    }
                }
                self.w_strb.d.next = (self.c_ones.val() >> (self.c_lanes.val() - (self.w_cols.q.val() << 2)))
                    << bit_cast::<16, 32>((self.w_j0.q.val() << 2) & bit_cast::<32, 64>(self.c_pmask.val()));
                if self.requant.q.val() {
                    self.w_strb.d.next = (self.c_ones.val() >> (self.c_lanes.val() - self.w_cols.q.val()))
                        << bit_cast::<16, 32>(self.w_j0.q.val() & bit_cast::<32, 64>(self.c_pmask.val()));
                }
                self.aw_done.d.next = false;
                self.w_done.d.next = false;
                self.wstate.d.next = WriterState::Send;
            }
            WriterState::Send => {
                if self.m_axi_gmem_awready.val() {
                    self.aw_done.d.next = true;
                }
                if self.m_axi_gmem_wready.val() {
                    self.w_done.d.next = true;
                }
                if (self.aw_done.q.val() | self.m_axi_gmem_awready.val())
                    & (self.w_done.q.val() | self.m_axi_gmem_wready.val())
                {
                    self.wr_issued.d.next = self.wr_issued.q.val() + 1;
                    self.wstate.d.next = WriterState::Idle;
                }
            }
            _ => {
                self.wstate.d.next = WriterState::Idle;
            }
        }

        if !self.ap_rst_n.val() {
            self.phase.d.next = Phase::Idle;
            self.wstate.d.next = WriterState::Idle;
            self.ar_valid.d.next = false;
        }
    }
}

/// Verilog of the unit, top module named [`GemmConfig::kernel_name`].
pub fn verilog(cfg: &GemmConfig) -> Result<String, HwError> {
    fn gen<const W: usize, const S: usize>(cfg: &GemmConfig) -> Result<String, HwError> {
        let mut unit = GemmUnit::<W, S>::new(cfg)?;
        unit.connect_all();
        let text = generate_verilog(&unit);
        Ok(crate::vitis::rename_top(&text, &cfg.kernel_name()))
    }
    cfg.validate()?;
    match cfg.port_bits {
        128 => gen::<128, 16>(cfg),
        256 => gen::<256, 32>(cfg),
        512 => gen::<512, 64>(cfg),
        1024 => gen::<1024, 128>(cfg),
        other => Err(HwError::Config(format!("port_bits = {other}"))),
    }
}

/// The same design in rust-hdl's own simulator (slow; needs no Verilator).
pub fn hdl_model(cfg: &GemmConfig) -> Result<Box<dyn PinLevel>, HwError> {
    fn boxed<const W: usize, const S: usize>(cfg: &GemmConfig) -> Result<Box<dyn PinLevel>, HwError> {
        let mut unit = GemmUnit::<W, S>::new(cfg)?;
        unit.connect_all();
        Ok(Box::new(crate::vitis::HdlSim::new(unit)))
    }
    cfg.validate()?;
    match cfg.port_bits {
        128 => boxed::<128, 16>(cfg),
        256 => boxed::<256, 32>(cfg),
        512 => boxed::<512, 64>(cfg),
        1024 => boxed::<1024, 128>(cfg),
        other => Err(HwError::Config(format!("port_bits = {other}"))),
    }
}
