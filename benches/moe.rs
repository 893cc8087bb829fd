//! MoE router benchmarks: the golden model (tokens per second), the small
//! simulated unit on Verilator (simulated cycles per second, then its cycles,
//! utilization and projected time printed once), and the OpenCL and CUDA
//! backends, skipped with the reason where they cannot be opened or do not
//! run the router.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrite::host::backend::cpu::{CpuDevice, CpuMode};
use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::host::ops;
use ferrite::hw::moe::{route, CapacityFactor, GateMode, MoeConfig, MoeProblem};
use ferrite::sim::MemoryConfig;
use rand::{Rng, SeedableRng};

mod common;

/// Softmax-top-k with a bias and capacity factor 1, as `ferrite compare` runs it.
fn problem(tokens: usize, hidden: usize, experts: usize, top_k: usize) -> MoeProblem {
    let p = MoeProblem::new(tokens, hidden, experts, top_k, GateMode::SoftmaxTopk, 1.0 / 16.0, 1.0 / 32.0).unwrap();
    MoeProblem { bias: true, capacity: Some(CapacityFactor::ONE), ..p }
}

fn operands(p: &MoeProblem, seed: u64) -> (Vec<i8>, Vec<i8>, Vec<i32>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x = (0..p.tokens * p.hidden).map(|_| rng.gen()).collect();
    let w = (0..p.experts * p.hidden).map(|_| rng.gen()).collect();
    let b = (0..p.experts).map(|_| rng.gen_range(-5000..5000)).collect();
    (x, w, b)
}

/// The golden router directly and through the cpu device (packing included).
fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("moe-cpu");
    g.sample_size(20);
    for (t, h, e, k) in [(256usize, 64usize, 12usize, 2usize), (1024, 1024, 64, 8)] {
        let p = problem(t, h, e, k);
        let (x, w, b) = operands(&p, 1);
        let id = format!("T{t}-H{h}-E{e}-k{k}");
        g.throughput(Throughput::Elements(t as u64));
        g.bench_function(BenchmarkId::new("golden", &id), |bch| bch.iter(|| route(&p, &x, &w, Some(&b)).unwrap()));
        let mut dev = CpuDevice::new(CpuMode::Golden);
        g.bench_function(BenchmarkId::new("cpu-device", &id), |bch| {
            bch.iter(|| ops::moe(&mut dev, &p, &x, &w, Some(&b)).unwrap())
        });
    }
    g.finish();
    eprintln!("moe-cpu-fast skipped: cpu-fast runs the golden router (no path of its own)");
}

/// The router through the `Device` trait on OpenCL and CUDA.
fn gpu(c: &mut Criterion) {
    let p = problem(1024, 1024, 64, 8);
    let (x, w, b) = operands(&p, 1);
    for (id, mut dev) in common::gpu_devices("moe", |dev| ops::moe(dev, &p, &x, &w, Some(&b)).map(drop)) {
        let mut g = c.benchmark_group(format!("moe-{}", id.id()));
        g.sample_size(10);
        g.throughput(Throughput::Elements(p.tokens as u64));
        g.bench_function(BenchmarkId::new("T1024-H1024-E64-k8", id.id()), |bch| {
            bch.iter(|| ops::moe(dev.as_mut(), &p, &x, &w, Some(&b)).unwrap())
        });
        g.finish();
    }
}

/// Simulated cycles per wall-clock second on the small unit (12 experts, 4 lanes, 128-bit port).
fn sim(c: &mut Criterion) {
    if !common::verilator_or_skip("moe-sim") {
        return;
    }
    let cfg = MoeConfig::small();
    let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
    let p = problem(256, 64, 12, 2);
    let (x, w, b) = operands(&p, 2);
    let (out, stats) = ops::moe(&mut dev, &p, &x, &w, Some(&b)).unwrap();
    assert_eq!(out, route(&p, &x, &w, Some(&b)).unwrap(), "{} is not bit-exact", cfg.kernel_name());
    let cycles = stats.cycles.unwrap();
    eprintln!(
        "moe T=256 H=64 E=12 k=2 on {} (default memory model): {} cycles, utilization {:.1}%, projected {:.2} µs at {} MHz",
        cfg.kernel_name(),
        cycles.cycles,
        100.0 * stats.utilization().unwrap(),
        stats.projected().unwrap().as_secs_f64() * 1e6,
        cfg.clock_mhz
    );
    let mut g = c.benchmark_group("moe-sim");
    g.sample_size(10);
    g.throughput(Throughput::Elements(cycles.cycles));
    g.bench_function(BenchmarkId::new("verilator-cycles", cfg.kernel_name()), |bch| {
        bch.iter(|| ops::moe(&mut dev, &p, &x, &w, Some(&b)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, cpu, gpu, sim);
criterion_main!(benches);
