//! The simulated MoE router unit against the golden model, bit for bit: ids,
//! weights, slots, loads, dropped count, capacity and the dispatch plan.
use ferrite::host::driver::{self, ControlPort, LaunchArgs, Poll};
use ferrite::host::DeviceError;
use ferrite::hw::moe::config::RECORD_BYTES;
use ferrite::hw::moe::{route, rtl, CapacityFactor, GateMode, MoeConfig, MoeLayout, MoeOutput, MoeProblem};
use ferrite::sim::{MemoryConfig, Simulation, VerilatorInstance, VerilatorModel};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

struct Port<'a>(&'a mut Simulation<VerilatorInstance>);

impl ControlPort for Port<'_> {
    fn read32(&mut self, offset: u32) -> Result<u32, DeviceError> {
        self.0.read_reg(offset).map_err(|e| DeviceError::Argument(e.to_string()))
    }
    fn write32(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
        self.0.write_reg(offset, value).map_err(|e| DeviceError::Argument(e.to_string()))
    }
    fn wait(&mut self, ticks: u64) -> Result<(), DeviceError> {
        self.0.step(ticks).map_err(|e| DeviceError::Argument(e.to_string()))
    }
    fn now(&self) -> u64 {
        self.0.cycle()
    }
    fn tick_name(&self) -> &'static str {
        "cycles"
    }
}

/// What the simulated unit wrote, decoded, plus its STATUS and CYCLES.
struct Run {
    out: MoeOutput,
    status: u32,
    cycles: u64,
}

