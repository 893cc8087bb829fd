//! rust-hdl generator of the streaming attention unit (Vitis RTL kernel).
//!
//! Per (batch·head) and per block of `lanes` queries: load the block's Q rows
//! into the lanes, stream K and V once (alternating bursts of `CHUNK` beats of K
//! and of V at the same offsets, one key per step broadcast to every lane),
//! then divide, serialize and write each lane's output row. On-chip state is
//! the lanes' q/m/l/o registers and two FIFOs: nothing grows with N.
use super::lane::{Lane, ROW32_BITS, ROW8_BITS};
use super::AttentionConfig;
use crate::blocks::{Fifo, MulU32};
use crate::control::Control;
use crate::regmap::CTRL_ADDR_BITS;
use crate::vitis::PinLevel;
use crate::HwError;
use rust_hdl::prelude::*;

const N_ARGS: usize = 22;
const N_STATUS: usize = 4;
/// Beats per K (and per V) burst.
const CHUNK: u64 = 8;

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum Phase {
    Idle,
    HeadInit,
    KvReq,
    KvWait,
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
    WPrep,
    WSend,
}

#[derive(LogicBlock)]
pub struct AttentionUnit<const W: usize, const S: usize> {
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
    lanes: Vec<Lane<W>>,
    kfifo: Fifo<W>,
    vfifo: Fifo<W>,
    mul_q: MulU32,
    mul_kv: MulU32,
    mul_o: MulU32,

    q_base: DFF<Bits<64>>,
    k_base: DFF<Bits<64>>,
    v_base: DFF<Bits<64>>,
    o_base: DFF<Bits<64>>,
    kl_base: DFF<Bits<64>>,
    heads: DFF<Bits<32>>,
    hpb: DFF<Bits<32>>,
    seq_q: DFF<Bits<32>>,
    seq_kv: DFF<Bits<32>>,
    q_stride: DFF<Bits<32>>,
    kv_stride: DFF<Bits<32>>,
    o_stride: DFF<Bits<32>>,
    causal: DFF<Bit>,
    use_kvlen: DFF<Bit>,
    out8: DFF<Bit>,
    smult: DFF<Bits<32>>,
    sshift: DFF<Bits<6>>,
    omult: DFF<Bits<32>>,
    oshift: DFF<Bits<6>>,

    phase: DFF<Phase>,
    status_err: DFF<Bit>,
    cycles: DFF<Bits<64>>,
    done_pulse: Signal<Local, Bit>,
    h: DFF<Bits<32>>,
    hb: DFF<Bits<32>>,
    b: DFF<Bits<32>>,
    qh: DFF<Bits<64>>,
    kh: DFF<Bits<64>>,
    vh: DFF<Bits<64>>,
    oh: DFF<Bits<64>>,
    nkv: DFF<Bits<32>>,
    kv_word: Signal<Local, Bits<32>>,
    kv_shift: Signal<Local, Bits<W>>,
    k_addr: Signal<Local, Bits<64>>,
    v_addr: Signal<Local, Bits<64>>,
    q0: DFF<Bits<32>>,
    lv: DFF<Bits<32>>,
    nk: DFF<Bits<32>>,
    lv_next: Signal<Local, Bits<32>>,
    qs: Signal<Local, Bits<32>>,
    qrow_base: DFF<Bits<32>>,
    q_total: DFF<Bits<16>>,
    qb: DFF<Bits<32>>,
    q_rx: Signal<Local, Bit>,
    // Read-address generation.
    ar_valid: DFF<Bit>,
    ar_addr: DFF<Bits<64>>,
    ar_len: DFF<Bits<8>>,
    slot_free: Signal<Local, Bit>,
    rd_addr: DFF<Bits<64>>,
    rd_rem: DFF<Bits<16>>,
    to_page: Signal<Local, Bits<16>>,
    burst: Signal<Local, Bits<16>>,
    kv_off: DFF<Bits<64>>,
    kv_rem: DFF<Bits<32>>,
    kv_turn: DFF<Bit>,
    kv_last_len: DFF<Bits<16>>,
    k_page: Signal<Local, Bits<16>>,
    v_page: Signal<Local, Bits<16>>,
    kv_len: Signal<Local, Bits<16>>,
    k_inflight: DFF<Bits<16>>,
    v_inflight: DFF<Bits<16>>,
    k_issue: Signal<Local, Bits<16>>,
    v_issue: Signal<Local, Bits<16>>,
    recv_v: DFF<Bit>,
    kv_rx: Signal<Local, Bit>,
    // Steps.
    j: DFF<Bits<32>>,
    rib: DFF<Bits<16>>,
    go: Signal<Local, Bit>,
    is_last: Signal<Local, Bit>,
    st_valid: DFF<Bit>,
    st_first: DFF<Bit>,
    st_j: DFF<Bits<32>>,
    k_row: DFF<Bits<W>>,
    v0: DFF<Bits<W>>,
    v1: DFF<Bits<W>>,
    v2: DFF<Bits<W>>,
    v3: DFF<Bits<W>>,
    last_pipe: DFF<Bits<5>>,
    // Finalize and write (block parameters handed over at the block's last step).
    fin: DFF<Fin>,
    p_q0: DFF<Bits<32>>,
    p_lv: DFF<Bits<32>>,
    p_oh: DFF<Bits<64>>,
    f_q0: DFF<Bits<32>>,
    f_lv: DFF<Bits<32>>,
    f_oh: DFF<Bits<64>>,
    fx: DFF<Bits<16>>,
    wi: DFF<Bits<32>>,
    wb: DFF<Bits<16>>,
    w_addr: DFF<Bits<64>>,
    w_beat: DFF<Bits<W>>,
    w_strb: DFF<Bits<S>>,
    aw_done: DFF<Bit>,
    w_done: DFF<Bit>,
    wr_issued: DFF<Bits<32>>,
    wr_acked: DFF<Bits<32>>,
    rm32: Vec<Signal<Local, Bits<ROW32_BITS>>>,
    rm8: Vec<Signal<Local, Bits<ROW8_BITS>>>,
    row32: Signal<Local, Bits<ROW32_BITS>>,
    row8: Signal<Local, Bits<ROW8_BITS>>,
    row_bytes_log: Signal<Local, Bits<16>>,
    row_byte: Signal<Local, Bits<32>>,
    beats_per_row: Signal<Local, Bits<16>>,
    beat32: Signal<Local, Bits<W>>,
    beat8: Signal<Local, Bits<W>>,

