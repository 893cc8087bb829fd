//! The systolic array: processing elements, rows of them, and the skewed
//! feeders that line up A (from the left) and B (from the top).
//!
//! Output-stationary: each PE owns one output element and accumulates it over
//! K steps while A values flow right and B values flow down, one hop per cycle.
//! Chosen over weight-stationary because the int32 partial sums never move
//! (no wide inter-PE buses) and every output tile needs each A and B byte
//! exactly once, so the memory port only streams int8 operands. A `last` flag
//! travels with A; when it reaches a PE, that PE moves its sum to a result
//! register and starts the next tile without a bubble.
use crate::blocks::{Copies, Pack, RamPort, SkewLine, SyncRam};
use crate::clock;
use rust_hdl::prelude::*;

/// An A byte and its k-step's flags (`valid`; `last`, the tile's last k), as
/// they travel right from a row's feeder through its PEs, a hop a cycle.
#[derive(LogicInterface, Default)]
#[join = "AStepIn"]
pub struct AStepOut {
    pub a: Signal<Out, Bits<8>>,
    pub valid: Signal<Out, Bit>,
    pub last: Signal<Out, Bit>,
}

/// Where an [`AStepOut`] arrives.
#[derive(LogicInterface, Default)]
#[join = "AStepOut"]
pub struct AStepIn {
    pub a: Signal<In, Bits<8>>,
    pub valid: Signal<In, Bit>,
    pub last: Signal<In, Bit>,
}

/// One multiply-accumulate cell: int8×int8 → int32. The product is
/// registered twice before the accumulate, so a sum finishes three cycles
/// after its `last` arrives: the multiplier and the 32-bit add in one cycle
/// were too slow a path for the clock, and with one register (`prod_r`, which
/// the flow folds into the MULT18X18D) the route from the multiplier column to
/// the adder was (docs/timing.md); `prod_q` is a fabric register the placer
/// can put between them.
///
/// Hand-written Verilog: the registers of the rust-hdl block of `DFF`s it
/// replaces (`a_r`, `b_r`, `v_r`, `l_r`, `prod_r`, `v_p`, `l_p`, `prod_q`,
/// `v_q`, `l_q`, `acc`, `res`) and its logic in the same order (yosys proves the two equivalent
/// and maps both to the same ECP5 cells). rust-hdl computes each `DFF`'s
/// input in the parent's combinational block and the `DFF` copies it, so
/// Verilator stored nine inputs and copied them into the registers every
/// cycle in each of the array's PEs; here one clocked block writes them.
#[derive(LogicBlock, Default)]
pub struct Pe {
    pub clock: Signal<In, Clock>,
    pub clear: Signal<In, Bit>,
    pub a_in: AStepIn,
    pub b_in: Signal<In, Bits<8>>,
    pub a_out: AStepOut,
    /// This PE's registered B, for the next row.
    pub b_out: Signal<Out, Bits<8>>,
    /// This PE's last finished sum.
    pub res_out: Signal<Out, Bits<32>>,
    /// The model: the registers.
    _r: PeRegs,
}

/// [`Pe`]'s registers, as its Verilog names them.
#[derive(Default, Clone, Copy)]
struct PeRegs {
    a_r: u8,
    b_r: u8,
    v_r: bool,
    l_r: bool,
    prod_r: i32,
    v_p: bool,
    l_p: bool,
    prod_q: i32,
    v_q: bool,
    l_q: bool,
    acc: i32,
    res: u32,
}