/// Run one problem on the simulated unit; a refused run is the driver's `Fault` error.
fn run(
    cfg: &MoeConfig,
    mem: MemoryConfig,
    p: &MoeProblem,
    x: &[i8],
    w: &[i8],
    bias: Option<&[i32]>,
) -> Result<Run, DeviceError> {
    let model = VerilatorModel::build(&rtl::verilog(cfg).unwrap(), &cfg.kernel_name(), cfg.port_bits, false).unwrap();
    let mut sim =
        Simulation::new(model.instance(None).unwrap(), MemoryConfig { data_bits: cfg.port_bits, ..mem }).unwrap();
    sim.reset(16).unwrap();
    let l = MoeLayout::new(cfg, p);
    let (t, h, e, k) = (p.tokens, p.hidden, p.experts, p.top_k);
    // Row padding (bytes from H to the pitch) holds junk, as in a user's buffer: it is not data.
    let pack = |src: &[i8], rows: usize, pitch: u64| {
        let mut out: Vec<u8> =
            (0..rows * pitch as usize).map(|i| (i as u32).wrapping_mul(0x9E37_79B9).to_le_bytes()[3] | 1).collect();
        for r in 0..rows {
            for c in 0..h {
                out[r * pitch as usize + c] = src[r * h + c] as u8;
            }
        }
        out
    };
    let m = sim.mem_mut();
    let xa = m.alloc(l.x_bytes).unwrap();
    let wa = m.alloc(l.w_bytes).unwrap();
    let ba = m.alloc(l.bias_bytes).unwrap();
    let ra = m.alloc(l.route_bytes).unwrap();
    let da = m.alloc(l.dispatch_bytes).unwrap();
    let sa = m.alloc(l.stats_bytes).unwrap();
    m.write(xa, &pack(x, t, l.ldx)).unwrap();
    m.write(wa, &pack(w, e, l.ldw)).unwrap();
    if let Some(b) = bias {
        m.write(ba, &b.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    }
    m.fill(ra, l.route_bytes as usize, 0xA5).unwrap();
    m.fill(da, l.dispatch_bytes as usize, 0xA5).unwrap();
    m.fill(sa, l.stats_bytes as usize, 0xA5).unwrap();
    let args = LaunchArgs {
        hwinfo: cfg.hwinfo(),
        values: vec![
            ("X", xa),
            ("WG", wa),
            ("BIAS", ba),
            ("ROUTE", ra),
            ("DISPATCH", da),
            ("STATS", sa),
            ("T", t as u64),
            ("H", h as u64),
            ("E", e as u64),
            ("K", k as u64),
            ("LDX", l.ldx),
            ("LDW", l.ldw),
            ("DPITCH", l.dpitch),
            ("FLAGS", p.flags() as u64),
            ("CF", p.capacity.map_or(0, |c| c.0) as u64),
            ("SMULT", p.logit.multiplier as u32 as u64),
            ("SSHIFT", p.logit.shift as u64),
        ],
    };
    let map = cfg.register_map();
    let cycles = driver::launch(&mut Port(&mut sim), &map, &args, Poll { interval: 64, limit: 50_000_000 })?;
    let status = sim.read_reg(map.offset("STATUS")).unwrap();
    let mem = sim.mem();
    let (experts, weights, slots) = MoeOutput::parse_records(&mem.read(ra, t * RECORD_BYTES).unwrap(), t, k);
    let words = |addr: u64, n: usize| -> Vec<u32> {
        mem.read(addr, 4 * n).unwrap().chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    };
    let stats = words(sa, e + 2);
    let load = stats[2..].to_vec();
    let capacity = stats[1];
    let dispatch = (0..e)
        .map(|x| {
            let kept = (load[x].min(capacity)) as usize;
            words(da + x as u64 * l.dpitch, kept)
        })
        .collect();
    Ok(Run { out: MoeOutput { experts, weights, slots, load, dropped: stats[0], capacity, dispatch }, status, cycles })
}

fn problem(t: usize, h: usize, e: usize, k: usize, mode: GateMode) -> MoeProblem {
    MoeProblem::new(t, h, e, k, mode, 1.0 / 16.0, 1.0 / 32.0).unwrap()
}

fn data(p: &MoeProblem, seed: u64) -> (Vec<i8>, Vec<i8>, Vec<i32>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let x = (0..p.tokens * p.hidden).map(|_| rng.gen()).collect();
    let w = (0..p.experts * p.hidden).map(|_| rng.gen()).collect();
    let b = (0..p.experts).map(|_| rng.gen_range(-5000..5000)).collect();
    (x, w, b)
}

#[test]
fn smoke() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let cfg = MoeConfig::small();
    for (t, h, e, k, mode, cap, bias) in [
        (1, 16, 1, 1, GateMode::SoftmaxTopk, false, false),
        (5, 20, 6, 2, GateMode::SoftmaxTopk, false, true),
        (9, 64, 12, 8, GateMode::TopkSoftmax, true, false),
        (17, 33, 5, 3, GateMode::SoftmaxTopk, true, true),
    ] {
        let p = MoeProblem { capacity: cap.then_some(CapacityFactor::ONE), bias, ..problem(t, h, e, k, mode) };
        let (x, w, b) = data(&p, t as u64);
        let bias = bias.then_some(b.as_slice());
        let want = route(&p, &x, &w, bias).unwrap();
        let got = run(&cfg, MemoryConfig::default(), &p, &x, &w, bias).unwrap();
        println!("T={t} H={h} E={e} k={k} {mode:?}: {} cycles", got.cycles);
        assert_eq!(got.status, 0);
        assert_eq!(got.out, want, "T={t} H={h} E={e} k={k} {mode:?}");
    }
}

/// Every logit equal (x = 0) on every expert a unit holds: each p is 1.0, so
/// the normalizer L = E·2^14 is the largest the unit can meet, and with it the
/// reciprocal's divisor and remainder (a narrower remainder fails here).
#[test]
fn largest_normalizer_when_every_expert_ties() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let configs =
        [MoeConfig::small(), MoeConfig { e_max: 4, k_max: 2, h_max: 16, lanes: 1, port_bits: 128, clock_mhz: 300.0 }];
    for cfg in &configs {
        let p = problem(3, 16, cfg.e_max, cfg.k_max, GateMode::SoftmaxTopk);
        let (x, w) = (vec![0i8; p.tokens * p.hidden], data(&p, 7).1);
        let want = route(&p, &x, &w, None).unwrap();
        let got = run(cfg, MemoryConfig::default(), &p, &x, &w, None).unwrap();
        assert_eq!(got.status, 0);
        assert_eq!(got.out, want, "{} E = {}", cfg.kernel_name(), cfg.e_max);
    }
}

