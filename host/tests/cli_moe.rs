//! `ferrite run moe`, `ferrite export moe` and their errors.
mod common;

use common::{ferrite, stderr, stdout};
use ferrite_hw::moe::{route, CapacityFactor, GateMode, MoeProblem};
use ndarray::{Array1, Array2};
use ndarray_npy::{read_npy, write_npy};

/// Deterministic int8 values spread over the whole range, -128 included.
fn values(len: usize, mult: i32) -> Vec<i8> {
    (0..len).map(|i| (i as i32 * mult % 256 - 128) as i8).collect()
}

#[test]
fn cpu_npy_round_trip_matches_the_golden_model() {
    let dir = tempfile::tempdir().unwrap();
    let (t, h, e, k) = (37, 24, 10, 3);
    let (x, w) = (values(t * h, 37), values(e * h, 53));
    let bias: Vec<i32> = (0..e as i32).map(|i| i * 1000 - 4000).collect();
    let path = |name: &str| dir.path().join(name);
    write_npy(path("x.npy"), &Array2::from_shape_vec((t, h), x.clone()).unwrap()).unwrap();
    write_npy(path("w.npy"), &Array2::from_shape_vec((e, h), w.clone()).unwrap()).unwrap();
    write_npy(path("bias.npy"), &Array1::from_vec(bias.clone())).unwrap();
    let out = ferrite()
        .args(["run", "moe", "--device", "cpu", "--top-k", "3", "--capacity-factor", "0.8", "--mode", "topk-softmax"])
        .args(["--x-scale", "0.03125", "--w-scale", "0.004"])
        .arg("--x")
        .arg(path("x.npy"))
        .arg("--w")
        .arg(path("w.npy"))
        .arg("--bias-file")
        .arg(path("bias.npy"))
        .arg("--out")
        .arg(path("out"))
        .assert()
        .success();
    let text = stdout(&out);
    assert!(text.contains("bit-exact"), "{text}");
    assert!(text.contains("T=37 H=24 E=10 k=3 topk-softmax capacity 9"), "{text}");
    assert!(text.contains("load-balancing"), "{text}");
    assert!(text.contains("per-expert load"), "{text}");

    let p = MoeProblem {
        capacity: Some(CapacityFactor::from_f64(0.8).unwrap()),
        bias: true,
        ..MoeProblem::new(t, h, e, k, GateMode::TopkSoftmax, 0.03125, 0.004).unwrap()
    };
    let golden = route(&p, &x, &w, Some(&bias)).unwrap();
    assert!(golden.dropped > 0, "the test wants some drops");
    let experts: Array2<u8> = read_npy(path("out/experts.npy")).unwrap();
    let weights: Array2<u16> = read_npy(path("out/weights.npy")).unwrap();
    let slots: Array2<i32> = read_npy(path("out/slots.npy")).unwrap();
    let load: Array1<u32> = read_npy(path("out/load.npy")).unwrap();
    let dispatch: Array2<i32> = read_npy(path("out/dispatch.npy")).unwrap();
    assert_eq!(experts.shape(), &[t, k]);
    assert_eq!(experts.iter().copied().collect::<Vec<_>>(), golden.experts);
    assert_eq!(weights.iter().copied().collect::<Vec<_>>(), golden.weights);
    assert_eq!(slots.iter().copied().collect::<Vec<_>>(), golden.slots);
    assert_eq!(load.to_vec(), golden.load);
    assert_eq!(dispatch.shape(), &[e, golden.capacity as usize]);
    for (ex, row) in dispatch.outer_iter().enumerate() {
        let kept: Vec<u32> = row.iter().filter(|&&v| v >= 0).map(|&v| v as u32).collect();
        assert_eq!(kept, golden.dispatch[ex], "expert {ex}");
        assert!(row.iter().skip(kept.len()).all(|&v| v == -1), "padding of expert {ex}");
    }
}

