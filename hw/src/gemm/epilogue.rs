//! One output lane of the fused epilogue: bias add, ReLU, requantize.
use crate::blocks::RequantPipe;
use rust_hdl::prelude::*;

/// Lane `c` of the epilogue. The writer enables the add, then reads the int32
/// result a cycle later and the int8 one [`RequantPipe::LATENCY`] cycles
/// later; the unit packs the lanes into beats (`Pack`).
#[derive(LogicBlock, Default)]
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
    value: DFF<Bits<32>>,
    sum: Signal<Local, Signed<32>>,
    rq: RequantPipe,
}

impl Logic for EpilogueLane {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, value);
        self.rq.clock.next = self.clock.val();
        // Two's-complement wrapping add, as the numerics contract says.
        self.sum.next = signed_cast(self.acc.val());
        if self.use_bias.val() {
            self.sum.next = signed_cast(self.acc.val()) + signed_cast(self.bias.val());
        }
        if self.en_add.val() {
            self.value.d.next = unsigned_cast(self.sum.val());
            if self.relu.val() & self.sum.val().get_bit(31) {
                self.value.d.next = 0.into();
            }
        }
        self.rq.x.next = self.value.q.val();
        self.rq.mult.next = self.mult.val();
        self.rq.shift.next = self.shift.val();
        self.out32.next = self.value.q.val();
        self.out8.next = self.rq.y.val();
    }
}
