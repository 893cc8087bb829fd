//! The Vitis RTL-kernel top-level port list shared by every Ferrite unit.
//!
//! `ap_clk`, `ap_rst_n` (active-low, synchronous), an AXI4-Lite slave
//! `s_axi_control_*` carrying the `ap_ctrl_hs` registers and arguments, one
//! AXI4 master `m_axi_gmem_*` (single ID, in-order, INCR bursts) and
//! `interrupt`. The simulator shim is generated from [`ports`], so a unit that
//! follows this list needs no simulator code of its own.
use crate::shell::{AxiLiteSlave, AxiMaster, VitisPorts};
use crate::HwError;
use rust_hdl::prelude::*;

/// Bits of every `m_axi_gmem` address.
pub const GMEM_ADDR_BITS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    In,
    Out,
}

/// One top-level port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub dir: Dir,
    pub bits: usize,
}

/// The full port list of a unit whose memory port is `data_bits` bits wide
/// (128, 256, 512 or 1024), read off [`VitisPorts`] itself so that the list
/// the simulators' shims and harnesses are generated from is the RTL's.
pub fn ports(data_bits: usize) -> Vec<Port> {
    /// Collects each signal's path below the top namespace, `_`-joined.
    #[derive(Default)]
    struct Collect {
        path: Vec<String>,
        ports: Vec<Port>,
    }
    impl Probe for Collect {
        fn visit_start_namespace(&mut self, name: &str, _: &dyn Block) {
            self.path.push(name.to_string());
        }
        fn visit_atom(&mut self, name: &str, signal: &dyn Atom) {
            let dir = match signal.kind() {
                AtomKind::InputParameter => Dir::In,
                _ => Dir::Out,
            };
            let name = self.path[1..].iter().map(String::as_str).chain([name]).collect::<Vec<_>>().join("_");
            self.ports.push(Port { name, dir, bits: signal.bits() });
        }
        fn visit_end_namespace(&mut self, _: &str, _: &dyn Block) {
            self.path.pop();
        }
    }
    fn collect<const W: usize, const S: usize>() -> Vec<Port> {
        let mut probe = Collect::default();
        VitisPorts::<W, S>::default().accept("vitis", &mut probe);
        probe.ports
    }
    match data_bits {
        128 => collect::<128, 16>(),
        256 => collect::<256, 32>(),
        512 => collect::<512, 64>(),
        1024 => collect::<1024, 128>(),
        other => panic!("no Vitis port list for a {other}-bit memory port (128, 256, 512 or 1024)"),
    }
}

#[cfg(test)]
mod tests {
    use super::{with_big_stack, VitisUnit};
    use crate::regmap::{ArgKind, RegisterMap, Table};

    /// The control slave's word counts and the FLAGS bits agree with the unit's table and map.
    fn check_against_table<U: VitisUnit>(cfg: U::Config, table: &'static Table, map: RegisterMap) {
        let (args, status) = with_big_stack(move || U::build(&cfg).unwrap().shell_words()).unwrap();
        let first_status = map.offset("CYCLES");
        assert_eq!(args, (first_status as usize - 0x10) / 4, "{}: argument words", map.kernel);
        assert_eq!(args, table.words());
        let status_bits: u32 = map
            .registers
            .iter()
            .filter(|r| r.kind == ArgKind::Status && r.offset >= first_status)
            .map(|r| r.bits)
            .sum();
        assert_eq!(status, status_bits as usize / 32, "{}: status words", map.kernel);
        for arg in table.args {
            assert_eq!(map.offset(arg.name) as usize, 0x10 + 4 * table.word(arg.name));
            for (name, bit) in arg.flags {
                let described = &map.get(arg.name).unwrap().description;
                assert!(described.contains(&format!("bit{bit} ")), "{}: {name} is bit {bit}: {described}", map.kernel);
            }
        }
    }

