//! Small building blocks shared by the units.
//!
//! Most logic is written in rust-hdl's HDL subset. A few primitives carry a
//! hand-written Verilog body, the way rust-hdl's own `RAM` and `DFF` do, because
//! rust-hdl cannot express them: memories whose depth is chosen at run time, a
//! 32×32-bit multiply (rust-hdl only has 16×16) and arithmetic right shifts.
//! Each has a Rust `update` with the same cycle behaviour, so rust-hdl's
//! simulator runs the same design.
use crate::dff_setup;
use rust_hdl::prelude::*;

fn to_u64<const N: usize>(b: Bits<N>) -> u64 {
    b.get_bits::<64>(0).to_u64()
}

/// A [`SyncRam`]'s inputs: its write port and read address. A block built
/// around a RAM (a row feed, a gate lane) exposes the same interface and
/// links it through.
#[derive(LogicInterface, Default)]
pub struct RamPort<const D: usize> {
    pub we: Signal<In, Bit>,
    pub waddr: Signal<In, Bits<16>>,
    pub wdata: Signal<In, Bits<D>>,
    pub raddr: Signal<In, Bits<16>>,
}

/// Simple dual-port RAM, synchronous read (one cycle), no read-during-write
/// to the same address (the units never do it). Maps to BRAM/URAM; the
/// memory is marked `no_rw_check` so that synthesis adds no collision
/// bypass (a register and a mux after the RAM's output, which kept the flow
/// from folding the next register into the block RAM's output register).
#[derive(LogicBlock)]
pub struct SyncRam<const D: usize> {
    pub clock: Signal<In, Clock>,
    pub port: RamPort<D>,
    pub rdata: Signal<Out, Bits<D>>,
    _mem: Vec<Bits<D>>,
    /// [`SyncRam::read_ahead`]'s copies of the read address (0: none) and
    /// the address they hold in the model.
    _copies: usize,
    _ra: u64,
}

impl<const D: usize> SyncRam<D> {
    pub fn new(depth: usize) -> Self {
        assert!((1..=1 << 16).contains(&depth));
        with_defaults!(Self {
            _mem: vec![Bits::default(); depth],
            _copies: 0,
            _ra: 0,
            .. clock, port, rdata
        })
    }

    /// `port.raddr` is the read address a cycle ahead (the next value of the
    /// parent's address registers): the RAM registers it in `copies` kept
    /// copies, each reading one slice of the width, so that no net of the
    /// width's fan-out lies in front of the read (the router's x buffer, a
    /// 128-bit row select off its token counter, docs/timing.md). `rdata`
    /// is then `mem[raddr two cycles ago]`, as [`SyncRam::new`]'s would be
    /// with the address registered outside.
    pub fn read_ahead(depth: usize, copies: usize) -> Self {
        assert!(depth.is_power_of_two() && depth <= 1 << 16);
        assert!(copies >= 1 && D.is_multiple_of(copies), "{copies} slices of {D} bits");
        Self { _copies: copies, ..Self::new(depth) }
    }
}

impl<const D: usize> Logic for SyncRam<D> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let depth = self._mem.len() as u64;
            let p = &self.port;
            let ra = if self._copies > 0 { self._ra } else { to_u64(p.raddr.val()) };
            self.rdata.next = self._mem[(ra % depth) as usize];
            self._ra = to_u64(p.raddr.val());
            if p.we.val() {
                self._mem[(to_u64(p.waddr.val()) % depth) as usize] = p.wdata.val();
            }
        }
    }
    fn connect(&mut self) {
        self.rdata.connect();
    }
    fn hdl(&self) -> Verilog {
        let (msb, last) = (D - 1, self._mem.len() - 1);
        if self._copies == 0 {
            return Verilog::Custom(format!(
                "\
(* no_rw_check *) reg [{msb}:0] mem[0:{last}];
always @(posedge clock) begin
   if (port$we) mem[port$waddr] <= port$wdata;
   rdata <= mem[port$raddr];
end"
            ));
        }
        // Slice i: its memory `mem{i}`, bits [w·i, w·i + w), read at `ra{i}`.
        let (k, w) = (self._copies, D / self._copies);
        let amsb = (self._mem.len().trailing_zeros() as usize).max(1) - 1;
        let mut v = String::new();
        for i in 0..k {
            let (lo, hi) = (w * i, w * i + w - 1);
            v += &format!(
                "\
(* no_rw_check *) reg [{wm}:0] mem{i}[0:{last}];
reg [{amsb}:0] ra{i};
(* keep *) always @(posedge clock) ra{i} <= port$raddr[{amsb}:0];
always @(posedge clock) begin
   if (port$we) mem{i}[port$waddr[{amsb}:0]] <= port$wdata[{hi}:{lo}];
   rdata[{hi}:{lo}] <= mem{i}[ra{i}];
end
",
                wm = w - 1
            );
        }
        Verilog::Custom(v)
    }
}

/// Whether a FIFO holds anything, as a flip-flop kept beside it from its push
/// and pop (and a count of its entries): a gate that reads `any` reads a
/// register, not the FIFO's pointer compare. `clear` empties it.
#[derive(LogicBlock, Default)]
pub struct Occupancy {
    pub clock: Signal<In, Clock>,
    pub clear: Signal<In, Bit>,
    pub push: Signal<In, Bit>,
    pub pop: Signal<In, Bit>,
    pub any: Signal<Out, Bit>,
    count: DFF<Bits<16>>,
    flag: DFF<Bit>,
}

impl Logic for Occupancy {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, count, flag);
        if self.push.val() & !self.pop.val() {
            self.count.d.next = self.count.q.val() + 1;
        }
        if !self.push.val() & self.pop.val() {
            self.count.d.next = self.count.q.val() - 1;
        }
        self.flag.d.next = self.push.val() | (self.count.q.val() > 1) | ((self.count.q.val() == 1) & !self.pop.val());
        if self.clear.val() {
            self.count.d.next = 0.into();
            self.flag.d.next = false;
        }
        self.any.next = self.flag.q.val();
    }
}

/// `K` flip-flops holding the same bit `d` (one edge late), each kept by
/// synthesis (yosys merges equal flip-flops): a flag that enables hundreds of
/// registers is split among copies, each placed near a share of its loads.
/// On ECP5 one hop of a net with fan-out ≥ 65 costs 1.7–2.1 ns of routing, of
/// fan-out 1–4 0.2–0.4 ns (docs/timing.md). `d` carries the reset, if any.
#[derive(LogicBlock, Default)]
pub struct Copies<const K: usize> {
    pub clock: Signal<In, Clock>,
    pub d: Signal<In, Bit>,
    pub q: Signal<Out, Bits<K>>,
}

impl<const K: usize> Logic for Copies<K> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            self.q.next = if self.d.val() { Bits::<K>::mask() } else { 0.into() };
        }
    }
    fn connect(&mut self) {
        self.q.connect();
    }
    fn hdl(&self) -> Verilog {
        let regs: String =
            (0..K).map(|i| format!("reg q{i};\n(* keep *) always @(posedge clock) q{i} <= d;\n")).collect();
        let all: Vec<String> = (0..K).rev().map(|i| format!("q{i}")).collect();
        Verilog::Custom(format!("{regs}always @(*) q = {{{}}};", all.join(", ")))
    }
}

/// A `D`-bit register kept by synthesis, as [`Copies`] keeps bits: a copy of
/// a wide value (a RAM's write address) for one share of its loads.
#[derive(LogicBlock, Default)]
pub struct Kept<const D: usize> {
    pub clock: Signal<In, Clock>,
    pub d: Signal<In, Bits<D>>,
    pub q: Signal<Out, Bits<D>>,
}

impl<const D: usize> Logic for Kept<D> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            self.q.next = self.d.val();
        }
    }
    fn connect(&mut self) {
        self.q.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom("(* keep *) always @(posedge clock) q <= d;".into())
    }
}

/// First-word-fall-through FIFO with a run-time depth (a power of two).
/// `dout` shows the head while `!empty`; `count` is the occupancy. `empty`
/// compares the pointers rather than testing `count`, so the pop gates that
/// read it carry no subtraction. [`Fifo::with_read_copies`] splits a wide
/// FIFO's memory into slices, each read at its own copy of the read pointer.
#[derive(LogicBlock)]
pub struct Fifo<const D: usize> {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub push: Signal<In, Bit>,
    pub din: Signal<In, Bits<D>>,
    pub pop: Signal<In, Bit>,
    pub dout: Signal<Out, Bits<D>>,
    pub empty: Signal<Out, Bit>,
    pub count: Signal<Out, Bits<16>>,
    _mem: Vec<Bits<D>>,
    _state: (usize, usize),
    _copies: usize,
    _trust: bool,
    _own: bool,
}

impl<const D: usize> Fifo<D> {
    pub fn new(depth: usize) -> Self {
        Self::with_read_copies(depth, 1)
    }

    /// The memory as `copies` slices of the width, each read at a copy of the
    /// read pointer of its own: one pointer addressing every LUT-RAM cell of a
    /// 128-bit FIFO was a net of fan-out 514 (docs/timing.md).
    pub fn with_read_copies(depth: usize, copies: usize) -> Self {
        assert!(depth.is_power_of_two() && depth <= 1 << 15);
        assert!(copies >= 1 && D.is_multiple_of(copies), "{copies} slices of {D} bits");
        with_defaults!(Self {
            _mem: vec![Bits::default(); depth],
            _state: (0, 0),
            _copies: copies,
            _trust: false,
            _own: false,
            .. clock, reset, push, din, pop, dout, empty, count
        })
    }

    /// For a parent that pops only while the FIFO holds an entry (by an
    /// occupancy flag of its own): the read pointers advance on `pop` alone,
    /// without the pointer compare (`wr != rd0`, the write pointer's fan-out
    /// 131 in the attention unit's V FIFO, docs/timing.md). The model panics
    /// on a pop of an empty FIFO.
    pub fn trusting_pop(mut self) -> Self {
        self._trust = true;
        self
    }

    /// For a FIFO in slices whose pop is checked: each slice keeps a write
    /// pointer of its own (kept copies of `wr`), writes at it and compares
    /// it with its read pointer, so no pointer crosses slices (`rd0` → the
    /// other copies and `wr` → `rd0` through the compare were near the limit
    /// in the attention lanes' metadata FIFO, docs/timing.md).
    pub fn pointers_per_slice(mut self) -> Self {
        assert!(!self._trust && self._copies > 1, "per-slice pointers are for a checked FIFO in slices");
        self._own = true;
        self
    }
}

impl<const D: usize> Logic for Fifo<D> {
    fn update(&mut self) {
        let depth = self._mem.len();
        if self.clock.pos_edge() {
            // `pos_edge` holds for one settle pass only, so pointers advance once.
            let (rd, wr) = self._state;
            let (mut nrd, mut nwr) = (rd, wr);
            if self.reset.val() {
                nrd = 0;
                nwr = 0;
            } else {
                if self.push.val() {
                    self._mem[wr % depth] = self.din.val();
                    nwr = wr + 1;
                }
                assert!(!(self._trust && self.pop.val() && rd == wr), "a trusting FIFO popped while empty");
                if self.pop.val() && rd != wr {
                    nrd = rd + 1;
                }
            }
            self._state = (nrd % (2 * depth), nwr % (2 * depth));
        }
        let (rd, wr) = self._state;
        let n = (wr + 2 * depth - rd) % (2 * depth);
        self.count.next = (n as u64).to_bits();
        self.empty.next = n == 0;
        self.dout.next = self._mem[rd % depth];
    }
    fn connect(&mut self) {
        self.dout.connect();
        self.empty.connect();
        self.count.connect();
    }
    fn hdl(&self) -> Verilog {
        let depth = self._mem.len();
        let pb = depth.trailing_zeros() as usize + 1;
        let (k, w) = (self._copies, D / self._copies);
        let (pmsb, amsb, last) = (pb - 1, pb.saturating_sub(2), depth - 1);
        // Slice i: its memory `mem{i}`, bits [w·i, w·i + w) of the data, read
        // at `rd{i}`; `rd0` also gives `empty` and `count`. A trusted pop: every
        // copy loads the next pointer `rd_nx`, computed once, so `pop` drives
        // its few bits, not the enables of every copy (fan-out 112 in the
        // GEMM's B FIFO, docs/timing.md). With per-slice pointers each slice
        // also writes at, and compares, a write pointer `wr{i}` of its own.
        let own = self._own;
        let mut v = format!("reg [{pmsb}:0] wr = 0;\nreg [{pmsb}:0] rd0 = 0;\n");
        if !own {
            let pop = if self._trust { "pop" } else { "(pop && (wr != rd0))" };
            v += &format!("wire [{pmsb}:0] rd_nx = {pop} ? rd0 + 1 : rd0;\n");
        }
        for i in 0..k {
            let (lo, hi) = (w * i, w * i + w - 1);
            let wp = if own && i > 0 { format!("wr{i}") } else { "wr".to_string() };
            let nx = if own { format!("(pop && ({wp} != rd{i})) ? rd{i} + 1 : rd{i}") } else { "rd_nx".to_string() };
            let mut decl = if i == 0 { String::new() } else { format!("reg [{pmsb}:0] rd{i} = 0;\n") };
            if own && i > 0 {
                decl += &format!(
                    "reg [{pmsb}:0] wr{i} = 0;\n(* keep *) always @(posedge clock) if (reset) wr{i} <= 0; else if (push) wr{i} <= wr{i} + 1;\n"
                );
            }
            v += &format!(
                "\
reg [{wm}:0] mem{i}[0:{last}];
{decl}(* keep *) always @(posedge clock) rd{i} <= reset ? {pb}'d0 : {nx};
always @(posedge clock) if (!reset && push) mem{i}[{wp}[{amsb}:0]] <= din[{hi}:{lo}];
",
                wm = w - 1
            );
        }
        let reads: Vec<String> = (0..k).rev().map(|i| format!("mem{i}[rd{i}[{amsb}:0]]")).collect();
        v += &format!(
            "\
wire [{pmsb}:0] used = wr - rd0;
always @(*) begin
   dout = {{{reads}}};
   empty = (wr == rd0);
   count = {{{pad}'d0, used}};
end
always @(posedge clock)
   if (reset) wr <= 0;
   else if (push) wr <= wr + 1;",
            reads = reads.join(", "),
            pad = 16 - pb,
        );
        Verilog::Custom(v)
    }
}

/// A delay line of `depth ≥ 1` registers: the systolic array's input skew.
#[derive(LogicBlock)]
pub struct SkewLine<const D: usize> {
    pub clock: Signal<In, Clock>,
    pub din: Signal<In, Bits<D>>,
    pub dout: Signal<Out, Bits<D>>,
    stages: Vec<DFF<Bits<D>>>,
    _depth: usize,
}

impl<const D: usize> SkewLine<D> {
    pub fn new(depth: usize) -> Self {
        assert!(depth >= 1);
        with_defaults!(Self {
            stages: crate::many(depth),
            _depth: depth,
            .. clock, din, dout
        })
    }
}

impl<const D: usize> Logic for SkewLine<D> {
    #[hdl_gen]
    fn update(&mut self) {
        for i in 0..self._depth {
            self.stages[i].clock.next = self.clock.val();
        }
        self.stages[0].d.next = self.din.val();
        for i in 1..self._depth {
            self.stages[i].d.next = self.stages[i - 1].q.val();
        }
        for last in (self._depth - 1)..self._depth {
            self.dout.next = self.stages[last].q.val();
        }
    }
}

/// The requantizer `y = sat8(round_half_away(x · mult / 2^shift))` as a
/// free-running pipeline of [`RequantPipe::LATENCY`] stages:
/// [`MulShiftStages`], then saturation. The
/// one-cycle 64-bit round/shift/saturate was the GEMM unit's critical path
/// (docs/timing.md). `y` is `sat8(round_half_away(x · mult / 2^shift))` of the
/// `x` held `LATENCY` cycles earlier; `mult` and `shift` must be steady for the
/// run (they are latched registers).
#[derive(LogicBlock, Default)]
pub struct RequantPipe {
    pub clock: Signal<In, Clock>,
    pub x: Signal<In, Bits<32>>,
    pub mult: Signal<In, Bits<32>>,
    pub shift: Signal<In, Bits<6>>,
    pub y: Signal<Out, Bits<8>>,
    _s: MulShiftStages,
}

impl RequantPipe {
    /// Cycles from `x` to `y`: the product and rounding shift, then saturation.
    pub const LATENCY: usize = MulShiftStages::LATENCY + 1;
}

impl Logic for RequantPipe {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            self.y.next = ((self._s.q.clamp(-128, 127) as i8 as u8) as u64).to_bits();
            self._s = self._s.step(to_u64(self.x.val()), to_u64(self.mult.val()), to_u64(self.shift.val()));
        }
    }
    fn connect(&mut self) {
        self.y.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(format!(
            "\
{}
// q fits int8 when q[63:7] is all sign: reductions, no comparator carry chains.
// As q = t >>> sr[2:0] with sr[2:0] ≤ 7, q[63:7] is all sign exactly when
// t[63:14] is (reduced beside the shift, registered) and q[13:7] is: the
// saturation's 57-input reductions in one cycle were the GEMM's critical path.
reg hi_ones = 0;
reg hi_zeros = 0;
always @(posedge clock) begin
   hi_ones <= &t[63:14];
   hi_zeros <= ~|t[63:14];
   y <= ((hi_ones & (&q[13:7])) | (hi_zeros & ~(|q[13:7]))) ? q[7:0] : (q[63] ? 8'h80 : 8'h7f);
end",
            mul_shift_verilog()
        ))
    }
}

