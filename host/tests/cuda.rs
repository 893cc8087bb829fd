//! CUDA backend tests. On a machine without a GPU (or driver) each test prints
//! why it skipped and passes; on the GPU machine they run for real
//! (`scripts/gpu-bundle.sh` builds this binary for it).
#![cfg(feature = "cuda")]
mod common;
use ferrite_host::backend::cpu::{CpuDevice, CpuMode};
use ferrite_host::backend::cuda::float::{flash_attention, from_bf16, gemm_bf16, moe_gate, to_bf16};
use ferrite_host::backend::cuda::{CudaDevice, GemmKernel};
use ferrite_host::device::{AttentionArgs, Buffer, GemmArgs, MoeArgs};
use ferrite_host::{ops, Device, DeviceError, Launch, Layout, Problem};
use ferrite_hw::attention::{attention, AttentionParams, AttentionProblem};
use ferrite_hw::gemm::{gemm, GemmProblem};
use ferrite_hw::moe::{route, CapacityFactor, GateMode, MoeProblem};
use ferrite_hw::numerics::Requant;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The GPU, or `None` after printing why this test skips.
fn gpu(test: &str) -> Option<CudaDevice> {
    match CudaDevice::new(0) {
        Ok(dev) => Some(dev),
        Err(e) => {
            eprintln!("{test}: skipped, no usable CUDA device: {e}");
            None
        }
    }
}

#[test]
fn opening_without_a_driver_is_an_error_not_a_panic() {
    let opened = std::panic::catch_unwind(|| CudaDevice::new(0).map(drop));
    match opened.expect("CudaDevice::new panicked") {
        Ok(()) => eprintln!("a CUDA device is present: nothing to check here"),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
            eprintln!("no device, as expected here: {msg}");
        }
    }
    // The CLI path gives the same error.
    if let Err(e) = ferrite_host::backend::open_cuda() {
        assert!(matches!(e, DeviceError::MissingTool { .. } | DeviceError::Backend { .. }), "{e}");
    }
}

/// Every int8 GEMM kernel this GPU runs: on a Hopper the portable mma.sync
/// one, the wgmma one at each tile width, and the automatic choice.
fn gemm_kernels(dev: &CudaDevice) -> Vec<GemmKernel> {
    if dev.gpu().arch != "sm_90a" {
        return vec![GemmKernel::Auto];
    }
    let wgmma = [64, 128, 256].map(|tile_n| GemmKernel::Wgmma { tile_n });
    [GemmKernel::MmaSync].into_iter().chain(wgmma).chain([GemmKernel::Auto]).collect()
}

/// The GEMM through `ops::gemm` (poisoned C) with every kernel, against the golden model.
fn check_gemm(dev: &mut CudaDevice, p: &GemmProblem, a: &[i8], b: &[i8], bias: Option<&[i32]>) -> Result<(), String> {
    let want = gemm(p, a, b, bias).map_err(|e| e.to_string())?;
    for kernel in gemm_kernels(dev) {
        dev.set_gemm_kernel(kernel).map_err(|e| e.to_string())?;
        let (got, _) = ops::gemm(dev, p, a, b, bias).map_err(|e| e.to_string())?;
        if let Some((i, g, w)) = got.first_mismatch(&want) {
            return Err(format!(
                "{p:?} {kernel:?}: first mismatch at ({}, {}): cuda {g}, golden {w}",
                i / p.n,
                i % p.n
            ));
        }
    }
    dev.set_gemm_kernel(GemmKernel::Auto).map_err(|e| e.to_string())
}

#[test]
fn gemm_edge_cases_are_bit_exact() {
    let Some(mut dev) = gpu("gemm_edge_cases_are_bit_exact") else {
        return;
    };
    let rq = Requant { multiplier: 1 << 30, shift: 36 };
    let shapes = [(1, 1, 1), (64, 64, 64), (65, 63, 33), (1, 300, 1), (130, 17, 1000), (7, 129, 64), (200, 200, 4096)];
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (m, n, k) in shapes {
        for (bias, relu, requant) in
            [(false, false, None), (true, true, None), (true, false, Some(rq)), (false, true, Some(rq))]
        {
            let p = GemmProblem { bias, relu, requant, ..GemmProblem::new(m, n, k) };
            let a: Vec<i8> = (0..m * k).map(|_| rng.gen()).collect();
            let b: Vec<i8> = (0..k * n).map(|_| rng.gen()).collect();
            let bv: Vec<i32> = (0..n).map(|_| rng.gen()).collect();
            check_gemm(&mut dev, &p, &a, &b, bias.then_some(&bv[..])).unwrap();
        }
    }
    // All -128: the largest products; saturation in both directions; wrapping bias.
    let p = GemmProblem {
        bias: true,
        requant: Some(Requant { multiplier: 1 << 30, shift: 30 }),
        ..GemmProblem::new(33, 40, 77)
    };
    let bias: Vec<i32> = (0..40).map(|j| if j % 2 == 0 { i32::MAX } else { i32::MIN }).collect();
    check_gemm(&mut dev, &p, &vec![-128; 33 * 77], &vec![-128; 77 * 40], Some(&bias)).unwrap();
    let p = GemmProblem { bias: true, ..GemmProblem::new(3, 5, 2) };
    check_gemm(&mut dev, &p, &[-128; 6], &[-128; 10], Some(&[i32::MAX; 5])).unwrap();
}

