//! Every unit with random start-up state: Verilator built with `--x-initial
//! unique --x-assign unique`, each instance seeded differently, so registers
//! and memories without an initial value start random and X assignments are
//! random. The units must come out of `ap_rst_n` and compute bit-exact
//! anyway: nothing may rely on a simulator zeroing state (docs/simulators.md).
use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::host::ops;
use ferrite::hw::attention::{attention, AttentionConfig, AttentionParams, AttentionProblem};
use ferrite::hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite::hw::moe::{route, GateMode, MoeConfig, MoeProblem};
use ferrite::sim::MemoryConfig;
use rand::{Rng, SeedableRng};

/// Seeds of the random start-up state (0 would mean "not random").
const SEEDS: [u32; 3] = [1, 0x5eed, 0xdead_beef];

fn memory(seed: u32) -> MemoryConfig {
    MemoryConfig { ready_stall_prob: 0.2, valid_stall_prob: 0.2, seed: seed as u64, ..MemoryConfig::default() }
}

fn int8s(rng: &mut impl Rng, len: usize) -> Vec<i8> {
    (0..len).map(|_| rng.gen()).collect()
}

#[test]
fn gemm_from_random_state() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    for seed in SEEDS {
        let mut dev =
            SimDevice::new(GemmConfig::small(4, 4), memory(seed), Engine::VerilatorXRandom(seed), None).unwrap();
        let p = GemmProblem { bias: true, relu: true, ..GemmProblem::new(6, 5, 9) };
        let (a, b) = (int8s(&mut rng, p.m * p.k), int8s(&mut rng, p.k * p.n));
        let bias: Vec<i32> = (0..p.n).map(|_| rng.gen_range(-1000..1000)).collect();
        let (got, _) = ops::gemm(&mut dev, &p, &a, &b, Some(&bias)).unwrap();
        assert_eq!(got, gemm(&p, &a, &b, Some(&bias)).unwrap(), "seed {seed}");
    }
}

#[test]
fn attention_from_random_state() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let cfg =
        AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, read_fifo_depth: 32, clock_mhz: 300.0 };
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for seed in SEEDS {
        let mut dev = SimDevice::new(cfg.clone(), memory(seed), Engine::VerilatorXRandom(seed), None).unwrap();
        let s = 1.0 / 32.0;
        let p = AttentionProblem {
            batch: 1,
            heads: 2,
            seq_q: 3,
            seq_kv: 5,
            dim: 16,
            causal: true,
            kv_len: None,
            params: AttentionParams::from_scales(16, s, s, s, Some(1.0 / 64.0)).unwrap(),
        };
        let (nq, nkv) = (2 * 3 * 16, 2 * 5 * 16);
        let (q, k, v) = (int8s(&mut rng, nq), int8s(&mut rng, nkv), int8s(&mut rng, nkv));
        let (got, _) = ops::attention(&mut dev, &p, &q, &k, &v).unwrap();
        assert_eq!(got, attention(&p, &q, &k, &v).unwrap(), "seed {seed}");
    }
}

#[test]
fn moe_from_random_state() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    // 8 experts: the top-k rounds compare pairs; 12: comparator trees, whose
    // Verilator form keeps the root in a register of its own.
    let cfgs = [(8, 2, 6), (12, 3, 10)];
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for (e_max, k_max, experts) in cfgs {
        let cfg = MoeConfig { e_max, k_max, h_max: 64, lanes: 2, port_bits: 128, clock_mhz: 300.0 };
        for seed in SEEDS {
            let mut dev = SimDevice::new(cfg.clone(), memory(seed), Engine::VerilatorXRandom(seed), None).unwrap();
            let p = MoeProblem::new(5, 32, experts, k_max, GateMode::SoftmaxTopk, 1.0 / 16.0, 1.0 / 32.0).unwrap();
            let (x, w) = (int8s(&mut rng, 5 * 32), int8s(&mut rng, experts * 32));
            let (got, _) = ops::moe(&mut dev, &p, &x, &w, None).unwrap();
            assert_eq!(got, route(&p, &x, &w, None).unwrap(), "E_max {e_max}, seed {seed}");
        }
    }
}
