//! The OpenCL C ports of the GEMM, attention and MoE router units
//! (`kernels/opencl/`) are bit-exact with the golden models, on whatever
//! non-Xilinx OpenCL device is first (PoCL in CI). Output buffers are poisoned
//! before every run (by `ops`, or by `run_raw` for byte-level comparisons with
//! the CPU device under pitched layouts).
#![cfg(feature = "opencl")]
mod common;
use ferrite_host::backend::cpu::{CpuDevice, CpuMode};
use ferrite_host::backend::opencl::{list, OpenClDevice};
use ferrite_host::device::{AttentionArgs, MoeArgs};
use ferrite_host::{ops, Buffer, Device, DeviceError, Launch};
use ferrite_hw::attention::{attention, AttentionLayout, AttentionParams, AttentionProblem};
use ferrite_hw::gemm::{gemm, GemmProblem};
use ferrite_hw::moe::{route, CapacityFactor, GateMode, MoeLayout, MoeProblem};
use ferrite_hw::numerics::Requant;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// The first OpenCL device, or the reason there is none (printed, then the test is skipped
/// unless CI is set: CI installs PoCL, so a missing device there is a failure).
fn device() -> Option<OpenClDevice> {
    let found = list().ok().filter(|l| !l.is_empty());
    let Some(first) = found.as_ref().and_then(|l| l.iter().find(|d| !d.platform.contains("Xilinx"))) else {
        let why = "no non-Xilinx OpenCL device (install pocl-opencl-icd)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return None;
    };
    Some(OpenClDevice::open(first.platform_index, first.device_index, None).expect("opening the OpenCL device"))
}

/// int8 values with the edges (−128, −1, 0, 1, 127) over-represented.
fn int8() -> impl Strategy<Value = i8> {
    prop_oneof![3 => any::<i8>(), 1 => prop::sample::select(vec![-128i8, -127, -1, 0, 1, 127])]
}

fn problem() -> impl Strategy<Value = (GemmProblem, Vec<i8>, Vec<i8>, Option<Vec<i32>>)> {
    let requant = prop_oneof![
        Just(None),
        (any::<i32>(), 0u32..=62).prop_map(|(multiplier, shift)| Some(Requant { multiplier, shift })),
        (0.0001f64..4.0).prop_map(Requant::from_scale),
    ];
    (1usize..24, 1usize..24, prop_oneof![Just(1usize), 1usize..80], any::<bool>(), any::<bool>(), requant)
        .prop_flat_map(|(m, n, k, bias, relu, requant)| {
            let p = GemmProblem { bias, relu, requant, ..GemmProblem::new(m, n, k) };
            let bias_values = prop_oneof![any::<i32>(), Just(i32::MAX), Just(i32::MIN), -70000i32..70000];
            (
                Just(p),
                prop::collection::vec(int8(), m * k),
                prop::collection::vec(int8(), k * n),
                if bias { prop::collection::vec(bias_values, n).prop_map(Some).boxed() } else { Just(None).boxed() },
            )
        })
}

fn check(dev: &mut dyn Device, p: &GemmProblem, a: &[i8], b: &[i8], bias: Option<&[i32]>) -> Result<(), String> {
    let (out, _) = ops::gemm(dev, p, a, b, bias).map_err(|e| e.to_string())?;
    let want = gemm(p, a, b, bias).map_err(|e| e.to_string())?;
    match out.first_mismatch(&want) {
        None => Ok(()),
        Some((i, got, exp)) => Err(format!("{p:?}: element {i}: got {got}, golden {exp}")),
    }
}

#[test]
fn gemm_port_is_bit_exact_on_random_problems() {
    let Some(dev) = device() else { return };
    // TestRunner takes a `Fn`; the device is used from one thread, one case at a time.
    let dev = std::cell::RefCell::new(dev);
    let mut runner = TestRunner::new(Config { cases: 96, ..Config::default() });
    runner
        .run(&problem(), |(p, a, b, bias)| {
            check(&mut *dev.borrow_mut(), &p, &a, &b, bias.as_deref()).map_err(TestCaseError::fail)
        })
        .unwrap();
}