/// `round(x · mult / 2^shift)` (signed 32-bit `x` and `mult`, rounding half
/// away from zero) kept to 40 bits, as a free-running pipeline of
/// [`ScaleRoundPipe::LATENCY`] stages ([`MulShiftStages`]): an int32 score to
/// the log2 domain (attention lanes, MoE logits). In one cycle it was the
/// critical path of both units (docs/timing.md). `mult` and `shift` must be
/// steady for the run.
#[derive(LogicBlock, Default)]
pub struct ScaleRoundPipe {
    pub clock: Signal<In, Clock>,
    pub x: Signal<In, Signed<32>>,
    pub mult: Signal<In, Bits<32>>,
    pub shift: Signal<In, Bits<6>>,
    pub y: Signal<Out, Signed<40>>,
    _s: MulShiftStages,
}

impl ScaleRoundPipe {
    /// Cycles from `x` to `y`.
    pub const LATENCY: usize = MulShiftStages::LATENCY;
}

impl Logic for ScaleRoundPipe {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let x = unsigned_cast(self.x.val());
            self._s = self._s.step(to_u64(x), to_u64(self.mult.val()), to_u64(self.shift.val()));
            self.y.next = from_i64(self._s.q);
        }
    }
    fn connect(&mut self) {
        self.y.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(format!("{}\nalways @(*) y = q[39:0];", mul_shift_verilog()))
    }
}

/// The registers of a 32×32 → 64-bit multiply `prod = a · b`, signed or
/// unsigned, in [`Mul32Stages::LATENCY`] stages: the four 16×16 partial
/// products, their middle sum beside the high and low ones side by side, the
/// product. Named as in [`mul32_verilog`].
#[derive(Default, Clone, Copy)]
struct Mul32Stages {
    hh: i64,
    hl: i64,
    lh: i64,
    ll: i64,
    mid: i64,
    hilo: i64,
    prod: i64,
}

impl Mul32Stages {
    const LATENCY: usize = 3;

    /// The registers after a clock edge with inputs `a`, `b` (32 bits, sign- or
    /// zero-extended to 64).
    fn step(self, a: i64, b: i64) -> Self {
        let o = self;
        let (ah, al, bh, bl) = (a >> 16, a & 0xFFFF, b >> 16, b & 0xFFFF);
        Self {
            hh: ah * bh,
            hl: ah * bl,
            lh: al * bh,
            ll: al * bl,
            mid: o.hl + o.lh,
            hilo: ((o.hh as u64) << 32 | (o.ll as u64 & 0xFFFF_FFFF)) as i64,
            prod: o.hilo.wrapping_add(o.mid << 16),
        }
    }
}

