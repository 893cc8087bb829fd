//! The AXI4-Lite control slave shared by every unit: Vitis `ap_ctrl_hs`
//! (CTRL/GIE/IER/ISR at 0x00–0x0C), then `n_args` writable argument words from
//! 0x10, then read-only status words. Offsets agree with
//! [`crate::regmap::RegisterMap`] by construction: both count words from 0x10.
use crate::regmap::CTRL_ADDR_BITS;
use crate::shell::AxiLiteSlave;
use rust_hdl::prelude::*;

/// The write's address and data are taken in either order, both at once when
/// they come together; the cycle after both are in (`Apply`) writes the word.
#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum WriteState {
    /// Both channels ready.
    Addr,
    /// The address is in, the data not yet.
    Data,
    /// The data is in, the address not yet.
    DataIn,
    Apply,
    Resp,
}

#[derive(Copy, Clone, PartialEq, Debug, LogicState)]
enum ReadState {
    Addr,
    /// The word is selected from last cycle's address decode (the hit flags).
    Sel,
    /// The two halves of the select, registered in `Sel`, are joined.
    Join,
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
    /// No run is going: a flip-flop, cleared by `start`, set the cycle after
    /// `core_done` (the core is back in its idle state then); `idle_next` is
    /// its value after this edge, for copies of it elsewhere.
    pub idle: Signal<Out, Bit>,
    pub idle_next: Signal<Out, Bit>,
    pub args: Vec<Signal<Out, Bits<32>>>,
    pub status: Vec<Signal<In, Bits<32>>>,
    arg_regs: Vec<DFF<Bits<32>>>,
    wstate: DFF<WriteState>,
    rstate: DFF<ReadState>,
    // The write is applied from registers alone (the address decode and the
    // handshake in front of the argument registers' enables limited every
    // unit's clock, docs/timing.md): `wsel_*` the taken address as one flag per
    // word, `we_*` those flags as one-cycle pulses in `Apply`, `wd`/`wm` the
    // data and its byte mask. `sel_*` is this cycle's decode: AWADDR's when
    // the address is taken now, else the kept one.
    wsel_c: Vec<DFF<Bit>>,
    wsel_a: Vec<DFF<Bit>>,
    we_c: Vec<DFF<Bit>>,
    we_a: Vec<DFF<Bit>>,
    sel_c: Vec<Signal<Local, Bit>>,
    sel_a: Vec<Signal<Local, Bit>>,
    wd: DFF<Bits<32>>,
    wm: DFF<Bits<32>>,
    take_a: Signal<Local, Bit>,
    take_w: Signal<Local, Bit>,
    /// Both address and data are in after this cycle.
    full: Signal<Local, Bit>,
    rdata_r: DFF<Bits<32>>,
    // ARADDR decoded every cycle into one flag per readable word (CTRL, GIE,
    // IER, ISR; the arguments; the status words) and used the cycle after the
    // address is taken, so the read's decode and its select have a cycle each
    // (together they limited the GEMM unit's clock, docs/timing.md). The
    // select is an OR of the words that hit (at most one), zero elsewhere,
    // registered in two halves (`rd_a` the arguments', `rd_b` the control and
    // status words') and joined a cycle later: one OR of every readable word
    // behind the hit flags limited the GEMM unit's clock (docs/timing.md).
    hit_c: Vec<DFF<Bit>>,
    hit_a: Vec<DFF<Bit>>,
    hit_s: Vec<DFF<Bit>>,
    rw_a: Vec<Signal<Local, Bits<32>>>,
    rw_s: Vec<Signal<Local, Bits<32>>>,
    or_a: Vec<Signal<Local, Bits<32>>>,
    or_s: Vec<Signal<Local, Bits<32>>>,
    rsel: Signal<Local, Bits<32>>,
    rd_a: DFF<Bits<32>>,
    rd_b: DFF<Bits<32>>,
    ap_start: DFF<Bit>,
    idle_r: DFF<Bit>,
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
            wsel_c: crate::many(4),
            wsel_a: crate::many(n_args),
            we_c: crate::many(4),
            we_a: crate::many(n_args),
            sel_c: crate::many(4),
            sel_a: crate::many(n_args),
            hit_c: crate::many(4),
            hit_a: crate::many(n_args),
            hit_s: crate::many(n_status),
            rw_a: crate::many(n_args),
            rw_s: crate::many(n_status),
            or_a: crate::many(n_args),
            or_s: crate::many(n_status),
            _n_args: n_args,
            _n_status: n_status,
            .. clock, rst_n, s_axi_control, interrupt, start, core_done, idle, idle_next, idle_r, wstate, rstate, wd, wm, take_a, take_w,
            full, rdata_r, rd_a, rd_b, ap_start, ap_done, auto_restart, gie, ier, isr, rsel, wmask, go, ctrl_word
        })
    }
}

