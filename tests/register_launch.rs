//! The generic register-level launch (`Launch::Registers`) on a built-in unit:
//! the GEMM's register-level golden model on the CPU and its RTL in Verilator
//! agree with the typed golden model, byte for byte, pitch padding included.
use ferrite_hw::gemm::{gemm, GemmConfig, GemmOutput, GemmProblem};
use ferrite_hw::numerics::Requant;
use ferrite_runtime::backend::cpu::{CpuDevice, CpuMode};
use ferrite_runtime::backend::sim::{Engine, SimDevice};
use ferrite_runtime::device::{RegValue, RegisterArgs, UnitRef};
use ferrite_runtime::{Device, DeviceError, Launch, RunStats};
use ferrite_sim::MemoryConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const POISON: u8 = 0xC3;

/// One problem's operands, pitched rows with random bytes in the padding.
struct Case {
    p: GemmProblem,
    a: Vec<i8>,
    b: Vec<i8>,
    bias: Option<Vec<i32>>,
    pitch: [u64; 3],
}

impl Case {
    fn random(rng: &mut ChaCha8Rng, beat: u64) -> Self {
        let (m, n, k) = (rng.gen_range(1..11), rng.gen_range(1..15), rng.gen_range(1..40));
        let edge = |rng: &mut ChaCha8Rng| if rng.gen_bool(0.2) { -128 } else { rng.gen::<i8>() };
        let requant = rng.gen_bool(0.5).then(|| Requant { multiplier: rng.gen(), shift: rng.gen_range(0..=40) });
        let p = GemmProblem { m, n, k, bias: rng.gen_bool(0.5), relu: rng.gen_bool(0.5), requant };
        let pitch =
            |bytes: usize, rng: &mut ChaCha8Rng| (bytes as u64).div_ceil(beat) * beat + beat * rng.gen_range(0..2);
        Self {
            a: (0..m * k).map(|_| edge(rng)).collect(),
            b: (0..k * n).map(|_| edge(rng)).collect(),
            bias: p.bias.then(|| (0..n).map(|_| rng.gen()).collect()),
            pitch: [pitch(k, rng), pitch(n, rng), pitch(n * p.out_elem_bytes(), rng)],
            p,
        }
    }

    /// Rows of `data` at `pitch` with random padding.
    fn pitched(data: &[u8], row: usize, pitch: u64, rng: &mut ChaCha8Rng) -> Vec<u8> {
        let mut out: Vec<u8> = (0..data.len() / row * pitch as usize).map(|_| rng.gen()).collect();
        for (r, chunk) in data.chunks(row).enumerate() {
            out[r * pitch as usize..][..row].copy_from_slice(chunk);
        }
        out
    }
}

/// Launch `case` register by register on `dev`; returns the result and C's whole pitched buffer.
fn run(dev: &mut dyn Device, cfg: &GemmConfig, c: &Case, seed: u64) -> (Result<RunStats, DeviceError>, Vec<u8>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let p = &c.p;
    let as_u8 = |v: &[i8]| v.iter().map(|&x| x as u8).collect::<Vec<_>>();
    let mut upload = |bytes: Vec<u8>| {
        let buf = dev.alloc(bytes.len().max(1) as u64).unwrap();
        dev.upload(buf, 0, &bytes).unwrap();
        buf
    };
    let a = upload(Case::pitched(&as_u8(&c.a), p.k, c.pitch[0], &mut rng));
    let b = upload(Case::pitched(&as_u8(&c.b), p.n, c.pitch[1], &mut rng));
    let bias = c.bias.as_ref().map(|v| upload(v.iter().flat_map(|x| x.to_le_bytes()).collect()));
    let out = upload(vec![POISON; p.m * c.pitch[2] as usize]);
    let (qmult, qshift) = p.requant.map_or((0, 0), |rq| (rq.multiplier as u32 as u64, rq.shift as u64));
    let scalar = |name: &str, v: u64| (name.to_string(), RegValue::Scalar(v));
    let buffer = |name: &str, buf| (name.to_string(), RegValue::Buffer(buf));
    let mut values = vec![
        buffer("A", a),
        buffer("B", b),
        buffer("C", out),
        scalar("M", p.m as u64),
        scalar("N", p.n as u64),
        scalar("K", p.k as u64),
        scalar("LDA", c.pitch[0]),
        scalar("LDB", c.pitch[1]),
        scalar("LDC", c.pitch[2]),
        scalar("FLAGS", p.flags() as u64),
        scalar("QMULT", qmult),
        scalar("QSHIFT", qshift),
    ];
    // The unit reads BIAS only with FLAGS.bias; any buffer stands in otherwise.
    values.push(buffer("BIAS", bias.unwrap_or(a)));
    let unit = UnitRef(Arc::new(cfg.clone()));
    let result = dev.launch(&Launch::Registers(RegisterArgs { unit, values, useful_macs: p.macs() }));
    let mut bytes = vec![0; p.m * c.pitch[2] as usize];
    dev.download(out, 0, &mut bytes).unwrap();
    (result, bytes)
}

