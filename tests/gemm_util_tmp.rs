use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite::sim::MemoryConfig;

#[test]
fn util() {
    let cfg = GemmConfig::default();
    let t = std::time::Instant::now();
    let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
    println!("build {:?}", t.elapsed());
    let (m, n, k) = (256, 256, 256);
    let p = GemmProblem::new(m, n, k);
    let a: Vec<i8> = (0..m * k).map(|i| (i as i32 * 7 % 255 - 127) as i8).collect();
    let b: Vec<i8> = (0..k * n).map(|i| (i as i32 * 5 % 255 - 127) as i8).collect();
    let want = gemm(&p, &a, &b, None).unwrap();
    let t = std::time::Instant::now();
    let (got, stats) = ferrite::host::ops::gemm(&mut dev, &p, &a, &b, None).unwrap();
    let c = stats.cycles.unwrap();
    println!("run {:?} cycles {} util {:.4} cyc/s {:.0}", t.elapsed(), c.cycles, (m*n*k) as f64 / (256.0 * c.cycles as f64), c.cycles as f64 / t.elapsed().as_secs_f64());
    assert_eq!(got, want);
}
