//! `docs/adding-a-unit.md`, followed: a toy unit written outside `ferrite-hw`
//! with only a config, a register table, a golden model and a datapath in the
//! shared shell, run through the generic register-level host path on the CPU
//! (its golden model) and in Verilator (its RTL), with no host code of its own.
//!
//! The unit, `vadd`, adds two int8 vectors with saturation: C[i] = sat8(A[i] + B[i]).
use ferrite_hw::regmap::RegisterMap;
use ferrite_hw::unit::{Memory, RegisterValues, Unit};
use ferrite_hw::vitis::PinLevel;
use ferrite_hw::HwError;
use ferrite_runtime::backend::cpu::{CpuDevice, CpuMode};
use ferrite_runtime::backend::sim::{Engine, SimDevice};
use ferrite_runtime::device::{RegValue, RegisterArgs, UnitRef};
use ferrite_runtime::{Buffer, Device, DeviceError, Launch};
use ferrite_sim::MemoryConfig;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use std::sync::Arc;

/// Step 1: the config, one type every layer reads.
mod vadd {
    use super::*;
    use ferrite_hw::dff_setup;
    use ferrite_hw::shell::{Shell, VitisPorts};
    use rust_hdl::prelude::*;

    /// Unit id in HWINFO's top byte; 0xF0 and up are free for out-of-tree units.
    pub const UNIT_ID: u32 = 0xF0;

    #[derive(Debug, Clone, PartialEq)]
    pub struct VaddConfig {
        pub port_bits: usize,
        pub clock_mhz: f64,
    }

    impl VaddConfig {
        pub fn kernel_name(&self) -> String {
            format!("ferrite_vadd_p{}", self.port_bits)
        }

        pub fn validate(&self) -> Result<(), HwError> {
            match self.port_bits {
                128 | 256 | 512 | 1024 => Ok(()),
                other => Err(HwError::Config(format!("port_bits = {other} (supported: 128, 256, 512, 1024)"))),
            }
        }

        pub fn hwinfo(&self) -> u32 {
            self.port_bits.trailing_zeros() << 16 | UNIT_ID << 24
        }
    }

    /// Step 2: the register table. The JSON map, the driver's names and the
    /// RTL's argument decoder (`Args`) all come from it.
    pub mod regs {
        use rust_hdl::prelude::*;
        ferrite_hw::register_table! {
            hwinfo: "log2(port_bits)<<16 | 0xF0<<24",
            status: "bit0: N = 0 (refused, no memory access) or an AXI error response";
            a: A Buffer "int8 A, N elements";
            b: B Buffer "int8 B, N elements";
            c: C Buffer "int8 C = sat8(A + B), N elements; bytes past N are not written";
            n: N Scalar "elements (≥ 1)";
        }
    }

    /// Step 3: the golden model, which is the unit's specification.
    pub fn vadd(a: &[i8], b: &[i8]) -> Vec<i8> {
        a.iter().zip(b).map(|(&x, &y)| x.saturating_add(y)).collect()
    }

    /// Step 4: the datapath in the shell: one beat of A, one of B, one of C,
    /// until N bytes are done (a toy: no overlap of reads and writes).
    #[derive(LogicBlock)]
    pub struct VaddUnit<const W: usize, const S: usize> {
        pub vitis: VitisPorts<W, S>,
        shell: Shell<W, S>,
        now: regs::Args,
        run: regs::Args,
        state: DFF<State>,
        offset: DFF<Bits<32>>,
        a_beat: DFF<Bits<W>>,
        b_beat: DFF<Bits<W>>,
        lane_a: Vec<Signal<Local, Bits<W>>>,
        lane_b: Vec<Signal<Local, Bits<W>>>,
        lane_sum: Vec<Signal<Local, Bits<W>>>,
        lane_out: Vec<Signal<Local, Bits<W>>>,
        packed: Vec<Signal<Local, Bits<W>>>,
        left: Signal<Local, Bits<32>>,
        /// Bit offset of each byte lane in the beat.
        c_lane_at: Vec<Constant<Bits<16>>>,
        c_byte: Constant<Bits<W>>,
        c_lanes: Constant<Bits<32>>,
        c_ones: Constant<Bits<S>>,
        _lanes: usize,
    }

    #[derive(Copy, Clone, PartialEq, Debug, LogicState)]
    enum State {
        Idle,
        ReadA,
        WaitA,
        ReadB,
        WaitB,
        Write,
        Finish,
        Done,
    }