impl Logic for Pe {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let o = self._r;
            let sum = o.acc.wrapping_add(o.prod_q);
            let clear = self.clear.val();
            self._r = PeRegs {
                a_r: self.a_in.a.val().to_u64() as u8,
                b_r: self.b_in.val().to_u64() as u8,
                v_r: self.a_in.valid.val(),
                l_r: self.a_in.last.val(),
                prod_r: i32::from(o.a_r as i8) * i32::from(o.b_r as i8),
                v_p: o.v_r & !clear,
                l_p: o.l_r,
                prod_q: o.prod_r,
                v_q: o.v_p & !clear,
                l_q: o.l_p,
                acc: if clear || (o.v_q && o.l_q) {
                    0
                } else if o.v_q {
                    sum
                } else {
                    o.acc
                },
                res: if o.v_q && o.l_q { sum as u32 } else { o.res },
            };
            let r = self._r;
            self.a_out.a.next = u64::from(r.a_r).to_bits();
            self.a_out.valid.next = r.v_r;
            self.a_out.last.next = r.l_r;
            self.b_out.next = u64::from(r.b_r).to_bits();
            self.res_out.next = u64::from(r.res).to_bits();
        }
    }
    fn connect(&mut self) {
        self.a_out.a.connect();
        self.a_out.valid.connect();
        self.a_out.last.connect();
        self.b_out.connect();
        self.res_out.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(
            "\
reg [7:0] a_r = 8'h0;
reg [7:0] b_r = 8'h0;
reg v_r = 1'b0;
reg l_r = 1'b0;
reg signed [31:0] prod_r = 32'h0;
reg v_p = 1'b0;
reg l_p = 1'b0;
reg signed [31:0] prod_q = 32'h0;
reg v_q = 1'b0;
reg l_q = 1'b0;
reg signed [31:0] acc = 32'h0;
reg [31:0] res = 32'h0;
wire signed [31:0] sum = acc + prod_q;
always @(posedge clock) begin
   a_r <= a_in$a;
   b_r <= b_in;
   v_r <= a_in$valid;
   l_r <= a_in$last;
   prod_r <= $signed(a_r) * $signed(b_r);
   v_p <= v_r;
   l_p <= l_r;
   prod_q <= prod_r;
   v_q <= v_p;
   l_q <= l_p;
   if (v_q) begin
      if (l_q) begin
         res <= sum;
         acc <= 32'h0;
      end else begin
         acc <= sum;
      end
   end
   if (clear) begin
      acc <= 32'h0;
      v_p <= 1'b0;
      v_q <= 1'b0;
   end
end
always @(*) begin
   a_out$a = a_r;
   a_out$valid = v_r;
   a_out$last = l_r;
   b_out = b_r;
   res_out = res;
end"
            .into(),
        )
    }
}

/// One row of PEs. B enters and leaves as packed byte lanes so rows chain
/// with a single bus; results leave packed as 32-bit lanes.
#[derive(LogicBlock)]
pub struct PeRow<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub clear: Signal<In, Bit>,
    pub a_in: AStepIn,
    pub b_in: Signal<In, Bits<W>>,
    pub b_out: Signal<Out, Bits<W>>,
    /// High for one cycle when every PE of the row holds its finished sum.
    pub cap: Signal<Out, Bit>,
    /// The row's sums while `cap` is high, else zero (so rows can be OR-ed).
    pub res_sel: Signal<Out, Bits<W>>,
    /// This row's index while `cap` is high, else zero.
    pub idx_sel: Signal<Out, Bits<32>>,
    pes: Vec<Pe>,
    /// The PEs' B bytes and sums, packed as lanes `c` of the row's buses.
    bpack: Pack<8, W>,
    rpack: Pack<32, W>,
    cap_p: DFF<Bit>,
    cap_q: DFF<Bit>,
    cap_r: DFF<Bit>,
    /// `cap_r` again, one kept copy per column to gate its 32-bit sum (one
    /// flip-flop gating the row's sums was a net of fan-out 129, docs/timing.md).
    cap_cp: Vec<Copies<1>>,
    row_idx: Constant<Bits<32>>,
    _cols: usize,
}

impl<const W: usize> PeRow<W> {
    pub fn new(row: usize, cols: usize) -> Self {
        with_defaults!(Self {
            pes: (0..cols).map(|_| Pe::default()).collect(),
            bpack: Pack::new(cols),
            rpack: Pack::new(cols),
            cap_cp: (0..cols).map(|_| Copies::default()).collect(),
            row_idx: Constant::new((row as u64).to_bits()),
            _cols: cols,
            .. clock, clear, a_in, b_in, b_out, cap, res_sel, idx_sel, cap_p, cap_q, cap_r
        })
    }
}

