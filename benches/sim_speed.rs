//! Simulation speed of the three default units on Verilator: simulated clock
//! cycles per wall-clock second of one launch each, best of a few runs, every
//! result checked bit-exact against the golden model. Prints one table row per
//! unit. `docs/simulators.md` keeps the numbers, before and after each change,
//! measured side by side in one run (`scripts/sim-speed.sh`).
//!
//! `cargo bench --bench sim_speed [-- RUNS] [UNIT]` (default 3 runs of every
//! unit). The first run builds the units with Verilator (minutes, cached
//! afterwards).
use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::host::ops;
use ferrite::host::RunStats;
use ferrite::hw::attention::{attention, AttentionConfig, AttentionParams, AttentionProblem};
use ferrite::hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite::hw::moe::{route, CapacityFactor, GateMode, MoeConfig, MoeProblem};
use ferrite::sim::MemoryConfig;
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// One launch on a fresh device; returns its stats after checking the result.
type Run = Box<dyn FnMut(&mut SimDevice) -> RunStats>;
/// A unit's name, its device and its launch.
type Make = fn() -> (String, SimDevice, Run);

fn gemm_unit() -> (String, SimDevice, Run) {
    let cfg = GemmConfig::default();
    let p = GemmProblem::new(256, 256, 256);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let a: Vec<i8> = (0..p.m * p.k).map(|_| rng.gen()).collect();
    let b: Vec<i8> = (0..p.k * p.n).map(|_| rng.gen()).collect();
    let want = gemm(&p, &a, &b, None).unwrap();
    let run = move |dev: &mut SimDevice| {
        let (out, stats) = ops::gemm(dev, &p, &a, &b, None).unwrap();
        assert_eq!(out, want, "gemm is not bit-exact");
        stats
    };
    (format!("{} gemm 256³", cfg.kernel_name()), device(cfg), Box::new(run))
}

fn attention_unit() -> (String, SimDevice, Run) {
    let cfg = AttentionConfig::default();
    let s = 1.0 / 32.0;
    let (seq_q, seq_kv, dim) = (64, 1024, cfg.head_dim);
    let params = AttentionParams::from_scales(dim, s, s, s, None).unwrap();
    let p = AttentionProblem { batch: 1, heads: 1, seq_q, seq_kv, dim, causal: false, kv_len: None, params };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    let mut t = |len: usize| -> Vec<i8> { (0..len).map(|_| rng.gen_range(-64..=64)).collect() };
    let (q, k, v) = (t(seq_q * dim), t(seq_kv * dim), t(seq_kv * dim));
    let want = attention(&p, &q, &k, &v).unwrap();
    let run = move |dev: &mut SimDevice| {
        let (out, stats) = ops::attention(dev, &p, &q, &k, &v).unwrap();
        assert_eq!(out, want, "attention is not bit-exact");
        stats
    };
    (format!("{} attention N=1024 seq_q=64", cfg.kernel_name()), device(cfg), Box::new(run))
}

fn moe_unit() -> (String, SimDevice, Run) {
    let cfg = MoeConfig::default();
    let (tokens, hidden, experts, top_k) = (256, 512, 64, 8);
    let p = MoeProblem::new(tokens, hidden, experts, top_k, GateMode::SoftmaxTopk, 1.0 / 16.0, 1.0 / 32.0).unwrap();
    let p = MoeProblem { bias: true, capacity: Some(CapacityFactor::ONE), ..p };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let x: Vec<i8> = (0..tokens * hidden).map(|_| rng.gen()).collect();
    let w: Vec<i8> = (0..experts * hidden).map(|_| rng.gen()).collect();
    let b: Vec<i32> = (0..experts).map(|_| rng.gen_range(-5000..5000)).collect();
    let want = route(&p, &x, &w, Some(&b)).unwrap();
    let run = move |dev: &mut SimDevice| {
        let (out, stats) = ops::moe(dev, &p, &x, &w, Some(&b)).unwrap();
        assert_eq!(out, want, "moe is not bit-exact");
        stats
    };
    (format!("{} moe T=256 H=512 E=64 k=8", cfg.kernel_name()), device(cfg), Box::new(run))
}

fn device(cfg: impl Into<ferrite::host::manifest::UnitConfig>) -> SimDevice {
    SimDevice::new(cfg, MemoryConfig::default(), Engine::Verilator, None).unwrap()
}

fn main() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    // `cargo bench` passes `--bench`; a number is the run count, a word picks
    // the units whose name contains it (`gemm`, `attention`, `moe`).
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let runs = args.iter().find_map(|a| a.parse::<usize>().ok()).unwrap_or(3);
    let picked = |name: &str| args.iter().all(|a| a.parse::<usize>().is_ok() || name.contains(a.as_str()));
    println!("| unit | cycles | best wall | cycles/s |");
    println!("|---|---:|---:|---:|");
    let units: [(&str, Make); 3] = [("gemm", gemm_unit), ("attention", attention_unit), ("moe", moe_unit)];
    for (unit, make) in units {
        if !picked(unit) {
            continue;
        }
        let (name, mut dev, mut run) = make();
        let (mut cycles, mut best) = (0, Duration::MAX);
        for _ in 0..runs {
            let stats = run(&mut dev);
            cycles = stats.cycles.unwrap().cycles;
            best = best.min(stats.wall);
        }
        let rate = cycles as f64 / best.as_secs_f64();
        println!("| {name} | {cycles} | {:.3} s | {rate:.0} |", best.as_secs_f64());
    }
}