#[test]
fn gemm_accumulator_wraps_like_int32() {
    let Some(mut dev) = gpu("gemm_accumulator_wraps_like_int32") else {
        return;
    };
    // 140000 · 16384 > 2^31: the exact sum wraps, as the unit's int32 accumulator does.
    let k = 140_000;
    let p = GemmProblem::new(2, 3, k);
    check_gemm(&mut dev, &p, &vec![-128; 2 * k], &vec![-128; k * 3], None).unwrap();
    // Two row tiles of the Hopper kernel, mixed signs, a wrapping bias on top.
    let (m, n) = (130, 20);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let a: Vec<i8> = (0..m * k).map(|_| if rng.gen_bool(0.9) { -128 } else { 127 }).collect();
    let b: Vec<i8> = (0..k * n).map(|_| if rng.gen_bool(0.9) { -128 } else { rng.gen() }).collect();
    let bias: Vec<i32> = (0..n).map(|_| rng.gen()).collect();
    let p = GemmProblem { bias: true, ..GemmProblem::new(m, n, k) };
    check_gemm(&mut dev, &p, &a, &b, Some(&bias)).unwrap();
}

#[test]
fn gemm_past_the_transpose_grid_falls_back_to_mma_sync() {
    let Some(mut dev) = gpu("gemm_past_the_transpose_grid_falls_back_to_mma_sync") else {
        return;
    };
    // K beyond 65535 block rows of the Bᵀ pre-pass: Auto takes mma.sync (and
    // the sum wraps), an explicit wgmma request is refused.
    let k = 65_535 * 128 + 1;
    let p = GemmProblem::new(1, 1, k);
    let (a, b) = (vec![-128i8; k], vec![-128i8; k]);
    let want = gemm(&p, &a, &b, None).unwrap();
    assert_eq!(ops::gemm(&mut dev, &p, &a, &b, None).unwrap().0, want);
    if dev.gpu().arch == "sm_90a" {
        dev.set_gemm_kernel(GemmKernel::Wgmma { tile_n: 64 }).unwrap();
        let err = ops::gemm(&mut dev, &p, &a, &b, None).unwrap_err();
        assert!(matches!(err, DeviceError::TooBig { .. }), "{err}");
    }
}

/// Every epilogue mode on shapes around the Hopper kernel's tile edges, as raw
/// launches: A and B rows carry junk padding that must not leak in, C starts
/// poisoned and its row padding must stay poisoned.
#[test]
fn gemm_every_epilogue_on_pitched_buffers_is_bit_exact() {
    let Some(mut dev) = gpu("gemm_every_epilogue_on_pitched_buffers_is_bit_exact") else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let dims = [1, 15, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300];
    for case in 0..32 {
        let mut dim = || dims[rng.gen_range(0..dims.len())];
        let (m, n, k) = (dim(), dim(), dim() + dim());
        let requant =
            (case & 4 != 0).then(|| Requant { multiplier: rng.gen_range(1..=i32::MAX), shift: rng.gen_range(0..=62) });
        let p = GemmProblem { bias: case & 1 != 0, relu: case & 2 != 0, requant, ..GemmProblem::new(m, n, k) };
        let mut i8s = |len: usize| -> Vec<i8> {
            (0..len)
                .map(|_| match rng.gen_range(0..4) {
                    0 => -128,
                    1 => 127,
                    _ => rng.gen(),
                })
                .collect()
        };
        let (a, b) = (i8s(m * k), i8s(k * n));
        let bias: Vec<i32> = (0..n).map(|_| rng.gen()).collect();
        let want = gemm(&p, &a, &b, p.bias.then_some(&bias[..])).unwrap();
        let eb = p.out_elem_bytes();
        for kernel in gemm_kernels(&dev) {
            dev.set_gemm_kernel(kernel).unwrap();
            let Ok(Layout::Gemm(l)) = dev.layout(&Problem::Gemm(p)) else { panic!("no GEMM layout") };
            let mut inputs = vec![pitched(&bytes(&a), k, l.lda as usize), pitched(&bytes(&b), n, l.ldb as usize)];
            if p.bias {
                inputs.push(bias.iter().flat_map(|x| x.to_le_bytes()).collect());
            }
            let make = |i: &[Buffer], o: &[Buffer]| {
                Launch::Gemm(GemmArgs { problem: p, layout: l, a: i[0], b: i[1], bias: p.bias.then(|| i[2]), c: o[0] })
            };
            let c = run_raw(&mut dev, &inputs, &[l.c_bytes], make).unwrap().remove(0);
            for (r, row) in c.chunks_exact(l.ldc as usize).enumerate() {
                let expect: Vec<u8> =
                    (0..n).flat_map(|j| want.get(r * n + j).to_le_bytes().into_iter().take(eb)).collect();
                assert_eq!(&row[..n * eb], &expect[..], "{p:?} {kernel:?}: row {r}");
                assert!(row[n * eb..].iter().all(|&x| x == ops::POISON), "{p:?} {kernel:?}: row {r} padding written");
            }
        }
    }
}

