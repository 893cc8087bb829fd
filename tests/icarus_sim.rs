//! Every unit's exported Verilog in Icarus Verilog, an event-driven simulator
//! like Vivado's xsim, through its real AXI ports and the host's own layout
//! and driver, against the golden models: registers start as X, the memory
//! stalls at random, input padding is random, and a problem the unit must
//! refuse comes before valid launches (docs/simulators.md).
use ferrite::host::backend::icarus::IcarusDevice;
use ferrite::host::device::{AttentionArgs, Buffer, Device, DeviceError, GemmArgs, Launch, Layout, MoeArgs, Problem};
use ferrite::host::driver::LaunchArgs;
use ferrite::host::ops;
use ferrite::hw::attention::{attention, AttentionConfig, AttentionParams, AttentionProblem};
use ferrite::hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite::hw::moe::{route, CapacityFactor, GateMode, MoeConfig, MoeProblem};
use ferrite::hw::numerics::Requant;
use ferrite::sim::MemoryConfig;
use rand::{Rng, SeedableRng};

/// Bytes of testbench memory: every problem below fits.
const MEM_BYTES: u64 = 1 << 20;
/// Cycles a launch may take; the largest problem below needs a few thousand.
const LIMIT: u64 = 20_000;

/// A memory that stalls every channel 30 % of the time, with latency and seed from `seed`.
fn memory(seed: u64) -> MemoryConfig {
    MemoryConfig {
        read_latency: 1 + (seed % 13) as u32,
        write_latency: 1 + (seed % 5) as u32,
        ready_stall_prob: 0.3,
        valid_stall_prob: 0.3,
        seed,
        ..MemoryConfig::default()
    }
}

fn int8s(rng: &mut impl Rng, len: usize) -> Vec<i8> {
    (0..len).map(|_| rng.gen()).collect()
}

/// A buffer of `bytes` holding `fill`.
fn buffer(dev: &mut IcarusDevice, bytes: u64, fill: u8) -> Buffer {
    let buf = dev.alloc(bytes).unwrap();
    dev.upload(buf, 0, &vec![fill; bytes as usize]).unwrap();
    buf
}

/// Register `name` set to `value` after the host's checks.
fn set(name: &'static str, value: u64) -> impl Fn(&mut LaunchArgs) {
    move |args: &mut LaunchArgs| args.values.iter_mut().filter(|(n, _)| *n == name).for_each(|(_, v)| *v = value)
}

/// `launch` with `edit` applied is refused by the unit itself: STATUS bit 0,
/// no memory traffic at all, and the output buffers keep their poison.
fn assert_refused(dev: &mut IcarusDevice, launch: &Launch, edit: &dyn Fn(&mut LaunchArgs), outputs: &[Buffer]) {
    let before = dev.sim().beats().unwrap();
    let err = dev.launch_edited(launch, edit).unwrap_err();
    assert!(matches!(err, DeviceError::Fault { status } if status & 1 == 1), "{err}");
    assert_eq!(dev.sim().beats().unwrap(), before, "a refused launch moved data on m_axi_gmem");
    for &buf in outputs {
        let mut got = vec![0; buf.len() as usize];
        dev.download(buf, 0, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == ops::POISON), "a refused launch wrote its output");
    }
}

/// Cuts `run` short after `cycles` cycles, mid-launch, and holds `ap_rst_n`
/// low: the launches after it must be exact, so every register that steers
/// control flow is reset by `ap_rst_n` and none keeps its mid-run value.
fn abort_and_reset<T: std::fmt::Debug>(
    dev: &mut IcarusDevice,
    cycles: u64,
    run: impl FnOnce(&mut IcarusDevice) -> Result<T, DeviceError>,
) {
    dev.set_limit(cycles);
    let err = run(dev).unwrap_err();
    assert!(matches!(err, DeviceError::Timeout { .. }), "{err}");
    dev.sim().reset(16).unwrap();
    dev.set_limit(LIMIT);
}

#[test]
fn gemm_4x4_128bit() {
    if !ferrite::sim::iverilog_or_skip() {
        return;
    }
    let cfg = GemmConfig::small(4, 4);
    let mut dev = IcarusDevice::new(cfg.clone(), &memory(1), MEM_BYTES, LIMIT).unwrap();

    // K beyond k_max, written past the host's checks.
    let p = GemmProblem::new(4, 4, 4);
    let Layout::Gemm(layout) = dev.layout(&Problem::Gemm(p)).unwrap() else { unreachable!() };
    let (a, b) = (buffer(&mut dev, layout.a_bytes, 1), buffer(&mut dev, layout.b_bytes, 1));
    let c = buffer(&mut dev, layout.c_bytes, ops::POISON);
    let launch = Launch::Gemm(GemmArgs { problem: p, layout, a, b, bias: None, c });
    assert_refused(&mut dev, &launch, &set("K", cfg.k_max as u64 + 1), &[c]);

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (a, b) = (int8s(&mut rng, 8 * 40), int8s(&mut rng, 40 * 8));
    abort_and_reset(&mut dev, 150, |dev| ops::gemm(dev, &GemmProblem::new(8, 8, 40), &a, &b, None));
    gemm_launches(
        &mut dev,
        &[
            (4, 4, 4, false, false, None),
            (5, 7, 9, false, true, None),
            (9, 6, 17, false, false, Some((123_456_789, 30))),
        ],
    );
}