    c_logp: Constant<Bits<16>>,
    c_pmask: Constant<Bits<64>>,
    c_pmask32: Constant<Bits<32>>,
    c_logd: Constant<Bits<16>>,
    c_logd8: Constant<Bits<16>>,
    c_rpb: Constant<Bits<16>>,
    c_lanes: Constant<Bits<32>>,
    c_half: Constant<Bits<16>>,
    c_chunk: Constant<Bits<16>>,
    c_fifo: Constant<Bits<16>>,
    c_hwinfo: Constant<Bits<32>>,
    c_sbytes: Constant<Bits<16>>,
    c_ones: Constant<Bits<S>>,
    c_lane_off: Vec<Constant<Bits<32>>>,
    c_lane_idx: Vec<Constant<Bits<32>>>,
    _lanes: usize,
}

crate::impl_vitis_top!(AttentionUnit);

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
            lanes: (0..l).map(|_| Lane::new(cfg.head_dim)).collect(),
            kfifo: Fifo::new(cfg.read_fifo_depth),
            vfifo: Fifo::new(cfg.read_fifo_depth),
            mul_q: Default::default(),
            mul_kv: Default::default(),
            mul_o: Default::default(),
            q_base: Default::default(),
            k_base: Default::default(),
            v_base: Default::default(),
            o_base: Default::default(),
            kl_base: Default::default(),
            heads: Default::default(),
            hpb: Default::default(),
            seq_q: Default::default(),
            seq_kv: Default::default(),
            q_stride: Default::default(),
            kv_stride: Default::default(),
            o_stride: Default::default(),
            causal: Default::default(),
            use_kvlen: Default::default(),
            out8: Default::default(),
            smult: Default::default(),
            sshift: Default::default(),
            omult: Default::default(),
            oshift: Default::default(),
            phase: Default::default(),
            status_err: Default::default(),
            cycles: Default::default(),
            done_pulse: Default::default(),
            h: Default::default(),
            hb: Default::default(),
            b: Default::default(),
            qh: Default::default(),
            kh: Default::default(),
            vh: Default::default(),
            oh: Default::default(),
            nkv: Default::default(),
            kv_word: Default::default(),
            kv_shift: Default::default(),
            k_addr: Default::default(),
            v_addr: Default::default(),
            q0: Default::default(),
            lv: Default::default(),
            nk: Default::default(),
            lv_next: Default::default(),
            qs: Default::default(),
            qrow_base: Default::default(),
            q_total: Default::default(),
            qb: Default::default(),
            q_rx: Default::default(),
            ar_valid: Default::default(),
            ar_addr: Default::default(),
            ar_len: Default::default(),
            slot_free: Default::default(),
            rd_addr: Default::default(),
            rd_rem: Default::default(),
            to_page: Default::default(),
            burst: Default::default(),
            kv_off: Default::default(),
            kv_rem: Default::default(),
            kv_turn: Default::default(),
            kv_last_len: Default::default(),
            k_page: Default::default(),
            v_page: Default::default(),
            kv_len: Default::default(),
            k_inflight: Default::default(),
            v_inflight: Default::default(),
            k_issue: Default::default(),
            v_issue: Default::default(),
            recv_v: Default::default(),
            kv_rx: Default::default(),
            j: Default::default(),
            rib: Default::default(),
            go: Default::default(),
            is_last: Default::default(),
            st_valid: Default::default(),
            st_first: Default::default(),
            st_j: Default::default(),
            k_row: Default::default(),
            v0: Default::default(),
            v1: Default::default(),
            v2: Default::default(),
            v3: Default::default(),
            last_pipe: Default::default(),
            fin: Default::default(),
            p_q0: Default::default(),
            p_lv: Default::default(),
            p_oh: Default::default(),
            f_q0: Default::default(),
            f_lv: Default::default(),
            f_oh: Default::default(),
            fx: Default::default(),
            wi: Default::default(),
            wb: Default::default(),
            w_addr: Default::default(),
            w_beat: Default::default(),
            w_strb: Default::default(),
            aw_done: Default::default(),
            w_done: Default::default(),
            wr_issued: Default::default(),
            wr_acked: Default::default(),
            rm32: (0..l).map(|_| Default::default()).collect(),
            rm8: (0..l).map(|_| Default::default()).collect(),
            row32: Default::default(),
            row8: Default::default(),
            row_bytes_log: Default::default(),
            row_byte: Default::default(),
            beats_per_row: Default::default(),
            beat32: Default::default(),
            beat8: Default::default(),
            c_logp: Constant::new(k(p.trailing_zeros() as u64)),
            c_pmask: Constant::new(k(p - 1)),
            c_pmask32: Constant::new(k(p - 1)),
            c_logd: Constant::new(k(logd)),
            c_logd8: Constant::new(k(logd + 3)),
            c_rpb: Constant::new(k(p / d)),
            c_lanes: Constant::new(k(l as u64)),
            c_half: Constant::new(k(d / 2)),
            c_chunk: Constant::new(k(CHUNK)),
            c_fifo: Constant::new(k(cfg.read_fifo_depth as u64)),
            c_hwinfo: Constant::new(k(cfg.hwinfo() as u64)),
            c_sbytes: Constant::new(k(S as u64)),
            c_ones: Constant::new(Bits::<S>::mask()),
            c_lane_off: (0..l).map(|i| Constant::new(k(i as u64 * d))).collect(),
            c_lane_idx: (0..l).map(|i| Constant::new(k(i as u64))).collect(),
            _lanes: l,
        })
    }
}

