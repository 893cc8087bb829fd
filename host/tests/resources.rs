//! yosys resource estimates on a small GEMM configuration: counts parsed,
//! results cached by hash, the `resources` report extrapolated per board.
use assert_cmd::Command;
use ferrite_host::bitstream::board::Board;
use ferrite_host::resources::{companion, largest_fit, synthesize, Model};
use ferrite_hw::gemm::GemmConfig;

#[test]
fn yosys_counts_cache_and_extrapolate() {
    if !ferrite_host::bitstream::on_path("yosys") {
        assert!(std::env::var_os("CI").is_none(), "CI installs yosys");
        eprintln!("skipped: yosys not installed");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    // Only this test in this binary reads FERRITE_CACHE.
    std::env::set_var("FERRITE_CACHE", cache.path());
    // The CLI's defaults for the flags it is not given (FIFO depth 64), so it hits the cache.
    let cfg = GemmConfig { read_fifo_depth: 64, ..GemmConfig::small(2, 2) };
    let a = synthesize(&cfg, "xcup").unwrap();
    eprintln!("{}: {:?} in {:.1} s", cfg.kernel_name(), a.counts, a.seconds);
    assert!(!a.cached);
    assert!(a.counts.lut > 0 && a.counts.ff > 0, "{:?}", a.counts);
    let b = synthesize(&companion(&cfg), "xcup").unwrap();
    eprintln!("{}: {:?} in {:.1} s", companion(&cfg).kernel_name(), b.counts, b.seconds);
    let again = synthesize(&cfg, "xcup").unwrap();
    assert!(again.cached);
    assert_eq!(again.counts, a.counts);
    let model = Model::fit(&a, &b).unwrap();
    let z2 = largest_fit(&model, Board::PynqZ2, cfg.port_bits);
    let u250 = largest_fit(&model, Board::U250, cfg.port_bits);
    assert!(u250.rows >= z2.rows, "{u250:?} vs {z2:?}");

    // The CLI reads the same cache, so this is quick.
    let out = Command::cargo_bin("ferrite")
        .unwrap()
        .args([
            "resources",
            "--unit",
            "gemm",
            "--rows",
            "2",
            "--cols",
            "2",
            "--port-bits",
            "128",
            "--k-max",
            "256",
            "--n-max",
            "256",
        ])
        .env("FERRITE_CACHE", cache.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("cached") && text.contains("EXTRAPOLATED") && text.contains("PYNQ-Z2"), "{text}");
    println!("{text}");
}