/// The GEMM epilogue with bias in Icarus.
#[test]
fn gemm_4x4_128bit_bias() {
    if !ferrite::sim::iverilog_or_skip() {
        return;
    }
    let mut dev = IcarusDevice::new(GemmConfig::small(4, 4), &memory(5), MEM_BYTES, LIMIT).unwrap();
    gemm_launches(&mut dev, &[(5, 7, 9, true, true, None), (1, 1, 1, true, false, Some((1 << 20, 12)))]);
}

/// GEMM problems `(m, n, k, bias, relu, requant)` on one device against the golden model.
#[allow(clippy::type_complexity)]
fn gemm_launches(dev: &mut IcarusDevice, problems: &[(usize, usize, usize, bool, bool, Option<(i32, u32)>)]) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for &(m, n, k, bias, relu, rq) in problems {
        let p = GemmProblem {
            bias,
            relu,
            requant: rq.map(|(multiplier, shift)| Requant { multiplier, shift }),
            ..GemmProblem::new(m, n, k)
        };
        let (a, b) = (int8s(&mut rng, m * k), int8s(&mut rng, k * n));
        let bias_v: Option<Vec<i32>> = bias.then(|| (0..n).map(|_| rng.gen_range(-100_000..100_000)).collect());
        let (got, stats) = ops::gemm(dev, &p, &a, &b, bias_v.as_deref()).unwrap();
        assert_eq!(got, gemm(&p, &a, &b, bias_v.as_deref()).unwrap(), "{p:?}");
        println!("gemm {m}x{n}x{k}: {} cycles", stats.cycles.unwrap().cycles);
    }
}

#[test]
fn attention_2_lanes_d16() {
    if !ferrite::sim::iverilog_or_skip() {
        return;
    }
    let cfg =
        AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, read_fifo_depth: 32, clock_mhz: 300.0 };
    let mut dev = IcarusDevice::new(cfg, &memory(2), MEM_BYTES, LIMIT).unwrap();
    let problem = |batch, heads, seq_q, seq_kv, causal, out8: bool| {
        let s = 1.0 / 32.0;
        AttentionProblem {
            batch,
            heads,
            seq_q,
            seq_kv,
            dim: 16,
            causal,
            kv_len: None,
            params: AttentionParams::from_scales(16, s, s, s, out8.then_some(1.0 / 64.0)).unwrap(),
        }
    };

    // SEQ_Q = 0, written past the host's checks.
    let p = problem(1, 1, 2, 2, false, false);
    let Layout::Attention(layout) = dev.layout(&Problem::Attention(p.clone())).unwrap() else { unreachable!() };
    let (q, k, v) = (
        buffer(&mut dev, layout.q_bytes, 1),
        buffer(&mut dev, layout.kv_bytes, 1),
        buffer(&mut dev, layout.kv_bytes, 1),
    );
    let o = buffer(&mut dev, layout.o_bytes, ops::POISON);
    let launch = Launch::Attention(AttentionArgs { problem: p, layout, q, k, v, o, kv_len: None });
    assert_refused(&mut dev, &launch, &set("SEQ_Q", 0), &[o]);

    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let p = problem(1, 2, 5, 12, false, false);
    let (q, k) = (int8s(&mut rng, 2 * 5 * 16), int8s(&mut rng, 2 * 12 * 16));
    abort_and_reset(&mut dev, 150, |dev| ops::attention(dev, &p, &q, &k, &k));
    for p in [problem(1, 1, 3, 5, false, false), problem(1, 2, 4, 4, true, true), {
        let mut p = problem(2, 1, 2, 6, false, false);
        p.kv_len = Some(vec![3, 6]);
        p
    }] {
        let n_q = p.heads_total() * p.seq_q * p.dim;
        let n_kv = p.heads_total() * p.seq_kv * p.dim;
        let (q, k, v) = (int8s(&mut rng, n_q), int8s(&mut rng, n_kv), int8s(&mut rng, n_kv));
        let (got, stats) = ops::attention(&mut dev, &p, &q, &k, &v).unwrap();
        assert_eq!(got, attention(&p, &q, &k, &v).unwrap(), "{p:?}");
        println!("attention sq={} skv={}: {} cycles", p.seq_q, p.seq_kv, stats.cycles.unwrap().cycles);
    }
}

/// A small router: 8 experts, top-2, 2 lanes, 128-bit port.
fn moe_config() -> MoeConfig {
    MoeConfig { e_max: 8, k_max: 2, h_max: 64, lanes: 2, port_bits: 128, clock_mhz: 300.0 }
}