#[test]
fn gemm_large_random_is_bit_exact() {
    let Some(mut dev) = gpu("gemm_large_random_is_bit_exact") else {
        return;
    };
    // Many tiles in both directions and a long K, edge values included.
    let (m, n, k) = (1000, 1100, 1200);
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let mut i8s = |len: usize| -> Vec<i8> {
        (0..len)
            .map(|_| match rng.gen_range(0..8) {
                0 => -128,
                1 => 127,
                _ => rng.gen(),
            })
            .collect()
    };
    let (a, b) = (i8s(m * k), i8s(k * n));
    let bias: Vec<i32> = (0..n).map(|j| (j as i32 - 550) * 1000).collect();
    for requant in [None, Some(Requant { multiplier: 1 << 30, shift: 42 })] {
        let p = GemmProblem { bias: true, relu: requant.is_some(), requant, ..GemmProblem::new(m, n, k) };
        check_gemm(&mut dev, &p, &a, &b, Some(&bias)).unwrap();
    }
}

#[test]
fn gemm_random_shapes_are_bit_exact() {
    let Some(dev) = gpu("gemm_random_shapes_are_bit_exact") else {
        return;
    };
    // proptest's test closure is `Fn`; the device needs `&mut`.
    let dev = std::cell::RefCell::new(dev);
    let i8s = |n: usize| prop::collection::vec(prop_oneof![Just(-128i8), Just(127i8), any::<i8>()], n);
    let strategy = (
        1usize..150,
        1usize..150,
        1usize..300,
        any::<bool>(),
        any::<bool>(),
        prop::option::of((1i32..=i32::MAX, 0u32..=62)),
    )
        .prop_flat_map(move |(m, n, k, bias, relu, rq)| {
            (
                Just(GemmProblem {
                    bias,
                    relu,
                    requant: rq.map(|(multiplier, shift)| Requant { multiplier, shift }),
                    ..GemmProblem::new(m, n, k)
                }),
                i8s(m * k),
                i8s(k * n),
                prop::collection::vec(any::<i32>(), n),
            )
        });
    let mut runner = TestRunner::new(Config { cases: 64, ..Config::default() });
    runner
        .run(&strategy, |(p, a, b, bias)| {
            check_gemm(&mut dev.borrow_mut(), &p, &a, &b, p.bias.then_some(&bias[..])).map_err(TestCaseError::fail)
        })
        .unwrap();
}

#[test]
fn gemm_bad_input_is_refused() {
    let Some(mut dev) = gpu("gemm_bad_input_is_refused") else {
        return;
    };
    let p = GemmProblem::new(4, 4, 4);
    let err = ops::gemm(&mut dev, &p, &[0; 15], &[0; 16], None).unwrap_err();
    assert!(err.to_string().contains("A has 15 elements"), "{err}");
    assert!(dev.layout(&Problem::Gemm(GemmProblem::new(0, 4, 4))).is_err());
    // A layout with a pitch the kernel cannot load in 16-byte chunks.
    let Ok(Layout::Gemm(mut layout)) = dev.layout(&Problem::Gemm(p)) else { panic!("no GEMM layout") };
    layout.lda = 4;
    layout.a_bytes = 16;
    let bufs: Vec<Buffer> = [16, layout.b_bytes, layout.c_bytes].iter().map(|&n| dev.alloc(n).unwrap()).collect();
    let launch = Launch::Gemm(GemmArgs { problem: p, layout, a: bufs[0], b: bufs[1], bias: None, c: bufs[2] });
    let err = dev.launch(&launch).unwrap_err();
    assert!(err.to_string().contains("multiple of 16"), "{err}");
    let err = dev.upload(bufs[0], 10, &[0; 7]).unwrap_err();
    assert!(matches!(err, DeviceError::OutOfBounds { .. }), "{err}");
    for b in bufs {
        dev.free(b).unwrap();
    }
    assert!(matches!(dev.free(Buffer::new(999, 1)), Err(DeviceError::UnknownBuffer(999))));
}

fn attention_problem(
    d: usize,
    seq_q: usize,
    seq_kv: usize,
    causal: bool,
    kv_len: Option<Vec<usize>>,
    out: Option<f64>,
) -> AttentionProblem {
    let s = 1.0 / 32.0;
    AttentionProblem {
        batch: kv_len.as_ref().map_or(1, Vec::len),
        heads: 2,
        seq_q,
        seq_kv,
        dim: d,
        causal,
        kv_len,
        params: AttentionParams::from_scales(d, s, s, s, out).unwrap(),
    }
}

/// Dense rows of `row` bytes into rows `pitch` bytes apart; the padding is
/// junk (0x7F), so a kernel that reads it gives a wrong answer.
fn pitched(dense: &[u8], row: usize, pitch: usize) -> Vec<u8> {
    let rows = dense.len() / row.max(1);
    let mut out = vec![0x7f; rows * pitch];
    for (r, src) in dense.chunks(row).enumerate() {
        out[r * pitch..r * pitch + row].copy_from_slice(src);
    }
    out
}

fn bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

/// Run one launch on `dev` with `inputs` uploaded and `outputs` (sizes)
/// poisoned with [`ops::POISON`]; returns every output buffer whole.
fn run_raw(
    dev: &mut dyn Device,
    inputs: &[Vec<u8>],
    outputs: &[u64],
    make: impl Fn(&[Buffer], &[Buffer]) -> Launch,
) -> Result<Vec<Vec<u8>>, DeviceError> {
    let mut ins = Vec::new();
    for data in inputs {
        let b = dev.alloc(data.len() as u64)?;
        dev.upload(b, 0, data)?;
        ins.push(b);
    }
    let mut outs = Vec::new();
    for &n in outputs {
        let b = dev.alloc(n)?;
        dev.upload(b, 0, &vec![ops::POISON; n as usize])?;
        outs.push(b);
    }
    dev.launch(&make(&ins, &outs))?;
    let mut got = Vec::new();
    for &b in &outs {
        let mut data = vec![0; b.len() as usize];
        dev.download(b, 0, &mut data)?;
        got.push(data);
    }
    for b in ins.into_iter().chain(outs) {
        dev.free(b)?;
    }
    Ok(got)
}

