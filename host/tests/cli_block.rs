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
        (&["--heads", "3"][..], "--hidden must be a multiple of --heads"),
        (&["--top-k", "5"], "top-k = 5 exceeds the 4 experts"),
        (&["--tokens", "0"], "every block size must be ≥ 1"),
        (&["--capacity-factor=-1"], "must be > 0"),
    ] {
        let out = ferrite().arg("block").args(args).assert().failure();
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}
