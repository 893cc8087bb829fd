//! Makes rust-hdl's Verilog simulate the same in every standard simulator.
//!
//! rust-hdl writes combinational logic (its `update` bodies, the links between
//! parent and child signals, and our own custom blocks) as `always @(*)`. An
//! `always @(*)` block runs only when one of its inputs changes, so a block
//! whose inputs keep their time-zero value (a FIFO's `empty` before the first
//! push) never runs in an event-driven simulator such as Icarus or Vivado's
//! xsim: its outputs stay X and the unit hangs. Verilator evaluates every
//! block at start-up and hides this. IEEE 1800 `always_comb` is the same
//! logic plus one evaluation at time zero, so the exported file uses it and is
//! SystemVerilog (`.sv`): Icarus (`-g2012`), Verilator, yosys (`read_verilog
//! -sv`) and Vivado read it. `docs/simulators.md` says which are tested.

/// File extension of an exported unit: the text uses `always_comb`.
pub const EXTENSION: &str = "sv";

/// rust-hdl's Verilog with every `always @(*)` turned into `always_comb`.
pub fn always_comb(verilog: &str) -> String {
    verilog.replace("always @(*)", "always_comb")
}

#[cfg(test)]
mod tests {
    #[test]
    fn combinational_blocks_become_always_comb() {
        let v = "always @(*) begin\n  y = a;\nend\nalways @(posedge clock) q <= d;\nalways @(*) x$y = z$y;\n";
        let out = super::always_comb(v);
        assert_eq!(out, "always_comb begin\n  y = a;\nend\nalways @(posedge clock) q <= d;\nalways_comb x$y = z$y;\n");
    }
}
