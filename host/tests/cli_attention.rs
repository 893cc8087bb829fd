//! `ferrite run attention` and the attention part of `ferrite demo`.
mod common;

use common::{ferrite, stderr, stdout};
use ferrite_hw::attention::{attention, AttentionOutput, AttentionParams, AttentionProblem};
use ndarray::{Array3, Array4, ArrayD};
use ndarray_npy::{read_npy, write_npy};
use std::path::Path;

/// Deterministic int8 values spread over the whole range.
fn values(len: usize, mult: i32) -> Vec<i8> {
    (0..len).map(|i| (i as i32 * mult % 255 - 127) as i8).collect()
}

#[test]
fn cpu_npy_round_trip_matches_the_golden_model() {
    let dir = tempfile::tempdir().unwrap();
    let (b, h, n, m, d) = (2, 3, 5, 7, 16);
    let (q, k, v) = (values(b * h * n * d, 37), values(b * h * m * d, 53), values(b * h * m * d, 29));
    let path = |name: &str| dir.path().join(name);
    write_npy(path("q.npy"), &Array4::from_shape_vec((b, h, n, d), q.clone()).unwrap()).unwrap();
    // K and V flattened to [batch·heads, seq, dim] would not match a 4-D Q: same rank for all three.
    write_npy(path("k.npy"), &Array4::from_shape_vec((b, h, m, d), k.clone()).unwrap()).unwrap();
    write_npy(path("v.npy"), &Array4::from_shape_vec((b, h, m, d), v.clone()).unwrap()).unwrap();
    let out = ferrite()
        .args(["run", "attention", "--device", "cpu", "--causal", "--kv-len", "4,7"])
        .arg("--q")
        .arg(path("q.npy"))
        .arg("--k")
        .arg(path("k.npy"))
        .arg("--v")
        .arg(path("v.npy"))
        .arg("--out")
        .arg(path("o.npy"))
        .assert()
        .success();
    let text = stdout(&out);
    assert!(text.contains("bit-exact"), "{text}");
    assert!(text.contains("batch=2 heads=3 seq=5 seq_kv=7 d=16 +causal +kv_len[4, 7]"), "{text}");
    assert!(text.contains("golden/f64   rel. Frobenius"), "{text}");

    let s = 1.0 / 32.0;
    let p = AttentionProblem {
        batch: b,
        heads: h,
        seq_q: n,
        seq_kv: m,
        dim: d,
        causal: true,
        kv_len: Some(vec![4, 7]),
        params: AttentionParams::from_scales(d, s, s, s, None).unwrap(),
    };
    let back: ArrayD<i32> = read_npy(path("o.npy")).unwrap();
    assert_eq!(back.shape(), [b, h, n, d]);
    assert_eq!(AttentionOutput::I32(back.iter().copied().collect()), attention(&p, &q, &k, &v).unwrap());

    // The same heads as [batch·heads, seq, dim] files, int8 output.
    let flat = |name: &str, rows: usize, data: &[i8]| {
        write_npy(path(name), &Array3::from_shape_vec((b * h, rows, d), data.to_vec()).unwrap()).unwrap();
    };
    flat("q3.npy", n, &q);
    flat("k3.npy", m, &k);
    flat("v3.npy", m, &v);
    ferrite()
        .args(["run", "attention", "--batch", "2", "--int8-out", "--q"])
        .arg(path("q3.npy"))
        .arg("--k")
        .arg(path("k3.npy"))
        .arg("--v")
        .arg(path("v3.npy"))
        .arg("--out")
        .arg(path("o8.npy"))
        .assert()
        .success();
    let back: ArrayD<i8> = read_npy(path("o8.npy")).unwrap();
    assert_eq!(back.shape(), [b, h, n, d]);
}

