//! `ferrite block`: the decoder block through the CLI, and its one-line errors.
mod common;

use common::{ferrite, stderr, stdout};

#[test]
fn block_on_cpu_is_bit_exact_and_reports_accuracy_and_units() {
    let out = ferrite().args(["block", "--device", "cpu-fast", "--tokens", "9", "--seed", "3"]).assert().success();
    let text = stdout(&out);
    assert!(text.contains("T=9 H=64 heads=2×32 E=4 k=2 F=128"), "{text}");
    assert!(text.contains("bit-exact vs the golden block"), "{text}");
    assert!(text.contains("relative error vs float64"), "{text}");
    for unit in ["gemm", "attention", "moe"] {
        assert!(text.contains(unit), "{text}");
    }
}

#[test]
fn bad_blocks_are_one_line_errors() {
    for (args, says) in [
        (&["--heads", "3"][..], "H = 64 must be a multiple of the 3 heads"),
        (&["--top-k", "5"], "top-k = 5 exceeds the 4 experts"),
        (&["--tokens", "0"], "every block size must be ≥ 1"),
        (&["--capacity-factor=-1"], "must be > 0"),
        (&["--project"], "--project and --units need --device sim"),
        (&["--units", "default"], "--project and --units need --device sim"),
        // About 8·10⁸ MACs: hours on the 4×4 array; refused before any work, pointing to --project.
        (
            &[
                "--device",
                "sim",
                "--tokens",
                "256",
                "--hidden",
                "512",
                "--heads",
                "8",
                "--experts",
                "8",
                "--ffn",
                "1024",
            ],
            "pass --project to project it from simulated launches",
        ),
        (&["--device", "sim", "--units", "default", "--ffn", "8192"], "the default units hold K, N ≤ 4096"),
    ] {
        let out = ferrite().arg("block").args(args).assert().failure();
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// `--save-weights` writes the layer as `--weights` reads it: the same block
/// loaded back gives the same result; a bad file is one line naming it.
#[test]
fn weights_round_trip_through_files_and_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("layer");
    let run = |args: &[&str]| {
        let out =
            ferrite().args(["block", "--device", "cpu-fast", "--tokens", "11", "--seed", "5"]).args(args).assert();
        stdout(&out.success())
    };
    let seeded = run(&[
        "--hidden",
        "32",
        "--heads",
        "4",
        "--experts",
        "6",
        "--top-k",
        "3",
        "--ffn",
        "48",
        "--save-weights",
        w.to_str().unwrap(),
    ]);
    let loaded = run(&["--weights", w.to_str().unwrap()]);
    let accuracy = |text: &str| text.lines().find(|l| l.starts_with("accuracy")).map(str::to_owned);
    assert!(loaded.contains("T=11 H=32 heads=4×8 E=6 k=3 F=48"), "{loaded}");
    assert!(loaded.contains("bit-exact vs the golden block"), "{loaded}");
    assert_eq!(accuracy(&seeded), accuracy(&loaded));
    assert!(accuracy(&loaded).is_some(), "{loaded}");

    let gate = w.join("gate.npy");
    ndarray_npy::write_npy(&gate, &ndarray::Array2::<i8>::zeros((6, 33))).unwrap();
    let out = ferrite().args(["block", "--weights", w.to_str().unwrap()]).assert().failure();
    let err = stderr(&out);
    assert!(err.contains("gate.npy: shape [6, 33], expected [E, H] = [6, 32]"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = ferrite().args(["block", "--weights", w.to_str().unwrap(), "--hidden", "32"]).assert().code(2);
    assert!(stderr(&out).contains("cannot be used with"));
}

/// The demo ends with the block on every device it has, each bit-exact, the
/// simulated units projected at their common clock with its source.
#[test]
fn demo_has_a_block_table() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let out = ferrite().args(["demo", "--size", "16"]).assert().success();
    let text = stdout(&out);
    let table = &text[text.find("int8 MoE decoder block").expect("a block table")..];
    let sim = table.lines().find(|l| l.contains("sim (verilator, 3 units)")).unwrap_or_else(|| panic!("{table}"));
    assert!(sim.contains("yes") && (sim.contains("assumed") || sim.contains("measured")), "{sim}");
    assert!(table.contains("projected at ") && table.contains("the slowest of one clock domain"), "{table}");
    assert!(!table.contains("NO"), "{table}");
}