/// [`Mul32Stages`] in Verilog on the inputs `a` and `b`, with its own always
/// block. Each partial product is a signed 17×17 multiply (one MULT18X18D):
/// the low halves unsigned, the high halves with their sign bit when `signed`,
/// else with a zero.
fn mul32_verilog(a: &str, b: &str, signed: bool) -> String {
    let ext = |v: &str| if signed { format!("{v}[31]") } else { "1'b0".into() };
    // Verilator's form: the whole product at the first edge (one 64-bit
    // multiply; `(zext(x) ^ s) − s` sign-extends), then two registers to
    // `prod`, where the synthesis form's four partial products, their sums
    // and seven registers were each computed every cycle. It replaces the
    // lines from the wires to the clocked block's end: `` `ifndef ``
    // ends `prod`'s line, the form and `` `endif `` the block's last, so
    // synthesis reads every token where it was (`synthesis::synthesis_text`).
    let wide = |v: &str| {
        if signed {
            format!("(({{32'd0, {v}}} ^ 64'h80000000) - 64'h80000000)")
        } else {
            format!("{{32'd0, {v}}}")
        }
    };
    let fast = format!(
        "reg [63:0] vm1 = 0; reg [63:0] vm2 = 0; \
         always @(posedge clock) begin vm1 <= {} * {}; vm2 <= vm1; prod <= vm2; end",
        wide(a),
        wide(b)
    );
    format!(
        "\
reg signed [31:0] hh = 0;
reg signed [32:0] hl = 0;
reg signed [32:0] lh = 0;
reg [31:0] ll = 0;
reg signed [33:0] mid = 0;
reg [63:0] hilo = 0;
reg signed [63:0] prod = 0; `ifndef VERILATOR
wire signed [16:0] ah = {{{ea}, {a}[31:16]}};
wire signed [16:0] al = {{1'b0, {a}[15:0]}};
wire signed [16:0] bh = {{{eb}, {b}[31:16]}};
wire signed [16:0] bl = {{1'b0, {b}[15:0]}};
wire signed [33:0] phh = ah * bh;
wire signed [33:0] phl = ah * bl;
wire signed [33:0] plh = al * bh;
wire signed [33:0] pll = al * bl;
always @(posedge clock) begin
   hh <= phh[31:0];
   hl <= phl[32:0];
   lh <= plh[32:0];
   ll <= pll[31:0];
   mid <= hl + lh;
   hilo <= {{hh, ll}};
   prod <= $signed(hilo) + ({{{{30{{mid[33]}}}}, mid}} <<< 16);
end `else {fast} `endif
",
        ea = ext(a),
        eb = ext(b)
    )
}

/// The registers of `q = round_half_away(x · mult / 2^shift)` on signed 32-bit
/// `x` and `mult` (64-bit `q`), named as in [`mul_shift_verilog`], which
/// [`RequantPipe`] and [`ScaleRoundPipe`] share: the product
/// ([`Mul32Stages`]), then the rounding add, the shift by `8·shift[5:3]`, by
/// `shift[2:0]`; no stage holds more than one carry chain or a few mux
/// levels. The rounding constants `2^(shift-1)` and `2^(shift-1) - 1` are
/// decoded from a registered copy of `shift` by shifts of constants (decoders
/// without a carry chain; a loop of 64 compares is the same logic, but
/// simulators execute it bit by bit every cycle), so `shift` must be steady.
#[derive(Default, Clone, Copy)]
struct MulShiftStages {
    mul: Mul32Stages,
    sr: u32,
    hpos: i64,
    hneg: i64,
    neg1: bool,
    neg2: bool,
    adj: i64,
    sum: i64,
    t: i64,
    q: i64,
}

impl MulShiftStages {
    /// Cycles from `x` to `q`.
    const LATENCY: usize = Mul32Stages::LATENCY + 3;

    /// The registers after a clock edge with inputs `x`, `mult` (32 bits) and `shift` (6 bits).
    fn step(self, x: u64, mult: u64, shift: u64) -> Self {
        let o = self;
        let (x, m) = (x as u32 as i32 as i64, mult as u32 as i32 as i64);
        Self {
            mul: o.mul.step(x, m),
            sr: shift as u32,
            hpos: if o.sr == 0 { 0 } else { 1 << (o.sr - 1) },
            hneg: if o.sr == 0 { 0 } else { (1 << (o.sr - 1)) - 1 },
            neg1: (x < 0) != (m < 0) && x != 0 && m != 0,
            neg2: o.neg1,
            adj: if o.neg2 { o.hneg } else { o.hpos },
            sum: o.mul.prod.wrapping_add(o.adj),
            t: o.sum >> (o.sr & 0x38),
            q: o.t >> (o.sr & 7),
        }
    }
}

/// [`MulShiftStages`] in Verilog, on the inputs `x`, `mult`, `shift`.
fn mul_shift_verilog() -> String {
    let mul = mul32_verilog("x", "mult", true);
    format!(
        "\
{mul}reg [5:0] sr = 0;
reg [63:0] hpos = 0;
reg [63:0] hneg = 0;
reg neg1 = 0;
reg neg2 = 0;
reg [63:0] adj = 0;
reg signed [63:0] sum = 0;
reg signed [63:0] t = 0;
reg signed [63:0] q = 0;
always @(posedge clock) begin
   sr <= shift;
   hpos <= (64'd1 << sr) >> 1;
   hneg <= ~(64'hFFFFFFFFFFFFFFFF << sr) >> 1;
   neg1 <= (x[31] != mult[31]) && (x != 32'd0) && (mult != 32'd0);
   neg2 <= neg1;
   adj <= neg2 ? hneg : hpos;
   sum <= prod + $signed(adj);
   t <= sum >>> {{sr[5:3], 3'b000}};
   q <= t >>> sr[2:0];
end"
    )
}

/// Unsigned 32×32 → 64-bit multiply ([`Mul32Stages`]), [`MulU32Pipe::LATENCY`]
/// cycles from `a`, `b` to `p`: products off the critical paths (the GEMM
/// writer's row address, the attention heads' offsets, the MoE capacity).
#[derive(LogicBlock, Default)]
pub struct MulU32Pipe {
    pub clock: Signal<In, Clock>,
    pub a: Signal<In, Bits<32>>,
    pub b: Signal<In, Bits<32>>,
    pub p: Signal<Out, Bits<64>>,
    _s: Mul32Stages,
}

impl MulU32Pipe {
    pub const LATENCY: usize = Mul32Stages::LATENCY;
}

impl Logic for MulU32Pipe {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            self._s = self._s.step(to_u64(self.a.val()) as i64, to_u64(self.b.val()) as i64);
            self.p.next = (self._s.prod as u64).to_bits();
        }
    }
    fn connect(&mut self) {
        self.p.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(format!("{}always @(*) p = prod;", mul32_verilog("a", "b", false)))
    }
}

/// `n` lanes of `L` bits side by side in a `W`-bit bus, lane 0 in the low
/// bits, the rest zero: the concatenation rust-hdl cannot write. Placing each
/// lane with a shift and OR-ing the results is the same logic, but simulators
/// execute every shift and OR over the full bus width (Verilator: calls to
/// `VL_SHIFTL_WWI` per lane per cycle); a concatenation is copies of words.
#[derive(LogicBlock)]
pub struct Pack<const L: usize, const W: usize> {
    pub lanes: Vec<Signal<In, Bits<L>>>,
    pub out: Signal<Out, Bits<W>>,
}

impl<const L: usize, const W: usize> Pack<L, W> {
    pub fn new(n: usize) -> Self {
        assert!(n >= 1 && n * L <= W, "{n} lanes of {L} bits do not fit {W} bits");
        Self { lanes: crate::many(n), out: Default::default() }
    }
}

impl<const L: usize, const W: usize> Logic for Pack<L, W> {
    fn update(&mut self) {
        let mut bus = Bits::<W>::default();
        for (i, lane) in self.lanes.iter().enumerate() {
            bus = bus | (bit_cast::<W, L>(lane.val()) << (i * L) as u64);
        }
        self.out.next = bus;
    }
    fn connect(&mut self) {
        self.out.connect();
    }
    fn hdl(&self) -> Verilog {
        let n = self.lanes.len();
        let mut parts: Vec<String> = (0..n).rev().map(|i| format!("lanes${i}")).collect();
        if n * L < W {
            parts.insert(0, format!("{}'d0", W - n * L));
        }
        Verilog::Custom(format!("always @(*) out = {{{}}};", parts.join(", ")))
    }
}

/// A register loaded with `d >> sh` on the edges where `en` is set (0 at
/// start): a row picked out of a wider beat. A `DFF` whose `d` is `q` unless
/// enabled, fed by the shift, is the same hardware, but rust-hdl writes the
/// shift and the hold in the parent's combinational block and simulators
/// execute both every cycle: for a wide row Verilator shifts, zeroes a
/// temporary and copies the row three times a cycle. Here the row is shifted
/// and copied on enabled edges only.
#[derive(LogicBlock, Default)]
pub struct ShrReg<const N: usize> {
    pub clock: Signal<In, Clock>,
    pub en: Signal<In, Bit>,
    pub d: Signal<In, Bits<N>>,
    pub sh: Signal<In, Bits<16>>,
    pub q: Signal<Out, Bits<N>>,
}

impl<const N: usize> Logic for ShrReg<N> {
    fn update(&mut self) {
        if self.clock.pos_edge() && self.en.val() {
            self.q.next = self.d.val() >> self.sh.val();
        }
    }
    fn connect(&mut self) {
        self.q.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(format!("initial q = {N}'d0;\nalways @(posedge clock) if (en) q <= d >> sh;"))
    }
}

/// [`SkewLine`] for wide rows, `din >> sh` delayed `depth ≥ 2` edges: `dout`
/// holds, after edge t, the `din >> sh` of edge t − depth + 1 (0 before).
/// A ring of `depth − 1` rows (distributed RAM: one write, one read a
/// cycle) and the output register, where a `SkewLine` shifts `depth`
/// registers every cycle, which simulators copy row by row.
#[derive(LogicBlock)]
pub struct RowDelay<const N: usize> {
    pub clock: Signal<In, Clock>,
    pub din: Signal<In, Bits<N>>,
    pub sh: Signal<In, Bits<16>>,
    pub dout: Signal<Out, Bits<N>>,
    /// The model: the rows written, oldest first.
    _line: std::collections::VecDeque<Bits<N>>,
}

impl<const N: usize> RowDelay<N> {
    pub fn new(depth: usize) -> Self {
        assert!((2..=256).contains(&depth));
        with_defaults!(Self {
            _line: std::iter::repeat_n(Bits::default(), depth - 1).collect(),
            .. clock, din, sh, dout
        })
    }
}

impl<const N: usize> Logic for RowDelay<N> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            if let Some(oldest) = self._line.pop_front() {
                self.dout.next = oldest;
            }
            self._line.push_back(self.din.val() >> self.sh.val());
        }
    }
    fn connect(&mut self) {
        self.dout.connect();
    }
    fn hdl(&self) -> Verilog {
        let slots = self._line.len();
        let pb = usize::BITS as usize - (slots - 1).max(1).leading_zeros() as usize;
        Verilog::Custom(format!(
            "\
reg [{msb}:0] mem[0:{last}];
reg [{pmsb}:0] ptr = 0;
integer i;
initial begin
   dout = {N}'d0;
   for (i = 0; i < {slots}; i = i + 1) mem[i] = {N}'d0;
end
always @(posedge clock) begin
   dout <= mem[ptr];
   mem[ptr] <= din >> sh;
   ptr <= (ptr == {pb}'d{last}) ? {pb}'d0 : ptr + {pb}'d1;
end",
            msb = N - 1,
            last = slots - 1,
            pmsb = pb - 1,
        ))
    }
}

/// The row being written out: on a `load` edge, row `sel` of `rows` (or, with
/// `out8`, of `rows8` widened with zeros); on a `shift` edge (never with
/// `load`), itself shifted down by `step` bits. 0 at start. Only the bits of
/// `sel` that index the rows are decoded (none for one row), so `sel` must be
/// below their count; past it in those bits, `rows` holds and `rows8` gives 0.
/// As a `DFF` with these as its `d`, simulators selected and copied the wide
/// rows every cycle. `load` and `shift` come as `copies` equal bits (kept
/// copies, [`Copies`]), bit c enabling the c-th of `copies` slices of the
/// `used` low bits of `q` (the last slice holds the bits above them too).
#[derive(LogicBlock)]
pub struct RowPick<const R: usize, const R8: usize> {
    pub clock: Signal<In, Clock>,
    pub load: Signal<In, Bits<4>>,
    pub shift: Signal<In, Bits<4>>,
    pub sel: Signal<In, Bits<32>>,
    pub out8: Signal<In, Bit>,
    pub rows: Vec<Signal<In, Bits<R>>>,
    pub rows8: Vec<Signal<In, Bits<R8>>>,
    pub q: Signal<Out, Bits<R>>,
    _step: u64,
    _used: usize,
    _copies: usize,
}

impl<const R: usize, const R8: usize> RowPick<R, R8> {
    pub fn new(n: usize, step: usize, used: usize, copies: usize) -> Self {
        assert!(n >= 1 && R8 <= R && step < R && (1..=4).contains(&copies) && copies <= used && used <= R);
        Self {
            clock: Default::default(),
            load: Default::default(),
            shift: Default::default(),
            sel: Default::default(),
            out8: Default::default(),
            rows: crate::many(n),
            rows8: crate::many(n),
            q: Default::default(),
            _step: step as u64,
            _used: used,
            _copies: copies,
        }
    }
}

/// Bits of a select among `n` rows (at least one).
fn sel_bits(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()).max(1) as usize
}

impl<const R: usize, const R8: usize> Logic for RowPick<R, R8> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            if self.load.val().get_bit(0) {
                let i = self.sel.val().index() & ((1 << sel_bits(self.rows.len())) - 1);
                if self.out8.val() {
                    self.q.next = self.rows8.get(i).map_or(Bits::default(), |r| bit_cast::<R, R8>(r.val()));
                } else if let Some(r) = self.rows.get(i) {
                    self.q.next = r.val();
                }
            } else if self.shift.val().get_bit(0) {
                self.q.next = self.q.val() >> self._step;
            }
        }
    }
    fn connect(&mut self) {
        self.q.connect();
    }
    fn hdl(&self) -> Verilog {
        let wide8 = |i: usize| if R8 < R { format!("{{{}'d0, rows8${i}}}", R - R8) } else { format!("rows8${i}") };
        let k = sel_bits(self.rows.len());
        let n = self.rows.len();
        let wires: String = (0..n).map(|i| format!("wire [{}:0] rw8_{i} = {};\n", R - 1, wide8(i))).collect();
        let c = self._copies;
        let slices: String = (0..c)
            .map(|s| {
                let lo = s * self._used / c;
                let hi = if s + 1 == c { R - 1 } else { (s + 1) * self._used / c - 1 };
                let arms: String = (0..n)
                    .map(|i| {
                        format!("         {k}'d{i}: q[{hi}:{lo}] <= out8 ? rw8_{i}[{hi}:{lo}] : rows${i}[{hi}:{lo}];\n")
                    })
                    .collect();
                format!(
                    "   if (load[{s}])
      case (sel[{kmsb}:0])
{arms}         default: if (out8) q[{hi}:{lo}] <= {w}'d0;
      endcase
   else if (shift[{s}]) q[{hi}:{lo}] <= qsh[{hi}:{lo}];
",
                    kmsb = k - 1,
                    w = hi - lo + 1,
                )
            })
            .collect();
        Verilog::Custom(format!(
            "\
initial q = {R}'d0;
{wires}wire [{rmsb}:0] qsh = q >> {step};
always @(posedge clock) begin
{slices}end",
            rmsb = R - 1,
            step = self._step,
        ))
    }
}

/// A bus carried beside a pipeline of one or two stages: `q` is `d` delayed
/// by the stages, `s` the bus as the last stage sees it (`d` itself, or `d`
/// registered once with `cut`). 0 at start. The same registers as a `DFF`
/// per stage with a selected `s`, but rust-hdl wrote the selection as two
/// assignments, which simulators execute over the whole bus every cycle
/// (Verilator: a zeroed temporary and copies); here the bus is copied only
/// from register to register.
#[derive(LogicBlock)]
pub struct Carry<const N: usize> {
    pub clock: Signal<In, Clock>,
    pub d: Signal<In, Bits<N>>,
    pub s: Signal<Out, Bits<N>>,
    pub q: Signal<Out, Bits<N>>,
    _cut: Option<Bits<N>>,
}

impl<const N: usize> Carry<N> {
    pub fn new(cut: bool) -> Self {
        with_defaults!(Self {
            _cut: cut.then(Bits::default),
            .. clock, d, s, q
        })
    }
}

impl<const N: usize> Logic for Carry<N> {
    fn update(&mut self) {
        match &mut self._cut {
            Some(s1) => {
                if self.clock.pos_edge() {
                    self.q.next = *s1;
                    *s1 = self.d.val();
                }
                self.s.next = *s1;
            }
            None => {
                if self.clock.pos_edge() {
                    self.q.next = self.d.val();
                }
                self.s.next = self.d.val();
            }
        }
    }
    fn connect(&mut self) {
        self.s.connect();
        self.q.connect();
    }
    fn hdl(&self) -> Verilog {
        let body = if self._cut.is_some() {
            format!(
                "\
reg [{msb}:0] s1 = {N}'d0;
initial q = {N}'d0;
always @(posedge clock) begin
   s1 <= d;
   q <= s1;
end
always @(*) s = s1;",
                msb = N - 1
            )
        } else {
            format!("initial q = {N}'d0;\nalways @(posedge clock) q <= d;\nalways @(*) s = d;")
        };
        Verilog::Custom(body)
    }
}

/// A row of `C`-bit elements filled two at a time from the top: on an edge
/// with `en` set, `q <= (q >> 2C) | lo << top | hi << (top + C)`, with
/// `top = C·(n − 2)` for a row of n elements (0 at start). After n/2 enabled
/// edges the row holds the n pairs in order, the first at the bottom. As a
/// [`ShrReg`], it is written on enabled edges only.
#[derive(LogicBlock)]
pub struct PairShiftRow<const C: usize, const N: usize> {
    pub clock: Signal<In, Clock>,
    pub en: Signal<In, Bit>,
    pub lo: Signal<In, Bits<C>>,
    pub hi: Signal<In, Bits<C>>,
    pub q: Signal<Out, Bits<N>>,
    _top: usize,
}

impl<const C: usize, const N: usize> PairShiftRow<C, N> {
    /// A row of `n ≥ 2` elements (`n·C ≤ N`); the bits above them stay 0.
    pub fn new(n: usize) -> Self {
        assert!(n >= 2 && n * C <= N, "{n} elements of {C} bits do not fit {N} bits");
        with_defaults!(Self {
            _top: C * (n - 2),
            .. clock, en, lo, hi, q
        })
    }
}

impl<const C: usize, const N: usize> Logic for PairShiftRow<C, N> {
    fn update(&mut self) {
        if self.clock.pos_edge() && self.en.val() {
            let top = self._top as u64;
            self.q.next = (self.q.val() >> (2 * C) as u64)
                | (bit_cast::<N, C>(self.lo.val()) << top)
                | (bit_cast::<N, C>(self.hi.val()) << (top + C as u64));
        }
    }
    fn connect(&mut self) {
        self.q.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(format!(
            "\
initial q = {N}'d0;
always @(posedge clock) if (en)
   q <= (q >> {c2}) | ({{{pad}'d0, lo}} << {top}) | ({{{pad}'d0, hi}} << {top_hi});",
            c2 = 2 * C,
            pad = N - C,
            top = self._top,
            top_hi = self._top + C,
        ))
    }
}

fn to_i64<const N: usize>(b: Signed<N>) -> i64 {
    let raw = unsigned_cast(b).get_bits::<64>(0).to_u64();
    // sign-extend from N bits
    ((raw << (64 - N)) as i64) >> (64 - N)
}

fn from_i64<const N: usize>(v: i64) -> Signed<N> {
    signed_cast(((v as u64) & (u64::MAX >> (64 - N))).to_bits())
}

/// One online-softmax accumulator (`l`, or one `o[x]`): `acc ← round(acc / 2^s) + a`
/// (rounding half away from zero, the sum wrapping in `N` bits), or `acc ← a`
/// on a block's first step, with the rescale taken out of the loop. A step
/// whose running maximum rose (s > 0) takes three cycles: in the cycle of
/// `hold` the instance registers `acc >>> 8·(s >> 3)` and the rounding
/// decode's eight partial ORs, in the next (`mid`) `acc` takes the rest of
/// the shift, `acc >>> s`, and c the rounding bit, and the third adds them,
/// `({acc, c} + {a, c}) >> 1` (the parent's `upd` is low in the first two);
/// other steps add `a` to `acc` in one cycle, c 0. So the loop is one carry
/// chain with a select after it, and the shifter and the rounding decode are
/// two registered stages: in one stage each (`acc` → 6-level shift, `acc` →
/// 48-bit AND-OR tree → c) they were the attention unit's critical paths,
/// and a select of `acc >>> s` before the add (on `post`, fan-out 49) the
/// next (docs/timing.md).
///
/// `s` is `sh` as of the last `load` (the parent's step entering the stage
/// before this one), copied into each instance under `(* keep *)` (yosys
/// merges equal flip-flops, and one shared register's fan-out across the lane
/// was a path of its own), as is `hold` a cycle later. The shift's first
/// stage is registered in `hold` cycles only (simulators then skip it on the
/// other steps). `hot` marks bit s − 1
/// of the same s (none when s = 0) and `lo` the bits below it, decoded once
/// by the parent for all its instances; the model takes them as given.
#[derive(LogicBlock, Default)]
pub struct RescaleAcc<const N: usize> {
    pub clock: Signal<In, Clock>,
    pub load: Signal<In, Bit>,
    pub sh: Signal<In, Bits<6>>,
    pub hot: Signal<In, Bits<64>>,
    pub lo: Signal<In, Bits<64>>,
    pub hold: Signal<In, Bit>,
    pub upd: Signal<In, Bit>,
    pub first: Signal<In, Bit>,
    pub a: Signal<In, Signed<N>>,
    pub y: Signal<Out, Signed<N>>,
    _st: RescaleState,
}

/// A [`RescaleAcc`]'s model registers: the shift, `hold` one and two cycles
/// late, the accumulator, the shift `acc >>> s` and its rounding bit
/// (registered in `hold`, the shift's first stage in the hardware), c.
#[derive(Clone, Copy, Default)]
struct RescaleState {
    s: u32,
    mid: bool,
    acc: i64,
    fl: i64,
    rc: bool,
    c: bool,
}

impl<const N: usize> Logic for RescaleAcc<N> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let ctl = (self.load.val(), self.sh.val(), self.hold.val(), self.upd.val(), self.first.val());
            let a = to_i64(self.a.val());
            rescale_step::<N>(&mut self._st, ctl, a);
        }
        self.y.next = from_i64(self._st.acc);
    }
    fn connect(&mut self) {
        self.y.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(format!("{}always @(*) y = acc;", rescale_verilog(N, "", "a")))
    }
}

/// One edge of a [`RescaleAcc`]'s model (also each of a [`RescaleRow`]'s
/// accumulators): `ctl` is (load, sh, hold, upd, first), `a` the addend.
fn rescale_step<const N: usize>(st: &mut RescaleState, ctl: (bool, Bits<6>, bool, bool, bool), a: i64) {
    let (load, sh, hold, upd, first) = ctl;
    let wrap = |v: i64| (v << (64 - N)) >> (64 - N);
    let old = st.acc;
    if st.mid {
        st.acc = st.fl;
    } else if upd {
        st.acc = if first { a } else { wrap(old.wrapping_add(a) + i64::from(st.c)) };
    }
    st.c = st.mid && st.rc;
    if hold {
        let s = st.s.min(62);
        st.fl = old >> s;
        st.rc = crate::numerics::round_shift(old, s) != st.fl;
    }
    st.mid = hold;
    if load {
        st.s = to_u64(sh) as u32;
    }
}

/// A [`RescaleAcc`]'s registers and logic in Verilog, its names suffixed by
/// `sfx` (`acc{sfx}` is the accumulator), adding the expression `a`; reads
/// the ports `clock`, `load`, `sh`, `hot`, `lo`, `hold`, `upd`, `first`.
/// The shift's first stage and the rounding decode's partial ORs are
/// written out in the `hold` block rather than as wires of `acc` (the same
/// logic): simulators evaluate a wire every cycle, these only in `hold`
/// cycles. The add's carry-in is
/// `c + 1` in bit 0 rather than `c + c`: the carry out of bit 0 is c
/// either way, and bit 0 is dropped, so `c` is read once (yosys maps both
/// to the same cells; Verilator computed the carry-in into a variable of its own).
fn rescale_verilog(n: usize, sfx: &str, a: &str) -> String {
    rescale_verilog_ctl(n, sfx, a, ["load", "sh", "hold", "upd", "first"], None)
}

/// [`rescale_verilog`] reading its controls `load`, `sh`, `hold`, `upd`,
/// `first` from the signals named in `ctl` (in that order). With `clear`
/// (a signal's name) `first` is not read: `acc` clears on `clear` (below
/// `hold`'s second cycle and `upd`), and every step adds, so the parent must
/// clear each accumulator (with c 0) before a block's first step. The sum
/// then reaches `acc` through one LUT (`mid`'s select), not two.
fn rescale_verilog_ctl(n: usize, sfx: &str, a: &str, ctl: [&str; 5], clear: Option<&str>) -> String {
    let [load, sh, hold, upd, first] = ctl;
    let upd_to = match clear {
        None => format!("{first} ? {a} : sum{sfx}[{n}:1];"),
        Some(cl) => format!("sum{sfx}[{n}:1];\n   else if ({cl}) acc{sfx} <= 0;"),
    };
    // c: the bit below the cut (`hot`), and for negative acc also any bit
    // under it (`lo`): AND-OR trees, ORed in eight bytes into registers (`ch`,
    // `cl`) and then into c. The shift: by whole bytes (`f1`), then the rest.
    assert!(n.is_multiple_of(8) && n < 64);
    let (msb, xe) = (n - 1, format!("{{{{{}{{acc{sfx}[{}]}}}}, acc{sfx}}}", 64 - n, n - 1));
    let acc = format!("acc{sfx}");
    let (ch, cl) = (rescale_ors(&acc, n, "hot"), rescale_ors(&acc, n, "lo"));
    format!(
        "\
reg [5:0] sr{sfx};
(* keep *) always @(posedge clock) if ({load}) sr{sfx} <= {sh};
reg mid{sfx};
(* keep *) always @(posedge clock) mid{sfx} <= {hold};
reg signed [{msb}:0] acc{sfx};
reg signed [{msb}:0] f1{sfx};
reg [7:0] ch{sfx}, cl{sfx};
always @(posedge clock) if ({hold}) begin
   f1{sfx} <= $signed({xe}) >>> {{sr{sfx}[5:3], 3'd0}};
   ch{sfx} <= {{{ch}}};
   cl{sfx} <= {{{cl}}};
end
reg c{sfx};
always @(posedge clock) c{sfx} <= mid{sfx} && (|ch{sfx}) && (!f1{sfx}[{msb}] || (|cl{sfx}));
wire [{n}:0] sum{sfx} = {{acc{sfx}, c{sfx}}} + {{{a}, 1'b1}};
always @(posedge clock)
   if (mid{sfx}) acc{sfx} <= f1{sfx} >>> sr{sfx}[2:0];
   else if ({upd}) acc{sfx} <= {upd_to}
"
    )
}

/// The rounding decode's partial ORs for an `n`-bit accumulator named `acc`:
/// byte b of `acc` sign-extended to 64 bits ANDed with byte b of `mask`
/// (`hot` or `lo`) and ORed, bytes 7 down to 0, as a concatenation's items.
fn rescale_ors(acc: &str, n: usize, mask: &str) -> String {
    let byte = |b: usize| match 8 * b {
        l if l < n => format!("{acc}[{}:{l}]", l + 7),
        _ => format!("{{8{{{acc}[{}]}}}}", n - 1),
    };
    let v: Vec<String> = (0..8).rev().map(|b| format!("|({} & {mask}[{}:{}])", byte(b), 8 * b + 7, 8 * b)).collect();
    v.join(", ")
}

/// A FIFO of rows of `n ≤ W` bits (the bits of `din` below n; a run-time
/// width) with its head registered: on a `pop` edge `q` takes the head (the
/// oldest row, or any row when empty), the bits of `q` above n stay 0. The
/// pointers are those of a [`Fifo`] of the same depth (`reset` empties it).
/// A `Fifo` of `W`-bit entries read into a `DFF` is the same for rows of W
/// bits, but simulators copied all W bits in and out of the entry and the
/// register, and held the register, every cycle.
#[derive(LogicBlock)]
pub struct RowBacklog<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub push: Signal<In, Bit>,
    pub din: Signal<In, Bits<W>>,
    pub pop: Signal<In, Bit>,
    pub q: Signal<Out, Bits<W>>,
    _n: usize,
    _mem: Vec<Bits<W>>,
    _state: (usize, usize),
}

impl<const W: usize> RowBacklog<W> {
    pub fn new(n: usize, depth: usize) -> Self {
        assert!((1..=W).contains(&n) && depth.is_power_of_two() && (2..=1 << 15).contains(&depth));
        with_defaults!(Self {
            _n: n,
            _mem: vec![Bits::default(); depth],
            _state: (0, 0),
            .. clock, reset, push, din, pop, q
        })
    }
}

impl<const W: usize> Logic for RowBacklog<W> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let depth = self._mem.len();
            let (rd, wr) = self._state;
            if self.pop.val() {
                self.q.next = self._mem[rd % depth];
            }
            let (mut nrd, mut nwr) = (rd, wr);
            if self.reset.val() {
                (nrd, nwr) = (0, 0);
            } else {
                if self.push.val() {
                    let ones = !Bits::<W>::default();
                    let keep = if self._n == W { ones } else { !(ones << self._n as u64) };
                    self._mem[wr % depth] = self.din.val() & keep;
                    nwr = wr + 1;
                }
                if self.pop.val() && rd != wr {
                    nrd = rd + 1;
                }
            }
            self._state = (nrd % (2 * depth), nwr % (2 * depth));
        }
    }
    fn connect(&mut self) {
        self.q.connect();
    }
    fn hdl(&self) -> Verilog {
        let depth = self._mem.len();
        let pb = depth.trailing_zeros() as usize + 1;
        Verilog::Custom(format!(
            "\
reg [{nmsb}:0] mem[0:{last}];
reg [{pmsb}:0] rd = 0;
reg [{pmsb}:0] wr = 0;
initial q = {W}'d0;
always @(posedge clock) begin
   if (pop) q[{nmsb}:0] <= mem[rd[{amsb}:0]];
   if (reset) begin
      rd <= 0;
      wr <= 0;
   end else begin
      if (push) begin
         mem[wr[{amsb}:0]] <= din[{nmsb}:0];
         wr <= wr + 1;
      end
      if (pop && (wr != rd)) rd <= rd + 1;
   end
end",
            nmsb = self._n - 1,
            last = depth - 1,
            pmsb = pb - 1,
            amsb = pb - 2,
        ))
    }
}

/// `y = round(o · r / 2^16)` (low 32 bits, rounding half away from zero) for
/// a 48-bit signed `o` and unsigned `r` as a free-running pipeline of
/// [`MulRound16Pipe::LATENCY`] stages, of the `o`, `r` held `LATENCY` cycles
/// earlier: the attention output `o / l` in Q16 once `r = floor(2^32 / l)`. Only bits 16..47 of the product reach `y`, so the
/// product is taken mod 2^48: five unsigned 16×16 partial products (one
/// MULT18X18D each, registered on both sides), then their sums, one carry
/// chain per stage. In one cycle it was the attention unit's critical path
/// (docs/timing.md).
#[derive(LogicBlock, Default)]
pub struct MulRound16Pipe {
    pub clock: Signal<In, Clock>,
    pub o: Signal<In, Signed<48>>,
    pub r: Signal<In, Bits<32>>,
    pub y: Signal<Out, Bits<32>>,
    _q: [u32; MulRound16Pipe::LATENCY],
}

impl MulRound16Pipe {
    /// Cycles from `o`, `r` to `y`: partial products, their sums, bits 16..47
    /// of the low sum plus the middle one, plus the high one.
    pub const LATENCY: usize = 4;
}

impl Logic for MulRound16Pipe {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let y = mul_round16(to_i64(self.o.val()), to_u64(self.r.val()));
            self.y.next = (delay(&mut self._q, y) as u64).to_bits();
        }
    }
    fn connect(&mut self) {
        self.y.connect();
    }
    fn hdl(&self) -> Verilog {
        // p mod 2^48 = ll + (lh + ml)·2^16 + (mh + hl)·2^32 on the 16-bit
        // pieces of o (ol, om, oh) and r (rl, rh); y = bits 16..47 of
        // p + 2^15 − [p < 0], which is (llr >> 16) + mid1 + mid2·2^16 mod 2^32
        // with llr = ll + 2^15 − [p < 0].
        Verilog::Custom(
            "\
reg [31:0] ll = 0;
reg [31:0] lh = 0;
reg [31:0] ml = 0;
reg [31:0] mh = 0;
reg [31:0] hl = 0;
reg neg1 = 0;
reg [32:0] llr = 0;
reg [32:0] mid1 = 0;
reg [15:0] mid2 = 0;
reg [31:0] a = 0;
reg [15:0] mid2b = 0;
always @(posedge clock) begin
   ll <= o[15:0] * r[15:0];
   lh <= o[15:0] * r[31:16];
   ml <= o[31:16] * r[15:0];
   mh <= o[31:16] * r[31:16];
   hl <= o[47:32] * r[15:0];
   neg1 <= o[47] && (r != 32'd0);
   llr <= {1'b0, ll} + (neg1 ? 33'd32767 : 33'd32768);
   mid1 <= {1'b0, lh} + {1'b0, ml};
   mid2 <= mh[15:0] + hl[15:0];
   a <= {15'd0, llr[32:16]} + mid1[31:0];
   mid2b <= mid2;
   y <= {a[31:16] + mid2b, a[15:0]};
end"
            .into(),
        )
    }
}

/// `round(o · r / 2^16)` (half away from zero) to 32 bits, exactly for every
/// 48-bit `o` and 32-bit `r` (the product can pass 64 bits).
fn mul_round16(o: i64, r: u64) -> u32 {
    let p = o as i128 * r as i128;
    ((p + (1 << 15) - (p < 0) as i128) >> 16) as u32
}

/// Verilog of a binary tree over the `n` leaves `leaf(i)`: node `i` of level
/// `l` is `join(l, a, b)` of nodes `2i` and `2i + 1` of level `l − 1`, or node
/// `2i` passed on when it has no sibling; a level `l` is `width(l)` bits a
/// node, registers `r<l>_<i>` (on `clock`) where `reg(l)`, else wires
/// `w<l>_<i>`. Returns the logic and the root's name. The pipelined adder and
/// comparator trees ([`DotI8Pipe`], [`AddTree16Pipe`], [`ArgMaxPipe`]) are
/// this with their own leaves, join and registered levels.
fn tree_verilog(
    n: usize,
    width: impl Fn(usize) -> usize,
    reg: impl Fn(usize) -> bool,
    leaf: impl Fn(usize) -> String,
    join: impl Fn(usize, &str, &str) -> String,
) -> (String, String) {
    let name = |l: usize, i: usize| format!("{}{l}_{i}", if reg(l) { 'r' } else { 'w' });
    let (mut decl, mut seq, mut comb) = (String::new(), String::new(), String::new());
    let root = tree_walk(n, &name, leaf, join, |l, i, v| {
        let (z, msb) = (name(l, i), width(l) - 1);
        if reg(l) {
            decl += &format!("reg [{msb}:0] {z} = 0;\n");
            seq += &format!("   {z} <= {v};\n");
        } else {
            decl += &format!("wire [{msb}:0] {z};\n");
            comb += &format!("assign {z} = {v};\n");
        }
    });
    let seq = if seq.is_empty() { seq } else { format!("always @(posedge clock) begin\n{seq}end\n") };
    (format!("{decl}{comb}{seq}"), root)
}

/// The nodes of [`tree_verilog`]'s tree, leaves first and then level by level:
/// `node(l, i, v)` with `v` the node's value (its leaf, the join of its two
/// children's names, or its one child's name). Returns the root's name.
fn tree_walk(
    n: usize,
    name: &dyn Fn(usize, usize) -> String,
    leaf: impl Fn(usize) -> String,
    join: impl Fn(usize, &str, &str) -> String,
    mut node: impl FnMut(usize, usize, String),
) -> String {
    (0..n).for_each(|i| node(0, i, leaf(i)));
    let (mut l, mut m) = (0, n);
    while m > 1 {
        l += 1;
        for i in 0..m.div_ceil(2) {
            let a = name(l - 1, 2 * i);
            node(l, i, if 2 * i + 1 < m { join(l, &a, &name(l - 1, 2 * i + 1)) } else { a });
        }
        m = m.div_ceil(2);
    }
    name(l, 0)
}

/// Shift `v` into a model's delay line `q` (the newest first) and return what
/// leaves it: a pipeline's output, `q.len()` clock edges after its input.
fn delay<T: Copy>(q: &mut [T], v: T) -> T {
    q.rotate_right(1);
    q[0] = v;
    q[q.len() - 1]
}

/// The dot product of the first `n` int8 pairs of two packed rows as a
/// free-running pipeline: the `n` 8×8 products registered (a MULT18X18D each,
/// registered on both sides), then a binary adder tree with a register after
/// every `per_stage` levels and at its root, each level only as wide as its
/// sums (16 + level bits), sign-extended to 32 bits. `dot` is the dot product
/// of the rows held [`DotI8Pipe::latency`] cycles earlier; it never wraps
/// (|dot| ≤ 128 · 2^14). The attention lanes' q·k and the MoE gate lanes'
/// x·w register every level; in one cycle, products and tree were each
/// unit's critical path (docs/timing.md).
#[derive(LogicBlock)]
pub struct DotI8Pipe<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub a: Signal<In, Bits<W>>,
    pub b: Signal<In, Bits<W>>,
    pub dot: Signal<Out, Signed<32>>,
    _n: usize,
    _per_stage: usize,
    /// The model: the dot products in flight.
    _q: Vec<i64>,
}

impl<const W: usize> DotI8Pipe<W> {
    /// Cycles from `a`, `b` to `dot`: the products, then one per `per_stage`
    /// of the log2(n) adder levels (the last stage may hold fewer).
    pub const fn latency(n: usize, per_stage: usize) -> usize {
        1 + (n.trailing_zeros() as usize).div_ceil(per_stage)
    }

    pub fn new(n: usize, per_stage: usize) -> Self {
        assert!(n.is_power_of_two() && n <= 128 && 8 * n <= W, "{n} int8 pairs in {W} bits");
        assert!(per_stage >= 1);
        with_defaults!(Self {
            _n: n,
            _per_stage: per_stage,
            _q: vec![0; Self::latency(n, per_stage)],
            .. clock, a, b, dot
        })
    }
}

impl<const W: usize> Logic for DotI8Pipe<W> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let byte = |v: Bits<W>, i: usize| v.get_bits::<8>(8 * i).to_u64() as u8 as i8 as i64;
            let dot = (0..self._n).map(|i| byte(self.a.val(), i) * byte(self.b.val(), i)).sum();
            self.dot.next = from_i64(delay(&mut self._q, dot));
        }
    }
    fn connect(&mut self) {
        self.dot.connect();
    }
    fn hdl(&self) -> Verilog {
        let (n, k) = (self._n, self._per_stage);
        let levels = n.trailing_zeros() as usize;
        let (tree, root) = tree_verilog(
            n,
            |l| 16 + l,
            |l| l == levels || l.is_multiple_of(k),
            |i| format!("$signed(a[{hi}:{lo}]) * $signed(b[{hi}:{lo}])", hi = 8 * i + 7, lo = 8 * i),
            // Sign-extended by the bit each level adds.
            |l, x, y| format!("{{{x}[{m}], {x}}} + {{{y}[{m}], {y}}}", m = 14 + l),
        );
        Verilog::Custom(format!(
            "`ifdef VERILATOR\n{fast}`else\n{tree}`endif\nalways @(*) dot = {{{{{ext}{{{root}[{m}]}}}}, {root}}};",
            fast = dot_i8_verilator(n, |l| l == levels || l.is_multiple_of(k)),
            ext = 16 - levels,
            m = 15 + levels
        ))
    }
}