    #[test]
    fn control_words_and_flags_follow_each_table() {
        use crate::{attention, gemm, moe};
        let g = gemm::GemmConfig::small(2, 2);
        check_against_table::<gemm::rtl::GemmUnit<128, 16>>(g.clone(), &gemm::regs::TABLE, g.register_map());
        let a =
            attention::AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, ..Default::default() };
        check_against_table::<attention::rtl::AttentionUnit<128, 16>>(
            a.clone(),
            &attention::regs::TABLE,
            a.register_map(),
        );
        let m = moe::MoeConfig::small();
        check_against_table::<moe::rtl::MoeUnit<128, 16, 16, 512, 640, 256>>(
            m.clone(),
            &moe::regs::TABLE,
            m.register_map(),
        );
    }

    #[test]
    fn port_list_is_the_vitis_one() {
        use super::{Dir, Port};
        let ports = super::ports(256);
        let port = |name: &str| ports.iter().find(|p| p.name == name).cloned();
        let p = |name: &str, dir, bits| Some(Port { name: name.to_string(), dir, bits });
        assert_eq!(ports.len(), 3 + 17 + 25);
        assert_eq!(
            ports[..3],
            [
                p("ap_clk", Dir::In, 1).unwrap(),
                p("ap_rst_n", Dir::In, 1).unwrap(),
                p("interrupt", Dir::Out, 1).unwrap()
            ]
        );
        assert_eq!(port("s_axi_control_awaddr"), p("s_axi_control_awaddr", Dir::In, crate::regmap::CTRL_ADDR_BITS));
        assert_eq!(port("s_axi_control_rdata"), p("s_axi_control_rdata", Dir::Out, 32));
        assert_eq!(port("m_axi_gmem_araddr"), p("m_axi_gmem_araddr", Dir::Out, super::GMEM_ADDR_BITS));
        assert_eq!(port("m_axi_gmem_rdata"), p("m_axi_gmem_rdata", Dir::In, 256));
        assert_eq!(port("m_axi_gmem_wstrb"), p("m_axi_gmem_wstrb", Dir::Out, 32));
        assert_eq!(super::ports(1024).iter().find(|p| p.name == "m_axi_gmem_wdata").unwrap().bits, 1024);
    }

    #[test]
    fn port_names_are_unique() {
        let ports = super::ports(512);
        let mut names: Vec<_> = ports.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ports.len());
    }
}

/// Widest supported `m_axi_gmem` data bus, in bits.
pub const MAX_DATA_BITS: usize = 1024;
/// 32-bit words of the widest data bus.
pub const DATA_WORDS: usize = MAX_DATA_BITS / 32;

/// Values driven into a unit's input ports for one evaluation. `#[repr(C)]`
/// because the Verilator shim reads it directly; each field is named after its
/// port without the interface prefix (`ctrl_` = `s_axi_control_`, `gmem_` =
/// `m_axi_gmem_`). Wide data is little-endian 32-bit words, bit 0 first.
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub ap_rst_n: u8,
    pub ctrl_awvalid: u8,
    pub ctrl_wvalid: u8,
    pub ctrl_bready: u8,
    pub ctrl_arvalid: u8,
    pub ctrl_rready: u8,
    pub gmem_awready: u8,
    pub gmem_wready: u8,
    pub gmem_bvalid: u8,
    pub gmem_arready: u8,
    pub gmem_rvalid: u8,
    pub gmem_rlast: u8,
    pub gmem_bresp: u8,
    pub gmem_rresp: u8,
    pub ctrl_wstrb: u8,
    pub ctrl_awaddr: u32,
    pub ctrl_araddr: u32,
    pub ctrl_wdata: u32,
    pub gmem_rdata: [u32; DATA_WORDS],
}

/// Values read from a unit's output ports after an evaluation (see [`Inputs`]).
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    pub interrupt: u8,
    pub ctrl_awready: u8,
    pub ctrl_wready: u8,
    pub ctrl_bvalid: u8,
    pub ctrl_arready: u8,
    pub ctrl_rvalid: u8,
    pub ctrl_bresp: u8,
    pub ctrl_rresp: u8,
    pub gmem_awvalid: u8,
    pub gmem_wvalid: u8,
    pub gmem_wlast: u8,
    pub gmem_bready: u8,
    pub gmem_arvalid: u8,
    pub gmem_rready: u8,
    pub gmem_awlen: u8,
    pub gmem_arlen: u8,
    pub gmem_awsize: u8,
    pub gmem_arsize: u8,
    pub gmem_awburst: u8,
    pub gmem_arburst: u8,
    pub ctrl_rdata: u32,
    pub gmem_awaddr: u64,
    pub gmem_araddr: u64,
    pub gmem_wdata: [u32; DATA_WORDS],
    /// One bit per byte lane, lane 0 in bit 0 of word 0.
    pub gmem_wstrb: [u32; DATA_WORDS / 8],
}