#[test]
fn gemm_port_edges() {
    let Some(mut dev) = device() else { return };
    // (−128)·(−128) summed: 16384·K, wrapping add of a bias at i32::MAX.
    let k = 200;
    let p = GemmProblem { bias: true, ..GemmProblem::new(1, 3, k) };
    check(&mut dev, &p, &vec![-128; k], &vec![-128; 3 * k], Some(&[i32::MAX, i32::MIN, -1])).unwrap();
    // Saturation both ways, ties rounding away from zero (x·1/2 for odd x).
    let half = Requant { multiplier: 1 << 30, shift: 31 };
    let p = GemmProblem { requant: Some(half), ..GemmProblem::new(1, 6, 1) };
    check(&mut dev, &p, &[1], &[-128, 127, -3, 3, -1, 1], None).unwrap();
    let big = Requant { multiplier: i32::MAX, shift: 20 };
    let p = GemmProblem { requant: Some(big), relu: true, ..GemmProblem::new(2, 2, 1) };
    check(&mut dev, &p, &[127, -128], &[127, -128], None).unwrap();
    let p = GemmProblem { requant: Some(Requant { multiplier: i32::MIN, shift: 62 }), ..GemmProblem::new(1, 1, 1) };
    check(&mut dev, &p, &[-128], &[-128], None).unwrap();
}

/// Upload `inputs`, fill buffers of `outputs` bytes with [`ops::POISON`], launch what
/// `launch` builds from the buffers (inputs, then outputs), and return the outputs' bytes.
fn run_raw(
    dev: &mut dyn Device,
    inputs: &[&[u8]],
    outputs: &[u64],
    launch: impl Fn(&[Buffer]) -> Launch,
) -> Result<Vec<Vec<u8>>, DeviceError> {
    let mut bufs = Vec::new();
    for data in inputs {
        let b = dev.alloc(data.len() as u64)?;
        dev.upload(b, 0, data)?;
        bufs.push(b);
    }
    for &bytes in outputs {
        let b = dev.alloc(bytes)?;
        dev.upload(b, 0, &vec![ops::POISON; bytes as usize])?;
        bufs.push(b);
    }
    let result = dev.launch(&launch(&bufs));
    let mut out = Vec::new();
    for (i, &b) in bufs.iter().enumerate().skip(inputs.len()) {
        let mut bytes = vec![0; outputs[i - inputs.len()] as usize];
        dev.download(b, 0, &mut bytes)?;
        out.push(bytes);
    }
    for b in bufs {
        dev.free(b)?;
    }
    result.map(|_| out)
}

/// Dense rows of `row` bytes placed `pitch` bytes apart (padding zero).
fn pitched(dense: &[u8], row: usize, pitch: usize) -> Vec<u8> {
    let mut out = vec![0; dense.len() / row.max(1) * pitch];
    for (dst, src) in out.chunks_exact_mut(pitch).zip(dense.chunks_exact(row)) {
        dst[..row].copy_from_slice(src);
    }
    out
}

