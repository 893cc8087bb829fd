//! The simulated attention unit against the golden model, bit for bit.
use ferrite::host::backend::cpu::{CpuDevice, CpuMode};
use ferrite::host::backend::sim::{Engine, SimDevice};
use ferrite::host::ops;
use ferrite::hw::attention::{attention, AttentionConfig, AttentionOutput, AttentionParams, AttentionProblem};
use ferrite::sim::MemoryConfig;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use rand::{Rng, SeedableRng};

/// Run one problem on the simulated unit through the host runtime; returns the output and the cycle count.
fn run(
    cfg: &AttentionConfig,
    mem: MemoryConfig,
    p: &AttentionProblem,
    q: &[i8],
    k: &[i8],
    v: &[i8],
) -> (AttentionOutput, u64) {
    let mut dev = SimDevice::new(cfg.clone(), mem, Engine::Verilator, None).unwrap();
    let (out, stats) = ops::attention(&mut dev, p, q, k, v).unwrap();
    (out, stats.cycles.unwrap().cycles)
}

fn small() -> AttentionConfig {
    AttentionConfig { head_dim: 16, lanes: 4, dot_par: 16, port_bits: 128, read_fifo_depth: 32, clock_mhz: 300.0 }
}

fn problem(d: usize, batch: usize, heads: usize, sq: usize, skv: usize, causal: bool, out8: bool) -> AttentionProblem {
    let s = 1.0 / 32.0;
    AttentionProblem {
        batch,
        heads,
        seq_q: sq,
        seq_kv: skv,
        dim: d,
        causal,
        kv_len: None,
        params: AttentionParams::from_scales(d, s, s, s, if out8 { Some(1.0 / 64.0) } else { None }).unwrap(),
    }
}

#[test]
fn smoke_single_head() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let cfg = small();
    for (sq, skv, causal) in [(1, 1, false), (4, 4, false), (5, 9, false), (6, 6, true), (13, 13, true)] {
        let p = problem(16, 1, 1, sq, skv, causal, false);
        let q: Vec<i8> = (0..sq * 16).map(|i| (i as i32 * 37 % 255 - 127) as i8).collect();
        let k: Vec<i8> = (0..skv * 16).map(|i| (i as i32 * 53 % 255 - 127) as i8).collect();
        let v: Vec<i8> = (0..skv * 16).map(|i| (i as i32 * 29 % 255 - 127) as i8).collect();
        let want = attention(&p, &q, &k, &v).unwrap();
        let (got, cycles) = run(&cfg, MemoryConfig::default(), &p, &q, &k, &v);
        println!("sq={sq} skv={skv} causal={causal}: {cycles} cycles");
        assert_eq!(got, want, "sq={sq} skv={skv} causal={causal}");
    }
}