/// Issue 18's shapes, where the router's dot products ran over whole beats and
/// summed the junk between H and the row pitch (non-zero here, see `run`).
#[test]
fn row_padding_is_not_data() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let configs = [
        MoeConfig { e_max: 8, k_max: 2, h_max: 64, lanes: 2, port_bits: 128, clock_mhz: 300.0 },
        MoeConfig { e_max: 5, k_max: 3, h_max: 64, lanes: 3, port_bits: 256, clock_mhz: 300.0 },
    ];
    for cfg in &configs {
        for (t, h, e, k) in [(5, 7, 3, 2), (6, 31, 7, 2), (8, 17, 8, 2), (6, 63, 4, 3)] {
            if e > cfg.e_max || k > cfg.k_max {
                continue;
            }
            let p = problem(t, h, e, k, GateMode::SoftmaxTopk);
            let (x, w, _) = data(&p, h as u64);
            let got = run(cfg, MemoryConfig::default(), &p, &x, &w, None).unwrap();
            assert_eq!(got.out, route(&p, &x, &w, None).unwrap(), "{} T={t} H={h} E={e} k={k}", cfg.kernel_name());
        }
    }
}

/// int8 values biased towards the edges of the range.
fn int8s(len: usize) -> impl Strategy<Value = Vec<i8>> {
    prop::collection::vec(prop_oneof![4 => any::<i8>(), 1 => Just(-128i8), 1 => Just(127i8), 1 => Just(0i8)], len)
}

#[derive(Debug, Clone)]
struct Case {
    p: MoeProblem,
    x: Vec<i8>,
    w: Vec<i8>,
    bias: Option<Vec<i32>>,
    mem: MemoryConfig,
}

fn case() -> impl Strategy<Value = Case> {
    let mems = (1u32..30, 0.0f64..0.4, any::<u64>()).prop_map(|(lat, stall, seed)| MemoryConfig {
        read_latency: lat,
        write_latency: lat / 2 + 1,
        ready_stall_prob: stall,
        valid_stall_prob: stall,
        seed,
        ..MemoryConfig::default()
    });
    let shape =
        (1usize..=24, 1usize..=64, 1usize..=12).prop_flat_map(|(t, h, e)| (Just(t), Just(h), Just(e), 1..=e.min(8)));
    let caps = prop_oneof![2 => Just(None), 1 => Just(Some(CapacityFactor::ONE)), 2 => (1u32..=0x3_0000).prop_map(|c| Some(CapacityFactor(c)))];
    // Ties: 0 random, 1 all-equal logits (zero x), 2 all-equal gate rows.
    (shape, any::<bool>(), any::<bool>(), caps, any::<bool>(), 0u8..4, mems, 1i32..=i32::MAX, 0u32..=40)
        .prop_flat_map(|((t, h, e, k), topk_softmax, renorm, capacity, bias, ties, mem, mult, shift)| {
            let mode = if topk_softmax { GateMode::TopkSoftmax } else { GateMode::SoftmaxTopk };
            let mut p = MoeProblem { renormalize: renorm, capacity, bias, ..problem(t, h, e, k, mode) };
            // Half the cases draw a raw logit scale (kept inside the unit's 40-bit range).
            if mult % 2 == 0 && (mult as f64) * 2f64.powi(31) / 2f64.powi(shift as i32) < 2f64.powi(38) {
                p.logit = ferrite::hw::numerics::Requant { multiplier: mult, shift };
            }
            let x = if ties == 1 { Just(vec![0i8; t * h]).boxed() } else { int8s(t * h).boxed() };
            let w =
                if ties == 2 { any::<i8>().prop_map(move |v| vec![v; e * h]).boxed() } else { int8s(e * h).boxed() };
            let b = if bias {
                prop::collection::vec(prop_oneof![any::<i32>(), -100i32..100], e).prop_map(Some).boxed()
            } else {
                Just(None).boxed()
            };
            (Just(p), x, w, b, Just(mem))
        })
        .prop_map(|(p, x, w, bias, mem)| Case { p, x, w, bias, mem })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// T, E, k, H, both modes, renormalization, capacity on/off, bias, ties and
    /// memory backpressure: every output bit equal.
    #[test]
    fn sim_equals_golden(c in case()) {
        if !ferrite::sim::verilator_or_skip() {
            return Ok(());
        }
        let want = route(&c.p, &c.x, &c.w, c.bias.as_deref()).unwrap();
        let got = run(&MoeConfig::small(), c.mem.clone(), &c.p, &c.x, &c.w, c.bias.as_deref()).unwrap();
        prop_assert_eq!(got.status, 0);
        prop_assert_eq!(got.out, want, "{:?}", c.p);
    }
}