/// A cycle-level model of a unit with the Vitis port list: Verilator's, or
/// rust-hdl's own simulator. The memory model and the AXI4-Lite driver in
/// `ferrite-sim` are written against this trait only.
pub trait PinLevel {
    /// Drive the inputs and settle combinational logic (clock unchanged).
    fn eval(&mut self, inputs: &Inputs) -> Outputs;
    /// One rising clock edge with `inputs` held, then settle; returns the outputs after the edge.
    fn tick(&mut self, inputs: &Inputs) -> Outputs;
    /// One clock cycle: [`eval`](Self::eval) into `settled` (the values the
    /// cycle's handshakes are read from), then [`tick`](Self::tick) into
    /// `after`. A model overrides it to do both in one call.
    fn cycle(&mut self, inputs: &Inputs, settled: &mut Outputs, after: &mut Outputs) {
        *settled = self.eval(inputs);
        *after = self.tick(inputs);
    }
    /// Memory data width of this unit in bits.
    fn data_bits(&self) -> usize;
}

/// Rename rust-hdl's `top` module to the kernel name Vitis expects, the
/// interface ports rust-hdl names `vitis$s_axi_control$awvalid` to the Vitis
/// names (`s_axi_control_awvalid`) in every module that carries them, and make the
/// text portable ([`crate::portable`]). Every unit's export goes through here.
pub fn rename_top(verilog: &str, kernel: &str) -> String {
    crate::portable::portable(
        &verilog
            .replacen("module top(", &format!("module {kernel}("), 1)
            .replace("vitis$", "")
            .replace("s_axi_control$", "s_axi_control_")
            .replace("m_axi_gmem$", "m_axi_gmem_"),
    )
}

/// A rust-hdl block with the Vitis port list: `ap_clk`, `ap_rst_n`,
/// `interrupt` and the two [`crate::shell`] interfaces.
pub trait VitisTop: rust_hdl::prelude::Block {
    fn drive(&mut self, i: &Inputs, clock: bool);
    fn sample(&self) -> Outputs;
    fn data_bits(&self) -> usize;
}

/// A unit's top level, built from its configuration at widths `W`, `S = W / 8`.
pub trait VitisUnit: VitisTop + Send + Sized + 'static {
    type Config: Clone + Send + 'static;
    fn build(cfg: &Self::Config) -> Result<Self, HwError>;
    fn kernel_name(cfg: &Self::Config) -> String;
    /// Argument and status words of the unit's control slave.
    fn shell_words(&self) -> (usize, usize);
}

/// Copy little-endian words into a wide value and back.
pub fn words_to_bits<const N: usize>(words: &[u32]) -> Bits<N> {
    let mut b = Bits::<N>::default();
    for (w, word) in words.iter().enumerate().take(N.div_ceil(32)) {
        let chunk: Bits<32> = (*word as u64).to_bits();
        let width = (N - 32 * w).min(32);
        for bit in 0..width {
            b = b.replace_bit(32 * w + bit, chunk.get_bit(bit));
        }
    }
    b
}

pub fn bits_to_words<const N: usize>(b: Bits<N>, words: &mut [u32]) {
    for (w, word) in words.iter_mut().enumerate().take(N.div_ceil(32)) {
        let width = (N - 32 * w).min(32);
        *word = (0..width).fold(0u32, |acc, bit| acc | (u32::from(b.get_bit(32 * w + bit)) << bit));
    }
}