fn bytes_of(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

fn words_of(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A positive fixed-point scale: a realistic one from a real scale, or any raw pair.
fn requant(scale: std::ops::Range<f64>, shifts: std::ops::RangeInclusive<u32>) -> impl Strategy<Value = Requant> {
    prop_oneof![
        scale.prop_filter_map("representable", Requant::from_scale),
        (1i32..=i32::MAX, shifts).prop_map(|(multiplier, shift)| Requant { multiplier, shift }),
    ]
}

type AttentionCase = (AttentionProblem, Vec<i8>, Vec<i8>, Vec<i8>, u64);

/// Random attention problems: one-element and odd shapes, causal, per-batch kv_len,
/// Q16 or int8 output, and a head alignment for the strided byte-level comparison.
fn attention_case() -> impl Strategy<Value = AttentionCase> {
    let out = prop_oneof![Just(None), requant(1e-7..1e-3, 0..=62).prop_map(Some)];
    let dims = prop_oneof![Just(1usize), 1usize..=20, Just(64)];
    (1usize..=3, 1usize..=2, 1usize..=9, 1usize..=11, dims, any::<bool>(), any::<bool>()).prop_flat_map(
        move |(batch, heads, seq_q, seq_kv, dim, causal, kv)| {
            let kv_len =
                if kv { prop::collection::vec(1..=seq_kv, batch).prop_map(Some).boxed() } else { Just(None).boxed() };
            let (nq, nkv) = (batch * heads * seq_q * dim, batch * heads * seq_kv * dim);
            (
                kv_len,
                requant(1e-3..4.0, 0..=62),
                out.clone(),
                prop::collection::vec(int8(), nq),
                prop::collection::vec(int8(), nkv),
                prop::collection::vec(int8(), nkv),
                prop::sample::select(vec![1u64, 4, 64]),
            )
                .prop_map(move |(kv_len, score, out, q, k, v, align)| {
                    let params = AttentionParams { score, out };
                    let p = AttentionProblem { batch, heads, seq_q, seq_kv, dim, causal, kv_len, params };
                    (p, q, k, v, align)
                })
        },
    )
}

/// The port against the golden model through `ops::attention` (dense, poisoned O), then
/// byte for byte against the CPU device with heads `align` bytes apart (padding stays poison).
fn check_attention(dev: &mut dyn Device, case: &AttentionCase) -> Result<(), String> {
    let (p, q, k, v, align) = case;
    let want = attention(p, q, k, v).map_err(|e| e.to_string())?;
    let (got, _) = ops::attention(dev, p, q, k, v).map_err(|e| e.to_string())?;
    if got != want {
        let i = (0..want.len().min(got.len())).find(|&i| got.get(i) != want.get(i));
        return Err(format!("{p:?}: first difference at {i:?} (got {} elements, golden {})", got.len(), want.len()));
    }
    let l = AttentionLayout::new(p, *align);
    let (nh, d) = (p.heads_total(), p.dim);
    let kv_len: Vec<i32> = p.kv_len.iter().flatten().map(|&n| n as i32).collect();
    let inputs = [
        pitched(&bytes_of(q), p.seq_q * d, l.q_stride as usize),
        pitched(&bytes_of(k), p.seq_kv * d, l.kv_stride as usize),
        pitched(&bytes_of(v), p.seq_kv * d, l.kv_stride as usize),
        words_of(&kv_len),
    ];
    let launch = |b: &[Buffer]| {
        Launch::Attention(AttentionArgs {
            problem: p.clone(),
            layout: l,
            q: b[0],
            k: b[1],
            v: b[2],
            o: b[4],
            kv_len: p.kv_len.as_ref().map(|_| b[3]),
        })
    };
    let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let cl = run_raw(dev, &refs, &[l.o_bytes], launch).map_err(|e| e.to_string())?;
    let cpu = run_raw(&mut CpuDevice::new(CpuMode::Golden), &refs, &[l.o_bytes], launch).map_err(|e| e.to_string())?;
    match cl[0].iter().zip(&cpu[0]).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => {
            Err(format!("{p:?} heads {align}-aligned ({nh} heads): O byte {i}: {} vs cpu {}", cl[0][i], cpu[0][i]))
        }
    }
}

#[test]
fn attention_port_is_bit_exact_on_random_problems() {
    let Some(dev) = device() else { return };
    let dev = std::cell::RefCell::new(dev);
    let mut runner = TestRunner::new(Config { cases: 64, ..Config::default() });
    runner
        .run(&attention_case(), |case| check_attention(&mut *dev.borrow_mut(), &case).map_err(TestCaseError::fail))
        .unwrap();
}

#[test]
fn attention_port_edges() {
    let Some(mut dev) = device() else { return };
    let fixed = |multiplier, shift| AttentionParams { score: Requant { multiplier, shift }, out: None };
    let problem = |dim, seq_q, seq_kv, params| AttentionProblem {
        batch: 1,
        heads: 1,
        seq_q,
        seq_kv,
        dim,
        causal: false,
        kv_len: None,
        params,
    };
    // All −128: the largest score d·2^14, every key equal.
    let p = problem(64, 3, 5, AttentionParams::from_scales(64, 1.0 / 32.0, 1.0 / 32.0, 1.0 / 32.0, None).unwrap());
    check_attention(&mut dev, &(p, vec![-128; 192], vec![-128; 320], vec![-128; 320], 1)).unwrap();
    // The largest scale (t up to 2^46): the running maximum jumps by far more than 62 and p shifts past 31.
    let p = problem(2, 2, 6, fixed(i32::MAX, 0));
    let k = [1, 0, -128, -128, 0, 0, 127, 127, -1, -1, 127, -128];
    let v = [127, -128, 1, -1, 0, 5, -7, 9, 100, -100, 3, 3];
    check_attention(&mut dev, &(p, vec![127, -128, -128, 127], k.to_vec(), v.to_vec(), 4)).unwrap();
    // int8 output of twice the average (large ones saturate); causal with per-batch key lengths.
    let p = AttentionProblem {
        batch: 2,
        heads: 2,
        causal: true,
        kv_len: Some(vec![1, 4]),
        params: AttentionParams { out: Some(Requant { multiplier: 1 << 30, shift: 45 }), ..fixed(1 << 20, 20) },
        ..problem(3, 5, 4, fixed(1, 0))
    };
    let q: Vec<i8> = (0..4 * 5 * 3).map(|i| (i * 37 % 256) as u8 as i8).collect();
    let kv: Vec<i8> = (0..4 * 4 * 3).map(|i| (i * 91 % 256) as u8 as i8).collect();
    check_attention(&mut dev, &(p, q, kv.clone(), kv, 64)).unwrap();
}

type MoeCase = (MoeProblem, Vec<i8>, Vec<i8>, Option<Vec<i32>>, u64);

/// Random router problems: T from 1, E 1..=256, k 1..=min(8, E), both modes,
/// renormalize, capacity on and off, bias, all-equal logits (ties), and a beat
/// for the pitched byte-level comparison.
fn moe_case() -> impl Strategy<Value = MoeCase> {
    let experts = prop_oneof![1usize..=8, 1usize..=256, Just(256)];
    let capacity = prop_oneof![Just(None), (1u32..=4 << 16).prop_map(|c| Some(CapacityFactor(c)))];
    let mode = prop_oneof![Just(GateMode::SoftmaxTopk), Just(GateMode::TopkSoftmax)];
    (prop_oneof![Just(1usize), 1usize..=40], prop_oneof![Just(1usize), 1usize..=33], experts, mode, capacity)
        .prop_flat_map(|(tokens, hidden, experts, mode, capacity)| {
            // true: every gate row the same, so all logits are equal without a bias (ties).
            let ties = prop_oneof![3 => Just(false), 1 => Just(true)];
            let bias_values = prop_oneof![any::<i32>(), -5000i32..5000, Just(i32::MAX), Just(i32::MIN)];
            (
                1..=experts.min(8),
                any::<bool>(),
                prop::option::of(prop::collection::vec(bias_values, experts)),
                requant(1e-4..64.0, 24..=62),
                ties,
                prop::collection::vec(int8(), tokens * hidden),
                prop::collection::vec(int8(), experts * hidden),
                prop::sample::select(vec![1u64, 16, 64]),
            )
                .prop_map(move |(top_k, renormalize, bias, logit, ties, x, mut w, beat)| {
                    if ties {
                        let row = w[..hidden].to_vec();
                        w.chunks_exact_mut(hidden).for_each(|r| r.copy_from_slice(&row));
                    }
                    let p = MoeProblem {
                        tokens,
                        hidden,
                        experts,
                        top_k,
                        mode,
                        renormalize,
                        capacity,
                        bias: bias.is_some(),
                        logit,
                    };
                    (p, x, w, bias, beat)
                })
        })
}

/// The port against `route` through `ops::moe` (poisoned outputs), then every byte of the
/// route, dispatch and stats buffers against the CPU device with pitches of `beat` bytes:
/// unused record choices zero, dispatch entries past each expert's kept tokens untouched.
fn check_moe(dev: &mut dyn Device, case: &MoeCase) -> Result<(), String> {
    let (p, x, w, bias, beat) = case;
    let want = route(p, x, w, bias.as_deref()).map_err(|e| e.to_string())?;
    let (got, _) = ops::moe(dev, p, x, w, bias.as_deref()).map_err(|e| e.to_string())?;
    if got != want {
        return Err(format!("{p:?}:\n got {got:?}\n golden {want:?}"));
    }
    let l = MoeLayout::with_beat(p, *beat);
    let inputs = [
        pitched(&bytes_of(x), p.hidden, l.ldx as usize),
        pitched(&bytes_of(w), p.hidden, l.ldw as usize),
        words_of(bias.as_deref().unwrap_or(&[0])),
    ];
    let outputs = [l.route_bytes, l.dispatch_bytes, l.stats_bytes];
    let launch = |b: &[Buffer]| {
        Launch::Moe(MoeArgs {
            problem: *p,
            layout: l,
            x: b[0],
            w: b[1],
            bias: p.bias.then_some(b[2]),
            route: b[3],
            dispatch: b[4],
            stats: b[5],
        })
    };
    let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let cl = run_raw(dev, &refs, &outputs, launch).map_err(|e| e.to_string())?;
    let cpu = run_raw(&mut CpuDevice::new(CpuMode::Golden), &refs, &outputs, launch).map_err(|e| e.to_string())?;
    for (name, (a, b)) in ["route", "dispatch", "stats"].iter().zip(cl.iter().zip(&cpu)) {
        if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
            return Err(format!("{p:?} beat {beat}: {name} byte {i}: {} vs cpu {}", a[i], b[i]));
        }
    }
    Ok(())
}