impl<const W: usize> Logic for PeRow<W> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, cap_p, cap_q, cap_r);
        for c in 0..self._cols {
            self.pes[c].clock.next = self.clock.val();
            self.pes[c].clear.next = self.clear.val();
            self.pes[c].b_in.next = self.b_in.val().get_bits::<8>(c * 8);
            self.cap_cp[c].clock.next = self.clock.val();
            self.cap_cp[c].d.next = self.cap_q.q.val();
        }
        self.pes[0].a_in.a.next = self.a_in.a.val();
        self.pes[0].a_in.valid.next = self.a_in.valid.val();
        self.pes[0].a_in.last.next = self.a_in.last.val();
        for c in 1..self._cols {
            self.pes[c].a_in.a.next = self.pes[c - 1].a_out.a.val();
            self.pes[c].a_in.valid.next = self.pes[c - 1].a_out.valid.val();
            self.pes[c].a_in.last.next = self.pes[c - 1].a_out.last.val();
        }
        for c in 0..self._cols {
            self.bpack.lanes[c].next = self.pes[c].b_out.val();
            self.rpack.lanes[c].next = 0.into();
            if self.cap_cp[c].q.val().any() {
                self.rpack.lanes[c].next = self.pes[c].res_out.val();
            }
        }
        self.b_out.next = self.bpack.out.val();
        for l in (self._cols - 1)..self._cols {
            // The last PE finishes its sum three cycles after it shows `last`.
            self.cap_p.d.next = self.pes[l].a_out.valid.val() & self.pes[l].a_out.last.val();
            self.cap_q.d.next = self.cap_p.q.val();
            self.cap_r.d.next = self.cap_q.q.val();
            self.res_sel.next = self.rpack.out.val();
        }
        self.cap.next = self.cap_r.q.val();
        self.idx_sel.next = 0.into();
        if self.cap_r.q.val() {
            self.idx_sel.next = self.row_idx.val();
        }
    }
}

/// Row `r`'s A-panel buffer (one beat-wide RAM holding row `i0 + r` of A),
/// its byte select, and its skew line of depth `r + 1`.
#[derive(LogicBlock)]
pub struct RowFeed<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub ram_port: RamPort<W>,
    /// Byte of the beat read last cycle that holds A[i0 + r][k].
    pub sel: Signal<In, Bits<8>>,
    pub valid_in: Signal<In, Bit>,
    pub last_in: Signal<In, Bit>,
    pub a_out: AStepOut,
    ram: SyncRam<W>,
    line: SkewLine<10>,
}

impl<const W: usize> RowFeed<W> {
    pub fn new(row: usize, depth_beats: usize) -> Self {
        with_defaults!(Self {
            ram: SyncRam::new(depth_beats),
            line: SkewLine::new(row + 1),
            .. clock, ram_port, sel, valid_in, last_in, a_out
        })
    }
}

impl<const W: usize> Logic for RowFeed<W> {
    #[hdl_gen]
    fn update(&mut self) {
        clock!(self, clock, ram, line);
        RamPort::<W>::link(&mut self.ram_port, &mut self.ram.port);
        self.line.din.next = bit_cast::<10, 8>(self.ram.rdata.val().get_bits::<8>(self.sel.val().index() * 8))
            | (bit_cast::<10, 1>(self.valid_in.val().into()) << 8)
            | (bit_cast::<10, 1>(self.last_in.val().into()) << 9);
        self.a_out.a.next = self.line.dout.val().get_bits::<8>(0);
        self.a_out.valid.next = self.line.dout.val().get_bit(8);
        self.a_out.last.next = self.line.dout.val().get_bit(9);
    }
}

/// Column `c`'s skew line of depth `c + 1`; the unit packs the columns'
/// outputs into the B bus (`Pack`).
#[derive(LogicBlock)]
pub struct ColFeed {
    pub clock: Signal<In, Clock>,
    pub din: Signal<In, Bits<8>>,
    pub dout: Signal<Out, Bits<8>>,
    line: SkewLine<8>,
}

impl ColFeed {
    pub fn new(col: usize) -> Self {
        with_defaults!(Self {
            line: SkewLine::new(col + 1),
            .. clock, din, dout
        })
    }
}

impl Logic for ColFeed {
    #[hdl_gen]
    fn update(&mut self) {
        self.line.clock.next = self.clock.val();
        self.line.din.next = self.din.val();
        self.dout.next = self.line.dout.val();
    }
}