/// int8 values biased towards the edges, or all one extreme value.
fn tensor(len: usize) -> impl Strategy<Value = Vec<i8>> {
    prop_oneof![
        4 => prop::collection::vec(prop_oneof![4 => any::<i8>(), 1 => Just(-128i8), 1 => Just(127i8)], len),
        1 => Just(vec![-128i8; len]),
        1 => Just(vec![127i8; len]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Sequence lengths 1..=3·lanes+1, causal on/off, batches with padded key
    /// lengths, int8 or Q16 output, random memory backpressure.
    #[test]
    fn sim_equals_golden(
        (batch, heads, sq, skv) in (1usize..=2, 1usize..=2, 1usize..=13, 1usize..=13),
        causal in any::<bool>(),
        out8 in any::<bool>(),
        padded in any::<bool>(),
        seed in any::<u64>(),
        stall in 0.0f64..0.4,
        latency in 1u32..30,
    ) {
        if !ferrite::sim::verilator_or_skip() {
            return Ok(());
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut p = problem(16, batch, heads, sq, skv, causal, out8);
        if padded {
            p.kv_len = Some((0..batch).map(|_| rng.gen_range(1..=skv)).collect());
        }
        let nh = batch * heads;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let q = tensor(nh * sq * 16).new_tree(&mut runner).unwrap().current();
        let k = tensor(nh * skv * 16).new_tree(&mut runner).unwrap().current();
        let mut v = tensor(nh * skv * 16).new_tree(&mut runner).unwrap().current();
        // One dominant key: a large q·k makes every other weight vanish.
        if seed % 4 == 0 {
            v.iter_mut().for_each(|x| *x = rng.gen());
        }
        let mem = MemoryConfig { read_latency: latency, ready_stall_prob: stall, valid_stall_prob: stall, seed, ..MemoryConfig::default() };
        let want = attention(&p, &q, &k, &v).unwrap();
        let (got, _) = run(&small(), mem, &p, &q, &k, &v);
        prop_assert_eq!(got, want);
    }
}

#[test]
fn one_dominant_key() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let p = problem(16, 1, 1, 3, 9, false, true);
    let q = vec![127i8; 3 * 16];
    let mut k = vec![0i8; 9 * 16];
    k[5 * 16..6 * 16].iter_mut().for_each(|x| *x = 127);
    let v: Vec<i8> = (0..9 * 16).map(|i| (i % 251) as i8).collect();
    let want = attention(&p, &q, &k, &v).unwrap();
    assert_eq!(run(&small(), MemoryConfig::default(), &p, &q, &k, &v).0, want);
}

/// A hundred keys that each raise the running maximum, then a long tail of
/// keys level with it: each rising step takes a lane two cycles, so with keys
/// arriving every cycle the lanes' backlogs fill past their depth unless
/// `room` stops the steps (`lane::room_below`); the tail's keys all weigh the
/// same, so a step lost or repeated there changes the output. Bit for bit
/// against the golden model, with and without backpressure on memory.
#[test]
fn rising_keys_fill_the_backlog() {
    use ferrite::hw::attention::lane::backlog_depth;
    use ferrite::hw::numerics::{round_shift, EXP2_FRAC_BITS};
    let (sq, skv, rising) = (6, 255, 100);
    let mut p = problem(16, 1, 1, sq, skv, false, false);
    p.params = AttentionParams::from_scales(16, 1.0 / 8.0, 1.0 / 8.0, 1.0 / 32.0, None).unwrap();
    let q = vec![127i8; sq * 16];
    let k: Vec<i8> = (0..skv * 16).map(|i| (27 + (i / 16).min(rising)) as i8).collect();
    let v: Vec<i8> = (0..skv * 16).map(|i| (i as i32 * 29 % 255 - 127) as i8).collect();
    let e = |j: usize| {
        let s: i64 = (0..16).map(|x| 127 * k[j * 16 + x] as i64).sum();
        round_shift(s * p.params.score.multiplier as i64, p.params.score.shift) >> EXP2_FRAC_BITS
    };
    assert!((1..=rising).all(|j| e(j) > e(j - 1)) && (rising..skv).all(|j| e(j) == e(rising)));
    assert!(rising > 2 * backlog_depth(16), "{rising} rises do not overfill a backlog of {}", backlog_depth(16));
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let want = attention(&p, &q, &k, &v).unwrap();
    // A 512-bit port at a short read latency streams a key (its K and V rows)
    // every cycle; the 128-bit one of `small` every other cycle, which lanes
    // taking two cycles a step keep up with.
    let cfg = AttentionConfig { port_bits: 512, ..small() };
    for (seed, stall) in [(0, 0.0), (7, 0.2)] {
        let mem = MemoryConfig {
            read_latency: 1,
            ready_stall_prob: stall,
            valid_stall_prob: stall,
            seed,
            ..MemoryConfig::default()
        };
        let (got, cycles) = run(&cfg, mem, &p, &q, &k, &v);
        println!("{rising} rising keys of {skv}, stall {stall}: {cycles} cycles");
        assert_eq!(got, want, "stall {stall}");
    }
}

/// Cycles and multiplier utilization of the default unit (d = 64, 8 lanes,
/// 1024-bit port) at N = 1024: `cargo test --release --test attention_sim -- --ignored --nocapture`.
#[test]
#[ignore = "measurement: builds the full-size unit (minutes)"]
fn utilization_default_unit() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let cfg = AttentionConfig::default();
    for (n, causal) in [(1024usize, false), (1024, true)] {
        let p = problem(64, 1, 1, 64, n, causal, false);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut t = |len: usize| -> Vec<i8> { (0..len).map(|_| rng.gen_range(-64..=64)).collect() };
        let (q, k, v) = (t(64 * 64), t(n * 64), t(n * 64));
        let (got, cycles) = run(&cfg, MemoryConfig::default(), &p, &q, &k, &v);
        assert_eq!(got, attention(&p, &q, &k, &v).unwrap());
        let util = p.macs() as f64 / (cfg.multipliers() as f64 * cycles as f64);
        println!(
            "attention d=64 lanes=8 N={n} seq_q=64 causal={causal}: {cycles} cycles, utilization {:.1}%, projected {:.1} µs at {} MHz",
            100.0 * util,
            cycles as f64 / cfg.clock_mhz,
            cfg.clock_mhz
        );
    }
}

#[test]
fn cpu_backend_runs_the_golden_model() {
    let p = AttentionProblem { kv_len: Some(vec![3, 7]), ..problem(16, 2, 2, 5, 7, true, true) };
    let gen = |n: usize, m: i32| -> Vec<i8> { (0..n).map(|i| (i as i32 * m % 255 - 127) as i8).collect() };
    let (q, k, v) = (gen(4 * 5 * 16, 37), gen(4 * 7 * 16, 53), gen(4 * 7 * 16, 29));
    let (got, _) = ops::attention(&mut CpuDevice::new(CpuMode::Golden), &p, &q, &k, &v).unwrap();
    assert_eq!(got, attention(&p, &q, &k, &v).unwrap());
}

#[test]
fn bad_attention_inputs_are_clear_errors() {
    let mut dev = CpuDevice::new(CpuMode::Golden);
    let p = problem(16, 1, 1, 2, 3, false, false);
    let err = ops::attention(&mut dev, &p, &[0; 31], &[0; 48], &[0; 48]).unwrap_err();
    assert!(err.to_string().contains("Q has 31 elements"), "{err}");
    let err = ops::attention(&mut dev, &AttentionProblem { seq_kv: 0, ..p.clone() }, &[0; 32], &[], &[]).unwrap_err();
    assert!(err.to_string().contains("≥ 1"), "{err}");
    // K/V FIFOs shallower than one burst never issued a read (the unit hung).
    let err = AttentionConfig { read_fifo_depth: 4, ..small() }.validate().unwrap_err();
    assert!(err.to_string().contains("read_fifo_depth = 4 (supported: powers of two from 8"), "{err}");
    AttentionConfig { read_fifo_depth: 8, ..small() }.validate().unwrap();
    if ferrite::sim::verilator_or_skip() {
        // A unit built for d = 16 refuses d = 32.
        let mut sim = SimDevice::new(small(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
        let p32 = problem(32, 1, 1, 1, 1, false, false);
        let err = ops::attention(&mut sim, &p32, &[0; 32], &[0; 32], &[0; 32]).unwrap_err();
        assert!(err.to_string().contains("head_dim = 16"), "{err}");
    }
}

/// Storage bits declared in generated Verilog: every `reg` (and memory) width × depth.
fn state_bits(verilog: &str) -> u64 {
    let mut bits = 0u64;
    for line in verilog.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("reg ").or_else(|| line.strip_prefix("output reg ")) else { continue };
        let rest = rest.trim_start_matches("signed").trim();
        let width = match rest.strip_prefix('[').and_then(|r| r.split_once(':')) {
            Some((msb, _)) => msb.trim().parse::<u64>().map_or(1, |m| m + 1),
            None => 1,
        };
        let depth = rest
            .split_once("[0:")
            .and_then(|(_, d)| d.split(']').next())
            .and_then(|d| d.parse::<u64>().ok())
            .map_or(1, |d| d + 1);
        bits += width * depth;
    }
    bits
}

/// The design is generated without N, and one build runs sequences far longer
/// than its FIFOs hold: on-chip state is O(lanes·d), never O(N) or O(N²).
#[test]
fn on_chip_state_does_not_grow_with_n() {
    let cfg = small();
    let verilog = ferrite::hw::attention::rtl::verilog(&cfg).unwrap();
    let bits = state_bits(&verilog);
    let kv_fifo_keys = 2 * cfg.read_fifo_depth * cfg.port_bytes() / cfg.head_dim;
    println!(
        "attention d={} lanes={}: {bits} bits of registers and memories; K/V FIFOs hold {kv_fifo_keys} keys",
        cfg.head_dim, cfg.lanes
    );
    // An N×N int32 score matrix for the longest run below alone would need more.
    let n = 600;
    assert!(bits < (n * n * 32) as u64, "{bits}");
    assert!(n > kv_fifo_keys);
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for keys in [3, n] {
        let p = problem(16, 1, 1, 5, keys, false, false);
        let mut t = |len: usize| -> Vec<i8> { (0..len).map(|_| rng.gen()).collect() };
        let (q, k, v) = (t(5 * 16), t(keys * 16), t(keys * 16));
        let (got, _) = ops::attention(&mut dev, &p, &q, &k, &v).unwrap();
        assert_eq!(got, attention(&p, &q, &k, &v).unwrap(), "N = {keys}");
    }
}

/// The CI-size unit (one lane, d = 16, 128-bit port): one-query and one-key
/// blocks, padded key counts (the KVLEN reads) and K/V bursts cut short,
/// under read latency and backpressure. The K/V request decision is taken a
/// cycle ahead (`k_ok`), the lane's Q beat is selected by a registered
/// counter (`q_sel`) and the finalizer's snapshot is registered (`snap_r`):
/// each is wrong on some of these edges if its register is a cycle off.
#[test]
fn one_lane_edges() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let cfg =
        AttentionConfig { head_dim: 16, lanes: 1, dot_par: 16, port_bits: 128, read_fifo_depth: 16, clock_mhz: 300.0 };
    let cases =
        [(1, 1, 1, false), (1, 1, 9, false), (2, 3, 1, false), (1, 2, 17, true), (2, 5, 5, true), (1, 1, 33, false)];
    for (latency, stall) in [(1u32, 0.0f64), (9, 0.3)] {
        let mem = MemoryConfig {
            read_latency: latency,
            ready_stall_prob: stall,
            valid_stall_prob: stall,
            seed: 14,
            ..MemoryConfig::default()
        };
        let mut dev = SimDevice::new(cfg.clone(), mem, Engine::Verilator, None).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(14);
        for (i, &(batch, sq, skv, causal)) in cases.iter().enumerate() {
            for padded in [false, true] {
                let mut p = problem(16, batch, 1, sq, skv, causal, i % 2 == 1);
                if padded {
                    p.kv_len = Some((0..batch).map(|_| rng.gen_range(1..=skv)).collect());
                }
                let q: Vec<i8> = (0..batch * sq * 16).map(|_| rng.gen()).collect();
                let k: Vec<i8> = (0..batch * skv * 16).map(|_| rng.gen()).collect();
                let v: Vec<i8> = (0..batch * skv * 16).map(|_| rng.gen()).collect();
                let want = attention(&p, &q, &k, &v).unwrap();
                let (got, _) = ops::attention(&mut dev, &p, &q, &k, &v).unwrap();
                assert_eq!(got, want, "case {i} padded={padded} latency={latency}");
            }
        }
    }
}