#[test]
fn moe_port_is_bit_exact_on_random_problems() {
    let Some(dev) = device() else { return };
    let dev = std::cell::RefCell::new(dev);
    let mut runner = TestRunner::new(Config { cases: 96, ..Config::default() });
    runner.run(&moe_case(), |case| check_moe(&mut *dev.borrow_mut(), &case).map_err(TestCaseError::fail)).unwrap();
}

#[test]
fn moe_port_edges() {
    let Some(mut dev) = device() else { return };
    let problem = |t, h, e, k, mode| MoeProblem::new(t, h, e, k, mode, 1.0 / 32.0, 1.0 / 64.0).unwrap();
    // All-equal logits, E = 256, k = 8: ties go to experts 0..8 for every token.
    for mode in [GateMode::SoftmaxTopk, GateMode::TopkSoftmax] {
        let p = problem(3, 4, 256, 8, mode);
        check_moe(&mut dev, &(p, vec![0; 12], vec![1; 1024], None, 1)).unwrap();
    }
    // Every token prefers expert 2 under a tight capacity; −128 operands, extreme biases.
    let p = MoeProblem {
        bias: true,
        capacity: Some(CapacityFactor::ONE),
        renormalize: true,
        ..problem(7, 3, 4, 2, GateMode::SoftmaxTopk)
    };
    let bias = vec![i32::MIN, i32::MAX, i32::MAX - 1, 0];
    check_moe(&mut dev, &(p, vec![-128; 21], vec![-128; 12], Some(bias), 64)).unwrap();
    // One token, one expert: weight 65535 (1.0 saturates), slot 0.
    let p = MoeProblem { capacity: Some(CapacityFactor(1)), ..problem(1, 1, 1, 1, GateMode::SoftmaxTopk) };
    check_moe(&mut dev, &(p, vec![127], vec![-128], None, 16)).unwrap();
}

