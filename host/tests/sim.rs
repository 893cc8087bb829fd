//! The simulated RTL against the golden model, through the whole host stack:
//! ops::gemm → Device → driver → AXI4-Lite → RTL → AXI memory model.
//!
//! Uses Verilator when installed; without it, rust-hdl (slow) outside CI and
//! an error under CI, as [`Engine::detect`] decides.
use ferrite_host::backend::sim::{Engine, SimDevice};
use ferrite_host::manifest::UnitConfig;
use ferrite_host::{ops, Device, DeviceError, Problem};
use ferrite_hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite_hw::numerics::Requant;
use ferrite_sim::MemoryConfig;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn device(mem: MemoryConfig) -> SimDevice {
    let engine = Engine::detect().expect("a simulator engine");
    SimDevice::new(GemmConfig::small(4, 4), mem, engine, None).expect("simulated 4×4 unit")
}

fn cases() -> u32 {
    match Engine::detect() {
        Ok(Engine::Verilator) => 40,
        _ => 4,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn sim_equals_golden(
        m in 1usize..=12,
        n in 1usize..=12,
        k in prop_oneof![Just(1usize), 1usize..=12, Just(40usize)],
        bias in any::<bool>(),
        relu in any::<bool>(),
        requant in prop_oneof![Just(None), (1i32 << 24..1 << 30, 20u32..36).prop_map(|(multiplier, shift)| Some(Requant { multiplier, shift }))],
        seed in any::<u64>(),
        backpressure in prop_oneof![Just(0.0), 0.0f64..0.6],
        latency in 1u32..=30,
    ) {
        let p = GemmProblem { bias, relu, requant, ..GemmProblem::new(m, n, k) };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let a: Vec<i8> = (0..m * k).map(|_| if rng.gen_bool(0.1) { -128 } else { rng.gen() }).collect();
        let b: Vec<i8> = (0..k * n).map(|_| if rng.gen_bool(0.1) { -128 } else { rng.gen() }).collect();
        let bias_v: Option<Vec<i32>> = bias.then(|| (0..n).map(|_| rng.gen_range(-(1 << 18)..1 << 18)).collect());
        let mem = MemoryConfig {
            read_latency: latency,
            write_latency: latency,
            ready_stall_prob: backpressure,
            valid_stall_prob: backpressure,
            seed,
            ..MemoryConfig::default()
        };
        let mut dev = device(mem);
        let (out, stats) = ops::gemm(&mut dev, &p, &a, &b, bias_v.as_deref()).unwrap();
        prop_assert_eq!(out, gemm(&p, &a, &b, bias_v.as_deref()).unwrap());
        let cycles = stats.cycles.unwrap();
        prop_assert!(cycles.cycles > 0);
        let util = stats.utilization().unwrap();
        prop_assert!(util > 0.0 && util <= 1.0, "utilization {}", util);
    }
}

#[test]
fn several_launches_on_one_device() {
    let mut dev = device(MemoryConfig::default());
    for (m, n, k) in [(4, 4, 4), (9, 3, 1), (5, 13, 7)] {
        let p = GemmProblem::new(m, n, k);
        let a: Vec<i8> = (0..m * k).map(|i| (i * 7 % 256) as u8 as i8).collect();
        let b: Vec<i8> = (0..k * n).map(|i| (i * 13 % 256) as u8 as i8).collect();
        let (out, _) = ops::gemm(&mut dev, &p, &a, &b, None).unwrap();
        assert_eq!(out, gemm(&p, &a, &b, None).unwrap());
    }
}

#[test]
fn problems_beyond_the_unit_are_refused() {
    let dev = device(MemoryConfig::default());
    let Some(UnitConfig::Gemm(cfg)) = dev.config() else { panic!("device() builds a GEMM unit") };
    let k_max = cfg.k_max;
    let err = dev.layout(&Problem::Gemm(GemmProblem::new(1, 1, k_max + 1))).unwrap_err();
    assert!(matches!(err, DeviceError::TooBig { .. }), "{err}");
    assert!(err.to_string().contains("k_max"), "{err}");
    let err = dev.layout(&Problem::Gemm(GemmProblem::new(1, 0, 1))).unwrap_err();
    assert!(matches!(err, DeviceError::Problem(_)), "{err}");
}

#[test]
fn a_memory_that_never_answers_times_out() {
    let mut dev = device(MemoryConfig { hang: true, ..MemoryConfig::default() });
    let p = GemmProblem::new(4, 4, 4);
    let err = ops::gemm(&mut dev, &p, &[1; 16], &[1; 16], None).unwrap_err();
    assert!(matches!(err, DeviceError::Timeout { unit: "cycles", .. }), "{err}");
}

/// Attention state (running max, sums, masks) must not leak from one launch into the next.
#[test]
fn several_attention_launches_on_one_device() {
    use ferrite_hw::attention::{attention, AttentionConfig, AttentionParams, AttentionProblem};
    if !matches!(Engine::detect(), Ok(Engine::Verilator)) {
        eprintln!("skipped: needs Verilator (rust-hdl takes minutes per attention launch)");
        return;
    }
    let cfg = AttentionConfig {
        head_dim: 16,
        lanes: 4,
        dot_par: 16,
        port_bits: 128,
        read_fifo_depth: 32,
        ..AttentionConfig::default()
    };
    let mut dev = SimDevice::new(cfg, MemoryConfig::default(), Engine::Verilator, None).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for (batch, seq_q, seq_kv, causal, kv_len) in
        [(1, 9, 9, true, None), (2, 5, 7, false, Some(vec![3, 7])), (1, 1, 1, false, None)]
    {
        let p = AttentionProblem {
            batch,
            heads: 1,
            seq_q,
            seq_kv,
            dim: 16,
            causal,
            kv_len,
            params: AttentionParams::from_scales(16, 1.0 / 32.0, 1.0 / 32.0, 1.0 / 32.0, None).unwrap(),
        };
        let mut int8 = |n: usize| -> Vec<i8> { (0..n).map(|_| rng.gen()).collect() };
        let (q, k, v) = (int8(batch * seq_q * 16), int8(batch * seq_kv * 16), int8(batch * seq_kv * 16));
        let (out, _) = ops::attention(&mut dev, &p, &q, &k, &v).unwrap();
        assert_eq!(out, attention(&p, &q, &k, &v).unwrap(), "batch {batch} seq {seq_q}×{seq_kv} causal {causal}");
    }
}