/// [`DotI8Pipe`]'s root for Verilator only: the whole dot product summed at
/// the first edge, then carried through a delay line to the root register
/// `r<levels>_0`, which is all that `dot` reads: the tree's registers hold
/// partial sums no one else sees, and Verilator wrote each of them every
/// cycle (127 a lane at n = 64: the MoE router's gate lanes were a third of its
/// model). Sign extensions are `(zext(x) ^ s) − s` (`s` the sign bit), as
/// `$signed` became a call of shifts and masks. The sum is exact in the
/// root's 16 + log2(n) bits, as the tree's is. The form keeps the line count
/// of the per-register form it replaced (`2 · registers + 2`), padded with
/// `//` lines (blanked like the rest of the branch; an empty line would keep
/// its indent), so that every line synthesis reads after it keeps its number
/// (yosys names cells by source position; `synthesis::synthesis_text`).
fn dot_i8_verilator(n: usize, reg: impl Fn(usize) -> bool) -> String {
    let levels = n.trailing_zeros() as usize;
    let regs: Vec<usize> = (0..=levels).filter(|&l| reg(l)).collect();
    let w = 16 + levels;
    let stage = |j: usize| if j + 1 == regs.len() { format!("r{levels}_0") } else { format!("vd{j}") };
    let product = |i: usize| {
        let (hi, lo, z) = (8 * i + 7, 8 * i, w - 8);
        let ext = |v: &str| format!("(({{{z}'d0, {v}[{hi}:{lo}]}} ^ {w}'h80) - {w}'h80)");
        format!("{} * {}", ext("a"), ext("b"))
    };
    let sum = (0..n).map(product).collect::<Vec<_>>().join(" + ");
    let mut lines: Vec<String> = (0..regs.len()).map(|j| format!("reg [{}:0] {} = 0;", w - 1, stage(j))).collect();
    lines.push("always @(posedge clock) begin".into());
    lines.push(format!("   {} <= {sum};", stage(0)));
    lines.extend((1..regs.len()).map(|j| format!("   {} <= {};", stage(j), stage(j - 1))));
    lines.push("end".into());
    let per_register_form: usize = 2 * regs.iter().map(|&l| n >> l).sum::<usize>() + 2;
    assert!(lines.len() <= per_register_form, "{} lines", lines.len());
    lines.resize(per_register_form, "//".into());
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// `min(round(p · r / 2^24), 65535)` for unsigned `p` (16 bits) and `r` (32
/// bits), an MoE gate weight `p / L` in Q0.16 once `r = floor(2^40 / L)`, as
/// a free-running pipeline of [`MulRoundSat16Pipe::LATENCY`] registered stages: `p` and `r` (the
/// flow folds these into the multipliers' input registers, so what feeds them
/// ends in fabric flip-flops: the MoE reciprocal's last compare into a
/// MULT18X18D's input register was −1.14 ns, docs/timing.md), the two 16×16
/// partial products `p · r[15:0]` and `p · r[31:16]` (one MULT18X18D each,
/// registered on both sides), their sum
/// `s = p · r` (48 bits; its low 16 bits are the low product's), then the
/// rounding and saturation from `s`'s bits: `w = s[39:24] + s[23]`, or 65535
/// when `s[47:40]` is not zero or the increment would carry out. `w` is
/// `min(round(p · r / 2^24), 65535)` of the `p`, `r` held `LATENCY` cycles
/// earlier. The MoE choice's weight; combinational, it followed the last
/// reciprocal stage in the same cycle.
#[derive(LogicBlock, Default)]
pub struct MulRoundSat16Pipe {
    pub clock: Signal<In, Clock>,
    pub p: Signal<In, Bits<16>>,
    pub r: Signal<In, Bits<32>>,
    pub w: Signal<Out, Bits<16>>,
    /// The model's registers: p, r, low product, high product, sum.
    _s: [u64; 5],
}

impl MulRoundSat16Pipe {
    pub const LATENCY: usize = 4;
}

impl Logic for MulRoundSat16Pipe {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let [pi, ri, pl, ph, s] = self._s;
            let sat = (s >> 40) != 0 || ((s >> 24) & 0xFFFF == 0xFFFF && (s >> 23) & 1 == 1);
            let w = if sat { 0xFFFF } else { ((s >> 24) & 0xFFFF) + ((s >> 23) & 1) };
            self.w.next = w.to_bits();
            let s = ((ph + (pl >> 16)) << 16 | (pl & 0xFFFF)) & ((1 << 48) - 1);
            let (p, r) = (to_u64(self.p.val()), to_u64(self.r.val()));
            self._s = [p, r, pi * (ri & 0xFFFF), pi * (ri >> 16 & 0xFFFF), s];
        }
    }
    fn connect(&mut self) {
        self.w.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(
            "\
reg [15:0] pi = 0;
reg [31:0] ri = 0;
reg [31:0] pl = 0;
reg [31:0] ph = 0;
reg [47:0] s = 0;
always @(posedge clock) begin
   pi <= p;
   ri <= r;
   pl <= pi * ri[15:0];
   ph <= pi * ri[31:16];
   s <= {ph + {16'd0, pl[31:16]}, pl[15:0]};
   w <= ((|s[47:40]) || ((&s[39:24]) && s[23])) ? 16'hffff : s[39:24] + {15'd0, s[23]};
end"
            .into(),
        )
    }
}

/// `numerics::exp2_fixed(u)` for a log2-domain `u ≤ 0` in two registered
/// stages: the Q1.14 LUT on the 8 fraction bits, the shift amount
/// `ceil(−u / 2^8)` (a 5-bit negation) and the range tests (reductions)
/// first, then the shift. `p` is `exp2_fixed(u)` of the `u` held
/// [`Exp2Pipe::LATENCY`] cycles earlier. The attention lanes' `p = 2^u` and
/// the MoE exponentials: combinational, LUT and shifter were a cycle each unit
/// could not close (the lanes' next critical path after S4b, docs/timing.md).
#[derive(LogicBlock, Default)]
pub struct Exp2Pipe {
    pub clock: Signal<In, Clock>,
    pub u: Signal<In, Signed<40>>,
    pub p: Signal<Out, Bits<16>>,
    /// The model's first stage: LUT value, shift, `u ≥ 0`, shift in range.
    _s: (u32, u32, bool, bool),
}

impl Exp2Pipe {
    pub const LATENCY: usize = 2;

    /// The model's clock edge: the output from the first stage `s`, and the
    /// first stage for the input `u`: LUT value, shift, `u ≥ 0`, shift in range.
    fn edge(s: (u32, u32, bool, bool), u: i64) -> (u32, (u32, u32, bool, bool)) {
        let (raw, sh, pos, inr) = s;
        let p = if pos {
            raw
        } else if inr {
            raw >> sh
        } else {
            0
        };
        let raw = crate::numerics::exp2_lut()[(u & 0xFF) as usize];
        // ceil(−u / 2^8) in 5 bits, in range when u[39:13] is all ones and u[12:8] is not zero.
        let f = ((u >> 8) & 0x1F) as u32;
        let sh = (!f).wrapping_add(1) & 0x1F;
        (p, (raw, sh, u >= 0, (u >> 13) == -1 && f != 0))
    }
}

