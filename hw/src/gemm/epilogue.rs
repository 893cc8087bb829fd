//! One output lane of the fused epilogue: bias add, ReLU, requantize.
use crate::blocks::{RequantPipe, SkewLine};
use crate::clock;
use rust_hdl::prelude::*;

/// Lane `c` of the epilogue. The sum `acc + bias` is registered every cycle
/// (`pre`: the writer's `Fetch`, where its row and bias word are in); the
/// writer then enables its move into the result register (`en_add`, in
/// `Bias`), the requantizer's input, and reads the int32
/// result a cycle later and the int8 one [`RequantPipe::LATENCY`] cycles
/// later; the unit packs the lanes into beats (`Pack`). ReLU is applied to
/// the registered sum on the way out (`clip`, and delayed beside the
/// requantizer: requantizing 0 gives 0), not as a clear of the sum's register
/// decided by its sign: sign, then the clear of 32 flip-flops after the add's
/// carry chain was the GEMM unit's critical path (docs/timing.md).
#[derive(LogicBlock)]
pub struct EpilogueLane {
    pub clock: Signal<In, Clock>,
    pub acc: Signal<In, Bits<32>>,
    pub bias: Signal<In, Bits<32>>,
    pub use_bias: Signal<In, Bit>,
    pub relu: Signal<In, Bit>,
    pub en_add: Signal<In, Bit>,
    pub mult: Signal<In, Bits<32>>,
    pub shift: Signal<In, Bits<6>>,
    pub out32: Signal<Out, Bits<32>>,
    pub out8: Signal<Out, Bits<8>>,
    pre: DFF<Bits<32>>,
    value: DFF<Bits<32>>,
    clip: DFF<Bit>,
    clip_dly: SkewLine<1>,
    sum: Signal<Local, Signed<32>>,
    rq: RequantPipe,
}

impl Default for EpilogueLane {
    fn default() -> Self {
        with_defaults!(Self {
            clip_dly: SkewLine::new(RequantPipe::LATENCY),
            .. clock, acc, bias, use_bias, relu, en_add, mult, shift, out32, out8, pre, value, clip, sum, rq
        })
    }
}

impl Logic for EpilogueLane {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, pre, value, clip);
        clock!(self, clock, rq, clip_dly);
        // Two's-complement wrapping add, as the numerics contract says.
        self.sum.next = signed_cast(self.acc.val());
        if self.use_bias.val() {
            self.sum.next = signed_cast(self.acc.val()) + signed_cast(self.bias.val());
        }
        self.pre.d.next = unsigned_cast(self.sum.val());
        if self.en_add.val() {
            self.value.d.next = self.pre.q.val();
            self.clip.d.next = self.relu.val() & self.pre.q.val().get_bit(31);
        }
        self.rq.x.next = self.value.q.val();
        self.rq.mult.next = self.mult.val();
        self.rq.shift.next = self.shift.val();
        self.clip_dly.din.next = bit_cast::<1, 1>(self.clip.q.val().into());
        self.out32.next = self.value.q.val();
        if self.clip.q.val() {
            self.out32.next = 0.into();
        }
        self.out8.next = self.rq.y.val();
        if self.clip_dly.dout.val().any() {
            self.out8.next = 0.into();
        }
    }
}
