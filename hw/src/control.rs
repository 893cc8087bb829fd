//! The AXI4-Lite control slave shared by every unit: Vitis `ap_ctrl_hs`
//! (CTRL/GIE/IER/ISR at 0x00–0x0C), then `n_args` writable argument words from
//! 0x10, then read-only status words. Offsets agree with
//! [`crate::regmap::RegisterMap`] by construction: both count words from 0x10.
use crate::regmap::CTRL_ADDR_BITS;
use crate::shell::AxiLiteSlave;
use rust_hdl::prelude::*;

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum WriteState {
    Addr,
    Data,
    Resp,
}

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum ReadState {
    Addr,
    /// The word is selected from last cycle's address decode (the hit flags).
    Sel,
    Data,
}

#[derive(LogicBlock)]
pub struct Control {
    pub clock: Signal<In, Clock>,
    pub rst_n: Signal<In, Bit>,
    pub s_axi_control: AxiLiteSlave,
    pub interrupt: Signal<Out, Bit>,
    /// One-cycle pulse: the core latches its arguments and starts.
    pub start: Signal<Out, Bit>,
    /// One-cycle pulse from the core when the run is complete.
    pub core_done: Signal<In, Bit>,
    pub core_idle: Signal<In, Bit>,
    pub args: Vec<Signal<Out, Bits<32>>>,
    pub status: Vec<Signal<In, Bits<32>>>,
    arg_regs: Vec<DFF<Bits<32>>>,
    wstate: DFF<WriteState>,
    rstate: DFF<ReadState>,
    waddr: DFF<Bits<CTRL_ADDR_BITS>>,
    rdata_r: DFF<Bits<32>>,
    // ARADDR decoded every cycle into one flag per readable word (CTRL, GIE,
    // IER, ISR; the arguments; the status words) and used the cycle after the
    // address is taken, so the read's decode and its select have a cycle each
    // (together they limited the GEMM unit's clock, docs/timing.md). The
    // select is an OR of the words that hit (at most one), zero elsewhere.
    hit_c: Vec<DFF<Bit>>,
    hit_a: Vec<DFF<Bit>>,
    hit_s: Vec<DFF<Bit>>,
    rw_a: Vec<Signal<Local, Bits<32>>>,
    rw_s: Vec<Signal<Local, Bits<32>>>,
    or_a: Vec<Signal<Local, Bits<32>>>,
    or_s: Vec<Signal<Local, Bits<32>>>,
    rsel: Signal<Local, Bits<32>>,
    ap_start: DFF<Bit>,
    ap_done: DFF<Bit>,
    auto_restart: DFF<Bit>,
    gie: DFF<Bit>,
    ier: DFF<Bits<2>>,
    isr: DFF<Bits<2>>,
    wmask: Signal<Local, Bits<32>>,
    /// Byte `b` of a word set: strobe `b`'s part of `wmask`.
    c_byte: Vec<Constant<Bits<32>>>,
    go: Signal<Local, Bit>,
    ctrl_word: Signal<Local, Bits<32>>,
    status_base: Constant<Bits<16>>,
    _n_args: usize,
    _n_status: usize,
}

impl Control {
    pub fn new(n_args: usize, n_status: usize) -> Self {
        assert!(n_args >= 1 && n_status >= 1 && 0x10 + 4 * (n_args + n_status) <= 1 << CTRL_ADDR_BITS);
        with_defaults!(Self {
            args: crate::many(n_args),
            status: crate::many(n_status),
            arg_regs: crate::many(n_args),
            status_base: Constant::new(((0x10 + 4 * n_args) as u64).to_bits()),
            c_byte: (0..4).map(|b| Constant::new((0xFFu64 << (8 * b)).to_bits())).collect(),
            hit_c: crate::many(4),
            hit_a: crate::many(n_args),
            hit_s: crate::many(n_status),
            rw_a: crate::many(n_args),
            rw_s: crate::many(n_status),
            or_a: crate::many(n_args),
            or_s: crate::many(n_status),
            _n_args: n_args,
            _n_status: n_status,
            .. clock, rst_n, s_axi_control, interrupt, start, core_done, core_idle, wstate, rstate, waddr, rdata_r,
            ap_start, ap_done, auto_restart, gie, ier, isr, rsel, wmask, go, ctrl_word
        })
    }
}

