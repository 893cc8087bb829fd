//! GEMM benchmarks: the golden model, the CPU library path, the simulated
//! unit on Verilator and on rust-hdl's simulator (throughput in simulated
//! cycles per second), plus the utilization of the default 16×16 unit on
//! 256×256×256 printed once, and the OpenCL and CUDA backends where present
//! (each skipped with the reason when it cannot be opened).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrite::host::backend::cpu::{CpuDevice, CpuMode};
use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::host::ops;
use ferrite::hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite::sim::MemoryConfig;
use rand::{Rng, SeedableRng};

mod common;

fn operands(p: &GemmProblem, seed: u64) -> (Vec<i8>, Vec<i8>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let a = (0..p.m * p.k).map(|_| rng.gen()).collect();
    let b = (0..p.k * p.n).map(|_| rng.gen()).collect();
    (a, b)
}

fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm-cpu");
    for s in [64usize, 256] {
        let p = GemmProblem::new(s, s, s);
        let (a, b) = operands(&p, 1);
        g.throughput(Throughput::Elements(p.macs()));
        g.bench_function(BenchmarkId::new("golden", s), |bch| bch.iter(|| gemm(&p, &a, &b, None).unwrap()));
        let mut dev = CpuDevice::new(CpuMode::Fast);
        g.bench_function(BenchmarkId::new("cpu-fast", s), |bch| {
            bch.iter(|| ops::gemm(&mut dev, &p, &a, &b, None).unwrap())
        });
    }
    g.finish();
}

/// The same GEMMs through the `Device` trait on the OpenCL port (PoCL here,
/// with `--features ferrite-host/opencl`) and on the first CUDA GPU.
fn gpu(c: &mut Criterion) {
    let probe = GemmProblem::new(8, 8, 8);
    let (pa, pb) = operands(&probe, 0);
    for (id, mut dev) in common::gpu_devices("gemm", |dev| ops::gemm(dev, &probe, &pa, &pb, None).map(drop)) {
        let mut g = c.benchmark_group(format!("gemm-{}", id.id()));
        g.sample_size(10);
        for s in [64usize, 256] {
            let p = GemmProblem::new(s, s, s);
            let (a, b) = operands(&p, 1);
            g.throughput(Throughput::Elements(p.macs()));
            g.bench_function(BenchmarkId::new(id.id(), s), |bch| {
                bch.iter(|| ops::gemm(dev.as_mut(), &p, &a, &b, None).unwrap())
            });
        }
        g.finish();
    }
}

/// Simulated cycles per wall-clock second for one engine on the 16×16 unit.
fn sim(c: &mut Criterion) {
    if !common::verilator_or_skip("gemm-sim") {
        return;
    }
    let cfg = GemmConfig::default();
    let mut g = c.benchmark_group("gemm-sim-16x16");
    g.sample_size(10);
    for (engine, size) in [(Engine::Verilator, 64usize), (Engine::RustHdl, 8)] {
        let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), engine, None).unwrap();
        let p = GemmProblem::new(size, size, size);
        let (a, b) = operands(&p, 2);
        let cycles = ops::gemm(&mut dev, &p, &a, &b, None).unwrap().1.cycles.unwrap().cycles;
        g.throughput(Throughput::Elements(cycles));
        g.bench_function(BenchmarkId::new(format!("{engine}-cycles"), size), |bch| {
            bch.iter(|| ops::gemm(&mut dev, &p, &a, &b, None).unwrap())
        });
    }
    g.finish();

    let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
    let p = GemmProblem::new(256, 256, 256);
    let (a, b) = operands(&p, 3);
    let stats = ops::gemm(&mut dev, &p, &a, &b, None).unwrap().1;
    let cyc = stats.cycles.unwrap();
    let (util, projected) = (stats.utilization().unwrap(), stats.projected().unwrap());
    eprintln!(
        "gemm 256x256x256 on {}x{} ({}-bit port, default memory model): {} cycles, utilization {:.1}%, projected {:.1} µs at {} MHz",
        cfg.rows,
        cfg.cols,
        cfg.port_bits,
        cyc.cycles,
        100.0 * util,
        projected.as_secs_f64() * 1e6,
        cfg.clock_mhz
    );
}

criterion_group!(benches, cpu, gpu, sim);
criterion_main!(benches);