/// The attention twin through `Launch::Attention` against the golden model:
/// the decoded output, and the whole O buffer (head padding must stay
/// poisoned) against the cpu backend given the same layout.
fn check_attention(dev: &mut CudaDevice, p: &AttentionProblem, q: &[i8], k: &[i8], v: &[i8]) -> Result<(), String> {
    let want = attention(p, q, k, v).map_err(|e| e.to_string())?;
    let (got, _) = ops::attention(dev, p, q, k, v).map_err(|e| e.to_string())?;
    if got.len() != want.len() {
        return Err(format!("{} outputs, golden {}", got.len(), want.len()));
    }
    if let Some(i) = (0..want.len()).find(|&i| got.get(i) != want.get(i)) {
        return Err(format!("{p:?}: element {i}: cuda {}, golden {}", got.get(i), want.get(i)));
    }
    let Ok(Layout::Attention(l)) = dev.layout(&Problem::Attention(p.clone())) else {
        return Err("no attention layout".into());
    };
    let (nh, d) = (p.heads_total(), p.dim);
    let mut inputs = vec![
        pitched(&bytes(q), p.seq_q * d, l.q_stride as usize),
        pitched(&bytes(k), p.seq_kv * d, l.kv_stride as usize),
        pitched(&bytes(v), p.seq_kv * d, l.kv_stride as usize),
    ];
    if let Some(kv) = &p.kv_len {
        inputs.push(kv.iter().flat_map(|&n| (n as u32).to_le_bytes()).collect());
    }
    let make = |i: &[Buffer], o: &[Buffer]| {
        Launch::Attention(AttentionArgs {
            problem: p.clone(),
            layout: l,
            q: i[0],
            k: i[1],
            v: i[2],
            o: o[0],
            kv_len: i.get(3).copied(),
        })
    };
    let o_bytes = l.o_stride * nh as u64;
    let gpu = run_raw(dev, &inputs, &[o_bytes], make).map_err(|e| e.to_string())?;
    let cpu = run_raw(&mut CpuDevice::new(CpuMode::Golden), &inputs, &[o_bytes], make).map_err(|e| e.to_string())?;
    match gpu[0].iter().zip(&cpu[0]).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!("{p:?}: O byte {i}: cuda {:#x}, cpu {:#x}", gpu[0][i], cpu[0][i])),
    }
}

#[test]
fn attention_twin_is_bit_exact() {
    let Some(mut dev) = gpu("attention_twin_is_bit_exact") else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let cases = [
        attention_problem(16, 5, 9, false, None, None),
        attention_problem(32, 33, 33, true, None, Some(1.0 / 32.0)),
        attention_problem(64, 70, 300, false, Some(vec![300, 1, 157]), None),
        attention_problem(128, 64, 64, true, Some(vec![64, 20]), Some(1.0 / 16.0)),
        attention_problem(64, 16, 1024, false, None, Some(1.0 / 64.0)),
    ];
    for p in cases {
        for extreme in [false, true] {
            let mut gen = |n: usize| -> Vec<i8> {
                (0..n)
                    .map(|_| {
                        if extreme {
                            if rng.gen() {
                                -128
                            } else {
                                127
                            }
                        } else {
                            rng.gen_range(-64..64)
                        }
                    })
                    .collect()
            };
            let hq = p.heads_total() * p.seq_q * p.dim;
            let hkv = p.heads_total() * p.seq_kv * p.dim;
            let (q, k, v) = (gen(hq), gen(hkv), gen(hkv));
            check_attention(&mut dev, &p, &q, &k, &v).unwrap();
        }
    }
    let bad = attention_problem(16, 2, 3, false, None, None);
    let err = ops::attention(&mut dev, &bad, &[0; 10], &[0; 96], &[0; 96]).unwrap_err();
    assert!(err.to_string().contains("Q has 10"), "{err}");
    let too_wide = attention_problem(256, 2, 3, false, None, None);
    assert!(matches!(dev.layout(&Problem::Attention(too_wide)), Err(DeviceError::TooBig { .. })));
}

/// The bench's data (Gaussian, σ = 32 LSB, scales 1/32) on long rows: most
/// blocks keep every row's maximum, some raise it once (the two-product
/// path), the first ones several times (the segmented path); all checked
/// whole against the golden model, causal, padded and int8 out included.
#[test]
fn attention_twin_gaussian_rows_are_bit_exact() {
    let Some(mut dev) = gpu("attention_twin_gaussian_rows_are_bit_exact") else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let cases = [
        attention_problem(64, 256, 2048, false, None, None),
        attention_problem(64, 1024, 1024, true, None, None),
        attention_problem(128, 256, 2048, false, Some(vec![2048, 1500]), Some(1.0 / 16.0)),
        attention_problem(128, 1024, 1024, true, None, None),
        attention_problem(100, 130, 999, true, Some(vec![999, 77]), None),
    ];
    for p in cases {
        let mut gen = |n: usize| -> Vec<i8> {
            (0..n)
                .map(|_| {
                    let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
                    let g = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                    (g * 32.0).round().clamp(-128.0, 127.0) as i8
                })
                .collect()
        };
        let hq = p.heads_total() * p.seq_q * p.dim;
        let hkv = p.heads_total() * p.seq_kv * p.dim;
        let (q, k, v) = (gen(hq), gen(hkv), gen(hkv));
        check_attention(&mut dev, &p, &q, &k, &v).unwrap();
    }
}