#[test]
fn bad_problems_are_refused_with_clear_errors() {
    let cfg = MoeConfig::small();
    let p = problem(4, 16, 6, 2, GateMode::SoftmaxTopk);
    let err = |p: MoeProblem| p.validate_for(&cfg).unwrap_err().to_string();
    assert!(err(MoeProblem { top_k: 7, ..p }).contains("top-k = 7 exceeds the 6 experts"));
    assert!(err(MoeProblem { top_k: 0, ..p }).contains("k = 0"));
    assert!(err(MoeProblem { experts: 13, ..p }).contains("e_max = 12"));
    assert!(err(MoeProblem { capacity: Some(CapacityFactor(0)), ..p }).contains("capacity factor must be > 0"));
    assert!(CapacityFactor::from_f64(-0.5).unwrap_err().to_string().contains("must be > 0"));
    assert!(err(MoeProblem { tokens: 0, ..p }).contains("≥ 1"));
}

/// Register writes that skip the host checks: the unit refuses them (STATUS bit 0) and touches no memory.
#[test]
fn unit_refuses_bad_registers() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let cfg = MoeConfig::small();
    let p = problem(4, 16, 6, 2, GateMode::SoftmaxTopk);
    let (x, w, _) = data(&p, 9);
    for bad in [
        MoeProblem { top_k: 7, ..p },
        MoeProblem { top_k: 0, ..p },
        MoeProblem { experts: 13, ..p },
        MoeProblem { hidden: 65, ..p },
        MoeProblem { capacity: Some(CapacityFactor(0)), ..p },
    ] {
        let (xs, ws) = (vec![0i8; bad.tokens * bad.hidden], vec![0i8; bad.experts * bad.hidden]);
        let err = run(&cfg, MemoryConfig::default(), &bad, &xs, &ws, None).err();
        assert!(matches!(err, Some(DeviceError::Fault { status: 1 })), "{bad:?}: {err:?}");
    }
    // The unit still works afterwards.
    let got = run(&cfg, MemoryConfig::default(), &p, &x, &w, None).unwrap();
    assert_eq!(got.out, route(&p, &x, &w, None).unwrap());
}

/// Cycles, cycles per token and gate multiplier utilization at T = 4096,
/// H = 1024, E = 64, k = 8 on a 16-lane, 512-bit unit (1024 MACs):
/// `cargo test --release --test moe_sim -- --ignored --nocapture`.
#[test]
#[ignore = "measurement: builds a 1024-MAC unit and simulates ~270k cycles (minutes)"]
fn utilization_t4096_h1024_e64() {
    if !ferrite::sim::verilator_or_skip() {
        return;
    }
    let cfg = MoeConfig { h_max: 1024, ..MoeConfig::default() };
    for (t, h, e, k) in [(4096usize, 1024usize, 64usize, 8usize), (4096, 64, 64, 8), (4096, 64, 16, 2)] {
        let p = MoeProblem {
            capacity: Some(CapacityFactor::from_f64(1.25).unwrap()),
            ..problem(t, h, e, k, GateMode::SoftmaxTopk)
        };
        let (x, w, _) = data(&p, 7);
        let got = run(&cfg, MemoryConfig::default(), &p, &x, &w, None).unwrap();
        assert_eq!(got.out, route(&p, &x, &w, None).unwrap());
        let util = p.macs() as f64 / (cfg.macs() as f64 * got.cycles as f64);
        println!(
            "moe T={t} H={h} E={e} k={k} on {} lanes × {} B: {} cycles, {:.2} cycles/token, gate utilization {:.1}%, {:.1} µs at {} MHz",
            cfg.lanes,
            cfg.port_bytes(),
            got.cycles,
            got.cycles as f64 / t as f64,
            100.0 * util,
            got.cycles as f64 / cfg.clock_mhz,
            cfg.clock_mhz
        );
    }
}