// hdl_gen turns each `if` into one Verilog `if`; the nesting follows the
// AXI4-Lite write (address, then byte strobe, then bit), so it stays.
#[allow(clippy::collapsible_if)]
impl Logic for Control {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, wstate, rstate, waddr, rdata_r, ap_start, ap_done, auto_restart, gie, ier, isr);
        for i in 0..self._n_args {
            self.arg_regs[i].clock.next = self.clock.val();
            self.arg_regs[i].d.next = self.arg_regs[i].q.val();
            self.args[i].next = self.arg_regs[i].q.val();
        }
        // Byte-lane mask from WSTRB: byte b of the word where strobe b is set.
        self.wmask.next = 0.into();
        for b in 0..4 {
            if self.s_axi_control.wstrb.val().get_bit(b) {
                self.wmask.next = self.wmask.val() | self.c_byte[b].val();
            }
        }

        // Start handshake: ap_start is consumed when the core is idle.
        self.go.next = self.ap_start.q.val() & self.core_idle.val();
        self.start.next = self.go.val();
        if self.go.val() {
            self.ap_start.d.next = self.auto_restart.q.val();
            if self.ier.q.val().get_bit(1) {
                self.isr.d.next = self.isr.q.val() | 2;
            }
        }
        if self.core_done.val() {
            self.ap_done.d.next = true;
            if self.ier.q.val().get_bit(0) {
                self.isr.d.next = self.isr.q.val() | 1;
            }
        }
        self.interrupt.next = self.gie.q.val() & self.isr.q.val().any();
        self.ctrl_word.next = bit_cast::<32, 1>(self.ap_start.q.val().into())
            | (bit_cast::<32, 1>(self.ap_done.q.val().into()) << 1)
            | (bit_cast::<32, 1>((self.core_idle.val() & !self.ap_start.q.val()).into()) << 2)
            | (bit_cast::<32, 1>(self.go.val().into()) << 3)
            | (bit_cast::<32, 1>(self.auto_restart.q.val().into()) << 7);

        // Write channel: address, then data, then response.
        self.s_axi_control.awready.next = self.wstate.q.val() == WriteState::Addr;
        self.s_axi_control.wready.next = self.wstate.q.val() == WriteState::Data;
        self.s_axi_control.bvalid.next = self.wstate.q.val() == WriteState::Resp;
        self.s_axi_control.bresp.next = 0.into();
        match self.wstate.q.val() {
            WriteState::Addr => {
                if self.s_axi_control.awvalid.val() {
                    self.waddr.d.next = self.s_axi_control.awaddr.val();
                    self.wstate.d.next = WriteState::Data;
                }
            }
            WriteState::Data => {
                if self.s_axi_control.wvalid.val() {
                    self.wstate.d.next = WriteState::Resp;
                    if self.waddr.q.val() == 0x00 {
                        if self.s_axi_control.wstrb.val().get_bit(0) {
                            if self.s_axi_control.wdata.val().get_bit(0) {
                                self.ap_start.d.next = true;
                            }
                            self.auto_restart.d.next = self.s_axi_control.wdata.val().get_bit(7);
                        }
                    }
                    if self.waddr.q.val() == 0x04 {
                        self.gie.d.next = self.s_axi_control.wdata.val().get_bit(0);
                    }
                    if self.waddr.q.val() == 0x08 {
                        self.ier.d.next = self.s_axi_control.wdata.val().get_bits::<2>(0);
                    }
                    if self.waddr.q.val() == 0x0C {
                        self.isr.d.next = self.isr.q.val() ^ self.s_axi_control.wdata.val().get_bits::<2>(0);
                    }
                    for i in 0..self._n_args {
                        if self.waddr.q.val().index() == 0x10 + 4 * i {
                            self.arg_regs[i].d.next = (self.arg_regs[i].q.val() & !self.wmask.val())
                                | (self.s_axi_control.wdata.val() & self.wmask.val());
                        }
                    }
                }
            }
            WriteState::Resp => {
                if self.s_axi_control.bready.val() {
                    self.wstate.d.next = WriteState::Addr;
                }
            }
            _ => {
                self.wstate.d.next = WriteState::Addr;
            }
        }

        // Read channel: address (decoded into the hit flags), select, then
        // registered data. Reading CTRL clears ap_done.
        self.s_axi_control.arready.next = self.rstate.q.val() == ReadState::Addr;
        self.s_axi_control.rvalid.next = self.rstate.q.val() == ReadState::Data;
        self.s_axi_control.rdata.next = self.rdata_r.q.val();
        self.s_axi_control.rresp.next = 0.into();
        for i in 0..4 {
            self.hit_c[i].clock.next = self.clock.val();
            self.hit_c[i].d.next = self.s_axi_control.araddr.val().index() == 4 * i;
        }
        for i in 0..self._n_args {
            self.hit_a[i].clock.next = self.clock.val();
            self.hit_a[i].d.next = self.s_axi_control.araddr.val().index() == 0x10 + 4 * i;
            self.rw_a[i].next = 0.into();
            if self.hit_a[i].q.val() {
                self.rw_a[i].next = self.arg_regs[i].q.val();
            }
        }
        for j in 0..self._n_status {
            self.hit_s[j].clock.next = self.clock.val();
            self.hit_s[j].d.next = self.s_axi_control.araddr.val().index() == self.status_base.val().index() + 4 * j;
            self.rw_s[j].next = 0.into();
            if self.hit_s[j].q.val() {
                self.rw_s[j].next = self.status[j].val();
            }
        }
        self.or_a[0].next = self.rw_a[0].val();
        for i in 1..self._n_args {
            self.or_a[i].next = self.or_a[i - 1].val() | self.rw_a[i].val();
        }
        self.or_s[0].next = self.rw_s[0].val();
        for j in 1..self._n_status {
            self.or_s[j].next = self.or_s[j - 1].val() | self.rw_s[j].val();
        }
        self.rsel.next = 0.into();
        if self.hit_c[0].q.val() {
            self.rsel.next = self.ctrl_word.val();
        }
        if self.hit_c[1].q.val() {
            self.rsel.next = bit_cast::<32, 1>(self.gie.q.val().into());
        }
        if self.hit_c[2].q.val() {
            self.rsel.next = bit_cast::<32, 2>(self.ier.q.val());
        }
        if self.hit_c[3].q.val() {
            self.rsel.next = bit_cast::<32, 2>(self.isr.q.val());
        }
        for l in (self._n_args - 1)..self._n_args {
            self.rsel.next = self.rsel.val() | self.or_a[l].val();
        }
        for l in (self._n_status - 1)..self._n_status {
            self.rsel.next = self.rsel.val() | self.or_s[l].val();
        }
        match self.rstate.q.val() {
            ReadState::Addr => {
                if self.s_axi_control.arvalid.val() {
                    self.rstate.d.next = ReadState::Sel;
                }
            }
            ReadState::Sel => {
                self.rdata_r.d.next = self.rsel.val();
                if self.hit_c[0].q.val() & !self.core_done.val() {
                    self.ap_done.d.next = false;
                }
                self.rstate.d.next = ReadState::Data;
            }
            ReadState::Data => {
                if self.s_axi_control.rready.val() {
                    self.rstate.d.next = ReadState::Addr;
                }
            }
            _ => {
                self.rstate.d.next = ReadState::Addr;
            }
        }

        if !self.rst_n.val() {
            self.wstate.d.next = WriteState::Addr;
            self.rstate.d.next = ReadState::Addr;
            self.ap_start.d.next = false;
            self.ap_done.d.next = false;
            self.auto_restart.d.next = false;
            self.gie.d.next = false;
            self.ier.d.next = 0.into();
            self.isr.d.next = 0.into();
        }
    }
}