/// Driven and sampled by [`vitis_unit!`] for the simulators.
impl<const W: usize, const S: usize> VitisPorts<W, S> {
    pub fn drive(&mut self, i: &Inputs, clock: bool) {
        self.ap_clk.next = Clock::from(clock);
        self.ap_rst_n.next = i.ap_rst_n != 0;
        self.s_axi_control.drive(i);
        self.m_axi_gmem.drive(i);
    }

    pub fn sample(&self) -> Outputs {
        let mut o = Outputs { interrupt: self.interrupt.val() as u8, ..Default::default() };
        self.s_axi_control.sample(&mut o);
        self.m_axi_gmem.sample(&mut o);
        o
    }
}

impl AxiLiteSlave {
    pub fn drive(&mut self, i: &Inputs) {
        self.awvalid.next = i.ctrl_awvalid != 0;
        self.awaddr.next = (i.ctrl_awaddr as u64).to_bits();
        self.wvalid.next = i.ctrl_wvalid != 0;
        self.wdata.next = (i.ctrl_wdata as u64).to_bits();
        self.wstrb.next = (i.ctrl_wstrb as u64).to_bits();
        self.bready.next = i.ctrl_bready != 0;
        self.arvalid.next = i.ctrl_arvalid != 0;
        self.araddr.next = (i.ctrl_araddr as u64).to_bits();
        self.rready.next = i.ctrl_rready != 0;
    }

    pub fn sample(&self, o: &mut Outputs) {
        o.ctrl_awready = self.awready.val() as u8;
        o.ctrl_wready = self.wready.val() as u8;
        o.ctrl_bvalid = self.bvalid.val() as u8;
        o.ctrl_arready = self.arready.val() as u8;
        o.ctrl_rvalid = self.rvalid.val() as u8;
        o.ctrl_bresp = self.bresp.val().to_u8();
        o.ctrl_rresp = self.rresp.val().to_u8();
        o.ctrl_rdata = self.rdata.val().to_u32();
    }
}

/// Driven and sampled by [`vitis_unit!`] for the simulators.
impl<const W: usize, const S: usize> AxiMaster<W, S> {
    pub fn drive(&mut self, i: &Inputs) {
        self.awready.next = i.gmem_awready != 0;
        self.wready.next = i.gmem_wready != 0;
        self.bvalid.next = i.gmem_bvalid != 0;
        self.bresp.next = (i.gmem_bresp as u64).to_bits();
        self.arready.next = i.gmem_arready != 0;
        self.rvalid.next = i.gmem_rvalid != 0;
        self.rdata.next = words_to_bits::<W>(&i.gmem_rdata);
        self.rlast.next = i.gmem_rlast != 0;
        self.rresp.next = (i.gmem_rresp as u64).to_bits();
    }

    pub fn sample(&self, o: &mut Outputs) {
        o.gmem_awvalid = self.awvalid.val() as u8;
        o.gmem_wvalid = self.wvalid.val() as u8;
        o.gmem_wlast = self.wlast.val() as u8;
        o.gmem_bready = self.bready.val() as u8;
        o.gmem_arvalid = self.arvalid.val() as u8;
        o.gmem_rready = self.rready.val() as u8;
        o.gmem_awlen = self.awlen.val().to_u8();
        o.gmem_arlen = self.arlen.val().to_u8();
        o.gmem_awsize = self.awsize.val().to_u8();
        o.gmem_arsize = self.arsize.val().to_u8();
        o.gmem_awburst = self.awburst.val().to_u8();
        o.gmem_arburst = self.arburst.val().to_u8();
        o.gmem_awaddr = self.awaddr.val().to_u64();
        o.gmem_araddr = self.araddr.val().to_u64();
        bits_to_words::<W>(self.wdata.val(), &mut o.gmem_wdata);
        bits_to_words::<S>(self.wstrb.val(), &mut o.gmem_wstrb);
    }
}

