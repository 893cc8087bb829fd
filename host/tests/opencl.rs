//! The OpenCL C port of the GEMM unit (`kernels/opencl/gemm.cl`) is bit-exact
//! with the golden model, on whatever non-Xilinx OpenCL device is first (PoCL
//! in CI). Output buffers are poisoned before every run by `ops::gemm`.
#![cfg(feature = "opencl")]
use ferrite_host::backend::opencl::{list, OpenClDevice};
use ferrite_host::{ops, Device};
use ferrite_hw::gemm::{gemm, GemmProblem};
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