impl<const W: usize, const S: usize> Logic for AttentionUnit<W, S> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self,
            ap_clk,
            q_base,
            k_base,
            v_base,
            o_base,
            kl_base,
            heads,
            hpb,
            seq_q,
            seq_kv,
            q_stride,
            kv_stride,
            o_stride,
            causal,
            use_kvlen,
            out8,
            smult,
            sshift,
            omult,
            oshift,
            phase,
            status_err,
            cycles,
            h,
            hb,
            b,
            qh,
            kh,
            vh,
            oh,
            nkv,
            q0,
            lv,
            nk,
            qrow_base,
            q_total,
            qb,
            ar_valid,
            ar_addr,
            ar_len,
            rd_addr,
            rd_rem,
            kv_off,
            kv_rem,
            kv_turn,
            kv_last_len,
            k_inflight,
            v_inflight,
            recv_v,
            j,
            rib,
            st_valid,
            st_first,
            st_j,
            k_row,
            v0,
            v1,
            v2,
            v3,
            last_pipe,
            fin,
            p_q0,
            p_lv,
            p_oh,
            f_q0,
            f_lv,
            f_oh,
            fx,
            wi,
            wb,
            w_addr,
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
        self.mul_q.a.next = self.h.q.val();
        self.mul_q.b.next = self.q_stride.q.val();
        self.mul_kv.a.next = self.h.q.val();
        self.mul_kv.b.next = self.kv_stride.q.val();
        self.mul_o.a.next = self.h.q.val();
        self.mul_o.b.next = self.o_stride.q.val();
        // Verilog cannot slice an expression: shift into a local first.
        self.kv_shift.next =
            self.m_axi_gmem_rdata.val() >> (bit_cast::<16, 32>((self.b.q.val() << 2) & self.c_pmask32.val()) << 3);
        self.kv_word.next = self.kv_shift.val().get_bits::<32>(0);
        self.lv_next.next = self.c_lanes.val();
        if (self.seq_q.q.val() - self.q0.q.val()) < self.c_lanes.val() {
            self.lv_next.next = self.seq_q.q.val() - self.q0.q.val();
        }
        self.qs.next = self.q0.q.val() << self.c_logd.val();
        self.q_rx.next =
            self.m_axi_gmem_rvalid.val() & ((self.phase.q.val() == Phase::QReq) | (self.phase.q.val() == Phase::QWait));
        self.kv_rx.next = self.m_axi_gmem_rvalid.val() & (self.phase.q.val() == Phase::Stream);
        // K/V bursts: the same length for K and V, never crossing a page in either.
        self.k_addr.next = self.kh.q.val() + self.kv_off.q.val();
        self.v_addr.next = self.vh.q.val() + self.kv_off.q.val();
        self.k_page.next =
            (bits::<16>(4096) - bit_cast::<16, 12>(self.k_addr.val().get_bits::<12>(0))) >> self.c_logp.val();
        self.v_page.next =
            (bits::<16>(4096) - bit_cast::<16, 12>(self.v_addr.val().get_bits::<12>(0))) >> self.c_logp.val();
        self.kv_len.next = self.c_chunk.val();
        if self.kv_rem.q.val() < bit_cast::<32, 16>(self.kv_len.val()) {
            self.kv_len.next = bit_cast::<16, 32>(self.kv_rem.q.val());
        }
        if self.k_page.val() < self.kv_len.val() {
            self.kv_len.next = self.k_page.val();
        }
        if self.v_page.val() < self.kv_len.val() {
            self.kv_len.next = self.v_page.val();
        }
        self.k_issue.next = 0.into();
        self.v_issue.next = 0.into();

        self.is_last.next = self.j.q.val() + 1 == self.nk.q.val();
        // Steps wait while the finalizer reads l and o (Div, Ser) and until the
        // previous block's last step has reached it; a block's last step also
        // waits for the previous block's rows to be written.
        self.go.next = (self.phase.q.val() == Phase::Stream)
            & !self.kfifo.empty.val()
            & !self.vfifo.empty.val()
            & (self.last_pipe.q.val() == 0)
            & (self.fin.q.val() != Fin::Div)
            & (self.fin.q.val() != Fin::Ser)
            & (!self.is_last.val() | (self.fin.q.val() == Fin::Idle));
        // ---------------- Output rows ----------------
        self.rm32[0].next = self.lanes[0].row32.val();
        self.rm8[0].next = self.lanes[0].row8.val();
        for i in 1..self._lanes {
            self.rm32[i].next = self.rm32[i - 1].val() | self.lanes[i].row32.val();
            self.rm8[i].next = self.rm8[i - 1].val() | self.lanes[i].row8.val();
        }
        self.row32.next = 0.into();
        self.row8.next = 0.into();
        for last in (self._lanes - 1)..self._lanes {
            self.row32.next = self.rm32[last].val();
            self.row8.next = self.rm8[last].val();
        }
        // Bytes per output row: d·4 (Q16) or d (int8), as a power of two.
        self.row_bytes_log.next = self.c_logd.val() + 2;
        if self.out8.q.val() {
            self.row_bytes_log.next = self.c_logd.val();
        }
        self.row_byte.next = (self.f_q0.q.val() + self.wi.q.val()) << self.row_bytes_log.val();
        self.beats_per_row.next = 1.into();
        if self.row_bytes_log.val() > self.c_logp.val() {
            self.beats_per_row.next = bits::<16>(1) << (self.row_bytes_log.val() - self.c_logp.val());
        }
        self.beat32.next = bit_cast::<W, ROW32_BITS>(
            self.row32.val() >> (bit_cast::<32, 16>(self.wb.q.val()) << (self.c_logp.val() + 3)),
        ) << (bit_cast::<16, 32>(self.row_byte.val() & self.c_pmask32.val()) << 3);
        self.beat8.next = bit_cast::<W, ROW8_BITS>(
            self.row8.val() >> (bit_cast::<32, 16>(self.wb.q.val()) << (self.c_logp.val() + 3)),
        ) << (bit_cast::<16, 32>(self.row_byte.val() & self.c_pmask32.val()) << 3);

        // ---------------- Phase machine ----------------
        match self.phase.q.val() {
            Phase::Idle => {
                if self.ctrl.start.val() {
                    self.q_base.d.next = bit_cast::<64, 32>(self.ctrl.args[0].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[1].val()) << 32);
                    self.k_base.d.next = bit_cast::<64, 32>(self.ctrl.args[2].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[3].val()) << 32);
                    self.v_base.d.next = bit_cast::<64, 32>(self.ctrl.args[4].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[5].val()) << 32);
                    self.o_base.d.next = bit_cast::<64, 32>(self.ctrl.args[6].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[7].val()) << 32);
                    self.kl_base.d.next = bit_cast::<64, 32>(self.ctrl.args[8].val())
                        | (bit_cast::<64, 32>(self.ctrl.args[9].val()) << 32);
                    self.heads.d.next = self.ctrl.args[10].val();
                    self.hpb.d.next = self.ctrl.args[11].val();
                    self.seq_q.d.next = self.ctrl.args[12].val();
                    self.seq_kv.d.next = self.ctrl.args[13].val();
                    self.q_stride.d.next = self.ctrl.args[14].val();
                    self.kv_stride.d.next = self.ctrl.args[15].val();
                    self.o_stride.d.next = self.ctrl.args[16].val();
                    self.causal.d.next = self.ctrl.args[17].val().get_bit(0);
                    self.use_kvlen.d.next = self.ctrl.args[17].val().get_bit(1);
                    self.out8.d.next = self.ctrl.args[17].val().get_bit(2);
                    self.smult.d.next = self.ctrl.args[18].val();
                    self.sshift.d.next = self.ctrl.args[19].val().get_bits::<6>(0);
                    self.omult.d.next = self.ctrl.args[20].val();
                    self.oshift.d.next = self.ctrl.args[21].val().get_bits::<6>(0);
                    self.cycles.d.next = 1.into();
                    self.status_err.d.next = false;
                    self.h.d.next = 0.into();
                    self.hb.d.next = 0.into();
                    self.b.d.next = 0.into();
                    self.wr_issued.d.next = 0.into();
                    self.wr_acked.d.next = 0.into();
                    self.phase.d.next = Phase::HeadInit;
                    if (self.ctrl.args[10].val() == 0)
                        | (self.ctrl.args[11].val() == 0)
                        | (self.ctrl.args[12].val() == 0)
                        | (self.ctrl.args[13].val() == 0)
                    {
                        self.status_err.d.next = true;
                        self.phase.d.next = Phase::Done;
                    }
                }
            }
            Phase::HeadInit => {
                self.qh.d.next = self.q_base.q.val() + self.mul_q.p.val();
                self.kh.d.next = self.k_base.q.val() + self.mul_kv.p.val();
                self.vh.d.next = self.v_base.q.val() + self.mul_kv.p.val();
                self.oh.d.next = self.o_base.q.val() + self.mul_o.p.val();
                self.q0.d.next = 0.into();
                self.nkv.d.next = self.seq_kv.q.val();
                self.phase.d.next = Phase::BlockInit;
                if self.use_kvlen.q.val() {
                    self.phase.d.next = Phase::KvReq;
                }
            }
            Phase::KvReq => {
                if self.slot_free.val() {
                    self.ar_valid.d.next = true;
                    self.ar_addr.d.next =
                        self.kl_base.q.val() + (bit_cast::<64, 32>(self.b.q.val() << 2) & !self.c_pmask.val());
                    self.ar_len.d.next = 0.into();
                    self.phase.d.next = Phase::KvWait;
                }
            }
            Phase::KvWait => {
                if self.m_axi_gmem_rvalid.val() {
                    self.nkv.d.next = self.kv_word.val();
                    if self.kv_word.val() > self.seq_kv.q.val() {
                        self.nkv.d.next = self.seq_kv.q.val();
                        self.status_err.d.next = true;
                    }
                    if self.kv_word.val() == 0 {
                        self.nkv.d.next = 1.into();
                        self.status_err.d.next = true;
                    }
                    self.phase.d.next = Phase::BlockInit;
                }
            }
            Phase::BlockInit => {
                self.lv.d.next = self.lv_next.val();
                self.nk.d.next = self.nkv.q.val();
                if self.causal.q.val() & ((self.q0.q.val() + self.lv_next.val()) < self.nkv.q.val()) {
                    self.nk.d.next = self.q0.q.val() + self.lv_next.val();
                }
                self.qrow_base.d.next = self.qs.val();
                self.rd_addr.d.next = self.qh.q.val() + (bit_cast::<64, 32>(self.qs.val()) & !self.c_pmask.val());
                self.rd_rem.d.next = bit_cast::<16, 32>(
                    ((self.qs.val() & self.c_pmask32.val())
                        + (self.lv_next.val() << self.c_logd.val())
                        + self.c_pmask32.val())
                        >> self.c_logp.val(),
                );
                self.q_total.d.next = bit_cast::<16, 32>(
                    ((self.qs.val() & self.c_pmask32.val())
                        + (self.lv_next.val() << self.c_logd.val())
                        + self.c_pmask32.val())
                        >> self.c_logp.val(),
                );
                self.qb.d.next = 0.into();
                self.phase.d.next = Phase::QReq;
            }
            Phase::QReq => {
                if self.slot_free.val() {
                    if self.rd_rem.q.val() != 0 {
                        self.ar_valid.d.next = true;
                        self.ar_addr.d.next = self.rd_addr.q.val();
                        self.ar_len.d.next = bit_cast::<8, 16>(self.burst.val() - 1);
                        self.rd_addr.d.next =
                            self.rd_addr.q.val() + (bit_cast::<64, 16>(self.burst.val()) << self.c_logp.val());
                        self.rd_rem.d.next = self.rd_rem.q.val() - self.burst.val();
                    } else {
                        self.phase.d.next = Phase::QWait;
                    }
                }
            }
            Phase::QWait => {
                if bit_cast::<16, 32>(self.qb.q.val()) == self.q_total.q.val() {
                    self.kv_off.d.next = 0.into();
                    self.kv_rem.d.next =
                        ((self.nk.q.val() << self.c_logd.val()) + self.c_pmask32.val()) >> self.c_logp.val();
                    self.kv_turn.d.next = false;
                    self.recv_v.d.next = false;
                    self.j.d.next = 0.into();
                    self.rib.d.next = 0.into();
                    self.phase.d.next = Phase::Stream;
                }
            }
            Phase::Stream => {
                if self.slot_free.val() {
                    if !self.kv_turn.q.val() {
                        if (self.kv_rem.q.val() != 0)
                            & ((self.kfifo.count.val() + self.k_inflight.q.val() + self.c_chunk.val())
                                <= self.c_fifo.val())
                            & ((self.vfifo.count.val() + self.v_inflight.q.val() + self.c_chunk.val())
                                <= self.c_fifo.val())
                        {
                            self.ar_valid.d.next = true;
                            self.ar_addr.d.next = self.kh.q.val() + self.kv_off.q.val();
                            self.ar_len.d.next = bit_cast::<8, 16>(self.kv_len.val() - 1);
                            self.kv_last_len.d.next = self.kv_len.val();
                            self.k_issue.next = self.kv_len.val();
                            self.kv_turn.d.next = true;
                        }
                    } else {
                        self.ar_valid.d.next = true;
                        self.ar_addr.d.next = self.vh.q.val() + self.kv_off.q.val();
                        self.ar_len.d.next = bit_cast::<8, 16>(self.kv_last_len.q.val() - 1);
                        self.v_issue.next = self.kv_last_len.q.val();
                        self.kv_off.d.next =
                            self.kv_off.q.val() + (bit_cast::<64, 16>(self.kv_last_len.q.val()) << self.c_logp.val());
                        self.kv_rem.d.next = self.kv_rem.q.val() - bit_cast::<32, 16>(self.kv_last_len.q.val());
                        self.kv_turn.d.next = false;
                    }
                }
                if self.go.val() & self.is_last.val() {
                    self.p_q0.d.next = self.q0.q.val();
                    self.p_lv.d.next = self.lv.q.val();
                    self.p_oh.d.next = self.oh.q.val();
                    self.phase.d.next = Phase::Next;
                }
            }
            Phase::Next => {
                // Next block, next head, or finish: the next Q load and K/V
                // prefetch overlap this block's finalization.
                self.q0.d.next = self.q0.q.val() + self.c_lanes.val();
                self.phase.d.next = Phase::BlockInit;
                if self.q0.q.val() + self.c_lanes.val() >= self.seq_q.q.val() {
                    self.h.d.next = self.h.q.val() + 1;
                    self.hb.d.next = self.hb.q.val() + 1;
                    if self.hb.q.val() + 1 == self.hpb.q.val() {
                        self.hb.d.next = 0.into();
                        self.b.d.next = self.b.q.val() + 1;
                    }
                    self.phase.d.next = Phase::HeadInit;
                    if self.h.q.val() + 1 == self.heads.q.val() {
                        self.phase.d.next = Phase::Finish;
                    }
                }
            }
            Phase::Finish => {
                if (self.fin.q.val() == Fin::Idle)
                    & (self.last_pipe.q.val() == 0)
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

        // ---------------- Finalizer: divide, serialize, write the block's rows ----------------
        match self.fin.q.val() {
            Fin::Idle => {
                if self.last_pipe.q.val().get_bit(4) {
                    self.f_q0.d.next = self.p_q0.q.val();
                    self.f_lv.d.next = self.p_lv.q.val();
                    self.f_oh.d.next = self.p_oh.q.val();
                    self.fin.d.next = Fin::Div;
                }
            }
            Fin::Div => {
                if !self.lanes[0].div_busy.val() {
                    self.fx.d.next = 0.into();
                    self.fin.d.next = Fin::Ser;
                }
            }
            Fin::Ser => {
                self.fx.d.next = self.fx.q.val() + 1;
                if self.fx.q.val() == self.c_half.val() + 2 {
                    self.wi.d.next = 0.into();
                    self.wb.d.next = 0.into();
                    self.fin.d.next = Fin::WPrep;
                }
            }
            Fin::WPrep => {
                // Row `f_q0 + wi` of the block's head, beat `wb` of it.
                self.w_addr.d.next = self.f_oh.q.val()
                    + (bit_cast::<64, 32>(self.row_byte.val()) & !self.c_pmask.val())
                    + (bit_cast::<64, 16>(self.wb.q.val()) << self.c_logp.val());
                self.w_beat.d.next = self.beat32.val();
                if self.out8.q.val() {
                    self.w_beat.d.next = self.beat8.val();
                }
                self.w_strb.d.next = self.c_ones.val();
                if self.row_bytes_log.val() < self.c_logp.val() {
                    self.w_strb.d.next = (self.c_ones.val()
                        >> (self.c_sbytes.val() - (bits::<16>(1) << self.row_bytes_log.val())))
                        << bit_cast::<16, 32>(self.row_byte.val() & self.c_pmask32.val());
                }
                self.aw_done.d.next = false;
                self.w_done.d.next = false;
                self.fin.d.next = Fin::WSend;
            }
            Fin::WSend => {
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
                    self.fin.d.next = Fin::WPrep;
                    if self.wb.q.val() + 1 < self.beats_per_row.val() {
                        self.wb.d.next = self.wb.q.val() + 1;
                    } else {
                        self.wb.d.next = 0.into();
                        self.wi.d.next = self.wi.q.val() + 1;
                        if self.wi.q.val() + 1 >= self.f_lv.q.val() {
                            self.fin.d.next = Fin::Idle;
                        }
                    }
                }
            }
            _ => {
                self.fin.d.next = Fin::Idle;
            }
        }

        // ---------------- K/V receive ----------------
        self.kfifo.clock.next = self.ap_clk.val();
        self.vfifo.clock.next = self.ap_clk.val();
        self.kfifo.reset.next = !self.ap_rst_n.val();
        self.vfifo.reset.next = !self.ap_rst_n.val();
        self.kfifo.din.next = self.m_axi_gmem_rdata.val();
        self.vfifo.din.next = self.m_axi_gmem_rdata.val();
        self.kfifo.push.next = self.kv_rx.val() & !self.recv_v.q.val();
        self.vfifo.push.next = self.kv_rx.val() & self.recv_v.q.val();
        if self.kv_rx.val() & self.m_axi_gmem_rlast.val() {
            self.recv_v.d.next = !self.recv_v.q.val();
        }
        self.k_inflight.d.next = self.k_inflight.q.val() + self.k_issue.val()
            - bit_cast::<16, 1>((self.kv_rx.val() & !self.recv_v.q.val()).into());
        self.v_inflight.d.next = self.v_inflight.q.val() + self.v_issue.val()
            - bit_cast::<16, 1>((self.kv_rx.val() & self.recv_v.q.val()).into());
        if self.q_rx.val() {
            self.qb.d.next = self.qb.q.val() + 1;
        }

        // ---------------- Steps: one key per cycle to every lane ----------------
        self.kfifo.pop.next = false;
        self.vfifo.pop.next = false;
        self.st_valid.d.next = self.go.val();
        self.st_first.d.next = self.j.q.val() == 0;
        self.st_j.d.next = self.j.q.val();
        self.k_row.d.next = self.kfifo.dout.val() >> (self.rib.q.val() << self.c_logd8.val());
        self.v0.d.next = self.vfifo.dout.val() >> (self.rib.q.val() << self.c_logd8.val());
        if self.go.val() {
            self.j.d.next = self.j.q.val() + 1;
            self.rib.d.next = self.rib.q.val() + 1;
            if (self.rib.q.val() + 1 == self.c_rpb.val()) | self.is_last.val() {
                self.kfifo.pop.next = true;
                self.vfifo.pop.next = true;
                self.rib.d.next = 0.into();
            }
        }
        self.v1.d.next = self.v0.q.val();
        self.v2.d.next = self.v1.q.val();
        self.v3.d.next = self.v2.q.val();
        self.last_pipe.d.next =
            (self.last_pipe.q.val() << 1) | bit_cast::<5, 1>((self.go.val() & self.is_last.val()).into());

        // ---------------- Lanes ----------------
        for i in 0..self._lanes {
            self.lanes[i].clock.next = self.ap_clk.val();
            self.lanes[i].q_we.next = self.q_rx.val()
                & ((((self.qrow_base.q.val() + self.c_lane_off[i].val()) >> self.c_logp.val())
                    - (self.qrow_base.q.val() >> self.c_logp.val()))
                    == self.qb.q.val());
            self.lanes[i].q_row.next = self.m_axi_gmem_rdata.val()
                >> (((self.qrow_base.q.val() + self.c_lane_off[i].val()) & self.c_pmask32.val()) << 3);
            self.lanes[i].q_idx.next = self.q0.q.val() + self.c_lane_idx[i].val();
            self.lanes[i].causal.next = self.causal.q.val();
            self.lanes[i].st_valid.next = self.st_valid.q.val();
            self.lanes[i].st_first.next = self.st_first.q.val();
            self.lanes[i].st_j.next = self.st_j.q.val();
            self.lanes[i].k_row.next = self.k_row.q.val();
            self.lanes[i].v_row.next = self.v3.q.val();
            self.lanes[i].smult.next = self.smult.q.val();
            self.lanes[i].sshift.next = self.sshift.q.val();
            self.lanes[i].div_start.next = (self.fin.q.val() == Fin::Idle) & self.last_pipe.q.val().get_bit(4);
            self.lanes[i].sel.next = self.fx.q.val().get_bits::<8>(0);
            self.lanes[i].omult.next = self.omult.q.val();
            self.lanes[i].oshift.next = self.oshift.q.val();
            self.lanes[i].sh32.next =
                (self.fin.q.val() == Fin::Ser) & (self.fx.q.val() >= 1) & (self.fx.q.val() <= self.c_half.val());
            self.lanes[i].sh8.next =
                (self.fin.q.val() == Fin::Ser) & (self.fx.q.val() >= 3) & (self.fx.q.val() <= self.c_half.val() + 2);
            self.lanes[i].out_sel.next = self.wi.q.val().index() == i;
        }

        self.m_axi_gmem_awvalid.next = (self.fin.q.val() == Fin::WSend) & !self.aw_done.q.val();
        self.m_axi_gmem_awaddr.next = self.w_addr.q.val();
        self.m_axi_gmem_awlen.next = 0.into();
        self.m_axi_gmem_awsize.next = self.c_logp.val().get_bits::<3>(0);
        self.m_axi_gmem_awburst.next = 1.into();
        self.m_axi_gmem_wvalid.next = (self.fin.q.val() == Fin::WSend) & !self.w_done.q.val();
        self.m_axi_gmem_wdata.next = self.w_beat.q.val();
        self.m_axi_gmem_wstrb.next = self.w_strb.q.val();
        self.m_axi_gmem_wlast.next = true;

        if !self.ap_rst_n.val() {
            self.phase.d.next = Phase::Idle;
            self.fin.d.next = Fin::Idle;
            self.ar_valid.d.next = false;
            self.k_inflight.d.next = 0.into();
            self.v_inflight.d.next = 0.into();
            self.last_pipe.d.next = 0.into();
        }
    }
}

/// Verilog of the unit, top module named [`AttentionConfig::kernel_name`].
pub fn verilog(cfg: &AttentionConfig) -> Result<String, HwError> {
    fn gen<const W: usize, const S: usize>(cfg: &AttentionConfig) -> Result<String, HwError> {
        let mut unit = AttentionUnit::<W, S>::new(cfg)?;
        unit.connect_all();
        Ok(crate::vitis::rename_top(&generate_verilog(&unit), &cfg.kernel_name()))
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

/// The same design in rust-hdl's own simulator.
pub fn hdl_model(cfg: &AttentionConfig) -> Result<Box<dyn PinLevel>, HwError> {
    fn boxed<const W: usize, const S: usize>(cfg: &AttentionConfig) -> Result<Box<dyn PinLevel>, HwError> {
        let mut unit = AttentionUnit::<W, S>::new(cfg)?;
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