/// Every key tied (p = 2^14 from the LUT, V = −128) until the last, whose score
/// is one step of e higher: the row's maximum rises once, at the end, with
/// l ≈ keys · 2^14 and |o| = 128·l past 2^31. The kernel must rescale in 64
/// bits there (its int32 path is only for l < NARROW_L = 2^22); an int32
/// rescale would wrap.
#[test]
fn attention_twin_late_rise_with_large_o_is_bit_exact() {
    let Some(mut dev) = gpu("attention_twin_late_rise_with_large_o_is_bit_exact") else {
        return;
    };
    for (d, keys, causal) in [(64, 2048, false), (128, 4000, false), (128, 1500, true)] {
        let mut p = attention_problem(d, 16, keys, causal, None, None);
        // s = d·2^14 for the last key, 128 less for the others; t = s·Ms/2^Ss
        // then differs by more than 256 (one step of e).
        p.params = AttentionParams::from_scales(d, 0.25, 0.25, 1.0 / 32.0, None).unwrap();
        if causal {
            p.seq_q = keys;
        }
        let hq = p.heads_total() * p.seq_q * d;
        let q = vec![-128i8; hq];
        let mut k = vec![-128i8; p.heads_total() * keys * d];
        for h in 0..p.heads_total() {
            for j in 0..keys - 1 {
                k[(h * keys + j) * d] = -127;
            }
        }
        let v = vec![-128i8; p.heads_total() * keys * d];
        check_attention(&mut dev, &p, &q, &k, &v)
            .unwrap_or_else(|e| panic!("d {d}, {keys} keys, causal {causal}: {e}"));
    }
}