/// Make `$unit<W, S>` a Vitis unit: [`VitisTop`] (its fields `vitis` and `shell`),
/// [`VitisUnit`] (built by `$unit::new(&$cfg)`), and the unit module's
/// `verilog` and `hdl_model` functions over the listed data widths.
#[macro_export]
macro_rules! vitis_unit {
    // A unit generic over its port alone: `Unit<W, S>`.
    ($unit:ident, $cfg:ident, [$($w:literal),*]) => {
        $crate::vitis_unit!(@impls $unit<>, $cfg);
        $crate::vitis_unit!(@entry $cfg, |cfg| match cfg.port_bits {
            $($w => Ok(::std::boxed::Box::new(::std::marker::PhantomData::<$unit<$w, { $w / 8 }>>)),)*
            other => Err($crate::HwError::Config(format!("port_bits = {other}"))),
        });
    };
    // A unit also generic over its expert slots `EL` and the packed bus widths
    // that follow from them (`Unit<W, S, EL, 32·EL, 40·EL, 16·EL>`).
    ($unit:ident<$($p:ident),+>, $cfg:ident, [$($w:literal),*], expert_slots $slots:tt) => {
        $crate::vitis_unit!(@impls $unit<$($p),+>, $cfg);
        $crate::vitis_unit!(@entry $cfg, |cfg| match cfg.port_bits {
            $($w => $crate::vitis_unit!(@slots $unit, cfg, $w, $slots),)*
            other => Err($crate::HwError::Config(format!("port_bits = {other}"))),
        });
    };
    (@slots $unit:ident, $c:ident, $w:literal, [$($e:literal),*]) => {
        match $c.expert_slots() {
            $($e => Ok(::std::boxed::Box::new(
                ::std::marker::PhantomData::<$unit<$w, { $w / 8 }, $e, { 32 * $e }, { 40 * $e }, { 16 * $e }>>,
            )),)*
            other => Err($crate::HwError::Config(format!("{other} expert slots"))),
        }
    };
    (@impls $unit:ident<$($p:ident),*>, $cfg:ident) => {
        impl<const W: usize, const S: usize $(, const $p: usize)*> $crate::vitis::VitisTop for $unit<W, S $(, $p)*> {
            fn drive(&mut self, i: &$crate::vitis::Inputs, clock: bool) {
                self.vitis.drive(i, clock);
            }
            fn sample(&self) -> $crate::vitis::Outputs {
                self.vitis.sample()
            }
            fn data_bits(&self) -> usize {
                W
            }
        }

        impl<const W: usize, const S: usize $(, const $p: usize)*> $crate::vitis::VitisUnit for $unit<W, S $(, $p)*> {
            type Config = $cfg;
            fn build(cfg: &$cfg) -> Result<Self, $crate::HwError> {
                Self::new(cfg)
            }
            fn kernel_name(cfg: &$cfg) -> String {
                cfg.kernel_name()
            }
            fn shell_words(&self) -> (usize, usize) {
                self.shell.words()
            }
        }
    };
    // `verilog` and `hdl_model` for the instantiation `$pick` chooses.
    (@entry $cfg:ident, $pick:expr) => {
        /// The instantiation of the unit's type that a configuration needs.
        fn instantiation(cfg: &$cfg) -> Result<Box<dyn $crate::vitis::Instantiate<$cfg>>, $crate::HwError> {
            let pick: fn(&$cfg) -> Result<Box<dyn $crate::vitis::Instantiate<$cfg>>, $crate::HwError> = $pick;
            pick(cfg)
        }

        /// Verilog of the unit, top module named after its kernel.
        pub fn verilog(cfg: &$cfg) -> Result<String, $crate::HwError> {
            cfg.validate()?;
            instantiation(cfg)?.verilog(cfg)
        }

        /// The same design in rust-hdl's own simulator (slow; needs no Verilator).
        pub fn hdl_model(cfg: &$cfg) -> Result<Box<dyn $crate::vitis::PinLevel>, $crate::HwError> {
            cfg.validate()?;
            instantiation(cfg)?.hdl_model(cfg)
        }
    };
}

/// One instantiation of a unit's type, chosen at run time from its config.
pub trait Instantiate<C> {
    fn verilog(&self, cfg: &C) -> Result<String, HwError>;
    fn hdl_model(&self, cfg: &C) -> Result<Box<dyn PinLevel>, HwError>;
}