    impl<const W: usize, const S: usize> VaddUnit<W, S> {
        pub fn new(cfg: &VaddConfig) -> Result<Self, HwError> {
            cfg.validate()?;
            Ok(ferrite_hw::with_defaults!(Self {
                shell: Shell::new(&regs::TABLE, cfg.hwinfo()),
                lane_a: ferrite_hw::many(S),
                lane_b: ferrite_hw::many(S),
                lane_sum: ferrite_hw::many(S),
                lane_out: ferrite_hw::many(S),
                packed: ferrite_hw::many(S),
                c_lane_at: (0..S).map(|l| Constant::new(((8 * l) as u64).to_bits())).collect(),
                c_byte: Constant::new(0xFFu64.to_bits()),
                c_lanes: Constant::new((S as u64).to_bits()),
                c_ones: Constant::new(Bits::<S>::mask()),
                _lanes: S,
                .. vitis, now, run, state, offset, a_beat, b_beat, left
            }))
        }
    }

    impl<const W: usize, const S: usize> Logic for VaddUnit<W, S> {
        #[hdl_gen]
        fn update(&mut self) {
            dff_setup!(self, vitis.ap_clk, state, offset, a_beat, b_beat);
            VitisPorts::<W, S>::link(&mut self.vitis, &mut self.shell.vitis);
            for i in 0..regs::TABLE.words() {
                self.now.words[i].next = self.shell.args[i].val();
                self.run.words[i].next = self.shell.run[i].val();
            }
            self.shell.done.next = self.state.q.val() == State::Done;
            self.shell.fail.next = false;
            self.shell.span_load.next = false;
            self.shell.span_resume.next = false;
            self.shell.span_addr.next = 0.into();
            self.shell.span_beats.next = 0.into();
            self.shell.span_rows.next = 0.into();
            self.shell.span_pitch.next = 0.into();
            self.shell.span_go.next = false;

            // The datapath: lane-wise saturating add of the two beats. Each lane works
            // in a beat-wide signal (its byte at the bottom): `#[hdl_gen]` cannot
            // `bit_cast` a value indexed by a loop variable, and synthesis trims the rest.
            for l in 0..self._lanes {
                self.lane_a[l].next = (self.a_beat.q.val() >> self.c_lane_at[l].val()) & self.c_byte.val();
                self.lane_b[l].next = (self.b_beat.q.val() >> self.c_lane_at[l].val()) & self.c_byte.val();
                self.lane_sum[l].next = (self.lane_a[l].val() + self.lane_b[l].val()) & self.c_byte.val();
                self.lane_out[l].next = self.lane_sum[l].val();
                // Overflow: both operands have one sign and the sum the other.
                if (self.lane_a[l].val().get_bit(7) == self.lane_b[l].val().get_bit(7))
                    & (self.lane_sum[l].val().get_bit(7) != self.lane_a[l].val().get_bit(7))
                {
                    self.lane_out[l].next = 0x7F.into();
                    if self.lane_a[l].val().get_bit(7) {
                        self.lane_out[l].next = 0x80.into();
                    }
                }
            }
            self.packed[0].next = self.lane_out[0].val();
            for l in 1..self._lanes {
                self.packed[l].next = self.packed[l - 1].val() | (self.lane_out[l].val() << self.c_lane_at[l].val());
            }

            // Reads: one beat at a time, at `offset` into A, then B.
            self.shell.ar_req.next = false;
            self.shell.ar_req_addr.next = self.run.a.val() + bit_cast::<64, 32>(self.offset.q.val());
            self.shell.ar_req_len.next = 0.into();
            // Writes: the summed beat, strobes only on the bytes before N.
            self.left.next = self.run.n.val() - self.offset.q.val();
            self.shell.wr_send.next = self.state.q.val() == State::Write;
            self.shell.wr_addr.next = self.run.c.val() + bit_cast::<64, 32>(self.offset.q.val());
            self.shell.wr_len.next = 0.into();
            for l in (self._lanes - 1)..self._lanes {
                self.shell.wr_data.next = self.packed[l].val();
            }
            self.shell.wr_strb.next = self.c_ones.val();
            if self.left.val() < self.c_lanes.val() {
                self.shell.wr_strb.next = self.c_ones.val() >> (self.c_lanes.val() - self.left.val());
            }
            self.shell.wr_last.next = true;

            match self.state.q.val() {
                State::Idle => {
                    if self.shell.start.val() {
                        self.offset.d.next = 0.into();
                        self.state.d.next = State::ReadA;
                        if self.now.n.val() == 0 {
                            self.shell.fail.next = true;
                            self.state.d.next = State::Done;
                        }
                    }
                }
                State::ReadA => {
                    if self.shell.slot_free.val() {
                        self.shell.ar_req.next = true;
                        self.state.d.next = State::WaitA;
                    }
                }
                State::WaitA => {
                    if self.vitis.m_axi_gmem.rvalid.val() {
                        self.a_beat.d.next = self.vitis.m_axi_gmem.rdata.val();
                        self.state.d.next = State::ReadB;
                    }
                }
                State::ReadB => {
                    self.shell.ar_req_addr.next = self.run.b.val() + bit_cast::<64, 32>(self.offset.q.val());
                    if self.shell.slot_free.val() {
                        self.shell.ar_req.next = true;
                        self.state.d.next = State::WaitB;
                    }
                }
                State::WaitB => {
                    if self.vitis.m_axi_gmem.rvalid.val() {
                        self.b_beat.d.next = self.vitis.m_axi_gmem.rdata.val();
                        self.state.d.next = State::Write;
                    }
                }
                State::Write => {
                    if self.shell.wr_fire.val() {
                        self.offset.d.next = self.offset.q.val() + self.c_lanes.val();
                        self.state.d.next = State::ReadA;
                        if self.left.val() <= self.c_lanes.val() {
                            self.state.d.next = State::Finish;
                        }
                    }
                }
                State::Finish => {
                    if self.shell.writes_done.val() {
                        self.state.d.next = State::Done;
                    }
                }
                State::Done => {
                    self.state.d.next = State::Idle;
                }
                _ => {
                    self.state.d.next = State::Idle;
                }
            }
            if !self.vitis.ap_rst_n.val() {
                self.state.d.next = State::Idle;
            }
        }
    }