// hdl_gen turns each `if` into one Verilog `if`; the nesting follows the
// AXI4-Lite write (address, then byte strobe, then bit), so it stays.
#[allow(clippy::collapsible_if)]
impl Logic for Control {
    #[hdl_gen]
    fn update(&mut self) {
        #[rustfmt::skip]
        dff_setup!(self, clock, wstate, rstate, wd, wm, rdata_r, rd_a, rd_b, ap_start, idle_r, ap_done, auto_restart, gie, ier, isr);
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
        self.go.next = self.ap_start.q.val() & self.idle_r.q.val();
        self.start.next = self.go.val();
        self.idle_next.next = !self.rst_n.val() | self.core_done.val() | (self.idle_r.q.val() & !self.ap_start.q.val());
        self.idle_r.d.next = self.idle_next.val();
        self.idle.next = self.idle_r.q.val();
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
            | (bit_cast::<32, 1>((self.idle_r.q.val() & !self.ap_start.q.val()).into()) << 2)
            | (bit_cast::<32, 1>(self.go.val().into()) << 3)
            | (bit_cast::<32, 1>(self.auto_restart.q.val().into()) << 7);

        // Write channel: address and data (in either order, or together), the
        // write itself (`Apply`), then the response: a host's write, address and
        // data together, takes the cycles it took when the data followed the
        // address, and the word changes after the same cycle (the second).
        self.s_axi_control.awready.next =
            (self.wstate.q.val() == WriteState::Addr) | (self.wstate.q.val() == WriteState::DataIn);
        self.s_axi_control.wready.next =
            (self.wstate.q.val() == WriteState::Addr) | (self.wstate.q.val() == WriteState::Data);
        self.s_axi_control.bvalid.next = self.wstate.q.val() == WriteState::Resp;
        self.s_axi_control.bresp.next = 0.into();
        self.take_a.next = self.s_axi_control.awvalid.val()
            & ((self.wstate.q.val() == WriteState::Addr) | (self.wstate.q.val() == WriteState::DataIn));
        self.take_w.next = self.s_axi_control.wvalid.val()
            & ((self.wstate.q.val() == WriteState::Addr) | (self.wstate.q.val() == WriteState::Data));
        self.full.next = false;
        match self.wstate.q.val() {
            WriteState::Addr => {
                self.full.next = self.take_a.val() & self.take_w.val();
                if self.take_a.val() & !self.take_w.val() {
                    self.wstate.d.next = WriteState::Data;
                }
                if !self.take_a.val() & self.take_w.val() {
                    self.wstate.d.next = WriteState::DataIn;
                }
            }
            WriteState::Data => {
                self.full.next = self.take_w.val();
            }
            WriteState::DataIn => {
                self.full.next = self.take_a.val();
            }
            WriteState::Apply => {
                self.wstate.d.next = WriteState::Resp;
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
        if self.full.val() {
            self.wstate.d.next = WriteState::Apply;
        }
        if self.take_w.val() {
            self.wd.d.next = self.s_axi_control.wdata.val();
            self.wm.d.next = self.wmask.val();
        }
        for i in 0..4 {
            self.wsel_c[i].clock.next = self.clock.val();
            self.we_c[i].clock.next = self.clock.val();
            self.sel_c[i].next = self.wsel_c[i].q.val();
            if self.take_a.val() {
                self.sel_c[i].next = self.s_axi_control.awaddr.val().index() == 4 * i;
            }
            self.wsel_c[i].d.next = self.sel_c[i].val();
            self.we_c[i].d.next = self.full.val() & self.sel_c[i].val();
        }
        for i in 0..self._n_args {
            self.wsel_a[i].clock.next = self.clock.val();
            self.we_a[i].clock.next = self.clock.val();
            self.sel_a[i].next = self.wsel_a[i].q.val();
            if self.take_a.val() {
                self.sel_a[i].next = self.s_axi_control.awaddr.val().index() == 0x10 + 4 * i;
            }
            self.wsel_a[i].d.next = self.sel_a[i].val();
            self.we_a[i].d.next = self.full.val() & self.sel_a[i].val();
            if self.we_a[i].q.val() {
                self.arg_regs[i].d.next =
                    (self.arg_regs[i].q.val() & !self.wm.q.val()) | (self.wd.q.val() & self.wm.q.val());
            }
        }
        if self.we_c[0].q.val() {
            if self.wm.q.val().get_bit(0) {
                if self.wd.q.val().get_bit(0) {
                    self.ap_start.d.next = true;
                }
                self.auto_restart.d.next = self.wd.q.val().get_bit(7);
            }
        }
        if self.we_c[1].q.val() {
            self.gie.d.next = self.wd.q.val().get_bit(0);
        }
        if self.we_c[2].q.val() {
            self.ier.d.next = self.wd.q.val().get_bits::<2>(0);
        }
        if self.we_c[3].q.val() {
            self.isr.d.next = self.isr.q.val() ^ self.wd.q.val().get_bits::<2>(0);
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
        for l in (self._n_status - 1)..self._n_status {
            self.rsel.next = self.rsel.val() | self.or_s[l].val();
        }
        self.rd_b.d.next = self.rsel.val();
        for l in (self._n_args - 1)..self._n_args {
            self.rd_a.d.next = self.or_a[l].val();
        }
        match self.rstate.q.val() {
            ReadState::Addr => {
                if self.s_axi_control.arvalid.val() {
                    self.rstate.d.next = ReadState::Sel;
                }
            }
            ReadState::Sel => {
                if self.hit_c[0].q.val() & !self.core_done.val() {
                    self.ap_done.d.next = false;
                }
                self.rstate.d.next = ReadState::Join;
            }
            ReadState::Join => {
                self.rdata_r.d.next = self.rd_a.q.val() | self.rd_b.q.val();
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
            for i in 0..4 {
                self.we_c[i].d.next = false;
            }
            for i in 0..self._n_args {
                self.we_a[i].d.next = false;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(c: &mut Control) {
        loop {
            c.update_all();
            if !c.has_changed() {
                break;
            }
        }
    }

    fn edge(c: &mut Control) {
        for v in [false, true] {
            c.clock.next = Clock::from(v);
            settle(c);
        }
    }

    /// One write whose address is offered from cycle `aw_at` and data from
    /// `w_at` (each until its handshake), `bready` high; per cycle until the
    /// response: argument 1 after the cycle's edge, and `bvalid` and `start`
    /// during it.
    fn write(c: &mut Control, offset: u64, value: u64, strb: u64, aw_at: usize, w_at: usize) -> Vec<(u64, bool, bool)> {
        let (mut aw_done, mut w_done, mut seen) = (false, false, vec![]);
        for cycle in 0..12 {
            let s = &mut c.s_axi_control;
            (s.awaddr.next, s.wdata.next, s.wstrb.next, s.bready.next) =
                (offset.to_bits(), value.to_bits(), strb.to_bits(), true);
            s.awvalid.next = !aw_done && cycle >= aw_at;
            s.wvalid.next = !w_done && cycle >= w_at;
            settle(c);
            let s = &c.s_axi_control;
            let (aw, w) = (s.awvalid.val() && s.awready.val(), s.wvalid.val() && s.wready.val());
            let (b, start) = (s.bvalid.val(), c.start.val());
            edge(c);
            (aw_done, w_done) = (aw_done || aw, w_done || w);
            seen.push((c.args[1].val().to_u64(), b, start));
            if b {
                return seen;
            }
        }
        panic!("no response: {seen:?}");
    }

    /// Address and data in either order or together, as a host writes them
    /// (together): the word changes after the write's second cycle, when the
    /// data came first or last two cycles after it is taken; the response
    /// follows; a byte strobe writes its byte alone; `ap_start` is up two
    /// cycles after its write's first.
    #[test]
    fn writes_take_address_and_data_in_either_order() {
        let mut c = Control::new(2, 1);
        c.connect_all();
        c.core_done.next = false;
        c.rst_n.next = false;
        edge(&mut c);
        c.rst_n.next = true;
        let (o, n) = (0x1122_3344, 0x11ff_3344);
        assert_eq!(write(&mut c, 0x14, o, 0xf, 0, 0).last(), Some(&(o, true, false)));
        let strobed = |x| vec![(o, false, false), (x, false, false), (x, true, false)];
        assert_eq!(write(&mut c, 0x14, 0xffff_ffff, 0x4, 0, 0), strobed(n));
        for (aw_at, w_at) in [(0, 2), (2, 0)] {
            assert_eq!(write(&mut c, 0x14, o, 0xf, 0, 0).last(), Some(&(o, true, false)));
            let seen = write(&mut c, 0x14, 0xffff_ffff, 0x4, aw_at, w_at);
            assert_eq!(seen, [vec![(o, false, false); 3], strobed(n)[1..].to_vec()].concat(), "{aw_at} {w_at}");
        }
        assert_eq!(write(&mut c, 0x10, 7, 0xf, 0, 0).last(), Some(&(n, true, false)), "another word");
        let seen = write(&mut c, 0x00, 1, 0x1, 0, 0);
        assert_eq!(seen.iter().map(|s| s.2).collect::<Vec<_>>(), [false, false, true], "start");
    }
}
