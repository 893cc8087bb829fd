//! The exports' Verilator-only forms sit at the ends of lines, so what
//! synthesis reads ([`synthesis_text`], the key of the timing and resource
//! caches) keeps every token on the line and in the column where the export
//! has it: yosys names cells by source position.
use ferrite::hw::attention::{rtl as attention_rtl, AttentionConfig};
use ferrite::hw::gemm::{rtl as gemm_rtl, GemmConfig};
use ferrite::hw::moe::{rtl as moe_rtl, MoeConfig};
use ferrite::hw::synthesis::synthesis_text;

fn check(top: &str, verilog: &str) {
    assert!(verilog.contains("`ifdef VERILATOR") || verilog.contains("`ifndef VERILATOR"), "{top} has Verilator forms");
    let synth = synthesis_text(verilog);
    assert!(!synth.contains("VERILATOR"), "{top}: a Verilator directive is left");
    assert_eq!(synth.lines().count(), verilog.lines().count(), "{top}: lines moved");
    for (n, (line, read)) in verilog.lines().zip(synth.lines()).enumerate() {
        assert!(line.starts_with(read), "{top} line {}: {read:?} is not where the export has it", n + 1);
    }
    // Text synthesis reads, changed: another key.
    let changed = verilog.replacen("always_comb", "always_comb ", 1);
    assert_ne!(synthesis_text(&changed), synth, "{top}");
}

#[test]
fn verilator_forms_end_lines_in_every_export_that_has_them() {
    let small =
        AttentionConfig { head_dim: 16, lanes: 1, dot_par: 16, port_bits: 128, read_fifo_depth: 32, clock_mhz: 300.0 };
    for c in [small.clone(), AttentionConfig { lanes: 2, ..small }] {
        check(&c.kernel_name(), &attention_rtl::verilog(&c).unwrap());
    }
    let c = MoeConfig::small();
    check(&c.kernel_name(), &moe_rtl::verilog(&c).unwrap());
    let c = GemmConfig::small(4, 4);
    check(&c.kernel_name(), &gemm_rtl::verilog(&c).unwrap());
}