#[test]
fn generated_operands_report_error_against_float64() {
    let out = ferrite()
        .args(["run", "attention", "--heads", "2", "--seq", "16", "--seq-kv", "40", "--dim", "32"])
        .assert()
        .success();
    let text = stdout(&out);
    let err: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("golden/f64   rel. Frobenius "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no error figure in {text}"));
    assert!(err < 0.01, "{err}");
}

fn write_i8(path: &Path, shape: &[usize]) {
    let len = shape.iter().product();
    write_npy(path, &ArrayD::from_shape_vec(shape.to_vec(), values(len, 7)).unwrap()).unwrap();
}

/// Bad shapes, dtypes, ranks, sizes and units: one `error:` line, status 1, no panic.
#[test]
fn bad_input_is_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    for (name, shape) in [
        ("q.npy", &[1, 2, 4, 16][..]),
        ("k.npy", &[1, 2, 6, 16]),
        ("v5.npy", &[1, 2, 5, 16]),
        ("k32.npy", &[1, 2, 6, 32]),
        ("m.npy", &[4, 16]),
    ] {
        write_i8(Path::new(&path(name)), shape);
    }
    write_npy(path("f.npy"), &Array3::<i16>::zeros((2, 4, 16))).unwrap();
    let files = |q: &str, k: &str, v: &str| vec!["--q".into(), path(q), "--k".into(), path(k), "--v".into(), path(v)];
    let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases = [
        (flags(&["--seq", "0", "--dim", "16"]), "≥ 1"),
        (flags(&["--seq", "4"]), "--dim is required"),
        (files("q.npy", "k.npy", "v5.npy"), "K has shape [1, 2, 6, 16] but V has shape [1, 2, 5, 16]"),
        (files("q.npy", "k32.npy", "k32.npy"), "batch, heads and dim must agree"),
        (files("m.npy", "k.npy", "k.npy"), "m.npy: array has 2 dimensions"),
        (files("f.npy", "k.npy", "k.npy"), "f.npy: dtype is"),
        ([flags(&["--seq", "9"]), files("q.npy", "k.npy", "k.npy")].concat(), "--seq 9 disagrees"),
        (flags(&["--seq", "4", "--dim", "16", "--batch", "2", "--kv-len", "3"]), "kv_len has 1 entries"),
        (flags(&["--seq", "4", "--dim", "16", "--q-scale", "0"]), "--q-scale 0 must be a positive number"),
        // The unit is checked before any build: no Verilator needed.
        (flags(&["--device", "sim", "--seq", "4", "--dim", "48"]), "head_dim = 48 (supported: 16, 32, 64, 128)"),
        (
            flags(&["--device", "sim", "--seq", "4", "--dim", "32", "--port-bits", "128"]),
            "cannot hold one 32-byte K/V row",
        ),
    ];
    for (args, want) in cases {
        let out = ferrite().args(["run", "attention"]).args(&args).assert().code(1);
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: ") && err.contains(want), "{args:?}: want `{want}`, got {err}");
    }
}

/// The tiny unit of `ferrite demo` (its Verilator build is shared with the demo and cached).
#[test]
fn sim_on_a_tiny_unit_is_bit_exact() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let out = ferrite()
        .args(["run", "attention", "--device", "sim", "--lanes", "4", "--port-bits", "128"])
        .args(["--fifo-depth", "32", "--batch", "2", "--heads", "1", "--seq", "9", "--dim", "16"])
        .args(["--causal", "--kv-len", "5,9", "--int8-out", "--backpressure", "0.2", "--seed", "3"])
        .assert()
        .success();
    let text = stdout(&out);
    for want in ["sim (verilator, ferrite_attention_d16_l4_p128)", "bit-exact", "cycles", "utilization", "projected"] {
        assert!(text.contains(want), "`{want}` missing: {text}");
    }
}

/// Without Verilator the demo skips its sim rows with the reason (no rust-hdl
/// fallback), and under CI that is an error.
#[test]
fn demo_without_verilator_skips_sim_rows_or_fails_under_ci() {
    let empty = tempfile::tempdir().unwrap();
    let out = ferrite().args(["demo", "--size", "16"]).env("PATH", empty.path()).env_remove("CI").assert().success();
    let text = stdout(&out);
    // GEMM, attention, MoE and block tables each skip their sim row.
    assert_eq!(text.matches("sim: skipped (verilator not found").count(), 4, "{text}");
    assert!(text.contains("int8 MoE decoder block T=32 H=64"), "{text}");
    assert!(text.contains("cpu-fast (matrixmultiply)"), "{text}");
    assert!(text.contains("attention batch=1 heads=2 seq=64"), "{text}");
    assert!(text.contains("MoE router T=256 H=64 E=12 k=2"), "{text}");
    assert!(text.contains("cpu (golden model)"), "{text}");
    assert!(!text.contains("sim (rust-hdl"), "{text}");

    let out = ferrite().args(["demo", "--size", "16"]).env("PATH", empty.path()).env("CI", "1").assert().code(1);
    let err = stderr(&out);
    assert!(err.starts_with("error: ") && err.contains("verilator"), "{err}");
}
