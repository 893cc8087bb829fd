//! The Vitis RTL-kernel top-level port list shared by every Ferrite unit.
//!
//! `ap_clk`, `ap_rst_n` (active-low, synchronous), an AXI4-Lite slave
//! `s_axi_control_*` carrying the `ap_ctrl_hs` registers and arguments, one
//! AXI4 master `m_axi_gmem_*` (single ID, in-order, INCR bursts) and
//! `interrupt`. The simulator shim is generated from [`ports`], so a unit that
//! follows this list needs no simulator code of its own.
use crate::regmap::CTRL_ADDR_BITS;

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

/// The full port list of a unit whose memory port is `data_bits` wide.
pub fn ports(data_bits: usize) -> Vec<Port> {
    use Dir::*;
    let p = |name: &str, dir, bits| Port { name: name.to_string(), dir, bits };
    let c = CTRL_ADDR_BITS;
    let (a, d, s) = (GMEM_ADDR_BITS, data_bits, data_bits / 8);
    let mut v = vec![p("ap_clk", In, 1), p("ap_rst_n", In, 1), p("interrupt", Out, 1)];
    for (name, dir, bits) in [
        ("awvalid", In, 1),
        ("awready", Out, 1),
        ("awaddr", In, c),
        ("wvalid", In, 1),
        ("wready", Out, 1),
        ("wdata", In, 32),
        ("wstrb", In, 4),
        ("bvalid", Out, 1),
        ("bready", In, 1),
        ("bresp", Out, 2),
        ("arvalid", In, 1),
        ("arready", Out, 1),
        ("araddr", In, c),
        ("rvalid", Out, 1),
        ("rready", In, 1),
        ("rdata", Out, 32),
        ("rresp", Out, 2),
    ] {
        v.push(p(&format!("s_axi_control_{name}"), dir, bits));
    }
    for (name, dir, bits) in [
        ("awvalid", Out, 1),
        ("awready", In, 1),
        ("awaddr", Out, a),
        ("awlen", Out, 8),
        ("awsize", Out, 3),
        ("awburst", Out, 2),
        ("wvalid", Out, 1),
        ("wready", In, 1),
        ("wdata", Out, d),
        ("wstrb", Out, s),
        ("wlast", Out, 1),
        ("bvalid", In, 1),
        ("bready", Out, 1),
        ("bresp", In, 2),
        ("arvalid", Out, 1),
        ("arready", In, 1),
        ("araddr", Out, a),
        ("arlen", Out, 8),
        ("arsize", Out, 3),
        ("arburst", Out, 2),
        ("rvalid", In, 1),
        ("rready", Out, 1),
        ("rdata", In, d),
        ("rlast", In, 1),
        ("rresp", In, 2),
    ] {
        v.push(p(&format!("m_axi_gmem_{name}"), dir, bits));
    }
    v
}

