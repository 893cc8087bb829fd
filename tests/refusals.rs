//! The register-level contract of every unit (issue 18): each out-of-range
//! register value and refused problem of docs/gemm.md, docs/attention.md and
//! docs/moe.md, written past the host's checks, is refused by the simulated
//! unit itself (STATUS bit 0, no memory written, no traffic at all unless the
//! check needs to read), and by the host before launch where a host can express
//! it; the next valid launch on the same unit is bit-exact (input padding is
//! random, as on every simulated launch).
use ferrite_hw::attention::{attention, AttentionConfig, AttentionParams, AttentionProblem};
use ferrite_hw::gemm::{gemm, GemmConfig, GemmProblem};
use ferrite_hw::moe::{route, CapacityFactor, GateMode, MoeConfig, MoeProblem};
use ferrite_hw::numerics::Requant;
use ferrite_hw::unit::{Memory, RegisterValues, Unit};
use ferrite_hw::HwError;
use ferrite_runtime::backend::sim::{Engine, SimDevice};
use ferrite_runtime::device::{AttentionArgs, Buffer, GemmArgs, Launch, Layout, MoeArgs, Problem};
use ferrite_runtime::driver::LaunchArgs;
use ferrite_runtime::{ops, Device, DeviceError};
use ferrite_sim::MemoryConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A memory that stalls 20 % of the time on every channel.
fn memory() -> MemoryConfig {
    MemoryConfig { ready_stall_prob: 0.2, valid_stall_prob: 0.2, read_latency: 7, seed: 18, ..Default::default() }
}