impl Logic for Exp2Pipe {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let p;
            (p, self._s) = Self::edge(self._s, to_i64(self.u.val()));
            self.p.next = (p as u64).to_bits();
        }
    }
    fn connect(&mut self) {
        self.p.connect();
    }
    fn hdl(&self) -> Verilog {
        // The LUT as 16 constant bit vectors indexed by u[7:0] (logic): a `case`
        // ROM read into a register becomes a block RAM, whose 5.8 ns
        // clock-to-out would sit in front of the shifter.
        let lut = crate::numerics::exp2_lut();
        let planes: String = (0..16)
            .map(|b| {
                let hex: String = (0..64)
                    .rev()
                    .map(|nib| {
                        let v = (0..4).fold(0u32, |acc, k| acc | ((lut[4 * nib + k] >> b) & 1) << k);
                        format!("{v:x}")
                    })
                    .collect();
                format!("wire [255:0] lut{b} = 256'h{hex};\n")
            })
            .collect();
        let bits: Vec<String> = (0..16).rev().map(|b| format!("lut{b}[u[7:0]]")).collect();
        // For Verilator only, the same LUT as one constant of 256 entries and a
        // part-select of entry u[7:0] (yosys proves the two forms equivalent):
        // Verilator executed the planes as 16 variable bit-selects per unit
        // every cycle, an eighth of the default MoE router's model. Synthesis
        // and Icarus read the planes.
        let rom: String = (0..256).rev().map(|i| format!("{:04x}", lut[i])).collect();
        Verilog::Custom(format!(
            "\
`ifdef VERILATOR
wire [4095:0] lut = 4096'h{rom};
wire [15:0] rawc = lut[{{u[7:0], 4'd0}} +: 16];
`else
{planes}wire [15:0] rawc = {{{}}};
`endif
reg [15:0] raw = 0;
reg [4:0] sh = 0;
reg pos = 0;
reg inr = 0;
always @(posedge clock) begin
   raw <= rawc;
   sh <= ~u[12:8] + 5'd1;
   pos <= !u[39];
   inr <= (&u[39:13]) && (|u[12:8]);
   p <= pos ? raw : (inr ? (raw >> sh) : 16'd0);
end",
            bits.join(", ")
        ))
    }
}

/// The sum of the first `n` 16-bit lanes of a packed `W`-bit bus, 32 bits
/// wide, as a pipeline: a binary adder tree with a register after every
/// level, [`AddTree16Pipe::latency`] cycles from `x` to `s`. The MoE's `Σ_e p`
/// over e_max exponentials, beside its top-k rounds (two cycles each), so
/// a level a cycle adds none at k ≥ 2; two levels a cycle were `exps[*].exp.p
/// → sd.din`, −0.6 ns (docs/timing.md), a chain of e_max − 1 adds before.
#[derive(LogicBlock)]
pub struct AddTree16Pipe<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub x: Signal<In, Bits<W>>,
    pub s: Signal<Out, Bits<32>>,
    _n: usize,
    /// The model: the sums in flight.
    _q: Vec<u64>,
}

impl<const W: usize> AddTree16Pipe<W> {
    pub fn new(n: usize) -> Self {
        assert!((1..=W / 16).contains(&n));
        with_defaults!(Self {
            _n: n,
            _q: vec![0; Self::latency(n)],
            .. clock, x, s
        })
    }
    /// Adder levels: ceil(log2 n).
    fn levels(n: usize) -> usize {
        n.next_power_of_two().trailing_zeros() as usize
    }
    /// Cycles from `x` to `s`: one register per level, at least one.
    pub fn latency(n: usize) -> usize {
        Self::levels(n).max(1)
    }
}

impl<const W: usize> Logic for AddTree16Pipe<W> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let sum = (0..self._n).map(|i| self.x.val().get_bits::<16>(16 * i).to_u64()).sum::<u64>();
            self.s.next = (delay(&mut self._q, sum) & 0xFFFF_FFFF).to_bits();
        }
    }
    fn connect(&mut self) {
        self.s.connect();
    }
    fn hdl(&self) -> Verilog {
        let levels = Self::levels(self._n);
        let (tree, root) = tree_verilog(
            self._n,
            |_| 32,
            |l| l > 0 || levels == 0,
            |i| format!("{{16'd0, x[{}:{}]}}", 16 * i + 15, 16 * i),
            |_, a, b| format!("{a} + {b}"),
        );
        Verilog::Custom(format!("{tree}always @(*) s = {root};"))
    }
}

/// The index of the largest valid one of the first `n` int32 lanes of a
/// packed `ZB`-bit bus (lane `e` valid where `mask[e]`; ties, and no valid
/// lane, to the lowest index), by a comparator tree of ceil(log2 n) levels
/// registered after level `cut` (0: not at all, `sel` follows the inputs in
/// the same cycle). A node is `{valid, index, key}` with the key the logit's
/// sign bit flipped, so an unsigned compare orders logits; it keeps its left
/// (lower-index) child unless the right one is valid and the left not, or
/// larger. Each node also carries its lane's 16-bit `pay`load, so the
/// winner's (`pay_sel`) leaves the root with it: a select of `pay` by `sel`
/// after the tree was the MoE router's critical path (docs/timing.md). The
/// MoE's top-k rounds, their payload the lanes' exponentials.
#[derive(LogicBlock)]
pub struct ArgMaxPipe<const ZB: usize, const EL: usize, const PB: usize> {
    pub clock: Signal<In, Clock>,
    pub z: Signal<In, Bits<ZB>>,
    pub mask: Signal<In, Bits<EL>>,
    pub pay: Signal<In, Bits<PB>>,
    pub sel: Signal<Out, Bits<8>>,
    pub pay_sel: Signal<Out, Bits<16>>,
    _n: usize,
    _cut: usize,
    /// The model: the inputs latched at the cut.
    _held: (Bits<ZB>, Bits<EL>, Bits<PB>),
}

impl<const ZB: usize, const EL: usize, const PB: usize> ArgMaxPipe<ZB, EL, PB> {
    pub fn new(n: usize, cut: usize) -> Self {
        assert!((1..=EL.min(ZB / 32).min(PB / 16).min(256)).contains(&n));
        assert!(cut <= n.next_power_of_two().trailing_zeros() as usize);
        with_defaults!(Self {
            _n: n,
            _cut: cut,
            _held: Default::default(),
            .. clock, z, mask, pay, sel, pay_sel
        })
    }
}

impl<const ZB: usize, const EL: usize, const PB: usize> Logic for ArgMaxPipe<ZB, EL, PB> {
    fn update(&mut self) {
        if self._cut > 0 && self.clock.pos_edge() {
            self._held = (self.z.val(), self.mask.val(), self.pay.val());
        }
        let (z, mask, pay) = if self._cut > 0 { self._held } else { (self.z.val(), self.mask.val(), self.pay.val()) };
        let key = |e: usize| z.get_bits::<32>(32 * e).to_u64() as u32 as i32;
        let best =
            (1..self._n).fold(0, |b, e| if mask.get_bit(e) && (!mask.get_bit(b) || key(e) > key(b)) { e } else { b });
        self.sel.next = (best as u64).to_bits();
        self.pay_sel.next = pay.get_bits::<16>(16 * best);
    }
    fn connect(&mut self) {
        self.sel.connect();
        self.pay_sel.connect();
    }
    fn hdl(&self) -> Verilog {
        let (tree, root) = tree_verilog(self._n, |_| 57, |l| l == self._cut && l > 0, arg_max_leaf, arg_max_join);
        let text = format!("{tree}always @(*) sel = {root}[39:32];\nalways @(*) pay_sel = {root}[56:41];");
        if self._cut == 0 {
            return Verilog::Custom(text);
        }
        // Line 1 (`wire [56:0] w0_0;`) is in both forms; the rest is synthesis's.
        let (first, rest) = text.split_once('\n').expect("a tree of one leaf has no cut");
        Verilog::Custom(format!("{first} `ifdef VERILATOR {} `else\n{rest} `endif", arg_max_verilator(self._n)))
    }
}

/// A node of [`ArgMaxPipe`]'s tree: `{payload, valid, index, key}`.
fn arg_max_leaf(e: usize) -> String {
    let (p, k) = (16 * e, 32 * e);
    format!("{{pay[{}:{p}], mask[{e}], 8'd{e}, ~z[{}], z[{}:{k}]}}", p + 15, k + 31, k + 30)
}

/// [`ArgMaxPipe`]'s node select: the right child if valid and the left not, or larger.
fn arg_max_join(_: usize, a: &str, b: &str) -> String {
    format!("({b}[40] & (!{a}[40] | ({b}[31:0] > {a}[31:0]))) ? {b} : {a}")
}

/// [`ArgMaxPipe`]'s root for Verilator only, where the tree has a cut: the
/// whole tree computed at the clock edge into one register, and only at an
/// edge where the bits it reads differ from the last edge's. The root is a
/// function of the cut's registers, which are a function of the inputs at
/// the last edge, so the register holds the root's value from every edge on;
/// before the first, the cut's registers are 0 and so is their root (a node
/// of two invalid children keeps its left one). The MoE router's top-k
/// rounds see a new token every few tens of cycles, and Verilator evaluated
/// each round's 63 nodes every cycle: 28 % of the default router launch's
/// instructions (docs/simulators.md, step 20).
fn arg_max_verilator(n: usize) -> String {
    let name = |l: usize, i: usize| format!("t{l}_{i}");
    let (mut decl, mut body) = (String::new(), String::new());
    let root = tree_walk(n, &name, arg_max_leaf, arg_max_join, |l, i, v| {
        decl += &format!("reg [56:0] {}; ", name(l, i));
        body += &format!("{} = {v}; ", name(l, i));
    });
    let read = [("z", 32 * n), ("mask", n), ("pay", 16 * n)];
    let copies: String = read.iter().map(|(s, w)| format!("reg [{}:0] vh_{s} = 0; ", w - 1)).collect();
    let chg = read.iter().map(|(s, w)| format!("{s}[{}:0] != vh_{s}", w - 1)).collect::<Vec<_>>().join(" || ");
    let load: String = read.iter().map(|(s, w)| format!("vh_{s} <= {s}[{}:0]; ", w - 1)).collect();
    format!(
        "assign w0_0 = 57'd0; {copies}reg vh_first = 1'b1; reg [56:0] vh_root = 57'd0; \
         /* verilator lint_off BLKSEQ */ always @(posedge clock) if (vh_first || {chg}) begin : vh {decl}\
         {body}{load}vh_first <= 1'b0; vh_root <= {root}; end /* verilator lint_on BLKSEQ */ \
         always @(*) sel = vh_root[39:32]; always @(*) pay_sel = vh_root[56:41];"
    )
}

/// Bit of pair `(i, j)`, `i < j < n`, in [`PairCmp`]'s `gt`: the pairs row by row.
fn pair_bit(n: usize, i: usize, j: usize) -> usize {
    i * (2 * n - i - 1) / 2 + (j - i - 1)
}

/// Experts a [`PairCmp`] compares at most: 28 pairs fit its 32-bit `gt`.
pub const PAIR_MAX: usize = 8;

/// Every pairwise compare of the first `n` int32 lanes of a packed `ZB`-bit
/// bus (`n ≤ PAIR_MAX`): bit [`pair_bit`]`(i, j)` of `gt` is `z[j] > z[i]`,
/// the rest zero. With it, [`PairWin`] finds [`ArgMaxPipe`]'s winner under
/// any mask in two LUT levels: the MoE's top-k rounds compare once a token,
/// where the tree's 32-bit compares and 57-bit node selects took every round's
/// critical path (docs/timing.md).
#[derive(LogicBlock)]
pub struct PairCmp<const ZB: usize> {
    pub z: Signal<In, Bits<ZB>>,
    pub gt: Signal<Out, Bits<32>>,
    _n: usize,
}

impl<const ZB: usize> PairCmp<ZB> {
    pub fn new(n: usize) -> Self {
        assert!((1..=PAIR_MAX.min(ZB / 32)).contains(&n));
        with_defaults!(Self { _n: n, .. z, gt })
    }
}

impl<const ZB: usize> Logic for PairCmp<ZB> {
    fn update(&mut self) {
        let key = |e: usize| self.z.val().get_bits::<32>(32 * e).to_u64() as u32 as i32;
        let mut gt = 0u64;
        for i in 0..self._n {
            for j in i + 1..self._n {
                gt |= u64::from(key(j) > key(i)) << pair_bit(self._n, i, j);
            }
        }
        self.gt.next = gt.to_bits();
    }
    fn connect(&mut self) {
        self.gt.connect();
    }
    fn hdl(&self) -> Verilog {
        let n = self._n;
        // The key with its sign bit flipped, compared unsigned, as
        // `ArgMaxPipe`'s nodes (a signed compare placed 3.9 ns of logic).
        let lane = |e: usize| format!("{{~z[{}], z[{}:{}]}}", 32 * e + 31, 32 * e + 30, 32 * e);
        let mut parts = vec![format!("{}'d0", 32 - n * (n - 1) / 2)];
        parts.extend(
            (0..n)
                .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
                .rev()
                .map(|(i, j)| format!("({} > {})", lane(j), lane(i))),
        );
        Verilog::Custom(format!("always @(*) gt = {{{}}};", parts.join(", ")))
    }
}

/// [`ArgMaxPipe`]'s winner, one-hot, from [`PairCmp`]'s bits: lane `e` wins
/// where it is valid and beats every other valid lane (a larger key than each
/// lower lane, no smaller than each higher one), lane 0 where none is valid.
/// The mask clears the winner without an index decode.
#[derive(LogicBlock)]
pub struct PairWin<const EL: usize> {
    pub gt: Signal<In, Bits<32>>,
    pub mask: Signal<In, Bits<EL>>,
    pub oh: Signal<Out, Bits<EL>>,
    _n: usize,
}

impl<const EL: usize> PairWin<EL> {
    pub fn new(n: usize) -> Self {
        assert!((1..=PAIR_MAX.min(EL)).contains(&n));
        with_defaults!(Self { _n: n, .. gt, mask, oh })
    }
}

impl<const EL: usize> Logic for PairWin<EL> {
    fn update(&mut self) {
        let (n, gt, mask) = (self._n, self.gt.val(), self.mask.val());
        let beats = |e: usize, j: usize| {
            !mask.get_bit(j) || if j < e { gt.get_bit(pair_bit(n, j, e)) } else { !gt.get_bit(pair_bit(n, e, j)) }
        };
        let none = (0..n).all(|e| !mask.get_bit(e));
        let win = (0..n).find(|&e| mask.get_bit(e) && (0..n).filter(|&j| j != e).all(|j| beats(e, j)));
        self.oh.next = bits::<EL>(1) << (if none { 0 } else { win.unwrap_or(0) } as u64);
    }
    fn connect(&mut self) {
        self.oh.connect();
    }
    fn hdl(&self) -> Verilog {
        let n = self._n;
        let wins = (0..n)
            .map(|e| {
                let mut t = vec![format!("mask[{e}]")];
                t.extend((0..n).filter(|&j| j != e).map(|j| {
                    if j < e {
                        format!("(!mask[{j}] | gt[{}])", pair_bit(n, j, e))
                    } else {
                        format!("(!mask[{j}] | !gt[{}])", pair_bit(n, e, j))
                    }
                }));
                let w = t.join(" & ");
                if e == 0 {
                    format!("   oh[0] = ({w}) | ~|mask[{}:0];\n", n - 1)
                } else {
                    format!("   oh[{e}] = {w};\n")
                }
            })
            .collect::<String>();
        Verilog::Custom(format!("always @(*) begin\n   oh = {EL}'d0;\n{wins}end"))
    }
}

/// The index and the 16-bit payload of a one-hot lane of `n` ([`PairWin`]'s
/// winner): an OR of AND-ed lanes, no select tree.
#[derive(LogicBlock)]
pub struct OneHotPick<const EL: usize, const PB: usize> {
    pub oh: Signal<In, Bits<EL>>,
    pub pay: Signal<In, Bits<PB>>,
    pub sel: Signal<Out, Bits<8>>,
    pub pay_sel: Signal<Out, Bits<16>>,
    _n: usize,
}

impl<const EL: usize, const PB: usize> OneHotPick<EL, PB> {
    pub fn new(n: usize) -> Self {
        assert!((1..=EL.min(PB / 16).min(256)).contains(&n));
        with_defaults!(Self { _n: n, .. oh, pay, sel, pay_sel })
    }
}