    ferrite_hw::vitis_unit!(VaddUnit, VaddConfig, [128, 256, 512, 1024]);

    /// Step 5: the `Unit` trait, which the host's generic path needs.
    impl Unit for VaddConfig {
        fn name(&self) -> &'static str {
            "vadd"
        }
        fn kernel_name(&self) -> String {
            VaddConfig::kernel_name(self)
        }
        fn validate(&self) -> Result<(), HwError> {
            VaddConfig::validate(self)
        }
        fn register_map(&self) -> RegisterMap {
            regs::TABLE.map(&self.kernel_name(), self.port_bits as u32)
        }
        fn hwinfo(&self) -> u32 {
            VaddConfig::hwinfo(self)
        }
        fn clock_mhz(&self) -> f64 {
            self.clock_mhz
        }
        fn multipliers(&self) -> u64 {
            0
        }
        fn port_bits(&self) -> usize {
            self.port_bits
        }
        fn scaling_knob(&self) -> (&'static str, usize) {
            ("port_bits", self.port_bits)
        }
        fn size_label(&self) -> String {
            format!("{} lanes", self.port_bits / 8)
        }
        fn generate_verilog(&self) -> Result<String, HwError> {
            verilog(self)
        }
        fn hdl_model(&self) -> Result<Box<dyn PinLevel>, HwError> {
            hdl_model(self)
        }
        /// The golden model on device memory, refusing N = 0 as the RTL does.
        fn run_registers(&self, args: &RegisterValues, mem: &mut dyn Memory) -> Result<u32, HwError> {
            let n = args.get(regs::N)? as usize;
            if n == 0 {
                return Ok(1);
            }
            let read = |addr: u64| -> Result<Vec<i8>, HwError> {
                let mut bytes = vec![0; n];
                mem.read(addr, &mut bytes)?;
                Ok(bytes.into_iter().map(|b| b as i8).collect())
            };
            let c = vadd(&read(args.get(regs::A)?)?, &read(args.get(regs::B)?)?);
            mem.write(args.get(regs::C)?, &c.iter().map(|&v| v as u8).collect::<Vec<_>>())?;
            Ok(0)
        }
    }
}

use vadd::VaddConfig;

/// Bytes every output buffer starts as, so an unwritten element fails the check.
const POISON: u8 = 0xA5;

/// One launch of the toy unit on `dev`, register by register; returns the
/// launch's result and C's whole buffer (N bytes and the poisoned tail of its
/// last beat), read back whether or not the launch succeeded.
fn run(dev: &mut dyn Device, unit: &Arc<VaddConfig>, a: &[i8], b: &[i8]) -> (Result<(), DeviceError>, Vec<u8>) {
    let n = a.len() as u64;
    let beat = (unit.port_bits / 8) as u64;
    let padded = n.div_ceil(beat).max(1) * beat;
    let upload = |dev: &mut dyn Device, bytes: Vec<u8>| -> Buffer {
        let buf = dev.alloc(padded).unwrap();
        dev.upload(buf, 0, &bytes).unwrap();
        buf
    };
    let pad = |v: &[i8]| {
        let mut bytes: Vec<u8> = v.iter().map(|&x| x as u8).collect();
        bytes.resize(padded as usize, 0x5A);
        bytes
    };
    let (ba, bb) = (upload(dev, pad(a)), upload(dev, pad(b)));
    let bc = upload(dev, vec![POISON; padded as usize]);
    let launch = Launch::Registers(RegisterArgs {
        unit: UnitRef(unit.clone()),
        values: vec![
            (vadd::regs::A.into(), RegValue::Buffer(ba)),
            (vadd::regs::B.into(), RegValue::Buffer(bb)),
            (vadd::regs::C.into(), RegValue::Buffer(bc)),
            (vadd::regs::N.into(), RegValue::Scalar(n)),
        ],
        useful_macs: 0,
    });
    let result = dev.launch(&launch).map(drop);
    let mut out = vec![0; padded as usize];
    dev.download(bc, 0, &mut out).unwrap();
    for buf in [ba, bb, bc] {
        dev.free(buf).unwrap();
    }
    (result, out)
}