#[test]
fn bad_launches_are_clear_errors() {
    let Some(mut dev) = device() else { return };
    let err = |r: Result<Vec<Vec<u8>>, DeviceError>| r.expect_err("the launch must be refused").to_string();
    let params = AttentionParams::from_scales(4, 0.1, 0.1, 0.1, None).unwrap();
    let p = AttentionProblem {
        batch: 2,
        heads: 1,
        seq_q: 2,
        seq_kv: 3,
        dim: 4,
        causal: false,
        kv_len: Some(vec![3, 2]),
        params,
    };
    let l = AttentionLayout::new(&p, 1);
    let args = |b: &[Buffer], layout, kv_len| {
        Launch::Attention(AttentionArgs { problem: p.clone(), layout, q: b[0], k: b[1], v: b[1], o: b[3], kv_len })
    };
    let inputs: [&[u8]; 3] = [&[0; 16], &[0; 24], &words_of(&[3, 1])];
    let msg = err(run_raw(&mut dev, &inputs, &[l.o_bytes], |b| args(b, l, Some(b[2]))));
    assert!(msg.contains("key-length buffer holds [3, 1]"), "{msg}");
    let msg = err(run_raw(&mut dev, &inputs, &[l.o_bytes], |b| args(b, l, None)));
    assert!(msg.contains("exactly when kv_len is"), "{msg}");
    let short = AttentionLayout { o_stride: l.o_stride - 1, ..l };
    let msg = err(run_raw(&mut dev, &inputs, &[l.o_bytes], |b| args(b, short, Some(b[2]))));
    assert!(msg.contains("O head stride"), "{msg}");
    let msg = err(run_raw(&mut dev, &inputs, &[l.o_bytes - 1], |b| args(b, l, Some(b[2]))));
    assert!(msg.contains("buffer O has"), "{msg}");
    let bad = AttentionProblem { dim: 0, ..p.clone() };
    let msg = ops::attention(&mut dev, &bad, &[], &[], &[]).unwrap_err().to_string();
    assert!(msg.contains("must be ≥ 1"), "{msg}");

    let p = MoeProblem { bias: true, ..MoeProblem::new(2, 4, 3, 2, GateMode::SoftmaxTopk, 0.1, 0.1).unwrap() };
    let l = MoeLayout::with_beat(&p, 1);
    let moe = |b: &[Buffer], bias, route| {
        Launch::Moe(MoeArgs { problem: p, layout: l, x: b[0], w: b[1], bias, route, dispatch: b[3], stats: b[4] })
    };
    let inputs: [&[u8]; 2] = [&[0; 8], &[0; 12]];
    let outputs = [l.route_bytes, l.dispatch_bytes, l.stats_bytes];
    let msg = err(run_raw(&mut dev, &inputs, &outputs, |b| moe(b, None, b[2])));
    assert!(msg.contains("bias enabled but no bias buffer"), "{msg}");
    let outputs = [12, l.route_bytes - 1, l.dispatch_bytes, l.stats_bytes];
    let msg = err(run_raw(&mut dev, &inputs, &outputs, |b| moe(b, Some(b[2]), b[3])));
    assert!(msg.contains("buffer route has"), "{msg}");
    let bad = MoeProblem { top_k: 4, ..p };
    let msg = ops::moe(&mut dev, &bad, &[0; 8], &[0; 12], Some(&[0; 3])).unwrap_err().to_string();
    assert!(msg.contains("exceeds the 3 experts"), "{msg}");
}