impl<const EL: usize, const PB: usize> Logic for OneHotPick<EL, PB> {
    fn update(&mut self) {
        let (oh, pay) = (self.oh.val(), self.pay.val());
        let on = (0..self._n).filter(|&e| oh.get_bit(e));
        self.sel.next = on.clone().fold(0u64, |s, e| s | e as u64).to_bits();
        self.pay_sel.next = on.fold(0u64, |s, e| s | pay.get_bits::<16>(16 * e).to_u64()).to_bits();
    }
    fn connect(&mut self) {
        self.sel.connect();
        self.pay_sel.connect();
    }
    fn hdl(&self) -> Verilog {
        let n = self._n;
        let sel = (0..n).map(|e| format!("({{8{{oh[{e}]}}}} & 8'd{e})")).collect::<Vec<_>>().join(" | ");
        let pay = (0..n)
            .map(|e| format!("({{16{{oh[{e}]}}}} & pay[{}:{}])", 16 * e + 15, 16 * e))
            .collect::<Vec<_>>()
            .join(" | ");
        Verilog::Custom(format!("always @(*) sel = {sel};\nalways @(*) pay_sel = {pay};"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::{requantize, Requant};

    /// Clock `n` edges, settling after each change as rust-hdl's simulator does.
    fn clock<B: Block>(b: &mut B, clk: impl Fn(&mut B, bool), n: usize) {
        let settle = |b: &mut B| loop {
            b.update_all();
            if !b.has_changed() {
                break;
            }
        };
        for _ in 0..n {
            clk(b, false);
            settle(b);
            clk(b, true);
            settle(b);
        }
    }

    /// Drive `inputs` one a clock edge into a pipeline of `lat` stages (the
    /// last held until all are out) and `check` each input's result in the
    /// cycle it comes out (with `lat` 0, the cycle it goes in).
    fn stream<B: Block, T>(
        b: &mut B,
        clk: impl Fn(&mut B, bool),
        lat: usize,
        inputs: &[T],
        drive: impl Fn(&mut B, &T),
        check: impl Fn(&B, &T),
    ) {
        for j in 0..inputs.len() + lat {
            drive(b, &inputs[j.min(inputs.len() - 1)]);
            clock(b, &clk, 1);
            if let Some(x) = (j + 1).checked_sub(lat.max(1)).and_then(|i| inputs.get(i)) {
                check(b, x);
            }
        }
    }

    /// xorshift64: reproducible operands.
    fn rng(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The row blocks' models: what the units' launches (Verilator, Icarus)
    /// check of their Verilog, for the rust-hdl engine.
    #[test]
    fn row_blocks_hold_shift_and_delay() {
        let tick = |c: &mut Signal<In, Clock>, v: bool| c.next = Clock::from(v);
        let mut r = ShrReg::<32>::default();
        r.connect_all();
        (r.d.next, r.sh.next, r.en.next) = (0xaabb_ccddu64.to_bits(), 8u64.to_bits(), false);
        clock(&mut r, |r, c| tick(&mut r.clock, c), 1);
        assert_eq!(r.q.val().to_u64(), 0);
        r.en.next = true;
        clock(&mut r, |r, c| tick(&mut r.clock, c), 1);
        assert_eq!(r.q.val().to_u64(), 0xaa_bbcc);

        let mut row = PairShiftRow::<8, 64>::new(4);
        row.connect_all();
        row.en.next = true;
        for (lo, hi) in [(1u64, 2u64), (3, 4)] {
            (row.lo.next, row.hi.next) = (lo.to_bits(), hi.to_bits());
            clock(&mut row, |r, c| tick(&mut r.clock, c), 1);
        }
        row.en.next = false;
        clock(&mut row, |r, c| tick(&mut r.clock, c), 2);
        assert_eq!(row.q.val().to_u64(), 0x0403_0201);

        let mut dly = RowDelay::<16>::new(3);
        dly.connect_all();
        dly.sh.next = 4u64.to_bits();
        for i in 1..=6u64 {
            dly.din.next = (i << 4).to_bits();
            clock(&mut dly, |d, c| tick(&mut d.clock, c), 1);
            // After edge i, the row of edge i − 2.
            assert_eq!(dly.dout.val().to_u64(), i.saturating_sub(2), "edge {i}");
        }

        // Three rows: `sel` decodes two bits, so 3 is no row.
        let mut pick = RowPick::<32, 8>::new(3, 8, 24, 3);
        pick.connect_all();
        (pick.rows[0].next, pick.rows[1].next) = (0x1111_1111u64.to_bits(), 0x2222_2222u64.to_bits());
        (pick.rows8[0].next, pick.rows8[1].next) = (0x33u64.to_bits(), 0x44u64.to_bits());
        (pick.rows[2].next, pick.rows8[2].next) = (0x5555_5555u64.to_bits(), 0x55u64.to_bits());
        let step = |p: &mut RowPick<32, 8>, load: bool, shift: bool, sel: u64, out8: bool| {
            let all = |b: bool| if b { Bits::<4>::mask() } else { 0.into() };
            (p.load.next, p.shift.next, p.sel.next, p.out8.next) = (all(load), all(shift), sel.to_bits(), out8);
            clock(p, |p, c| tick(&mut p.clock, c), 1);
            p.q.val().to_u64()
        };
        assert_eq!(step(&mut pick, true, false, 1, false), 0x2222_2222);
        assert_eq!(step(&mut pick, false, true, 1, false), 0x22_2222);
        assert_eq!(step(&mut pick, true, false, 3, false), 0x22_2222, "no row 3: holds");
        assert_eq!(step(&mut pick, true, false, 0, true), 0x33);
        assert_eq!(step(&mut pick, true, false, 3, true), 0, "no int8 row 3: 0");
        assert_eq!(step(&mut pick, true, false, 2, false), 0x5555_5555);

        for cut in [false, true] {
            let mut bus = Carry::<8>::new(cut);
            bus.connect_all();
            let lat = 1 + usize::from(cut);
            for i in 1..=4u64 {
                bus.d.next = i.to_bits();
                clock(&mut bus, |b, c| tick(&mut b.clock, c), 1);
                assert_eq!(bus.q.val().to_u64(), (i + 1).saturating_sub(lat as u64), "cut {cut}, edge {i}");
                assert_eq!(bus.s.val().to_u64(), i, "cut {cut}, edge {i}");
            }
        }
    }

    /// `RescaleRow`'s model: each element a `RescaleAcc` adding the product
    /// registered on the last `load`, seen through the snapshot and its
    /// shifts, all driven by the inputs of `RescaleRow::DELAY` edges before
    /// (but `shift`); `RowBacklog`'s: a `Fifo` whose head a register takes on `pop`
    /// (the bits below the row width).
    /// `RescaleRow`'s Verilator branches each sit inside one line of the
    /// synthesis form (docs/simulators.md, step 16): a newline in a branch
    /// would move every later line that yosys names cells by.
    #[test]
    fn rescale_row_verilator_branches_stay_within_lines() {
        let Verilog::Custom(v) = RescaleRow::<128>::new(16, 4).hdl() else { panic!("RescaleRow is a custom block") };
        let branches: Vec<&str> = v.split(" `ifdef VERILATOR ").skip(1).collect();
        assert_eq!(branches.len(), 17, "the shared registers and 16 accumulators");
        for b in branches {
            let end = b.find(" `else").or_else(|| b.find(" `endif")).expect("a branch ends");
            assert!(!b[..end].contains('\n'), "a Verilator branch spans lines: {}", &b[..end]);
        }
        // The snapshot's form for Verilator: after the synthesis form's last line.
        let (_, out) = v.split_once(" `ifndef VERILATOR\n").expect("the snapshot's forms");
        let (_, fast) = out.rsplit_once(" `else ").expect("the snapshot's Verilator form");
        assert!(fast.ends_with(" `endif") && !fast.contains('\n'), "the snapshot's form spans lines: {fast}");
        let synth: Vec<&str> = v.lines().filter(|l| l.starts_with('`')).collect();
        assert!(synth.is_empty(), "no directive starts a line: {synth:?}");
    }

    #[test]
    fn rescale_row_and_row_backlog_models() {
        let tick = |c: &mut Signal<In, Clock>, v: bool| c.next = Clock::from(v);
        let mut r = rng(0x5eed);
        let d = 4;
        let mut row = RescaleRow::<64>::new(d, 2);
        row.connect_all();
        let mut accs: Vec<RescaleAcc<48>> = crate::many(d);
        accs.iter_mut().for_each(|a| a.connect_all());
        let (mut pv, mut os) = (vec![0i64; d], vec![0i64; d]);
        let mut past = std::collections::VecDeque::from(vec![
            (false, false, false, false, false, 0, 0, 0);
            RescaleRow::<64>::DELAY
        ]);
        for edge in 0..600 {
            let (load, hold, first) = (!r().is_multiple_of(4), r().is_multiple_of(5), r().is_multiple_of(8));
            let upd = !hold && !r().is_multiple_of(4);
            let (snap, shift) = (r().is_multiple_of(16), r().is_multiple_of(3));
            let (sh, p, v) = (r() % 63, r() as i16 as i64, r());
            (row.load.next, row.hold.next, row.upd.next, row.first.next) = (load, hold, upd, first);
            (row.snap.next, row.shift.next, row.sh.next) = (snap, shift, sh.to_bits());
            (row.p.next, row.v.next) = ((p as u64 & 0xffff).to_bits(), v.to_bits());
            past.push_back((load, hold, upd, first, snap, sh, p, v));
            let (load, hold, upd, first, snap, sh, p, v) = past.pop_front().unwrap();
            let sh = sh.to_bits::<6>();
            for (a, &x) in accs.iter_mut().zip(&pv) {
                (a.load.next, a.hold.next, a.upd.next, a.first.next, a.sh.next) = (load, hold, upd, first, sh);
                a.a.next = from_i64(x);
            }
            let now: Vec<i64> = accs.iter().map(|a| to_i64(a.y.val())).collect();
            if snap {
                os.copy_from_slice(&now);
            } else if shift {
                os.copy_within(2.., 0);
            }
            clock(&mut row, |b, c| tick(&mut b.clock, c), 1);
            for a in &mut accs {
                clock(a, |b, c| tick(&mut b.clock, c), 1);
            }
            if load {
                for (x, pv) in pv.iter_mut().enumerate() {
                    *pv = p * (v >> (8 * x)) as u8 as i8 as i64;
                }
            }
            assert_eq!((to_i64(row.o0.val()), to_i64(row.o1.val())), (os[0], os[1]), "edge {edge}");
        }

        let mut log = RowBacklog::<64>::new(24, 4);
        log.connect_all();
        let mut fifo = Fifo::<64>::new(4);
        fifo.connect_all();
        let mut q = 0u64;
        for edge in 0..300 {
            let (push, pop, reset, din) = (r().is_multiple_of(2), !r().is_multiple_of(3), r().is_multiple_of(50), r());
            (log.push.next, log.pop.next, log.reset.next, log.din.next) = (push, pop, reset, din.to_bits());
            (fifo.push.next, fifo.pop.next, fifo.reset.next, fifo.din.next) = (push, pop, reset, din.to_bits());
            if pop {
                q = fifo.dout.val().to_u64() & 0xff_ffff;
            }
            clock(&mut log, |b, c| tick(&mut b.clock, c), 1);
            clock(&mut fifo, |b, c| tick(&mut b.clock, c), 1);
            assert_eq!(log.q.val().to_u64(), q, "edge {edge}");
        }
    }

    #[test]
    fn pack_places_lane_i_at_bit_i_times_l() {
        let mut p = Pack::<8, 32>::new(3);
        p.connect_all();
        for (i, v) in [0x12u64, 0x34, 0x56].into_iter().enumerate() {
            p.lanes[i].next = v.to_bits();
        }
        clock(&mut p, |_, _| (), 1);
        assert_eq!(p.out.val().to_u64(), 0x56_34_12);
        let Verilog::Custom(v) = p.hdl() else { panic!("Pack is a custom block") };
        assert_eq!(v, "always @(*) out = {8'd0, lanes$2, lanes$1, lanes$0};");
        let Verilog::Custom(v) = Pack::<8, 16>::new(2).hdl() else { panic!("Pack is a custom block") };
        assert_eq!(v, "always @(*) out = {lanes$1, lanes$0};");
    }

    #[test]
    fn requant_pipe_model_matches_numerics_after_its_latency() {
        let cases = [
            (1000, 1 << 30, 33),
            (-7, 3, 1),
            (i32::MIN, i32::MIN, 62),
            (i32::MAX, i32::MIN, 62),
            (5, -9, 0),
            (-300, 1 << 20, 20),
            (-65536, 65535, 9),
            (123_456_789, -987_654_321, 40),
            (0, -5, 3),
            (-1, 1 << 30, 31),
        ];
        let mut r = RequantPipe::default();
        r.connect_all();
        let clk = |r: &mut RequantPipe, c| r.clock.next = Clock::from(c);
        for &(x, m, s) in &cases {
            r.x.next = (x as u32 as u64).to_bits();
            r.mult.next = (m as u32 as u64).to_bits();
            r.shift.next = (s as u64).to_bits();
            clock(&mut r, clk, RequantPipe::LATENCY);
            assert_eq!(r.y.val().to_u8() as i8, requantize(x, Requant { multiplier: m, shift: s }), "{x}·{m}>>{s}");
        }
        // Streaming, one x per cycle at a steady mult and shift: y follows x by LATENCY.
        let xs: Vec<i32> = cases.iter().map(|c| c.0).collect();
        for &(_, m, s) in &cases {
            r.mult.next = (m as u32 as u64).to_bits();
            r.shift.next = (s as u64).to_bits();
            let want = |x: i32| requantize(x, Requant { multiplier: m, shift: s });
            stream(
                &mut r,
                clk,
                RequantPipe::LATENCY,
                &xs,
                |r, &x| r.x.next = (x as u32 as u64).to_bits(),
                |r, &x| assert_eq!(r.y.val().to_u8() as i8, want(x), "streamed {x}·{m}>>{s}"),
            );
        }
    }

    #[test]
    fn scale_round_pipe_model_matches_round_shift_after_its_latency() {
        let cases = [(1000, 1 << 30, 33), (-7, 3, 1), (i32::MIN, i32::MIN, 62), (i32::MAX, i32::MIN, 0), (-300, 77, 5)];
        let mut r = ScaleRoundPipe::default();
        r.connect_all();
        for &(x, m, s) in &cases {
            r.mult.next = (m as u32 as u64).to_bits();
            r.shift.next = (s as u64).to_bits();
            r.x.next = from_i64(x as i64);
            clock(&mut r, |r, c| r.clock.next = Clock::from(c), ScaleRoundPipe::LATENCY);
            let want = crate::numerics::round_shift(x as i64 * m as i64, s) << 24 >> 24;
            assert_eq!(to_i64(r.y.val()), want, "{x}·{m}>>{s}");
        }
    }

    #[test]
    fn mul_u32_pipe_model_multiplies_after_its_latency() {
        let mut m = MulU32Pipe::default();
        m.connect_all();
        for (a, b) in [(0u64, 0u64), (u32::MAX as u64, u32::MAX as u64), (123_456, 789_012), (1 << 31, 3)] {
            m.a.next = a.to_bits();
            m.b.next = b.to_bits();
            clock(&mut m, |m, c| m.clock.next = Clock::from(c), MulU32Pipe::LATENCY);
            assert_eq!(m.p.val().to_u64(), a * b, "{a}·{b}");
        }
    }

    /// The model of [`MulRound16Pipe`]'s Verilog, stage by stage (the
    /// registers named as there), stepped beside the block.
    #[derive(Default, Clone, Copy)]
    struct Stages {
        ll: u64,
        lh: u64,
        ml: u64,
        mh: u64,
        hl: u64,
        neg1: bool,
        llr: u64,
        mid1: u64,
        mid2: u64,
        a: u64,
        mid2b: u64,
        y: u64,
    }

    impl Stages {
        fn step(self, o: i64, r: u64) -> Self {
            let s = self;
            let ou = (o as u64) & ((1 << 48) - 1);
            let (ol, om, oh) = (ou & 0xFFFF, ou >> 16 & 0xFFFF, ou >> 32);
            let (rl, rh) = (r & 0xFFFF, r >> 16 & 0xFFFF);
            Stages {
                ll: ol * rl,
                lh: ol * rh,
                ml: om * rl,
                mh: om * rh,
                hl: oh * rl,
                neg1: o < 0 && r != 0,
                llr: s.ll + if s.neg1 { 32767 } else { 32768 },
                mid1: s.lh + s.ml,
                mid2: (s.mh + s.hl) & 0xFFFF,
                a: ((s.llr >> 16) + s.mid1) & 0xFFFF_FFFF,
                mid2b: s.mid2,
                y: (s.a & 0xFFFF) | ((((s.a >> 16) + s.mid2b) & 0xFFFF) << 16),
            }
        }
    }

    #[test]
    fn mul_round16_pipe_matches_round_shift_streamed_and_its_verilog_stages() {
        let mut cs: Vec<(i64, u64)> = vec![
            (0, 0),
            (1, 1 << 16),
            (-1, 1 << 15),
            (1, 1 << 15),
            (-3, 1 << 15),
            ((1 << 47) - 1, u32::MAX as u64),
            (-(1 << 47), u32::MAX as u64),
            (-(1 << 47), 0),
            (-123_456_789_012, 262_144),
            (987_654_321_098, 65_537),
            (-5, 1),
            (-65_536, 3),
        ];
        let mut rnd = rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..500 {
            let x = rnd();
            let o = ((x << 16) as i64) >> 16;
            let r = (x >> 13) & if x & 1 == 0 { 0x3_FFFF } else { 0xFFFF_FFFF };
            cs.push((o, r));
        }
        let mut b = MulRound16Pipe::default();
        b.connect_all();
        // The Verilog stages step on each edge beside the block, on the same operands.
        let st = std::cell::Cell::new(Stages::default());
        stream(
            &mut b,
            |b, c| b.clock.next = Clock::from(c),
            MulRound16Pipe::LATENCY,
            &cs,
            |b, &(o, r)| {
                b.o.next = from_i64(o);
                b.r.next = r.to_bits();
                st.set(st.get().step(o, r));
            },
            |b, &(o, r)| {
                let p = o as i128 * r as i128;
                let want = ((p.abs() + (1 << 15)) >> 16) as i64;
                let want = (if p < 0 { -want } else { want }) as u32 as u64;
                assert_eq!(b.y.val().to_u64(), want, "model {o}·{r}");
                assert_eq!(st.get().y, want, "Verilog stages {o}·{r}");
            },
        );
    }

    #[test]
    fn mul_round_sat16_pipe_rounds_and_saturates_after_its_latency() {
        let want = |p: u64, r: u64| ((p * r + (1 << 23)) >> 24).min(0xFFFF);
        let cases = [
            (0u64, 0u64),
            (0xFFFF, u32::MAX as u64),
            (16384, 1 << 26),
            (16384, (1 << 26) - 1),
            (1, 1 << 23),
            (1, (1 << 23) - 1),
            (0xFFFF, 0x0100_0000),
            (0xFFFF, 0x00FF_FFFF),
            (0x8000, 0x0200_0000),
            (12345, 98_765_432),
            (3, 0xFFFF_FFFF),
        ];
        let mut m = MulRoundSat16Pipe::default();
        m.connect_all();
        let clk = |m: &mut MulRoundSat16Pipe, c| m.clock.next = Clock::from(c);
        let drive = |m: &mut MulRoundSat16Pipe, &(p, r): &(u64, u64)| {
            m.p.next = p.to_bits();
            m.r.next = r.to_bits();
        };
        for c in &cases {
            drive(&mut m, c);
            clock(&mut m, clk, MulRoundSat16Pipe::LATENCY);
            assert_eq!(m.w.val().to_u64(), want(c.0, c.1), "{c:?}");
        }
        stream(&mut m, clk, MulRoundSat16Pipe::LATENCY, &cases, drive, |m, &(p, r)| {
            assert_eq!(m.w.val().to_u64(), want(p, r), "streamed {p}·{r}")
        });
    }

    #[test]
    fn exp2_pipe_matches_exp2_fixed_after_its_latency() {
        let lut = crate::numerics::exp2_lut();
        let mut us: Vec<i64> = (-9000..=0).step_by(7).collect();
        us.extend([0, -1, -255, -256, -257, -7936, -7937, -7680, -7679, -8192, -(1 << 38), -(1i64 << 39)]);
        let mut e = Exp2Pipe::default();
        e.connect_all();
        stream(
            &mut e,
            |e, c| e.clock.next = Clock::from(c),
            Exp2Pipe::LATENCY,
            &us,
            |e, &u| e.u.next = from_i64(u),
            |e, &u| assert_eq!(e.p.val().to_u64(), crate::numerics::exp2_fixed(&lut, u) as u64, "u = {u}"),
        );
    }

    /// `SyncRam::read_ahead` reads at the address given a cycle before the
    /// edge `SyncRam::new` would read at: written rows come back in order
    /// when the address is driven one cycle early, and its Verilog reads each
    /// slice at a kept copy.
    #[test]
    fn sync_ram_read_ahead_reads_the_address_given_a_cycle_early() {
        let mut r = SyncRam::<64>::read_ahead(4, 2);
        r.connect_all();
        let clk = |r: &mut SyncRam<64>, c| r.clock.next = Clock::from(c);
        let row = |a: u64| (a * 0x0101_0101_0101_0101 + 0x1000_0000_0000_0007).to_bits();
        r.port.we.next = true;
        for a in 0..4u64 {
            r.port.waddr.next = a.to_bits();
            r.port.wdata.next = row(a);
            clock(&mut r, clk, 1);
        }
        r.port.we.next = false;
        // Address a at edge t, so row a at edge t + 1 (after which `rdata` holds it).
        let order = [2u64, 0, 3, 1, 1, 2];
        for (t, &a) in order.iter().enumerate() {
            r.port.raddr.next = a.to_bits();
            clock(&mut r, clk, 1);
            if t > 0 {
                assert_eq!(r.rdata.val(), row(order[t - 1]), "edge {t}");
            }
        }
        let Verilog::Custom(v) = r.hdl() else { unreachable!() };
        assert!(v.contains("(* keep *) always @(posedge clock) ra1 <= port$raddr[1:0];"), "{v}");
        assert!(v.contains("rdata[63:32] <= mem1[ra1];") && v.contains("rdata[31:0] <= mem0[ra0];"), "{v}");
    }

    /// An exponential fed `u` and its LUT index `ul` apart ([`Exp2PipeC`],
    /// [`Exp2PipeU`]): every `u` of a sweep and the range edges comes out as
    /// `exp2_fixed(u)` after `lat` cycles.
    fn check_exp2_split<B: Block>(
        e: &mut B,
        step: usize,
        lat: usize,
        clk: impl Fn(&mut B, bool),
        drive: impl Fn(&mut B, i64),
        p: impl Fn(&B) -> u64,
    ) {
        let lut = crate::numerics::exp2_lut();
        let mut us: Vec<i64> = (-9000..=0).step_by(step).collect();
        us.extend([0, -1, -255, -256, -257, -7936, -7937, -8192, -(1i64 << 39)]);
        e.connect_all();
        stream(
            e,
            clk,
            lat,
            &us,
            |e, &u| drive(e, u),
            |e, &u| assert_eq!(p(e), crate::numerics::exp2_fixed(&lut, u) as u64, "u = {u}"),
        );
    }

    #[test]
    fn exp2_pipe_c_matches_exp2_fixed_after_its_latency() {
        let mut e = Exp2PipeC::default();
        let drive = |e: &mut Exp2PipeC, u: i64| {
            e.u.next = from_i64(u);
            e.ul.next = ((u as u64 & 0xFF) * 0x0101_0101).to_bits();
        };
        let clk = |e: &mut Exp2PipeC, c| e.clock.next = Clock::from(c);
        check_exp2_split(&mut e, 13, Exp2Pipe::LATENCY, clk, drive, |e| e.p.val().to_u64());
        let Verilog::Custom(v) = e.hdl() else { unreachable!() };
        assert!(v.contains("lut0[ul[7:0]]") && v.contains("lut15[ul[31:24]]") && !v.contains("lut3[u[7:0]]"), "{v}");
    }

    #[test]
    fn exp2_pipe_u_matches_exp2_fixed_after_its_latency() {
        let mut e = Exp2PipeU::default();
        let drive = |e: &mut Exp2PipeU, u: i64| {
            e.u.next = from_i64(u);
            e.ul.next = ((u & 0xFF) as u64).to_bits();
        };
        let clk = |e: &mut Exp2PipeU, c| e.clock.next = Clock::from(c);
        check_exp2_split(&mut e, 11, Exp2PipeU::LATENCY, clk, drive, |e| e.p.val().to_u64());
    }

    #[test]
    fn add_tree16_pipe_sums_n_lanes_after_its_latency() {
        let buses: Vec<Vec<u64>> =
            (0..6u64).map(|k| (0..16u64).map(|i| (0xFFFF - 977 * i - 4099 * k) & 0xFFFF).collect()).collect();
        let pack = |b: &[u64]| {
            b.iter().enumerate().fold(Bits::<256>::default(), |x, (i, &v)| x | (bits::<256>(v) << (16 * i as u64)))
        };
        for n in [1usize, 2, 3, 4, 5, 12, 16] {
            let mut t = AddTree16Pipe::<256>::new(n);
            t.connect_all();
            stream(
                &mut t,
                |t, c| t.clock.next = Clock::from(c),
                AddTree16Pipe::<256>::latency(n),
                &buses,
                |t, b| t.x.next = pack(b),
                |t, b| assert_eq!(t.s.val().to_u64(), b[..n].iter().sum::<u64>(), "n = {n}"),
            );
        }
    }

    #[test]
    fn tree_verilog_joins_pairs_passes_odd_nodes_and_registers_the_chosen_levels() {
        let (v, root) =
            tree_verilog(3, |l| 8 + l, |l| l == 1, |i| format!("x{i}"), |l, a, b| format!("j{l}({a}, {b})"));
        assert_eq!(root, "w2_0");
        assert_eq!(
            v,
            "wire [7:0] w0_0;\nwire [7:0] w0_1;\nwire [7:0] w0_2;\nreg [8:0] r1_0 = 0;\nreg [8:0] r1_1 = 0;\nwire [9:0] w2_0;\n\
             assign w0_0 = x0;\nassign w0_1 = x1;\nassign w0_2 = x2;\nassign w2_0 = j2(r1_0, r1_1);\n\
             always @(posedge clock) begin\n   r1_0 <= j1(w0_0, w0_1);\n   r1_1 <= w0_2;\nend\n"
        );
    }

    #[test]
    fn arg_max_pipe_picks_the_largest_valid_lane_lowest_index_first() {
        let mut rnd = rng(0x1234_5678_9ABC_DEF1);
        for n in [1usize, 2, 3, 5, 8, 13, 64] {
            let levels = n.next_power_of_two().trailing_zeros() as usize;
            for cut in [0, levels.div_ceil(2)] {
                let mut t = ArgMaxPipe::<2048, 64, 1024>::new(n, cut);
                t.connect_all();
                // Few distinct keys, so ties are common; some rows with no valid
                // lane; every lane a payload of its own.
                let rows: Vec<(Vec<i32>, u64, Vec<u16>)> = (0..40)
                    .map(|r| {
                        let keys = (0..n).map(|_| [i32::MIN, -1, 0, 7, i32::MAX][(rnd() % 5) as usize]).collect();
                        (keys, if r % 9 == 0 { 0 } else { rnd() }, (0..n).map(|_| rnd() as u16).collect())
                    })
                    .collect();
                let want = |(keys, mask, _): &(Vec<i32>, u64, Vec<u16>)| {
                    (0..n).filter(|&e| mask >> e & 1 == 1).max_by_key(|&e| (keys[e], std::cmp::Reverse(e))).unwrap_or(0)
                };
                stream(
                    &mut t,
                    |t, c| t.clock.next = Clock::from(c),
                    usize::from(cut > 0),
                    &rows,
                    |t, (keys, mask, pay)| {
                        t.z.next = keys
                            .iter()
                            .enumerate()
                            .fold(Bits::default(), |z, (e, &k)| z | (bits::<2048>(k as u32 as u64) << (32 * e as u64)));
                        t.mask.next = mask.to_bits();
                        t.pay.next = pay
                            .iter()
                            .enumerate()
                            .fold(Bits::default(), |b, (e, &p)| b | (bits::<1024>(p as u64) << (16 * e as u64)));
                    },
                    |t, row| {
                        let w = want(row);
                        assert_eq!(t.sel.val().to_u64() as usize, w, "n = {n}, cut {cut}: {row:?}");
                        assert_eq!(t.pay_sel.val().to_u64(), row.2[w] as u64, "n = {n}, cut {cut}: {row:?}");
                    },
                );
                // The cut level's nodes are the only registers.
                let Verilog::Custom(v) = t.hdl() else { panic!("ArgMaxPipe is a custom block") };
                let at_cut = if cut > 0 { n.div_ceil(1 << cut) } else { 0 };
                let synth = crate::synthesis::synthesis_text(&v);
                assert_eq!(synth.matches(" <= ").count(), at_cut, "{synth}");
            }
        }
    }

    /// The product's Verilator form adds no line and moves no token: the
    /// synthesis text is the multiplier's text with that form cut out (a line
    /// break in the form would renumber every line after it, and with them
    /// yosys's cells and the units' measured clocks).
    #[test]
    fn mul32_verilator_form_keeps_the_synthesis_text() {
        for signed in [true, false] {
            let v = mul32_verilog("x", "mult", signed);
            let (head, tail) = v.split_once(" `else ").expect("a Verilator form");
            let plain =
                format!("{}{}", head.replace(" `ifndef VERILATOR", ""), &tail[tail.find("`endif").unwrap() + 6..]);
            assert_eq!(crate::synthesis::synthesis_text(&v), plain);
            assert!(tail.contains("vm1") && !plain.contains("vm1"));
        }
    }

    /// [`ArgMaxPipe`]'s Verilator form is text synthesis does not read: the
    /// synthesis text is the tree's own, token for token (a token moved would
    /// rename yosys's cells and discard the router's measured clocks).
    #[test]
    fn arg_max_pipe_verilator_form_keeps_the_synthesis_text() {
        for (n, cut) in [(12, 2), (64, 3), (9, 2)] {
            let Verilog::Custom(v) = ArgMaxPipe::<2048, 64, 1024>::new(n, cut).hdl() else { panic!("custom") };
            let (tree, root) = tree_verilog(n, |_| 57, |l| l == cut, arg_max_leaf, arg_max_join);
            let plain = format!("{tree}always @(*) sel = {root}[39:32];\nalways @(*) pay_sel = {root}[56:41];");
            assert_eq!(crate::synthesis::synthesis_text(&v), plain, "n = {n}");
            assert!(v.contains("vh_root <= "), "n = {n}: no Verilator form");
            assert_eq!(v.lines().count(), plain.lines().count());
        }
    }

    #[test]
    fn pair_compares_find_arg_max_pipes_winner_one_hot() {
        let mut rnd = rng(0x0DDB_A11C_0FFE_E123);
        let settle = |b: &mut dyn FnMut() -> bool| while b() {};
        for n in 1..=PAIR_MAX {
            let (mut cmp, mut win, mut pick) =
                (PairCmp::<256>::new(n), PairWin::<8>::new(n), OneHotPick::<8, 128>::new(n));
            cmp.connect_all();
            win.connect_all();
            pick.connect_all();
            for r in 0..60 {
                let keys: Vec<i32> = (0..n).map(|_| [i32::MIN, -1, 0, 7, i32::MAX][(rnd() % 5) as usize]).collect();
                let mask = if r % 9 == 0 { 0 } else { rnd() & 0xFF };
                let pay: Vec<u16> = (0..n).map(|_| rnd() as u16).collect();
                cmp.z.next = keys
                    .iter()
                    .enumerate()
                    .fold(Bits::default(), |z, (e, &k)| z | (bits::<256>(k as u32 as u64) << (32 * e as u64)));
                settle(&mut || {
                    cmp.update_all();
                    cmp.has_changed()
                });
                (win.gt.next, win.mask.next) = (cmp.gt.val(), mask.to_bits());
                settle(&mut || {
                    win.update_all();
                    win.has_changed()
                });
                pick.oh.next = win.oh.val();
                pick.pay.next = pay
                    .iter()
                    .enumerate()
                    .fold(Bits::default(), |b, (e, &p)| b | (bits::<128>(p as u64) << (16 * e as u64)));
                settle(&mut || {
                    pick.update_all();
                    pick.has_changed()
                });
                let w = (0..n)
                    .filter(|&e| mask >> e & 1 == 1)
                    .max_by_key(|&e| (keys[e], std::cmp::Reverse(e)))
                    .unwrap_or(0);
                assert_eq!(win.oh.val().to_u64(), 1 << w, "n = {n}: {keys:?} {mask:#x}");
                assert_eq!(pick.sel.val().to_u64() as usize, w, "n = {n}: {keys:?} {mask:#x}");
                assert_eq!(pick.pay_sel.val().to_u64(), pay[w] as u64, "n = {n}: {keys:?} {mask:#x}");
            }
        }
    }

    #[test]
    fn dot_i8_pipe_streams_dot_products_after_its_latency() {
        let mut rnd = rng(0x2545_F491_4F6C_DD1D);
        let pack = |v: &[i8]| {
            v.iter()
                .enumerate()
                .fold(Bits::<512>::default(), |acc, (i, &x)| acc | (bits::<512>(x as u8 as u64) << (8 * i as u64)))
        };
        for per_stage in [1, 2] {
            for n in [1usize, 2, 4, 16, 64] {
                let mut b = DotI8Pipe::<512>::new(n, per_stage);
                b.connect_all();
                let levels = n.trailing_zeros() as usize;
                let lat = DotI8Pipe::<512>::latency(n, per_stage);
                assert_eq!(lat, 1 + levels.div_ceil(per_stage));
                // The extremes first, then random rows.
                let rows: Vec<(Vec<i8>, Vec<i8>)> = (0..20)
                    .map(|i| match i {
                        0 => (vec![-128; n], vec![-128; n]),
                        1 => (vec![-128; n], vec![127; n]),
                        _ => ((0..n).map(|_| rnd() as i8).collect(), (0..n).map(|_| rnd() as i8).collect()),
                    })
                    .collect();
                stream(
                    &mut b,
                    |b, c| b.clock.next = Clock::from(c),
                    lat,
                    &rows,
                    |b, (a, bb)| {
                        b.a.next = pack(a);
                        b.b.next = pack(bb);
                    },
                    |b, (a, bb)| {
                        let want: i64 = a.iter().zip(bb).map(|(&p, &q)| p as i64 * q as i64).sum();
                        assert_eq!(to_i64(b.dot.val()), want, "n = {n}, {per_stage} levels a stage");
                    },
                );
                // The products and a register per stage, each sum as wide as its level.
                let Verilog::Custom(v) = b.hdl() else { panic!("DotI8Pipe is a custom block") };
                let regs: usize = (0..=levels).filter(|&l| l == levels || l % per_stage == 0).map(|l| n >> l).sum();
                // Synthesis's branch: every node of a registered level;
                // Verilator's: a register per stage, ending in the same root,
                // on as many lines as a register each took (2 · regs + 2), so
                // the lines synthesis reads after it keep their numbers.
                let (fast, tree) = v.split_once("`else").unwrap();
                let root = format!("reg [{}:0] r{levels}_0 = 0;", 15 + levels);
                assert_eq!(tree.matches(" <= ").count(), regs, "{v}");
                assert_eq!(fast.matches(" <= ").count(), lat, "{v}");
                assert!(tree.contains(&root) && fast.contains(&root), "{v}");
                assert_eq!(fast.lines().count(), 1 + 2 * regs + 2, "{v}");
            }
        }
    }
}

/// The `d` output accumulators of an attention lane, `o[x]` (48 bits), with
/// the products that feed them and the snapshot the finalizer serializes,
/// [`RescaleRow::DELAY`] cycles behind their inputs: every input but `hot`,
/// `lo` and `shift` passes through that many registers first (`hot`/`lo`
/// the parent gives that late itself, decoded from `sh` as delayed). Then, on
/// a `load` edge, `pv[x] ← p · v[x]` (signed 16 × int8 element x of `v`, 32
/// bits), and `o[x]` is a [`RescaleAcc`] adding `pv[x]` (the same
/// `load`/`sh`/`hold`/`upd`/`first` for all, `hot`/`lo` from copies, below); on a `snap` edge
/// `os[x] ← o[x]`, on a `shift` edge (without `snap`) `os[x] ← os[x + 2]`
/// (the top two hold). `o0`, `o1` are `os[0]`, `os[1]`. `shift` must not
/// come within `DELAY` cycles after `snap` (the finalizer serializes after
/// a 33-cycle division).
///
/// The delay: the multipliers take `p`, `v` a cycle after the parent's
/// registers (the flow folds the delay registers into the MULT18X18Ds' input
/// registers, so the parent's `p`, loaded from a LUT-RAM FIFO and fed to d
/// multipliers, reaches one fabric register rather than d multipliers), and
/// each product is registered twice: in the multiplier (`pv`) and in the
/// fabric (`pvr`), which the placer can put beside the accumulator (the
/// route from the multiplier's output register to the add was 4.6–5.7 ns,
/// docs/timing.md). The accumulators' controls are delayed to match.
///
/// As a `DFF` per `pv[x]` and `os[x]` and a [`RescaleAcc`] instance per
/// `o[x]`, the same registers cost Verilator a copy per register and port
/// every cycle (the hold of `pv` and `os`, the instances' inputs): a third
/// of the default attention unit's simulation time. Here each is written
/// only on its edges, in one module.
///
/// Accumulator x reads its rounding decodes `hot` and `lo` from copy
/// `x·g / d` of `g` (the parent keeps the copies, e.g. [`Kept`] registers
/// loaded alike): each bit of one `hot` register fed the AND-OR trees of all
/// d accumulators and the parent's l (fan-out 17 at d = 16, 6–7 ns of routing
/// on ECP5, docs/timing.md).
///
/// The Verilog does not read `first`: it clears every `o[x]` on its `snap`
/// edge (as `os` takes it) and while `reset` is high, and a first step adds
/// to 0 (c is 0 then: no step rises into a first step). That is the model's
/// `o[x] ← pv[x]` for a parent that snapshots every block before the next
/// block's first step (its steps reach the row only after the snapshot) and
/// resets the row before the first block, as the attention lane does. With
/// `first` in the select behind the add, the sum went through two LUTs
/// (`o_row.c → acc`, −0.2 to −0.86 ns at every seed, docs/timing.md).
#[derive(LogicBlock)]
pub struct RescaleRow<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub load: Signal<In, Bit>,
    pub p: Signal<In, Bits<16>>,
    pub v: Signal<In, Bits<W>>,
    pub sh: Signal<In, Bits<6>>,
    pub hot: Vec<Signal<In, Bits<64>>>,
    pub lo: Vec<Signal<In, Bits<64>>>,
    pub hold: Signal<In, Bit>,
    pub upd: Signal<In, Bit>,
    pub first: Signal<In, Bit>,
    pub snap: Signal<In, Bit>,
    pub shift: Signal<In, Bit>,
    /// The parent's reset: the Verilog clears the accumulators (see below).
    pub reset: Signal<In, Bit>,
    pub o0: Signal<Out, Signed<48>>,
    pub o1: Signal<Out, Signed<48>>,
    /// The model's delay registers: (load, sh, hold, upd, first, snap) one
    /// and two edges late, and `p`, `v`'s elements one edge late.
    _c1: RowCtl,
    _c2: RowCtl,
    _p1: i64,
    _v1: Vec<i64>,
    _pv: Vec<i64>,
    _pvr: Vec<i64>,
    _st: Vec<RescaleState>,
    _os: Vec<i64>,
}

/// A [`RescaleRow`]'s delayed controls: load, sh, hold, upd, first, snap.
type RowCtl = (bool, Bits<6>, bool, bool, bool, bool);

impl<const W: usize> RescaleRow<W> {
    /// Cycles from the inputs to the accumulators and the snapshot.
    pub const DELAY: usize = 2;

    pub fn new(d: usize, g: usize) -> Self {
        assert!(d >= 2 && 8 * d <= W, "{d} int8 elements in {W} bits");
        assert!((1..=d).contains(&g), "{g} copies of the decodes for {d} accumulators");
        Self {
            clock: Default::default(),
            load: Default::default(),
            p: Default::default(),
            v: Default::default(),
            sh: Default::default(),
            hot: crate::many(g),
            lo: crate::many(g),
            hold: Default::default(),
            upd: Default::default(),
            first: Default::default(),
            snap: Default::default(),
            shift: Default::default(),
            reset: Default::default(),
            o0: Default::default(),
            o1: Default::default(),
            _c1: Default::default(),
            _c2: Default::default(),
            _p1: 0,
            _v1: vec![0; d],
            _pv: vec![0; d],
            _pvr: vec![0; d],
            _st: vec![RescaleState::default(); d],
            _os: vec![0; d],
        }
    }
}

impl<const W: usize> Logic for RescaleRow<W> {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let d = self._st.len();
            let (load2, sh2, hold2, upd2, first2, snap2) = self._c2;
            if snap2 {
                self._os.iter_mut().zip(&self._st).for_each(|(o, st)| *o = st.acc);
            } else if self.shift.val() {
                self._os.copy_within(2.., 0);
            }
            let ctl = (load2, sh2, hold2, upd2, first2);
            for x in 0..d {
                let a = self._pvr[x];
                rescale_step::<48>(&mut self._st[x], ctl, a);
                self._pvr[x] = self._pv[x];
                if self._c1.0 {
                    self._pv[x] = self._p1 * self._v1[x];
                }
                self._v1[x] = self.v.val().get_bits::<8>(8 * x).to_u64() as u8 as i8 as i64;
            }
            self._p1 = self.p.val().to_u64() as u16 as i16 as i64;
            self._c2 = self._c1;
            self._c1 =
                (self.load.val(), self.sh.val(), self.hold.val(), self.upd.val(), self.first.val(), self.snap.val());
        }
        self.o0.next = from_i64(self._os[0]);
        self.o1.next = from_i64(self._os[1]);
    }
    fn connect(&mut self) {
        self.o0.connect();
        self.o1.connect();
    }
    fn hdl(&self) -> Verilog {
        let (d, g) = (self._st.len(), self.hot.len());
        let mut v = format!(
            "\
reg ld1, ld2, hd1, hd2, up1, up2, sn1, sn2;
reg [5:0] sh1, sh2;
reg signed [15:0] p1;
reg [{vm}:0] v1;
always @(posedge clock) begin
   ld1 <= load; hd1 <= hold; up1 <= upd; sn1 <= snap; sh1 <= sh;
   ld2 <= ld1; hd2 <= hd1; up2 <= up1; sn2 <= sn1; sh2 <= sh1;
   p1 <= p; v1 <= v[{vm}:0];
end
wire zr2 = sn2 | reset;
",
            vm = 8 * d - 1
        );
        // Verilator's branches at the ends of lines of the synthesis form (the
        // shared registers on `zr2`'s line, each accumulator's on the line
        // before its own form, whose last line takes the `endif), so that every
        // line and column that synthesis and Icarus read is where it was:
        // yosys names cells by source position, and the placements in
        // docs/timing.md stand. One line a branch: Verilator refuses a line of
        // more than 40 000 preprocessor tokens.
        let (shared, fast, out) = rescale_row_verilator(d, g);
        v.pop();
        v += &format!(" `ifdef VERILATOR {shared} `endif");
        for (x, fast) in fast.iter().enumerate() {
            let k = x * g / d;
            let mut tree = format!(
                "reg signed [31:0] pv{x};\nalways @(posedge clock) if (ld1) pv{x} <= p1 * $signed(v1[{hi}:{lo}]);\n\
                 reg signed [31:0] pvr{x};\n(* keep *) always @(posedge clock) pvr{x} <= pv{x};\n",
                hi = 8 * x + 7,
                lo = 8 * x
            );
            let acc = rescale_verilog_ctl(
                48,
                &x.to_string(),
                &format!("{{{{16{{pvr{x}[31]}}}}, pvr{x}}}"),
                ["ld2", "sh2", "hd2", "up2", "first"],
                Some("zr2"),
            );
            assert!(acc.contains(" & hot[") && acc.contains(" & lo["));
            tree += &acc.replace(" & hot[", &format!(" & hot${k}[")).replace(" & lo[", &format!(" & lo${k}["));
            let tree = tree.strip_suffix('\n').expect("an accumulator's form ends in a newline");
            v += &format!(" `ifdef VERILATOR {fast} `else\n{tree} `endif");
        }
        v += " `ifndef VERILATOR\n";
        let accs: Vec<String> = (0..d).rev().map(|x| format!("acc{x}")).collect();
        let top = 48 * d - 1;
        let shift = if d > 2 {
            format!("   else if (shift) os <= {{os[{top}:{}], os[{top}:96]}};\n", 48 * (d - 2))
        } else {
            String::new()
        };
        v += &format!(
            "reg [{top}:0] os;\nalways @(posedge clock)\n   if (sn2) os <= {{{}}};\n{shift}\
             always @(*) begin\n   o0 = os[47:0];\n   o1 = os[95:48];\nend `else {out} `endif",
            accs.join(", ")
        );
        Verilog::Custom(v)
    }
}

/// [`RescaleRow`]'s accumulators for Verilator only: the registers of
/// [`rescale_verilog_ctl`] and the products (one shared `sr` and `mid` for
/// the row in place of each accumulator's kept copy, which synthesis needs
/// and a simulator does not), each accumulator's registers written in one
/// clocked block, and the sum `acc + a + c` (the synthesis form's
/// `{acc, c} + {a, 1}` without its dropped bit 0) and the rounding bit `c`
/// computed only in the cycles that load them. Verilator evaluated the
/// synthesis form's `sum` wires every cycle: the row cost 2.7 times the
/// instructions it did before the timing work (docs/simulators.md).
/// The product `pvr` is the synthesis form's two registers in one, computed
/// a cycle later from the row's copies of `p`, `v` (no per-accumulator copy
/// a cycle), and the snapshot's form (the third string, in place of the
/// 48·d-bit `os` that Verilator copied twice a cycle) keeps the
/// accumulators in registers and `o0`, `o1` as registers that a `shift`
/// loads from the next pair. Synthesis and Icarus read the other branch.
fn rescale_row_verilator(d: usize, g: usize) -> (String, Vec<String>, String) {
    assert!(d < 254, "the snapshot's pair index `ix` is 8 bits: {d} accumulators");
    let shared = format!(
        "reg [5:0] sr; reg mid; reg signed [15:0] p2; reg [{vm}:0] v2; \
         always @(posedge clock) begin if (ld2) sr <= sh2; mid <= hd2; if (ld1) begin p2 <= p1; v2 <= v1; end end",
        vm = 8 * d - 1
    );
    let one = |x: usize| {
        let (k, acc) = (x * g / d, format!("acc{x}"));
        format!(
            "reg signed [31:0] pvr{x}; reg signed [47:0] acc{x}, f1{x}; reg [7:0] ch{x}, cl{x}; reg c{x}; \
             always @(posedge clock) begin \
             if (mid) acc{x} <= f1{x} >>> sr[2:0]; \
             else if (up2) acc{x} <= acc{x} + {{{{16{{pvr{x}[31]}}}}, pvr{x}}} + {{47'd0, c{x}}}; \
             else if (zr2) acc{x} <= 0; \
             if (mid) c{x} <= (|ch{x}) && (!f1{x}[47] || (|cl{x})); else c{x} <= 1'b0; \
             if (hd2) begin f1{x} <= $signed({{{{16{{acc{x}[47]}}}}, acc{x}}}) >>> {{sr[5:3], 3'd0}}; \
             ch{x} <= {{{ch}}}; cl{x} <= {{{cl}}}; end \
             if (ld2) pvr{x} <= p2 * $signed(v2[{hi}:{lo}]); \
             end",
            ch = rescale_ors(&acc, 48, &format!("hot${k}")),
            cl = rescale_ors(&acc, 48, &format!("lo${k}")),
            hi = 8 * x + 7,
            lo = 8 * x
        )
    };
    let pairs: String = (2..d).step_by(2).map(|x| format!("{x}: begin o0 <= sv{x}; o1 <= sv{}; end ", x + 1)).collect();
    let snap: String = (2..d).map(|x| format!("sv{x} <= acc{x}; ")).collect();
    let regs: Vec<String> = (2..d).map(|x| format!("sv{x}")).collect();
    let regs = if regs.is_empty() { String::new() } else { format!("reg signed [47:0] {}; ", regs.join(", ")) };
    let out = format!(
        "{regs}reg [7:0] ix; always @(posedge clock) \
         if (sn2) begin o0 <= acc0; o1 <= acc1; ix <= 8'd2; {snap}end \
         else if (shift && ix < {d}) begin case (ix) {pairs}default: ; endcase ix <= ix + 8'd2; end"
    );
    (shared, (0..d).map(one).collect(), out)
}

/// [`Exp2Pipe`] whose LUT planes read the index from four copies of
/// u[7:0] in `ul` (copy c in bits 8c..8c+7, planes 4c..4c+3), which the
/// parent keeps (e.g. [`Kept`] registers loaded with what it registers into
/// `u`'s low byte): one register's byte fed all 16 planes (the attention
/// lanes' `exp2.u → exp2.raw`, fan-out 67–102, docs/timing.md). `ul` must
/// hold u[7:0] four times; `p` is as [`Exp2Pipe`]'s.
#[derive(LogicBlock, Default)]
pub struct Exp2PipeC {
    pub clock: Signal<In, Clock>,
    pub u: Signal<In, Signed<40>>,
    pub ul: Signal<In, Bits<32>>,
    pub p: Signal<Out, Bits<16>>,
    /// The model: [`Exp2Pipe`]'s first stage.
    _s: (u32, u32, bool, bool),
}

impl Logic for Exp2PipeC {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let p;
            (p, self._s) = Exp2Pipe::edge(self._s, to_i64(self.u.val()));
            self.p.next = (p as u64).to_bits();
        }
    }
    fn connect(&mut self) {
        self.p.connect();
    }
    fn hdl(&self) -> Verilog {
        let Verilog::Custom(mut v) = Exp2Pipe::default().hdl() else { unreachable!() };
        for b in 0..16 {
            let from = format!("lut{b}[u[7:0]]");
            assert!(v.contains(&from));
            v = v.replace(&from, &format!("lut{b}[ul[{}:{}]]", 8 * (b / 4) + 7, 8 * (b / 4)));
        }
        Verilog::Custom(v)
    }
}