/// Registers set after the host's checks, as a user driving the unit directly could.
type Edit<'a> = &'a [(&'static str, u64)];

fn apply(edit: Edit<'_>) -> impl Fn(&mut LaunchArgs) + '_ {
    move |args: &mut LaunchArgs| {
        for &(name, value) in edit {
            let slot = args.values.iter_mut().find(|(n, _)| *n == name);
            slot.unwrap_or_else(|| panic!("no register {name}")).1 = value;
        }
    }
}

/// `launch` with `edit` is refused by the unit: STATUS bit 0, no write beat, no
/// read beat unless `may_read`, and every output buffer keeps its poison.
fn assert_unit_refuses(dev: &mut SimDevice, launch: &Launch, edit: Edit<'_>, outputs: &[Buffer], may_read: bool) {
    let before = dev.memory_stats();
    let result = dev.launch_edited(launch, &apply(edit));
    assert!(matches!(result, Err(DeviceError::Fault { status }) if status & 1 == 1), "{edit:?}: {result:?}");
    let after = dev.memory_stats();
    assert_eq!(after.write_beats, before.write_beats, "{edit:?}: a refused launch wrote to memory");
    if !may_read {
        assert_eq!(after.read_beats, before.read_beats, "{edit:?}: a refused launch read memory");
    }
    for &buf in outputs {
        let mut got = vec![0; buf.len() as usize];
        dev.download(buf, 0, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == ops::POISON), "{edit:?}: a refused launch wrote its output");
    }
}

/// The host refuses `launch` before it reaches the unit: a one-line problem, no traffic.
fn assert_host_refuses(dev: &mut SimDevice, launch: &Launch, says: &str) {
    let before = dev.memory_stats();
    match dev.launch(launch) {
        Err(DeviceError::Problem(m)) => assert!(m.contains(says), "{m:?} does not say {says:?}"),
        other => panic!("host accepted a launch it must refuse ({says}): {other:?}"),
    }
    assert_eq!(dev.memory_stats(), before, "the host let a refused launch reach the unit");
}

fn buffer(dev: &mut SimDevice, bytes: u64, fill: impl FnMut() -> u8) -> Buffer {
    let buf = dev.alloc(bytes).unwrap();
    dev.upload(buf, 0, &std::iter::repeat_with(fill).take(bytes as usize).collect::<Vec<_>>()).unwrap();
    buf
}

fn int8s(rng: &mut ChaCha8Rng, n: usize) -> Vec<i8> {
    (0..n).map(|_| if rng.gen_bool(0.1) { -128 } else { rng.gen() }).collect()
}

/// A register-level golden model's memory that fails every access.
struct NoMemory;

impl Memory for NoMemory {
    fn read(&self, addr: u64, _: &mut [u8]) -> Result<(), HwError> {
        panic!("the golden model read {addr:#x} for a launch it must refuse")
    }
    fn write(&mut self, addr: u64, _: &[u8]) -> Result<(), HwError> {
        panic!("the golden model wrote {addr:#x} for a launch it must refuse")
    }
}

#[test]
fn gemm_refuses_every_out_of_range_register() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let cfg = GemmConfig::small(4, 4);
    let mut dev = SimDevice::new(cfg.clone(), memory(), Engine::Verilator, None).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let p = GemmProblem {
        bias: true,
        relu: true,
        requant: Some(Requant { multiplier: 1 << 30, shift: 38 }),
        ..GemmProblem::new(5, 6, 20)
    };
    let Layout::Gemm(l) = dev.layout(&Problem::Gemm(p)).unwrap() else { unreachable!() };
    assert_eq!((l.lda, l.ldb, l.ldc), (32, 16, 16), "the edits below assume these pitches");
    let a = buffer(&mut dev, l.a_bytes, || rng.gen());
    let b = buffer(&mut dev, l.b_bytes, || rng.gen());
    let bias = buffer(&mut dev, l.bias_bytes, || rng.gen());
    let c = buffer(&mut dev, l.c_bytes, || ops::POISON);
    let launch = Launch::Gemm(GemmArgs { problem: p, layout: l, a, b, bias: Some(bias), c });
    let no_requant = (p.flags() & !ferrite_hw::gemm::regs::flag::REQUANT) as u64;
    let edits: &[Edit] = &[
        &[("M", 0)],
        &[("N", 0)],
        &[("K", 0)],
        &[("K", cfg.k_max as u64 + 1), ("LDA", 272)],
        &[("N", cfg.n_max as u64 + 1), ("LDB", 272), ("LDC", 272)],
        &[("QSHIFT", 63)],
        // 64 must not read as a shift of 0.
        &[("QSHIFT", 64)],
        &[("LDA", 33)],
        &[("LDB", 24)],
        &[("LDC", 20)],
        &[("LDA", 16)],
        &[("LDB", 0)],
        &[("LDC", 0)],
        // Without FLAGS.requant a C row is 4·N = 24 bytes, over LDC = 16.
        &[("FLAGS", no_requant)],
    ];
    let Launch::Gemm(g) = &launch else { unreachable!() };
    let registers = ferrite_runtime::driver::gemm_args(&cfg, g, &|buf| Ok(buf.id())).unwrap();
    for &edit in edits {
        assert_unit_refuses(&mut dev, &launch, edit, &[c], false);
        // The register-level golden model refuses the same, touching no memory.
        let mut args = registers.clone();
        apply(edit)(&mut args);
        let values = RegisterValues(args.values.iter().map(|&(n, v)| (n.to_string(), v)).collect());
        assert_eq!(cfg.run_registers(&values, &mut NoMemory).unwrap(), 1, "{edit:?}");
    }

    // The host: out-of-range values in the problem, and pitches below a row.
    let rq = |shift| GemmProblem { requant: Some(Requant { multiplier: 1, shift }), ..p };
    for shift in [63, 64] {
        let err = rq(shift).validate_for(&cfg).unwrap_err().to_string();
        assert!(err.contains(&format!("requant shift {shift} > 62")), "{err}");
    }
    let short = |f: fn(&mut ferrite_hw::gemm::GemmLayout)| {
        let mut g = GemmArgs { problem: p, layout: l, a, b, bias: Some(bias), c };
        f(&mut g.layout);
        Launch::Gemm(g)
    };
    assert_host_refuses(&mut dev, &short(|l| l.lda = 16), "A pitch 16 is below its row of 20 bytes");
    assert_host_refuses(&mut dev, &short(|l| l.ldc = 8), "LDC = 8 is not a multiple of the 16-byte beat");

    // The unit still runs, bit-exact.
    let (av, bv) = (int8s(&mut rng, 5 * 20), int8s(&mut rng, 20 * 6));
    let bias_v: Vec<i32> = (0..6).map(|_| rng.gen()).collect();
    let (got, _) = ops::gemm(&mut dev, &p, &av, &bv, Some(&bias_v)).unwrap();
    assert_eq!(got, gemm(&p, &av, &bv, Some(&bias_v)).unwrap());
}

fn attention_problem(kv_len: Option<Vec<usize>>) -> AttentionProblem {
    let s = 1.0 / 32.0;
    AttentionProblem {
        batch: 2,
        heads: 1,
        seq_q: 3,
        seq_kv: 6,
        dim: 16,
        causal: false,
        kv_len,
        params: AttentionParams::from_scales(16, s, s, s, Some(1.0 / 64.0)).unwrap(),
    }
}

#[test]
fn attention_refuses_every_out_of_range_register_and_key_count() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let cfg =
        AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, read_fifo_depth: 32, clock_mhz: 300.0 };
    let mut dev = SimDevice::new(cfg.clone(), memory(), Engine::Verilator, None).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let p = attention_problem(Some(vec![4, 6]));
    let Layout::Attention(l) = dev.layout(&Problem::Attention(p.clone())).unwrap() else { unreachable!() };
    assert_eq!((l.q_stride, l.kv_stride, l.o_stride), (48, 96, 48), "the edits below assume these strides");
    let q = buffer(&mut dev, l.q_bytes, || rng.gen());
    let k = buffer(&mut dev, l.kv_bytes, || rng.gen());
    let v = buffer(&mut dev, l.kv_bytes, || rng.gen());
    let o = buffer(&mut dev, l.o_bytes, || ops::POISON);
    let mut lens = [4i32, 6].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into_iter();
    let kv = buffer(&mut dev, l.kv_len_bytes, || lens.next().unwrap_or(0));
    let args = AttentionArgs { problem: p.clone(), layout: l, q, k, v, o, kv_len: Some(kv) };
    let launch = Launch::Attention(args.clone());
    let q16 = (p.flags() & !ferrite_hw::attention::regs::flag::INT8) as u64;
    let edits: &[Edit] = &[
        &[("HEADS", 0)],
        &[("HPB", 0)],
        &[("SEQ_Q", 0)],
        &[("SEQ_KV", 0)],
        &[("SSHIFT", 63)],
        &[("SSHIFT", 64)],
        &[("OSHIFT", 63)],
        &[("OSHIFT", 64)],
        &[("SMULT", 0)],
        &[("SMULT", 1 << 31)],
        &[("OMULT", 0)],
        &[("OMULT", 0xFFFF_FFFF)],
        // |t| could reach d·2^14·SMULT / 2^SSHIFT = 2^38.
        &[("SMULT", 1 << 20), ("SSHIFT", 0)],
        &[("Q_STRIDE", 56)],
        &[("KV_STRIDE", 100)],
        &[("KV_STRIDE", 80)],
        &[("O_STRIDE", 32)],
        // Q16 output rows are 3·16·4 = 192 bytes, over O_STRIDE = 48.
        &[("FLAGS", q16)],
    ];
    for &edit in edits {
        assert_unit_refuses(&mut dev, &launch, edit, &[o], false);
    }
    // A bad key count anywhere refuses the whole launch before any write;
    // the unit reads KVLEN to know.
    for bad in [[0i32, 6], [4, 7], [7, 6]] {
        dev.upload(kv, 0, &bad.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        assert_unit_refuses(&mut dev, &launch, &[], &[o], true);
    }

    // The host refuses the same problems before launch.
    let with = |f: &dyn Fn(&mut AttentionProblem)| {
        let mut bad = p.clone();
        f(&mut bad);
        bad.validate_for(&cfg).unwrap_err().to_string()
    };
    assert!(with(&|b| b.params.score.shift = 63).contains("bad fixed-point parameter"));
    assert!(with(&|b| b.params.out = Some(Requant { multiplier: 1, shift: 63 })).contains("bad fixed-point"));
    assert!(with(&|b| b.params.score.multiplier = 0).contains("bad fixed-point parameter"));
    assert!(with(&|b| b.params.score = Requant { multiplier: 1 << 20, shift: 0 }).contains("≥ 2^38"));
    assert!(with(&|b| b.kv_len = Some(vec![0, 6])).contains("kv_len entry 0 outside 1..=6"));
    assert!(with(&|b| b.kv_len = Some(vec![4, 7])).contains("kv_len entry 7 outside 1..=6"));
    let mut short = args.clone();
    short.layout.o_stride = 32;
    assert_host_refuses(&mut dev, &Launch::Attention(short), "O head stride 32 is below a head's 48 bytes");

    // The unit still runs, bit-exact, with valid key counts.
    let n = p.heads_total() * 16;
    let (qv, kv_, vv) = (int8s(&mut rng, n * 3), int8s(&mut rng, n * 6), int8s(&mut rng, n * 6));
    let (got, _) = ops::attention(&mut dev, &p, &qv, &kv_, &vv).unwrap();
    assert_eq!(got, attention(&p, &qv, &kv_, &vv).unwrap());
}