fn check((result, out): (Result<(), DeviceError>, Vec<u8>), a: &[i8], b: &[i8]) {
    result.unwrap();
    let want = vadd::vadd(a, b);
    let got: Vec<i8> = out[..a.len()].iter().map(|&x| x as i8).collect();
    assert_eq!(got, want, "C differs from the golden model");
    assert!(out[a.len()..].iter().all(|&x| x == POISON), "bytes past N were written");
}

fn sim(unit: &Arc<VaddConfig>) -> Option<SimDevice> {
    if !ferrite_sim::verilator_or_skip() {
        return None;
    }
    let mem = MemoryConfig { ready_stall_prob: 0.3, valid_stall_prob: 0.3, seed: 7, ..Default::default() };
    Some(SimDevice::generic(unit.clone(), mem, Engine::Verilator, None).expect("the vadd unit builds"))
}

fn vectors() -> impl Strategy<Value = (Vec<i8>, Vec<i8>)> {
    let edge = prop_oneof![Just(-128i8), Just(127i8), Just(-1i8), Just(0i8), any::<i8>()];
    (1usize..100).prop_flat_map(move |n| {
        (proptest::collection::vec(edge.clone(), n), proptest::collection::vec(edge.clone(), n))
    })
}

#[test]
fn vadd_register_map_comes_from_its_table() {
    let unit = VaddConfig { port_bits: 128, clock_mhz: 300.0 };
    let map = unit.register_map();
    map.check().unwrap();
    let names: Vec<_> = map.arguments().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["A", "B", "C", "N"]);
    assert_eq!(map.offset("A"), 0x10);
    assert_eq!(map.offset("N"), 0x28);
    assert!(map.get("HWINFO").is_some() && map.get("STATUS").is_some());
}

#[test]
fn vadd_runs_on_cpu_and_in_simulation_bit_exact() {
    let unit = Arc::new(VaddConfig { port_bits: 128, clock_mhz: 300.0 });
    let mut cpu = CpuDevice::new(CpuMode::Golden);
    let mut sim = sim(&unit);
    // A fixed edge case first: saturation both ways, N = 1 and a partial last beat.
    let mut cases: Vec<(Vec<i8>, Vec<i8>)> = vec![
        (vec![-128, 127, 100, -100, 5], vec![-1, 1, 100, -100, -5]),
        (vec![-128], vec![-128]),
        (vec![7; 32], vec![-8; 32]),
    ];
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..12 {
        cases.push(vectors().new_tree(&mut runner).unwrap().current());
    }
    for (a, b) in &cases {
        check(run(&mut cpu, &unit, a, b), a, b);
        if let Some(sim) = sim.as_mut() {
            check(run(sim, &unit, a, b), a, b);
        }
    }
}

#[test]
fn vadd_refuses_n_zero_without_touching_memory_and_runs_on_after() {
    let unit = Arc::new(VaddConfig { port_bits: 128, clock_mhz: 300.0 });
    let mut devices: Vec<Box<dyn Device>> = vec![Box::new(CpuDevice::new(CpuMode::Golden))];
    if let Some(sim) = sim(&unit) {
        devices.push(Box::new(sim));
    }
    for dev in &mut devices {
        let (result, out) = run(dev.as_mut(), &unit, &[], &[]);
        assert!(matches!(result, Err(DeviceError::Fault { status: 1 })), "{result:?}");
        assert!(out.iter().all(|&x| x == POISON), "a refused run wrote C");
        let (a, b) = (vec![100i8; 20], vec![100i8; 20]);
        check(run(dev.as_mut(), &unit, &a, &b), &a, &b);
    }
}

#[test]
fn typed_only_devices_answer_unsupported() {
    let unit = Arc::new(VaddConfig { port_bits: 128, clock_mhz: 300.0 });
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let gemm = ferrite_hw::gemm::GemmConfig::small(2, 2);
    let mut gemm = SimDevice::new(gemm, MemoryConfig::default(), Engine::Verilator, None).unwrap();
    let (result, _) = run(&mut gemm, &unit, &[1], &[2]);
    assert!(matches!(result, Err(DeviceError::Unsupported { unit: "vadd", .. })), "{result:?}");
}
