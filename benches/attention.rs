//! Attention benchmarks: the golden model at N = 1024, d = 64, and the
//! simulated small unit on Verilator (throughput in simulated cycles per
//! second). Then, printed once, the cycles, multiplier utilization and
//! projected time at the unit's clock of the two full-size points of the
//! attention docs: (N = 1024, d = 64) on the default unit and (N = 4096,
//! d = 128) on a d = 128 unit, each with 64 queries against N keys. Building
//! those two units with Verilator takes minutes the first time (cached after).
//! The OpenCL and CUDA backends are tried on the same problem and skipped,
//! with the reason, where they cannot be opened or do not run attention.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::host::ops;
use ferrite::hw::attention::{attention, AttentionConfig, AttentionParams, AttentionProblem};
use ferrite::sim::MemoryConfig;
use rand::{Rng, SeedableRng};

mod common;

/// `batch = 1` problem with unit-variance reals from int8 with σ = 32 LSB.
fn problem(heads: usize, seq_q: usize, seq_kv: usize, dim: usize) -> AttentionProblem {
    let s = 1.0 / 32.0;
    AttentionProblem {
        batch: 1,
        heads,
        seq_q,
        seq_kv,
        dim,
        causal: false,
        kv_len: None,
        params: AttentionParams::from_scales(dim, s, s, s, None).unwrap(),
    }
}

/// Q, K, V uniform in ±64 (σ ≈ 37 LSB, close to the error budget's σ = 32).
fn operands(p: &AttentionProblem, seed: u64) -> (Vec<i8>, Vec<i8>, Vec<i8>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut t = |len: usize| -> Vec<i8> { (0..len).map(|_| rng.gen_range(-64..=64)).collect() };
    let nh = p.heads_total();
    (t(nh * p.seq_q * p.dim), t(nh * p.seq_kv * p.dim), t(nh * p.seq_kv * p.dim))
}

fn golden(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention-golden");
    g.sample_size(10);
    let p = problem(1, 1024, 1024, 64);
    let (q, k, v) = operands(&p, 1);
    g.throughput(Throughput::Elements(p.macs()));
    g.bench_function(BenchmarkId::new("N1024-d64", "self"), |b| b.iter(|| attention(&p, &q, &k, &v).unwrap()));
    g.finish();
    eprintln!("attention-cpu-fast skipped: cpu-fast runs the golden model for attention (no path of its own)");
}

/// The golden model's problem through the `Device` trait on OpenCL and CUDA.
fn gpu(c: &mut Criterion) {
    let p = problem(1, 1024, 1024, 64);
    let (q, k, v) = operands(&p, 1);
    for (id, mut dev) in common::gpu_devices("attention", |dev| ops::attention(dev, &p, &q, &k, &v).map(drop)) {
        let mut g = c.benchmark_group(format!("attention-{}", id.id()));
        g.sample_size(10);
        g.throughput(Throughput::Elements(p.macs()));
        g.bench_function(BenchmarkId::new("N1024-d64", id.id()), |b| {
            b.iter(|| ops::attention(dev.as_mut(), &p, &q, &k, &v).unwrap())
        });
        g.finish();
    }
}

/// Simulated cycles per wall-clock second on a small unit (d = 16, 4 lanes,
/// 128-bit port), then the full-size measurements.
fn sim(c: &mut Criterion) {
    if !common::verilator_or_skip("attention-sim") {
        return;
    }
    let small = AttentionConfig {
        head_dim: 16,
        lanes: 4,
        dot_par: 16,
        port_bits: 128,
        read_fifo_depth: 32,
        ..AttentionConfig::default()
    };
    let mut dev = SimDevice::new(small.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
    let p = problem(2, 64, 256, 16);
    let (q, k, v) = operands(&p, 2);
    let cycles = ops::attention(&mut dev, &p, &q, &k, &v).unwrap().1.cycles.unwrap().cycles;
    let mut g = c.benchmark_group("attention-sim");
    g.sample_size(10);
    g.throughput(Throughput::Elements(cycles));
    g.bench_function(BenchmarkId::new("verilator-cycles", small.kernel_name()), |b| {
        b.iter(|| ops::attention(&mut dev, &p, &q, &k, &v).unwrap())
    });
    g.finish();

    let d128 = AttentionConfig { head_dim: 128, dot_par: 128, lanes: 8, port_bits: 1024, ..AttentionConfig::default() };
    for (cfg, n) in [(AttentionConfig::default(), 1024usize), (d128, 4096)] {
        let p = problem(1, 64, n, cfg.head_dim);
        let (q, k, v) = operands(&p, 3);
        let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
        let (out, stats) = ops::attention(&mut dev, &p, &q, &k, &v).unwrap();
        assert_eq!(out, attention(&p, &q, &k, &v).unwrap(), "{} is not bit-exact", cfg.kernel_name());
        let cyc = stats.cycles.unwrap();
        eprintln!(
            "attention N={n} d={} seq_q=64 on {} (default memory model): {} cycles, utilization {:.1}%, projected {:.2} µs at {} MHz",
            cfg.head_dim,
            cfg.kernel_name(),
            cyc.cycles,
            100.0 * stats.utilization().unwrap(),
            stats.projected().unwrap().as_secs_f64() * 1e6,
            cfg.clock_mhz
        );
    }
}

criterion_group!(benches, golden, gpu, sim);
criterion_main!(benches);