#[test]
fn expert_choice_balances_every_expert() {
    let out = ferrite()
        .args(["run", "moe", "--tokens", "64", "--hidden", "32", "--experts", "8", "--top-k", "2"])
        .args(["--policy", "expert-choice"])
        .assert()
        .success();
    let text = stdout(&out);
    assert!(text.contains("each expert takes its top 16 tokens"), "{text}");
    assert!(text.contains("min 16, mean 16.0, max 16"), "{text}");
    let err = ferrite()
        .args(["run", "moe", "--device", "sim", "--tokens", "4", "--hidden", "8", "--experts", "4"])
        .args(["--policy", "expert-choice"])
        .assert()
        .failure();
    assert!(stderr(&err).contains("expert-choice routing runs on --device cpu only"), "{}", stderr(&err));
}

#[test]
fn bad_input_is_a_clear_error() {
    let run = |extra: &[&str]| {
        let out =
            ferrite().args(["run", "moe", "--tokens", "8", "--hidden", "16", "--experts", "4"]).args(extra).assert();
        let out = out.failure();
        stderr(&out)
    };
    assert!(run(&["--top-k", "5"]).contains("top-k = 5 exceeds the 4 experts"));
    assert!(run(&["--top-k", "0"]).contains("k = 0"));
    assert!(run(&["--capacity-factor", "0"]).contains("capacity factor 0 must be > 0"));
    assert!(run(&["--capacity-factor=-1.5"]).contains("capacity factor -1.5 must be > 0"));
    assert!(run(&["--mode", "topk-softmax", "--renormalize"]).contains("--renormalize applies to --mode softmax-topk"));
    assert!(run(&["--x-scale", "0"]).contains("--x-scale 0 must be a positive number"));
    let missing = ferrite().args(["run", "moe", "--hidden", "16", "--experts", "4"]).assert().failure();
    assert!(stderr(&missing).contains("--tokens is required"), "{}", stderr(&missing));
    // A problem over the built unit's limits is refused before any simulation.
    let sim = ["--device", "sim", "--engine", "verilator", "--lanes", "2", "--h-max", "64", "--port-bits", "128"];
    let big = run(&[&sim[..], &["--e-max", "2", "--k-max", "2"]].concat());
    assert!(big.contains("problem too big for ferrite_moe_e2") && big.contains("e_max = 2"), "{big}");
}

#[test]
fn sim_is_bit_exact_and_reports_cycles() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let out = ferrite()
        .args(["run", "moe", "--device", "sim", "--tokens", "50", "--hidden", "64", "--experts", "12", "--top-k", "4"])
        .args(["--capacity-factor", "1.0", "--bias", "--backpressure", "0.3"])
        .args(["--e-max", "12", "--h-max", "64", "--lanes", "4", "--port-bits", "128"])
        .assert()
        .success();
    let text = stdout(&out);
    assert!(text.contains("bit-exact"), "{text}");
    assert!(text.contains("utilization"), "{text}");
    assert!(text.contains("per token"), "{text}");
}

#[test]
fn export_writes_lint_clean_verilog() {
    let dir = tempfile::tempdir().unwrap();
    let out = ferrite()
        .args(["export", "moe", "--e-max", "12", "--h-max", "64", "--lanes", "4", "--port-bits", "128", "--out"])
        .arg(dir.path())
        .assert()
        .success();
    let text = stdout(&out);
    let name = "ferrite_moe_e12_k8_l4_p128";
    for ext in ["sv", "regmap.json", "config.json"] {
        assert!(dir.path().join(format!("{name}.{ext}")).is_file(), "{name}.{ext} missing: {text}");
    }
    if ferrite_sim::verilator_available() {
        assert!(text.contains("lint: clean"), "{text}");
    }
    let bad = ferrite().args(["export", "moe", "--e-max", "300", "--out"]).arg(dir.path()).assert().failure();
    assert!(stderr(&bad).contains("e_max"), "{}", stderr(&bad));
}
