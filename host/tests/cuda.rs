//! CUDA backend tests. On a machine without a GPU (or driver) each test prints
//! why it skipped and passes; on the GPU machine they run for real
//! (`scripts/gpu-bundle.sh` builds this binary for it).
#![cfg(feature = "cuda")]
use ferrite_host::backend::cuda::float::{flash_attention, from_bf16, gemm_bf16, moe_gate, to_bf16};
use ferrite_host::backend::cuda::CudaDevice;
use ferrite_host::device::{Buffer, GemmArgs};
use ferrite_host::{ops, Device, DeviceError, Launch, Layout, Problem};
use ferrite_hw::attention::{attention, AttentionParams, AttentionProblem};
use ferrite_hw::gemm::{gemm, GemmProblem};
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

fn check_gemm(dev: &mut CudaDevice, p: &GemmProblem, a: &[i8], b: &[i8], bias: Option<&[i32]>) -> Result<(), String> {
    let want = gemm(p, a, b, bias).map_err(|e| e.to_string())?;
    let (got, _) = ops::gemm(dev, p, a, b, bias).map_err(|e| e.to_string())?;
    match got.first_mismatch(&want) {
        None => Ok(()),
        Some((i, g, w)) => Err(format!("{p:?}: first mismatch at ({}, {}): cuda {g}, golden {w}", i / p.n, i % p.n)),
    }
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
            let want = attention(&p, &q, &k, &v).unwrap();
            let (got, _) = dev.attention(&p, &q, &k, &v).unwrap();
            assert_eq!(got.len(), want.len());
            if let Some(i) = (0..want.len()).find(|&i| got.get(i) != want.get(i)) {
                panic!("{p:?} extreme={extreme}: element {i}: cuda {}, golden {}", got.get(i), want.get(i));
            }
        }
    }
    let bad = attention_problem(16, 2, 3, false, None, None);
    assert!(dev.attention(&bad, &[0; 10], &[0; 96], &[0; 96]).unwrap_err().to_string().contains("Q has 10"));
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

    let (m, n, k) = (256, 384, 192);
    let (a, b) = (bf(m * k), bf(n * k));
    let (da, db) = (g.stream.clone_htod(&a).unwrap(), g.stream.clone_htod(&b).unwrap());
    let mut dc = g.stream.clone_htod(&vec![0xffffu16; m * n]).unwrap();
    gemm_bf16(g, &da, &db, &mut dc, (m, n, k)).unwrap();
    let c = g.stream.clone_dtoh(&dc).unwrap();
    let want: Vec<f64> = (0..m * n).map(|i| (0..k).map(|x| f(a[i / n * k + x]) * f(b[i % n * k + x])).sum()).collect();
    let err = rel(&c.iter().map(|&x| f(x)).collect::<Vec<_>>(), &want);
    assert!(err < 1e-2, "bf16 GEMM rel err {err}");
    assert!(gemm_bf16(g, &da, &db, &mut dc, (100, n, k)).is_err());

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
