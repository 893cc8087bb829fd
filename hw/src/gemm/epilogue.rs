//! One output lane of the fused epilogue: bias add, ReLU, requantize.
use crate::blocks::RequantPipe;
use rust_hdl::prelude::*;

/// Lane `c` of the epilogue. The writer enables the add, then reads the int32
/// result a cycle later and the int8 one [`RequantPipe::LATENCY`] cycles
/// later, each already placed at lane `c` of a W-bit beat.
#[derive(LogicBlock)]
pub struct EpilogueLane<const W: usize> {
    pub clock: Signal<In, Clock>,
    pub acc: Signal<In, Bits<32>>,
    pub bias: Signal<In, Bits<32>>,
    pub use_bias: Signal<In, Bit>,
    pub relu: Signal<In, Bit>,
    pub en_add: Signal<In, Bit>,
    pub mult: Signal<In, Bits<32>>,
    pub shift: Signal<In, Bits<6>>,
    pub out32: Signal<Out, Bits<W>>,
    pub out8: Signal<Out, Bits<W>>,
    value: DFF<Bits<32>>,
    sum: Signal<Local, Signed<32>>,
    rq: RequantPipe,
    s32: Constant<Bits<16>>,
    s8: Constant<Bits<16>>,
}

impl<const W: usize> EpilogueLane<W> {
    pub fn new(col: usize) -> Self {
        with_defaults!(Self {
            s32: Constant::new(((col * 32) as u64).to_bits()),
            s8: Constant::new(((col * 8) as u64).to_bits()),
            .. clock, acc, bias, use_bias, relu, en_add, mult, shift, out32, out8, value, sum, rq
        })
    }
}

impl<const W: usize> Logic for EpilogueLane<W> {
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
        self.out32.next = bit_cast::<W, 32>(self.value.q.val()) << self.s32.val();
        self.out8.next = bit_cast::<W, 8>(self.rq.y.val()) << self.s8.val();
    }
}