#[cfg(test)]
mod tests {
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

/// Rename rust-hdl's `top` module to the kernel name Vitis expects and make
/// the text portable ([`crate::portable`]). Every unit's export goes through here.
pub fn rename_top(verilog: &str, kernel: &str) -> String {
    crate::portable::portable(&verilog.replacen("module top(", &format!("module {kernel}("), 1))
}

/// A rust-hdl block with the Vitis port list, as fields named after the ports.
pub trait VitisTop: rust_hdl::prelude::Block {
    fn drive(&mut self, i: &Inputs, clock: bool);
    fn sample(&self) -> Outputs;
    fn data_bits(&self) -> usize;
}

/// Copy little-endian words into a wide value and back.
pub fn words_to_bits<const N: usize>(words: &[u32]) -> rust_hdl::prelude::Bits<N> {
    use rust_hdl::prelude::*;
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

pub fn bits_to_words<const N: usize>(b: rust_hdl::prelude::Bits<N>, words: &mut [u32]) {
    for (w, word) in words.iter_mut().enumerate().take(N.div_ceil(32)) {
        let width = (N - 32 * w).min(32);
        *word = (0..width).fold(0u32, |acc, bit| acc | (u32::from(b.get_bit(32 * w + bit)) << bit));
    }
}

/// Implement [`VitisTop`] for a unit struct whose fields are the Vitis ports.
#[macro_export]
macro_rules! impl_vitis_top {
    ($t:ident) => {
        impl<const W: usize, const S: usize> $crate::vitis::VitisTop for $t<W, S> {
            fn drive(&mut self, i: &$crate::vitis::Inputs, clock: bool) {
                use rust_hdl::prelude::*;
                let b = |v: u8| v != 0;
                self.ap_clk.next = Clock::from(clock);
                self.ap_rst_n.next = b(i.ap_rst_n);
                self.s_axi_control_awvalid.next = b(i.ctrl_awvalid);
                self.s_axi_control_awaddr.next = (i.ctrl_awaddr as u64).to_bits();
                self.s_axi_control_wvalid.next = b(i.ctrl_wvalid);
                self.s_axi_control_wdata.next = (i.ctrl_wdata as u64).to_bits();
                self.s_axi_control_wstrb.next = (i.ctrl_wstrb as u64).to_bits();
                self.s_axi_control_bready.next = b(i.ctrl_bready);
                self.s_axi_control_arvalid.next = b(i.ctrl_arvalid);
                self.s_axi_control_araddr.next = (i.ctrl_araddr as u64).to_bits();
                self.s_axi_control_rready.next = b(i.ctrl_rready);
                self.m_axi_gmem_awready.next = b(i.gmem_awready);
                self.m_axi_gmem_wready.next = b(i.gmem_wready);
                self.m_axi_gmem_bvalid.next = b(i.gmem_bvalid);
                self.m_axi_gmem_bresp.next = (i.gmem_bresp as u64).to_bits();
                self.m_axi_gmem_arready.next = b(i.gmem_arready);
                self.m_axi_gmem_rvalid.next = b(i.gmem_rvalid);
                self.m_axi_gmem_rdata.next = $crate::vitis::words_to_bits::<W>(&i.gmem_rdata);
                self.m_axi_gmem_rlast.next = b(i.gmem_rlast);
                self.m_axi_gmem_rresp.next = (i.gmem_rresp as u64).to_bits();
            }
            fn sample(&self) -> $crate::vitis::Outputs {
                let mut o = $crate::vitis::Outputs {
                    interrupt: self.interrupt.val() as u8,
                    ctrl_awready: self.s_axi_control_awready.val() as u8,
                    ctrl_wready: self.s_axi_control_wready.val() as u8,
                    ctrl_bvalid: self.s_axi_control_bvalid.val() as u8,
                    ctrl_arready: self.s_axi_control_arready.val() as u8,
                    ctrl_rvalid: self.s_axi_control_rvalid.val() as u8,
                    ctrl_bresp: self.s_axi_control_bresp.val().to_u8(),
                    ctrl_rresp: self.s_axi_control_rresp.val().to_u8(),
                    gmem_awvalid: self.m_axi_gmem_awvalid.val() as u8,
                    gmem_wvalid: self.m_axi_gmem_wvalid.val() as u8,
                    gmem_wlast: self.m_axi_gmem_wlast.val() as u8,
                    gmem_bready: self.m_axi_gmem_bready.val() as u8,
                    gmem_arvalid: self.m_axi_gmem_arvalid.val() as u8,
                    gmem_rready: self.m_axi_gmem_rready.val() as u8,
                    gmem_awlen: self.m_axi_gmem_awlen.val().to_u8(),
                    gmem_arlen: self.m_axi_gmem_arlen.val().to_u8(),
                    gmem_awsize: self.m_axi_gmem_awsize.val().to_u8(),
                    gmem_arsize: self.m_axi_gmem_arsize.val().to_u8(),
                    gmem_awburst: self.m_axi_gmem_awburst.val().to_u8(),
                    gmem_arburst: self.m_axi_gmem_arburst.val().to_u8(),
                    ctrl_rdata: self.s_axi_control_rdata.val().to_u32(),
                    gmem_awaddr: self.m_axi_gmem_awaddr.val().to_u64(),
                    gmem_araddr: self.m_axi_gmem_araddr.val().to_u64(),
                    ..Default::default()
                };
                $crate::vitis::bits_to_words::<W>(self.m_axi_gmem_wdata.val(), &mut o.gmem_wdata);
                $crate::vitis::bits_to_words::<S>(self.m_axi_gmem_wstrb.val(), &mut o.gmem_wstrb);
                o
            }
            fn data_bits(&self) -> usize {
                W
            }
        }
    };
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
