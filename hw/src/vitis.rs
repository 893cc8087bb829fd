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
    /// Memory data width of this unit in bits.
    fn data_bits(&self) -> usize;
}
