//! The simulated GEMM unit against the golden model: every output bit equal,
//! over random shapes (1..=3× the array, non-multiples, K = 1), values with
//! −128 and saturation, every epilogue, and memory latency/backpressure.
use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::host::{ops, DeviceError};
use ferrite::hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite::hw::numerics::Requant;
use ferrite::sim::MemoryConfig;
use proptest::prelude::*;

/// Verilator, or a skip outside CI (CI must have it: `.ci/run` installs it).
fn engine() -> Option<Engine> {
    if ferrite::sim::verilator_available() {
        return Some(Engine::Verilator);
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but Verilator is missing: run scripts/install-deps.sh");
    eprintln!("skipped: Verilator is not installed (scripts/install-deps.sh installs it)");
    None
}

/// int8 values biased towards the edges of the range.
fn int8s(len: usize) -> impl Strategy<Value = Vec<i8>> {
    prop::collection::vec(prop_oneof![4 => any::<i8>(), 1 => Just(-128i8), 1 => Just(127i8), 1 => Just(0i8)], len)
}

#[derive(Debug, Clone)]
struct Case {
    cfg: GemmConfig,
    p: GemmProblem,
    a: Vec<i8>,
    b: Vec<i8>,
    bias: Option<Vec<i32>>,
    mem: MemoryConfig,
}

fn case() -> impl Strategy<Value = Case> {
    let cfgs = prop_oneof![Just(GemmConfig::small(4, 4)), Just(GemmConfig::small(3, 2))];
    let mems = (1u32..40, 0.0f64..0.5, 0.0f64..0.5, any::<u64>()).prop_map(|(lat, r, v, seed)| MemoryConfig {
        read_latency: lat,
        write_latency: lat / 2 + 1,
        ready_stall_prob: r,
        valid_stall_prob: v,
        seed,
        ..MemoryConfig::default()
    });
    (
        cfgs,
        mems,
        1usize..=12,
        1usize..=12,
        1usize..=12,
        any::<bool>(),
        any::<bool>(),
        prop::option::of((1i32..=i32::MAX, 0u32..=40)),
    )
        .prop_flat_map(|(cfg, mem, m, n, k, bias, relu, rq)| {
            let p = GemmProblem {
                bias,
                relu,
                requant: rq.map(|(multiplier, shift)| Requant { multiplier, shift }),
                ..GemmProblem::new(m, n, k)
            };
            let bias_s = if bias {
                prop::option::of(prop::collection::vec(any::<i32>(), n)).boxed()
            } else {
                Just(None).boxed()
            };
            (Just(cfg), Just(p), int8s(m * k), int8s(k * n), bias_s, Just(mem))
        })
        .prop_filter("bias flag and vector agree", |(_, p, _, _, bias, _)| p.bias == bias.is_some())
        .prop_map(|(cfg, p, a, b, bias, mem)| Case { cfg, p, a, b, bias, mem })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn sim_equals_golden(c in case()) {
        let Some(engine) = engine() else { return Ok(()) };
        let want = gemm(&c.p, &c.a, &c.b, c.bias.as_deref()).unwrap();
        let mut dev = SimDevice::new(c.cfg.clone(), c.mem.clone(), engine, None).unwrap();
        let (got, stats) = ops::gemm(&mut dev, &c.p, &c.a, &c.b, c.bias.as_deref()).unwrap();
        prop_assert_eq!(got.first_mismatch(&want), None, "{:?} on {}x{}", c.p, c.cfg.rows, c.cfg.cols);
        let util = stats.utilization().unwrap();
        prop_assert!(util > 0.0 && util <= 1.0, "utilization {}", util);
    }
}

#[test]
fn back_to_back_runs_reuse_the_unit() {
    let Some(engine) = engine() else { return };
    let mut dev = SimDevice::new(GemmConfig::small(4, 4), MemoryConfig::default(), engine, None).unwrap();
    for s in [1usize, 5, 8, 2] {
        let p = GemmProblem { relu: true, ..GemmProblem::new(s, s + 1, s + 2) };
        let a: Vec<i8> = (0..p.m * p.k).map(|i| (i as i32 * 37 - 100) as i8).collect();
        let b: Vec<i8> = (0..p.k * p.n).map(|i| (i as i32 * 11 - 60) as i8).collect();
        let (got, _) = ops::gemm(&mut dev, &p, &a, &b, None).unwrap();
        assert_eq!(got, gemm(&p, &a, &b, None).unwrap(), "{p:?}");
    }
}

/// K = 1 over many column blocks: every B read ends a column block, and the
/// next block's address and end flag are registered from the last one's, so
/// the unit must not issue two such reads in consecutive cycles.
#[test]
fn one_k_step_over_many_column_blocks() {
    let Some(engine) = engine() else { return };
    let mut dev = SimDevice::new(GemmConfig::small(4, 4), MemoryConfig::default(), engine, None).unwrap();
    for (m, n, bias) in [(9usize, 200usize, true), (64, 256, false)] {
        let p = GemmProblem { bias, ..GemmProblem::new(m, n, 1) };
        let a: Vec<i8> = (0..m).map(|i| (i as i32 * 29 - 128) as i8).collect();
        let b: Vec<i8> = (0..n).map(|i| (i as i32 * 13 - 90) as i8).collect();
        let bias = bias.then(|| (0..n as i32).map(|j| j * 1000 - 7).collect::<Vec<_>>());
        let (got, _) = ops::gemm(&mut dev, &p, &a, &b, bias.as_deref()).unwrap();
        assert_eq!(got, gemm(&p, &a, &b, bias.as_deref()).unwrap(), "{p:?}");
    }
}

#[test]
fn memory_that_never_answers_times_out() {
    let Some(engine) = engine() else { return };
    let mem = MemoryConfig { hang: true, ..MemoryConfig::default() };
    let mut dev = SimDevice::new(GemmConfig::small(4, 4), mem, engine, None).unwrap();
    let p = GemmProblem::new(4, 4, 4);
    let err = ops::gemm(&mut dev, &p, &[1; 16], &[1; 16], None).unwrap_err();
    assert!(matches!(err, DeviceError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("ap_done") || err.to_string().contains("timed out"), "{err}");
}

#[test]
fn problems_beyond_the_unit_are_refused() {
    let Some(engine) = engine() else { return };
    let cfg = GemmConfig::small(4, 4);
    let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), engine, None).unwrap();
    let k = cfg.k_max + 1;
    let err = ops::gemm(&mut dev, &GemmProblem::new(1, 1, k), &vec![0; k], &vec![0; k], None).unwrap_err();
    assert!(err.to_string().contains("k_max"), "{err}");
    let err = ops::gemm(&mut dev, &GemmProblem::new(0, 1, 1), &[], &[0], None).unwrap_err();
    assert!(err.to_string().contains("≥ 1"), "{err}");
    let err = ops::gemm(&mut dev, &GemmProblem::new(2, 2, 2), &[0; 3], &[0; 4], None).unwrap_err();
    assert!(err.to_string().contains("A has 3 elements"), "{err}");
}