impl<U: VitisUnit + 'static> Instantiate<U::Config> for std::marker::PhantomData<U> {
    fn verilog(&self, cfg: &U::Config) -> Result<String, HwError> {
        verilog::<U>(cfg)
    }
    fn hdl_model(&self, cfg: &U::Config) -> Result<Box<dyn PinLevel>, HwError> {
        hdl_model::<U>(cfg)
    }
}

/// Stack for building a unit: rust-hdl keeps every wide bus (up to 10 240
/// bits) inline in the block structs, several megabytes in all.
const BUILD_STACK: usize = 1 << 30;

/// Run `f` on a thread with [`BUILD_STACK`] of stack.
fn with_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, HwError> {
    std::thread::Builder::new()
        .stack_size(BUILD_STACK)
        .spawn(f)
        .map_err(|e| HwError::Config(format!("cannot start the generator thread: {e}")))?
        .join()
        .map_err(|_| HwError::Config("the generator thread panicked".into()))
}

/// Verilog of unit `U`, top module named after the kernel, Vitis port names.
pub fn verilog<U: VitisUnit>(cfg: &U::Config) -> Result<String, HwError> {
    let cfg = cfg.clone();
    with_big_stack(move || {
        let mut unit = Box::new(U::build(&cfg)?);
        unit.connect_all();
        Ok(rename_top(&generate_verilog(unit.as_ref()), &U::kernel_name(&cfg)))
    })?
}

/// Unit `U` in rust-hdl's own simulator (slow; needs no Verilator).
pub fn hdl_model<U: VitisUnit>(cfg: &U::Config) -> Result<Box<dyn PinLevel>, HwError> {
    let cfg = cfg.clone();
    let sim = with_big_stack(move || -> Result<Box<HdlSim<U>>, HwError> {
        let mut unit = U::build(&cfg)?;
        unit.connect_all();
        Ok(Box::new(HdlSim::new(unit)))
    })??;
    Ok(sim)
}

/// rust-hdl's own event-driven simulator behind the [`PinLevel`] interface.
pub struct HdlSim<T: VitisTop> {
    unit: T,
}

impl<T: VitisTop> HdlSim<T> {
    pub fn new(unit: T) -> Self {
        Self { unit }
    }

    fn settle(&mut self) {
        // Combinational loops are rejected at generation, so this converges.
        loop {
            self.unit.update_all();
            if !self.unit.has_changed() {
                break;
            }
        }
    }
}

impl<T: VitisTop> PinLevel for HdlSim<T> {
    fn eval(&mut self, inputs: &Inputs) -> Outputs {
        self.unit.drive(inputs, false);
        self.settle();
        self.unit.sample()
    }

    fn tick(&mut self, inputs: &Inputs) -> Outputs {
        self.unit.drive(inputs, false);
        self.settle();
        self.unit.drive(inputs, true);
        self.settle();
        self.unit.sample()
    }

    fn data_bits(&self) -> usize {
        self.unit.data_bits()
    }
}

/// Verilator `-Wall` warnings waived on exported units, each with the reason.
/// Everything else `verilator --lint-only -Wall` reports is a defect.
pub const LINT_WAIVERS: &[(&str, &str)] = &[
    ("DECLFILENAME", "rust-hdl emits one module per instance (`top$rows$0$pes$1`) into a single file"),
    ("WIDTH", "rust-hdl widens with `bit_cast`, emitted as `(x & mask)` with a wider mask; the value is zero-extended as intended"),
    ("UNUSEDSIGNAL", "shared blocks expose lanes a configuration leaves unused (e.g. the high bits of a packed bus); synthesis removes them"),
    ("UNUSEDPARAM", "rust-hdl emits every `Constant` as a localparam, also in instances that do not read it"),
    ("SYMRSVDWORD", "`interrupt` is the port name Vitis requires; it only collides with a C++ word inside Verilator"),
];

/// The `verilator --lint-only` command line for an exported unit.
pub fn lint_args(file: &str, top: &str) -> Vec<String> {
    let mut args = vec!["--lint-only".to_string(), "-Wall".to_string(), "--top-module".to_string(), top.to_string()];
    args.extend(LINT_WAIVERS.iter().map(|(w, _)| format!("-Wno-{w}")));
    args.push(file.to_string());
    args
}
