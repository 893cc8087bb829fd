//! `verilator --lint-only -Wall` on exported units, with only the waivers that
//! `ferrite_hw::vitis::LINT_WAIVERS` justifies.
use ferrite::hw::gemm::{rtl, GemmConfig};
use std::process::Command;

fn verilator_or_skip() -> bool {
    if ferrite::sim::verilator_available() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but Verilator is missing: run scripts/install-deps.sh");
    eprintln!("skipped: Verilator is not installed (scripts/install-deps.sh installs it)");
    false
}

#[test]
fn gemm_exports_lint_clean() {
    if !verilator_or_skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferrite-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for cfg in [GemmConfig::small(4, 4), GemmConfig::small(3, 2), GemmConfig { rows: 2, cols: 16, ..GemmConfig::default() }] {
        let file = dir.join(format!("{}.v", cfg.kernel_name()));
        std::fs::write(&file, rtl::verilog(&cfg).unwrap()).unwrap();
        let out = Command::new("verilator")
            .args(ferrite::hw::vitis::lint_args(file.to_str().unwrap(), &cfg.kernel_name()))
            .output()
            .unwrap();
        assert!(out.status.success(), "lint of {} failed:\n{}", cfg.kernel_name(), String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn moe_exports_lint_clean() {
    use ferrite::hw::moe::{rtl as moe_rtl, MoeConfig};
    if !verilator_or_skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferrite-lint-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for cfg in [MoeConfig::small(), MoeConfig { e_max: 1, k_max: 1, lanes: 1, ..MoeConfig::small() }, MoeConfig { port_bits: 256, h_max: 128, ..MoeConfig::small() }] {
        let file = dir.join(format!("{}.v", cfg.kernel_name()));
        std::fs::write(&file, moe_rtl::verilog(&cfg).unwrap()).unwrap();
        let out = Command::new("verilator")
            .args(ferrite::hw::vitis::lint_args(file.to_str().unwrap(), &cfg.kernel_name()))
            .output()
            .unwrap();
        assert!(out.status.success(), "lint of {} failed:\n{}", cfg.kernel_name(), String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&dir).ok();
}