/// Runs MoE problems of hidden sizes `hs` on one device against the golden model.
fn moe_launches(dev: &mut IcarusDevice, hs: &[usize]) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for (i, &h) in hs.iter().enumerate() {
        let (t, e) = (3 + 2 * i, 3 + i);
        let mode = if i % 2 == 0 { GateMode::SoftmaxTopk } else { GateMode::TopkSoftmax };
        let p = MoeProblem {
            capacity: (i % 2 == 1).then_some(CapacityFactor::ONE),
            bias: i % 2 == 0,
            ..MoeProblem::new(t, h, e, 2, mode, 1.0 / 16.0, 1.0 / 32.0).unwrap()
        };
        let (x, w) = (int8s(&mut rng, t * h), int8s(&mut rng, e * h));
        let bias: Vec<i32> = (0..e).map(|_| rng.gen_range(-5000..5000)).collect();
        let bias = p.bias.then_some(bias.as_slice());
        let (got, stats) = ops::moe(dev, &p, &x, &w, bias).unwrap();
        assert_eq!(got, route(&p, &x, &w, bias).unwrap(), "{p:?}");
        println!("moe T={t} H={h} E={e}: {} cycles", stats.cycles.unwrap().cycles);
    }
}

#[test]
fn moe_8_experts_2_lanes() {
    if !ferrite::sim::iverilog_or_skip() {
        return;
    }
    let cfg = moe_config();
    let mut dev = IcarusDevice::new(cfg.clone(), &memory(3), MEM_BYTES, LIMIT).unwrap();

    // E beyond e_max, written past the host's checks.
    let p = MoeProblem::new(2, 16, 2, 1, GateMode::SoftmaxTopk, 1.0 / 16.0, 1.0 / 32.0).unwrap();
    let Layout::Moe(layout) = dev.layout(&Problem::Moe(p)).unwrap() else { unreachable!() };
    let (x, w) = (buffer(&mut dev, layout.x_bytes, 1), buffer(&mut dev, layout.w_bytes, 1));
    let (route_b, dispatch, stats) = (
        buffer(&mut dev, layout.route_bytes, ops::POISON),
        buffer(&mut dev, layout.dispatch_bytes, ops::POISON),
        buffer(&mut dev, layout.stats_bytes, ops::POISON),
    );
    let launch = Launch::Moe(MoeArgs { problem: p, layout, x, w, bias: None, route: route_b, dispatch, stats });
    assert_refused(&mut dev, &launch, &set("E", cfg.e_max as u64 + 1), &[route_b, dispatch, stats]);

    let p = MoeProblem::new(9, 64, 8, 2, GateMode::SoftmaxTopk, 1.0 / 16.0, 1.0 / 32.0).unwrap();
    let (x, w) = (vec![3i8; 9 * 64], vec![-2i8; 8 * 64]);
    abort_and_reset(&mut dev, 150, |dev| ops::moe(dev, &p, &x, &w, None));

    // H a multiple of the 16-byte beat: rows have no padding (see the test below).
    moe_launches(&mut dev, &[16, 48, 64]);
}

/// A router past `PAIR_MAX` experts, whose top-k rounds are comparator
/// trees (`blocks::ArgMaxPipe`), not the pairwise compares of the routers
/// above. Capacity 0.5 drops choices, so the experts' full flags decide slots.
#[test]
fn moe_12_experts_tree_top_k() {
    if !ferrite::sim::iverilog_or_skip() {
        return;
    }
    let cfg = MoeConfig { e_max: 12, k_max: 3, h_max: 32, lanes: 2, port_bits: 128, clock_mhz: 300.0 };
    let mut dev = IcarusDevice::new(cfg, &memory(5), MEM_BYTES, LIMIT).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let (t, h, e) = (10, 32, 12);
    let p = MoeProblem {
        capacity: Some(CapacityFactor::from_f64(0.5).unwrap()),
        ..MoeProblem::new(t, h, e, 3, GateMode::SoftmaxTopk, 1.0 / 16.0, 1.0 / 32.0).unwrap()
    };
    let (x, w) = (int8s(&mut rng, t * h), int8s(&mut rng, e * h));
    let (got, stats) = ops::moe(&mut dev, &p, &x, &w, None).unwrap();
    let want = route(&p, &x, &w, None).unwrap();
    assert!(want.dropped > 0, "capacity 0.5 drops no choice: the full flags go unchecked");
    assert_eq!(got, want, "{p:?}");
    println!("moe T={t} H={h} E={e} top-3: {} cycles, {} dropped", stats.cycles.unwrap().cycles, want.dropped);
}

/// H not a multiple of the beat, so every X and W row has random padding.
#[test]
fn moe_ignores_row_padding() {
    if !ferrite::sim::iverilog_or_skip() {
        return;
    }
    let mut dev = IcarusDevice::new(moe_config(), &memory(4), MEM_BYTES, LIMIT).unwrap();
    moe_launches(&mut dev, &[7, 33, 50]);
}