#[test]
fn moe_refuses_every_out_of_range_register() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let cfg = MoeConfig::small();
    let mut dev = SimDevice::new(cfg.clone(), memory(), Engine::Verilator, None).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    // Capacity ceil(40·2 / 4) = 20 slots: 80 bytes of dispatch row.
    let p = MoeProblem {
        capacity: Some(CapacityFactor::ONE),
        ..MoeProblem::new(40, 20, 4, 2, GateMode::SoftmaxTopk, 1.0 / 16.0, 1.0 / 32.0).unwrap()
    };
    assert_eq!(p.capacity_slots(), 20);
    let Layout::Moe(l) = dev.layout(&Problem::Moe(p)).unwrap() else { unreachable!() };
    assert_eq!((l.ldx, l.ldw, l.dpitch), (32, 32, 80), "the edits below assume these pitches");
    let x = buffer(&mut dev, l.x_bytes, || rng.gen());
    let w = buffer(&mut dev, l.w_bytes, || rng.gen());
    let (route_b, dispatch, stats) = (
        buffer(&mut dev, l.route_bytes, || ops::POISON),
        buffer(&mut dev, l.dispatch_bytes, || ops::POISON),
        buffer(&mut dev, l.stats_bytes, || ops::POISON),
    );
    let args = MoeArgs { problem: p, layout: l, x, w, bias: None, route: route_b, dispatch, stats };
    let launch = Launch::Moe(args);
    let edits: &[Edit] = &[
        &[("T", 0)],
        &[("H", 0)],
        &[("H", cfg.h_max as u64 + 1), ("LDX", 80), ("LDW", 80)],
        &[("E", 0)],
        &[("E", cfg.e_max as u64 + 1)],
        &[("K", 0)],
        &[("K", 5)],
        &[("CF", 0)],
        &[("SMULT", 0)],
        &[("SMULT", 1 << 31)],
        &[("SSHIFT", 63)],
        &[("SSHIFT", 64)],
        // |t| could reach 2^31 · SMULT / 2^SSHIFT = 2^38.
        &[("SMULT", 1 << 7), ("SSHIFT", 0)],
        &[("LDX", 40)],
        &[("LDW", 36)],
        &[("DPITCH", 84)],
        &[("LDX", 16)],
        &[("LDW", 16)],
        // Dispatch rows of 20 slots 64 bytes apart would overlap.
        &[("DPITCH", 64)],
    ];
    for &edit in edits {
        assert_unit_refuses(&mut dev, &launch, edit, &[route_b, dispatch, stats], false);
    }

    // The host refuses the same problems before launch.
    let with = |logit: Requant| MoeProblem { logit, ..p }.validate_for(&cfg).unwrap_err().to_string();
    assert!(with(Requant { multiplier: 0, shift: 20 }).contains("logit multiplier must be > 0"));
    assert!(with(Requant { multiplier: 1 << 20, shift: 63 }).contains("shift ≤ 62"));
    assert!(with(Requant { multiplier: 1 << 7, shift: 0 }).contains("logit multiplier too large"));
    let mut short = args;
    short.layout.dpitch = 64;
    assert_host_refuses(&mut dev, &Launch::Moe(short), "DPITCH 64 are below their rows");

    // The unit still runs, bit-exact.
    let (xv, wv) = (int8s(&mut rng, 40 * 20), int8s(&mut rng, 4 * 20));
    let (got, _) = ops::moe(&mut dev, &p, &xv, &wv, None).unwrap();
    assert_eq!(got, route(&p, &xv, &wv, None).unwrap());
}
