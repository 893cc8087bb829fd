//! The fast CPU path must be bit-exact with the golden model, through the
//! Device API as well as directly.
use ferrite_host::backend::cpu::{gemm_fast, CpuDevice, CpuMode};
use ferrite_host::{ops, DeviceError};
use ferrite_hw::gemm::{gemm, GemmProblem};
use ferrite_hw::numerics::Requant;
use proptest::prelude::*;

/// Operands biased towards the extremes (-128, 127) so saturation and the
/// asymmetric int8 minimum are exercised, not just typical values.
fn int8s(len: usize) -> impl Strategy<Value = Vec<i8>> {
    prop::collection::vec(prop_oneof![Just(-128i8), Just(127i8), any::<i8>()], len)
}

fn problem() -> impl Strategy<Value = GemmProblem> {
    let requant = prop_oneof![
        Just(None),
        (any::<i32>(), 0u32..=62).prop_map(|(multiplier, shift)| Some(Requant { multiplier, shift })),
        (1i32 << 20..1 << 30, 20u32..40).prop_map(|(multiplier, shift)| Some(Requant { multiplier, shift })),
    ];
    (1usize..=24, 1usize..=24, prop_oneof![Just(1usize), 1usize..=80], any::<bool>(), any::<bool>(), requant)
        .prop_map(|(m, n, k, bias, relu, requant)| GemmProblem { bias, relu, requant, ..GemmProblem::new(m, n, k) })
}

type Case = (GemmProblem, Vec<i8>, Vec<i8>, Option<Vec<i32>>);

fn case() -> impl Strategy<Value = Case> {
    problem().prop_flat_map(|p| {
        let bias = prop::collection::vec(prop_oneof![Just(i32::MIN), Just(i32::MAX), any::<i32>()], p.n);
        (Just(p), int8s(p.m * p.k), int8s(p.k * p.n), bias.prop_map(move |b| p.bias.then_some(b)))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn fast_equals_golden((p, a, b, bias) in case()) {
        let golden = gemm(&p, &a, &b, bias.as_deref()).unwrap();
        prop_assert_eq!(gemm_fast(&p, &a, &b, bias.as_deref()).unwrap(), golden.clone());
        for mode in [CpuMode::Golden, CpuMode::Fast] {
            let (out, stats) = ops::gemm(&mut CpuDevice::new(mode), &p, &a, &b, bias.as_deref()).unwrap();
            prop_assert_eq!(&out, &golden);
            prop_assert_eq!(stats.useful_macs, p.macs());
            prop_assert!(stats.cycles.is_none());
        }
    }
}

#[test]
fn int32_accumulator_wraps_like_the_unit() {
    // 2^17 products of (-128)·(-128) = 2^31: one past i32::MAX, so the sum wraps.
    let k = 1 << 17;
    let p = GemmProblem::new(1, 1, k);
    let (a, b) = (vec![-128i8; k], vec![-128i8; k]);
    let golden = gemm(&p, &a, &b, None).unwrap();
    assert_eq!(golden.get(0), i32::MIN);
    assert_eq!(gemm_fast(&p, &a, &b, None).unwrap(), golden);
}

#[test]
fn shape_errors_are_refused() {
    let mut dev = CpuDevice::new(CpuMode::Fast);
    let p = GemmProblem::new(2, 3, 4);
    let err = ops::gemm(&mut dev, &p, &[0; 7], &[0; 12], None).unwrap_err();
    assert!(matches!(err, DeviceError::Problem(ref m) if m.contains("A has 7 elements")), "{err}");
    let err = ops::gemm(&mut dev, &p, &[0; 8], &[0; 12], Some(&[0; 3])).unwrap_err();
    assert!(err.to_string().contains("bias given but the bias flag is off"), "{err}");
    let err = ops::gemm(&mut dev, &GemmProblem::new(0, 3, 4), &[], &[0; 12], None).unwrap_err();
    assert!(err.to_string().contains("must be ≥ 1"), "{err}");
}

/// A launch whose layout does not hold the problem is an error, never a panic or a short write.
#[test]
fn attention_layouts_too_small_are_refused() {
    use ferrite_host::device::AttentionArgs;
    use ferrite_host::{Device, Launch, Layout, Problem};
    use ferrite_hw::attention::{AttentionParams, AttentionProblem};
    let p = AttentionProblem {
        batch: 2,
        heads: 1,
        seq_q: 4,
        seq_kv: 4,
        dim: 8,
        causal: false,
        kv_len: Some(vec![4, 2]),
        params: AttentionParams::from_scales(8, 0.1, 0.1, 0.1, None).unwrap(),
    };
    let mut dev = CpuDevice::new(CpuMode::Golden);
    let Layout::Attention(l) = dev.layout(&Problem::Attention(p.clone())).unwrap() else { panic!("layout kind") };
    let mut buf = |n: u64| dev.alloc(n).unwrap();
    let args = AttentionArgs {
        problem: p,
        layout: l,
        q: buf(l.q_bytes),
        k: buf(l.kv_bytes),
        v: buf(l.kv_bytes),
        o: buf(l.o_bytes),
        kv_len: Some(buf(l.kv_len_bytes)),
    };
    let msg = |dev: &mut CpuDevice, a: AttentionArgs| dev.launch(&Launch::Attention(a)).unwrap_err().to_string();
    let small_stride =
        AttentionArgs { layout: ferrite_hw::attention::AttentionLayout { o_stride: 16, ..l }, ..args.clone() };
    assert!(msg(&mut dev, small_stride).contains("O head stride 16 is below a head's 128 bytes"));
    let short_o = AttentionArgs { o: dev.alloc(8).unwrap(), ..args.clone() };
    assert!(msg(&mut dev, short_o).contains("buffer O has 8 bytes"));
    let no_lens = AttentionArgs { kv_len: None, ..args.clone() };
    assert!(msg(&mut dev, no_lens).contains("exactly when kv_len is"));
    dev.launch(&Launch::Attention(args)).unwrap();
}
