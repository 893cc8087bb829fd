//! `verilator --lint-only -Wall` on exported units, with only the waivers that
//! `ferrite_hw::vitis::LINT_WAIVERS` justifies.
use ferrite::hw::attention::{rtl as attention_rtl, AttentionConfig};
use ferrite::hw::gemm::{rtl as gemm_rtl, GemmConfig};
use ferrite::hw::moe::{rtl as moe_rtl, MoeConfig};
use std::process::Command;

/// Lint each `(kernel name, Verilog)`; fail with Verilator's report.
fn lint_all(unit: &str, designs: impl IntoIterator<Item = (String, String)>) {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferrite-lint-{unit}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (top, verilog) in designs {
        let file = dir.join(format!("{top}.sv"));
        std::fs::write(&file, verilog).unwrap();
        let out = Command::new("verilator")
            .args(ferrite::hw::vitis::lint_args(file.to_str().unwrap(), &top))
            .output()
            .unwrap();
        assert!(out.status.success(), "lint of {top} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gemm_exports_lint_clean() {
    let cfgs =
        [GemmConfig::small(4, 4), GemmConfig::small(3, 2), GemmConfig { rows: 2, cols: 16, ..GemmConfig::default() }];
    lint_all("gemm", cfgs.iter().map(|c| (c.kernel_name(), gemm_rtl::verilog(c).unwrap())));
}

#[test]
fn attention_exports_lint_clean() {
    let small =
        AttentionConfig { head_dim: 16, lanes: 4, dot_par: 16, port_bits: 128, read_fifo_depth: 32, clock_mhz: 300.0 };
    let cfgs = [small.clone(), AttentionConfig { lanes: 1, head_dim: 32, dot_par: 32, port_bits: 256, ..small }];
    lint_all("attention", cfgs.iter().map(|c| (c.kernel_name(), attention_rtl::verilog(c).unwrap())));
}

#[test]
fn moe_exports_lint_clean() {
    let cfgs = [
        MoeConfig::small(),
        MoeConfig { e_max: 1, k_max: 1, lanes: 1, ..MoeConfig::small() },
        MoeConfig { port_bits: 256, h_max: 128, ..MoeConfig::small() },
    ];
    lint_all("moe", cfgs.iter().map(|c| (c.kernel_name(), moe_rtl::verilog(c).unwrap())));
}