#[test]
fn attention_launch_random_problems_are_bit_exact() {
    let Some(dev) = gpu("attention_launch_random_problems_are_bit_exact") else {
        return;
    };
    let dev = std::cell::RefCell::new(dev);
    let i8s = |n: usize| prop::collection::vec(prop_oneof![Just(-128i8), Just(127i8), any::<i8>()], n);
    let strategy = (
        1usize..=2,
        1usize..=3,
        1usize..40,
        1usize..70,
        prop_oneof![Just(16usize), Just(32), Just(64), Just(128)],
        any::<bool>(),
        any::<bool>(),
        prop::option::of(prop_oneof![Just(1.0 / 8.0), Just(1.0 / 64.0)]),
    )
        .prop_flat_map(move |(batch, heads, seq_q, seq_kv, dim, causal, padded, out)| {
            let kv_len = if padded {
                prop::collection::vec(1..=seq_kv, batch).prop_map(Some).boxed()
            } else {
                Just(None).boxed()
            };
            (Just((batch, heads, seq_q, seq_kv, dim, causal, out)), kv_len).prop_flat_map(
                move |((batch, heads, seq_q, seq_kv, dim, causal, out), kv_len)| {
                    let s = 1.0 / 32.0;
                    let p = AttentionProblem {
                        batch,
                        heads,
                        seq_q,
                        seq_kv,
                        dim,
                        causal,
                        kv_len,
                        params: AttentionParams::from_scales(dim, s, s, s, out).unwrap(),
                    };
                    let (nq, nkv) = (batch * heads * seq_q * dim, batch * heads * seq_kv * dim);
                    (Just(p), i8s(nq), i8s(nkv), i8s(nkv))
                },
            )
        });
    let mut runner = TestRunner::new(Config { cases: 48, ..Config::default() });
    runner
        .run(&strategy, |(p, q, k, v)| {
            check_attention(&mut dev.borrow_mut(), &p, &q, &k, &v).map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// The router twin through `Launch::Moe`: route records, statistics and the
/// whole dispatch buffer (unwritten entries must stay poisoned) byte for byte
/// against the cpu backend given the same layout, and decoded against
/// `ferrite_hw::moe::route`.
fn check_moe(dev: &mut CudaDevice, p: &MoeProblem, x: &[i8], w: &[i8], bias: Option<&[i32]>) -> Result<(), String> {
    let want = route(p, x, w, bias).map_err(|e| e.to_string())?;
    let (got, _) = ops::moe(dev, p, x, w, bias).map_err(|e| e.to_string())?;
    if got != want {
        return Err(format!("{p:?}: decoded output differs from the golden model"));
    }
    let Ok(Layout::Moe(l)) = dev.layout(&Problem::Moe(*p)) else { return Err("no MoE layout".into()) };
    let mut inputs = vec![pitched(&bytes(x), p.hidden, l.ldx as usize), pitched(&bytes(w), p.hidden, l.ldw as usize)];
    if let Some(b) = bias {
        inputs.push(b.iter().flat_map(|v| v.to_le_bytes()).collect());
    }
    let make = |i: &[Buffer], o: &[Buffer]| {
        Launch::Moe(MoeArgs {
            problem: *p,
            layout: l,
            x: i[0],
            w: i[1],
            bias: i.get(2).copied(),
            route: o[0],
            dispatch: o[1],
            stats: o[2],
        })
    };
    let sizes = [l.route_bytes, l.dispatch_bytes, l.stats_bytes];
    let gpu = run_raw(dev, &inputs, &sizes, make).map_err(|e| e.to_string())?;
    let cpu = run_raw(&mut CpuDevice::new(CpuMode::Golden), &inputs, &sizes, make).map_err(|e| e.to_string())?;
    for (name, (g, c)) in ["route", "dispatch", "stats"].iter().zip(gpu.iter().zip(&cpu)) {
        if let Some(i) = g.iter().zip(c).position(|(a, b)| a != b) {
            return Err(format!("{p:?}: {name} byte {i}: cuda {:#x}, cpu {:#x}", g[i], c[i]));
        }
    }
    Ok(())
}

fn moe_problem(t: usize, h: usize, e: usize, k: usize, mode: GateMode, scale: f64) -> MoeProblem {
    MoeProblem::new(t, h, e, k, mode, scale, scale).unwrap()
}

#[test]
fn moe_twin_edge_cases_are_bit_exact() {
    let Some(mut dev) = gpu("moe_twin_edge_cases_are_bit_exact") else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let cf = |f: f64| Some(CapacityFactor::from_f64(f).unwrap());
    let sm = GateMode::SoftmaxTopk;
    let cases = [
        moe_problem(1, 1, 1, 1, sm, 1.0 / 16.0),
        moe_problem(1, 17, 256, 8, GateMode::TopkSoftmax, 1.0 / 32.0),
        MoeProblem { capacity: cf(1.0), ..moe_problem(1000, 64, 8, 2, sm, 1.0 / 32.0) },
        MoeProblem { capacity: cf(0.3), renormalize: true, ..moe_problem(777, 33, 64, 8, sm, 1.0 / 64.0) },
        MoeProblem { bias: true, capacity: cf(1.25), ..moe_problem(513, 100, 256, 8, sm, 1.0 / 8.0) },
        MoeProblem { bias: true, ..moe_problem(300, 5, 3, 3, GateMode::TopkSoftmax, 1.0 / 4.0) },
    ];
    for p in cases {
        let (nx, nw) = (p.tokens * p.hidden, p.experts * p.hidden);
        let bias: Vec<i32> = (0..p.experts).map(|_| rng.gen()).collect();
        let bias = p.bias.then_some(&bias[..]);
        // Random; all-equal logits (every expert ties); the largest products.
        let x: Vec<i8> = (0..nx).map(|_| rng.gen()).collect();
        let w: Vec<i8> = (0..nw).map(|_| rng.gen()).collect();
        check_moe(&mut dev, &p, &x, &w, bias).unwrap();
        check_moe(&mut dev, &p, &x, &vec![3; nw], bias).unwrap();
        check_moe(&mut dev, &p, &vec![-128; nx], &vec![-128; nw], bias).unwrap();
        let signs: Vec<i8> = (0..nw).map(|i| if i % 3 == 0 { 127 } else { -128 }).collect();
        check_moe(&mut dev, &p, &vec![-128; nx], &signs, bias).unwrap();
    }
    // Every token prefers expert 2: slots 0..C, the rest dropped.
    let p = MoeProblem { bias: true, capacity: Some(CapacityFactor::ONE), ..moe_problem(600, 2, 4, 1, sm, 1.0 / 4.0) };
    check_moe(&mut dev, &p, &[1; 1200], &[0; 8], Some(&[0, 0, 100, 0])).unwrap();

    let bad = moe_problem(4, 4, 4, 2, sm, 1.0 / 32.0);
    assert!(dev.layout(&Problem::Moe(MoeProblem { top_k: 0, ..bad })).is_err());
    let err = ops::moe(&mut dev, &bad, &[0; 15], &[0; 16], None).unwrap_err();
    assert!(err.to_string().contains("x has 15"), "{err}");
    let Ok(Layout::Moe(mut l)) = dev.layout(&Problem::Moe(bad)) else { panic!("no MoE layout") };
    l.ldx = 4;
    let bufs: Vec<Buffer> = [64, 64, 256, 64, 64].iter().map(|&n| dev.alloc(n).unwrap()).collect();
    let launch = Launch::Moe(MoeArgs {
        problem: bad,
        layout: l,
        x: bufs[0],
        w: bufs[1],
        bias: None,
        route: bufs[2],
        dispatch: bufs[3],
        stats: bufs[4],
    });
    let err = dev.launch(&launch).unwrap_err();
    assert!(err.to_string().contains("multiple of 16"), "{err}");
}

#[test]
fn moe_twin_random_problems_are_bit_exact() {
    let Some(dev) = gpu("moe_twin_random_problems_are_bit_exact") else {
        return;
    };
    let dev = std::cell::RefCell::new(dev);
    let strategy = (1usize..700, 1usize..80, 1usize..=256)
        .prop_flat_map(|(t, h, e)| {
            (
                Just((t, h, e)),
                1..=e.min(8),
                prop_oneof![Just(GateMode::SoftmaxTopk), Just(GateMode::TopkSoftmax)],
                any::<bool>(),
                prop::option::of(0.05f64..3.0),
                any::<bool>(),
                prop_oneof![Just(1.0 / 256.0), Just(1.0 / 32.0), Just(1.0 / 4.0)],
                0u8..4,
            )
        })
        .prop_flat_map(|((t, h, e), k, mode, renormalize, cf, bias, scale, kind)| {
            let p = MoeProblem {
                renormalize,
                bias,
                capacity: cf.map(|f| CapacityFactor::from_f64(f).unwrap()),
                ..moe_problem(t, h, e, k, mode, scale)
            };
            // kind 0: random; 1: all logits equal; 2: ±128/127 extremes; 3: small values (near-ties).
            let vals = move |n: usize| match kind {
                1 => Just(vec![0i8; n]).boxed(),
                2 => prop::collection::vec(prop_oneof![Just(-128i8), Just(127i8)], n).boxed(),
                3 => prop::collection::vec(-2i8..=2, n).boxed(),
                _ => prop::collection::vec(any::<i8>(), n).boxed(),
            };
            let biases = prop::collection::vec(prop_oneof![Just(i32::MIN), Just(i32::MAX), any::<i32>(), -3i32..3], e);
            (Just(p), vals(t * h), prop::collection::vec(any::<i8>(), e * h), biases)
        });
    let mut runner = TestRunner::new(Config { cases: 96, ..Config::default() });
    runner
        .run(&strategy, |(p, x, w, bias)| {
            check_moe(&mut dev.borrow_mut(), &p, &x, &w, p.bias.then_some(&bias[..])).map_err(TestCaseError::fail)
        })
        .unwrap();
}

fn rel(got: &[f64], want: &[f64]) -> f64 {
    assert!(got.iter().all(|x| x.is_finite()), "an output was not written (NaN poison left)");
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

#[test]
fn float_kernels_match_float64() {
    let Some(dev) = gpu("float_kernels_match_float64") else {
        return;
    };
    let g = dev.gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(rand::random());
    let mut bf = |n: usize| -> Vec<u16> { (0..n).map(|_| to_bf16(rng.gen_range(-1.0f32..1.0))).collect() };
    let f = |x: u16| from_bf16(x) as f64;

    // 384 is no multiple of the wgmma kernel's 256 columns: that shape runs the mma.sync kernel.
    for (m, n, k) in [(256, 384, 192), (384, 768, 1024)] {
        let (a, b) = (bf(m * k), bf(n * k));
        let (da, db) = (g.stream.clone_htod(&a).unwrap(), g.stream.clone_htod(&b).unwrap());
        let mut dc = g.stream.clone_htod(&vec![0xffffu16; m * n]).unwrap();
        gemm_bf16(g, &da, &db, &mut dc, (m, n, k)).unwrap();
        let c = g.stream.clone_dtoh(&dc).unwrap();
        let want: Vec<f64> =
            (0..m * n).map(|i| (0..k).map(|x| f(a[i / n * k + x]) * f(b[i % n * k + x])).sum()).collect();
        let err = rel(&c.iter().map(|&x| f(x)).collect::<Vec<_>>(), &want);
        assert!(err < 1e-2, "bf16 GEMM {m}×{n}×{k} rel err {err}");
        assert!(gemm_bf16(g, &da, &db, &mut dc, (100, n, k)).is_err());
    }

    for (d, causal) in [(64, false), (64, true), (128, false), (128, true)] {
        let (bh, sn) = (3, 256);
        let len = bh * sn * d;
        let (q, kk, v) = (bf(len), bf(len), bf(len));
        let up = |x: &Vec<u16>| g.stream.clone_htod(x).unwrap();
        let (dq, dk, dv) = (up(&q), up(&kk), up(&v));
        let mut dout = g.stream.clone_htod(&vec![0xffffu16; len]).unwrap();
        flash_attention(g, &dq, &dk, &dv, &mut dout, bh, sn, d, causal).unwrap();
        let out = g.stream.clone_dtoh(&dout).unwrap();
        let mut want = Vec::with_capacity(len);
        for h in 0..bh {
            for i in 0..sn {
                let base = h * sn * d;
                let keys = if causal { i + 1 } else { sn };
                let s: Vec<f64> = (0..keys)
                    .map(|j| {
                        (0..d).map(|x| f(q[base + i * d + x]) * f(kk[base + j * d + x])).sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                let sum: f64 = w.iter().sum();
                for x in 0..d {
                    want.push((0..keys).map(|j| w[j] * f(v[base + j * d + x])).sum::<f64>() / sum);
                }
            }
        }
        let err = rel(&out.iter().map(|&x| f(x)).collect::<Vec<_>>(), &want);
        assert!(err < 1e-2, "attention d={d} causal={causal}: rel err {err}");
    }

    for (t, e, k) in [(1000, 8, 2), (333, 64, 8), (5, 3, 3), (77, 200, 1)] {
        let logits: Vec<f32> = (0..t * e).map(|_| rng.gen_range(-4.0f32..4.0)).collect();
        let dl = g.stream.clone_htod(&logits).unwrap();
        let mut dw = g.stream.clone_htod(&vec![f32::NAN; t * k]).unwrap();
        let mut di = g.stream.clone_htod(&vec![-1i32; t * k]).unwrap();
        moe_gate(g, &dl, &mut dw, &mut di, (t, e, k)).unwrap();
        let (w, idx) = (g.stream.clone_dtoh(&dw).unwrap(), g.stream.clone_dtoh(&di).unwrap());
        for tok in 0..t {
            let x = &logits[tok * e..(tok + 1) * e];
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|&a, &b| x[b].total_cmp(&x[a]).then(a.cmp(&b)));
            let mx = x[order[0]] as f64;
            let sum: f64 = order[..k].iter().map(|&i| (x[i] as f64 - mx).exp()).sum();
            for (slot, &i) in order[..k].iter().enumerate() {
                assert_eq!(idx[tok * k + slot], i as i32, "T={t} E={e} token {tok} slot {slot}");
                let want = (x[i] as f64 - mx).exp() / sum;
                assert!(
                    (w[tok * k + slot] as f64 - want).abs() <= 1e-5 * want.max(1e-3),
                    "token {tok}: {} vs {want}",
                    w[tok * k + slot]
                );
            }
        }
        let err = moe_gate(g, &dl, &mut dw, &mut di, (t, e, e + 1)).unwrap_err();
        assert!(err.to_string().contains("k ="), "{err}");
    }
}

/// The tensor-core twin on the edges of its tiles (64-row query blocks,
/// 64- or 32-key blocks, d padded to 32/64/128): seq_q and seq_kv around
/// multiples of 16, 32 and 64, odd d, causal, padded kv_len, Q16 and int8
/// out, operands random, −128-heavy or all −128 (every score ties), and score
/// scales from gentle to steep (steep: the running maximum rises often, so
/// blocks split into many segments). check_attention poisons O and compares
/// the whole buffer.
#[test]
fn attention_twin_tile_edges_are_bit_exact() {
    let Some(mut dev) = gpu("attention_twin_tile_edges_are_bit_exact") else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let seqs = [1usize, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129];
    for case in 0..40 {
        let d = [1usize, 7, 16, 20, 32, 33, 64, 65, 96, 128][case % 10];
        let (seq_q, seq_kv) = (seqs[rng.gen_range(0..seqs.len())], seqs[rng.gen_range(0..seqs.len())] * 2 - 1);
        let batch = rng.gen_range(1..=2);
        let kv_len = rng.gen_bool(0.4).then(|| (0..batch).map(|_| rng.gen_range(1..=seq_kv)).collect());
        let scale = [1.0 / 32.0, 1.0 / 8.0, 0.5][case % 3];
        let out = [None, Some(1.0 / 16.0)][case % 2];
        let p = AttentionProblem {
            batch,
            heads: rng.gen_range(1..=2),
            seq_q,
            seq_kv,
            dim: d,
            causal: rng.gen(),
            kv_len,
            params: AttentionParams::from_scales(d, scale, scale, scale, out).unwrap(),
        };
        let mode = case % 4;
        let mut gen = |n: usize| -> Vec<i8> {
            (0..n)
                .map(|_| match mode {
                    0 => -128,
                    1 => {
                        if rng.gen_bool(0.5) {
                            -128
                        } else {
                            rng.gen()
                        }
                    }
                    _ => rng.gen(),
                })
                .collect()
        };
        let nh = p.heads_total();
        let (q, k, v) = (gen(nh * seq_q * d), gen(nh * seq_kv * d), gen(nh * seq_kv * d));
        check_attention(&mut dev, &p, &q, &k, &v).unwrap_or_else(|e| panic!("case {case}: {e}"));
    }
}

/// Long rows: past the fold of o mod 256 into o/256 (every 32768 keys), and at
/// the key limit with every score tied at the LUT's largest p and V = −128,
/// where o/256 comes within 0.3 % of −2^31; one key more is refused.
#[test]
fn attention_twin_long_rows_are_bit_exact() {
    let Some(mut dev) = gpu("attention_twin_long_rows_are_bit_exact") else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let mut p = attention_problem(16, 3, 40_000, true, None, None);
    p.causal = false;
    let n = |p: &AttentionProblem, s: usize| p.heads_total() * s * p.dim;
    let mut gen = |len: usize| -> Vec<i8> { (0..len).map(|_| rng.gen()).collect() };
    let (q, k, v) = (gen(n(&p, 3)), gen(n(&p, 40_000)), gen(n(&p, 40_000)));
    check_attention(&mut dev, &p, &q, &k, &v).unwrap();

    let (d, keys) = (2usize, 1usize << 17);
    let s = (d * 16384) as i64;
    let score = (1..)
        .map(|m| Requant { multiplier: (1 << 30) + m, shift: 36 })
        .find(|rq| ferrite_hw::numerics::round_shift(s * rq.multiplier as i64, rq.shift) & 255 == 255)
        .unwrap();
    let p = AttentionProblem {
        batch: 1,
        heads: 1,
        seq_q: 2,
        seq_kv: keys,
        dim: d,
        causal: false,
        kv_len: None,
        params: AttentionParams { score, out: None },
    };
    check_attention(&mut dev, &p, &[-128; 4], &vec![-128; keys * d], &vec![-128; keys * d]).unwrap();
    let over = AttentionProblem { seq_kv: keys + 1, ..p };
    assert!(matches!(dev.layout(&Problem::Attention(over)), Err(DeviceError::TooBig { .. })));
}

/// The int8 MoE decoder block (issue 17) on the GPU, bit for bit against its golden model.
#[test]
fn block_is_bit_exact() {
    if let Some(mut dev) = gpu("block_is_bit_exact") {
        common::block_is_bit_exact_on(&mut dev);
    }
}