/// [`Exp2Pipe`] with its input register inside: `p` is `exp2_fixed(u)` of
/// the `u` given [`Exp2PipeU::LATENCY`] cycles earlier. The LUT's 16 planes
/// read the index from four kept copies of `ul` (four planes each), where one
/// register's low bits fanned out to every plane (the MoE exponentials'
/// `exp.u → exp.raw`, fan-out 50–163, docs/timing.md). `ul` must equal
/// u[7:0] whenever `exp2_fixed(u)` is not zero: the MoE's is the difference
/// before the `e < E` select, which gave a dead expert its floor (loading
/// the copies behind that select was −2.3 ns). MoE only.
#[derive(LogicBlock, Default)]
pub struct Exp2PipeU {
    pub clock: Signal<In, Clock>,
    pub u: Signal<In, Signed<40>>,
    pub ul: Signal<In, Bits<8>>,
    pub p: Signal<Out, Bits<16>>,
    /// The model: `u` registered, then [`Exp2Pipe`]'s first stage.
    _u: i64,
    _s: (u32, u32, bool, bool),
}

impl Exp2PipeU {
    pub const LATENCY: usize = 1 + Exp2Pipe::LATENCY;
}

impl Logic for Exp2PipeU {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let p;
            (p, self._s) = Exp2Pipe::edge(self._s, self._u);
            self.p.next = (p as u64).to_bits();
            self._u = to_i64(self.u.val());
        }
    }
    fn connect(&mut self) {
        self.p.connect();
    }
    fn hdl(&self) -> Verilog {
        let Verilog::Custom(base) = Exp2Pipe::default().hdl() else { unreachable!() };
        // The same stages on `ur` (u registered), the planes on the copies.
        let mut v = base.replace("u[", "ur[");
        for b in 0..16 {
            let from = format!("lut{b}[ur[7:0]]");
            assert!(v.contains(&from));
            v = v.replace(&from, &format!("lut{b}[ua{}]", b / 4));
        }
        let copies: String = (0..4)
            .map(|c| format!("reg [7:0] ua{c} = 0;\n(* keep *) always @(posedge clock) ua{c} <= ul;\n"))
            .collect();
        Verilog::Custom(format!("reg [39:0] ur = 0;\nalways @(posedge clock) ur <= u;\n{copies}{v}"))
    }
}