/// `ferrite run gemm|attention|moe --device opencl`: user `.npy` operands in,
/// results out, bit-exact with the golden model (the CLI checks and says so;
/// the test checks the written files against the golden model itself).
#[test]
fn run_cli_on_opencl_is_bit_exact_with_npy_in_and_out() {
    let Some(index) = list().ok().and_then(|l| l.iter().position(|d| !d.platform.contains("Xilinx"))) else {
        let why = "no non-Xilinx OpenCL device (install pocl-opencl-icd)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let run = |args: &[&str]| {
        let out = assert_cmd::Command::cargo_bin("ferrite")
            .unwrap()
            .args(["run"])
            .args(args)
            .args(["--device", "opencl", "--opencl-device", &index.to_string()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("device       opencl"), "{stdout}");
        assert!(stdout.contains("bit-exact"), "{stdout}");
    };

    let a = ndarray::Array2::<i8>::from_shape_fn((9, 13), |(i, j)| ((i as i32 * 29) ^ (j as i32 * 7)) as i8);
    let b = ndarray::Array2::<i8>::from_shape_fn((13, 6), |(i, j)| (j as i32 * 41 - i as i32 * 3) as i8);
    ndarray_npy::write_npy(path("a.npy"), &a).unwrap();
    ndarray_npy::write_npy(path("b.npy"), &b).unwrap();
    run(&["gemm", "--a", &path("a.npy"), "--b", &path("b.npy"), "--relu", "--out", &path("c.npy")]);
    let p = GemmProblem { relu: true, ..GemmProblem::new(9, 6, 13) };
    let want = gemm(&p, a.as_slice().unwrap(), b.as_slice().unwrap(), None).unwrap();
    let got: ndarray::Array2<i32> = ndarray_npy::read_npy(path("c.npy")).unwrap();
    assert_eq!(ferrite_hw::gemm::GemmOutput::I32(got.into_raw_vec()), want);

    let q = ndarray::Array4::<i8>::from_shape_fn((1, 2, 5, 16), |(_, h, i, j)| (h * 31 + i * 7 + j * 3) as i8);
    let k = ndarray::Array4::<i8>::from_shape_fn((1, 2, 8, 16), |(_, h, i, j)| ((h * 17 + i * 5) ^ j) as i8);
    for (n, t) in [("q.npy", &q), ("k.npy", &k), ("v.npy", &k)] {
        ndarray_npy::write_npy(path(n), t).unwrap();
    }
    run(&["attention", "--q", &path("q.npy"), "--k", &path("k.npy"), "--v", &path("v.npy"), "--out", &path("o.npy")]);
    let o: ndarray::Array4<i32> = ndarray_npy::read_npy(path("o.npy")).unwrap();
    assert_eq!(o.dim(), (1, 2, 5, 16));

    let x = ndarray::Array2::<i8>::from_shape_fn((20, 32), |(i, j)| ((i as i32 * 13) ^ (j as i32 * 5)) as i8);
    let w = ndarray::Array2::<i8>::from_shape_fn((6, 32), |(i, j)| (i as i32 * 23 + j as i32 * 9) as i8);
    ndarray_npy::write_npy(path("x.npy"), &x).unwrap();
    ndarray_npy::write_npy(path("w.npy"), &w).unwrap();
    let moe_out = dir.path().join("routes");
    run(&["moe", "--x", &path("x.npy"), "--w", &path("w.npy"), "--top-k", "2", "--out", moe_out.to_str().unwrap()]);
    let experts: ndarray::Array2<u8> = ndarray_npy::read_npy(moe_out.join("experts.npy")).unwrap();
    assert_eq!(experts.dim(), (20, 2));
}

/// The int8 MoE decoder block (issue 17) on the OpenCL device, bit for bit against its golden model.
#[test]
fn block_is_bit_exact() {
    if let Some(mut dev) = device() {
        common::block_is_bit_exact_on(&mut dev);
    }
}