/// C's pitched bytes as the golden model says: outputs, then the poison left in the padding.
fn expected(c: &Case) -> Vec<u8> {
    let out = gemm(&c.p, &c.a, &c.b, c.bias.as_deref()).unwrap();
    let dense: Vec<u8> = match out {
        GemmOutput::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        GemmOutput::I8(v) => v.iter().map(|&x| x as u8).collect(),
    };
    let row = c.p.n * c.p.out_elem_bytes();
    let mut want = vec![POISON; c.p.m * c.pitch[2] as usize];
    for (r, chunk) in dense.chunks(row).enumerate() {
        want[r * c.pitch[2] as usize..][..row].copy_from_slice(chunk);
    }
    want
}

#[test]
fn gemm_register_launches_match_the_golden_model_on_cpu_and_in_simulation() {
    let cfg = GemmConfig::small(4, 4);
    let mut devices: Vec<Box<dyn Device>> = vec![Box::new(CpuDevice::new(CpuMode::Golden))];
    if ferrite_sim::verilator_or_skip() {
        let mem = MemoryConfig { ready_stall_prob: 0.2, valid_stall_prob: 0.2, seed: 3, ..Default::default() };
        devices.push(Box::new(SimDevice::new(cfg.clone(), mem, Engine::Verilator, None).unwrap()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    for i in 0..10 {
        let case = Case::random(&mut rng, cfg.port_bytes() as u64);
        for dev in &mut devices {
            let (result, got) = run(dev.as_mut(), &cfg, &case, i);
            result.unwrap_or_else(|e| panic!("{}: {e}", dev.info().name));
            assert_eq!(got, expected(&case), "{} on {:?}", dev.info().name, case.p);
        }
    }
}

#[test]
fn refused_register_launches_leave_memory_untouched_on_cpu_and_in_simulation() {
    let cfg = GemmConfig::small(2, 2);
    let mut devices: Vec<Box<dyn Device>> = vec![Box::new(CpuDevice::new(CpuMode::Golden))];
    if ferrite_sim::verilator_or_skip() {
        devices.push(Box::new(SimDevice::new(cfg.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut case = Case::random(&mut rng, cfg.port_bytes() as u64);
    case.p.k = cfg.k_max + 16;
    case.a = vec![1; case.p.m * case.p.k];
    case.b = vec![1; case.p.k * case.p.n];
    case.pitch[0] = (case.p.k as u64).div_ceil(16) * 16;
    for dev in &mut devices {
        let (result, got) = run(dev.as_mut(), &cfg, &case, 1);
        assert!(matches!(result, Err(DeviceError::Fault { status: 1 })), "{}: {result:?}", dev.info().name);
        assert!(got.iter().all(|&x| x == POISON), "{}: a refused launch wrote C", dev.info().name);
        // The next valid launch on the same unit is bit-exact.
        let ok = Case::random(&mut rng, cfg.port_bytes() as u64);
        let (result, got) = run(dev.as_mut(), &cfg, &ok, 2);
        result.unwrap();
        assert_eq!(got, expected(&ok), "{}", dev.info().name);
    }
}

/// A simulator publishes its cycle count as it runs (for progress bars): after
/// a launch the counter has moved by at least the unit's own CYCLES; devices
/// that do not simulate report none.
#[test]
fn simulated_cycles_are_published_while_a_launch_runs() {
    assert!(CpuDevice::new(CpuMode::Golden).cycles_done().is_none());
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let cfg = GemmConfig::small(2, 2);
    let mut dev = SimDevice::new(cfg.clone(), MemoryConfig::default(), Engine::Verilator, None).unwrap();
    let counter = dev.cycles_done().expect("a simulator counts cycles");
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    for i in 0..3 {
        let before = counter.load(std::sync::atomic::Ordering::Relaxed);
        let case = Case::random(&mut rng, cfg.port_bytes() as u64);
        let stats = run(&mut dev, &cfg, &case, i).0.unwrap();
        let unit_cycles = stats.cycles.expect("the simulator reports cycles").cycles;
        let moved = counter.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(moved >= unit_cycles && unit_cycles > 0, "counter moved {moved}, the unit counted {unit_cycles}");
    }
}
