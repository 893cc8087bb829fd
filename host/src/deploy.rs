//! `ferrite deploy`: load a built image on its board and run a self-test of
//! the unit against the golden model.
//!
//! Alveo images load through XRT ([`crate::backend::xrt`], feature `xrt`);
//! PYNQ images through the Linux FPGA manager, a UIO control window and a
//! u-dma-buf region ([`crate::backend::pynq`], Linux only). Both then run the
//! same [`self_test`].
use crate::device::Device;
use crate::manifest::{LoadedManifest, Manifest, UnitConfig};
use crate::ops;
use anyhow::{bail, Context, Result};
use ferrite_hw::attention::{
    attention, AttentionConfig, AttentionLayout, AttentionOutput, AttentionParams, AttentionProblem,
};
use ferrite_hw::gemm::config::BUFFER_ALIGN;
use ferrite_hw::gemm::{gemm, GemmConfig, GemmLayout, GemmProblem};
use ferrite_hw::moe::{route, CapacityFactor, GateMode, MoeConfig, MoeLayout, MoeOutput, MoeProblem};
use ferrite_hw::numerics::Requant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// One self-test case and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct SelfTestCase {
    /// What the case runs, e.g. `17×19×7 bias` (GEMM) or `T=33 H=64 E=12 k=2 capacity` (MoE).
    pub problem: String,
    /// `None` when bit-exact with the golden model; else the first mismatch or error.
    pub failure: Option<String>,
    pub cycles: Option<u64>,
}

/// The GEMM self-test problems: K = 1, −128·−128 with a wrapping bias,
/// shapes that are not multiples of the array, requantization with
/// saturation, and one as large as the unit's buffers allow.
pub fn gemm_problems(cfg: &GemmConfig) -> Vec<GemmProblem> {
    let rq = Requant::from_scale(1.0 / 700.0);
    vec![
        GemmProblem::new(1, 1, 1),
        GemmProblem { bias: true, ..GemmProblem::new(cfg.rows + 1, cfg.cols + 3, 7) },
        GemmProblem {
            bias: true,
            relu: true,
            requant: rq,
            ..GemmProblem::new(2 * cfg.rows + 3, 3 * cfg.cols + 1, 129.min(cfg.k_max))
        },
        GemmProblem { requant: Some(Requant { multiplier: i32::MAX, shift: 24 }), ..GemmProblem::new(5, 5, cfg.k_max) },
    ]
}

/// The attention self-test problems: one query and one key; a padded causal
/// batch (per-entry key lengths) with int8 output whose first operands are
/// all −128 (the saturating extreme); more queries than lanes over a key
/// count that is not a multiple of anything.
pub fn attention_problems(cfg: &AttentionConfig) -> Vec<AttentionProblem> {
    let d = cfg.head_dim;
    let q16 = AttentionParams::from_scales(d, 0.05, 0.05, 0.05, None).expect("fixed scales are representable");
    let int8 = AttentionParams::from_scales(d, 0.05, 0.05, 0.05, Some(0.01)).expect("fixed scales are representable");
    let problem = |batch, heads, seq_q, seq_kv, params| AttentionProblem {
        batch,
        heads,
        seq_q,
        seq_kv,
        dim: d,
        causal: false,
        kv_len: None,
        params,
    };
    vec![
        problem(1, 1, 1, 1, q16),
        AttentionProblem { causal: true, kv_len: Some(vec![7, 3]), ..problem(2, 2, cfg.lanes + 1, 7, int8) },
        problem(1, 2, 2 * cfg.lanes + 3, 33, q16),
    ]
}

/// The MoE self-test problems: one token, one expert; a capacity limit that
/// drops choices, with a bias and top-k-then-softmax; every expert and
/// choice at `h_max` with all-−128 operands (every logit ties).
pub fn moe_problems(cfg: &MoeConfig) -> Vec<MoeProblem> {
    let new = |t, h, e, k, mode| MoeProblem::new(t, h, e, k, mode, 0.02, 0.01).expect("fixed scales are representable");
    let h = (3 * cfg.port_bytes() + 5).min(cfg.h_max);
    vec![
        new(1, 1, 1, 1, GateMode::SoftmaxTopk),
        MoeProblem {
            capacity: Some(CapacityFactor::from_f64(1.0).expect("1.0 is a valid capacity factor")),
            bias: true,
            ..new(33, h, cfg.e_max, 2.min(cfg.k_max), GateMode::TopkSoftmax)
        },
        MoeProblem { renormalize: true, ..new(17, cfg.h_max, cfg.e_max, cfg.k_max, GateMode::SoftmaxTopk) },
    ]
}

/// Run the unit's self-test on `dev`; operands are seeded random with −128 included.
pub fn self_test(dev: &mut dyn Device, unit: &UnitConfig) -> Vec<SelfTestCase> {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    match unit {
        UnitConfig::Gemm(cfg) => {
            gemm_problems(cfg).into_iter().enumerate().map(|(i, p)| gemm_case(dev, &mut rng, i, p)).collect()
        }
        UnitConfig::Attention(cfg) => {
            attention_problems(cfg).into_iter().enumerate().map(|(i, p)| attention_case(dev, &mut rng, i, p)).collect()
        }
        UnitConfig::Moe(cfg) => {
            moe_problems(cfg).into_iter().enumerate().map(|(i, p)| moe_case(dev, &mut rng, i, p)).collect()
        }
    }
}

/// Operands of `n` elements: all −128 for the extreme case, else seeded random.
fn operands(rng: &mut ChaCha8Rng, n: usize, extreme: bool) -> Vec<i8> {
    if extreme {
        vec![-128; n]
    } else {
        (0..n).map(|_| rng.gen()).collect()
    }
}

/// The failure text and cycles of a device run against its golden result.
fn outcome<T>(
    run: Result<(T, crate::device::RunStats), crate::device::DeviceError>,
    golden: Result<T, ferrite_hw::HwError>,
    mismatch: impl Fn(&T, &T) -> Option<String>,
) -> (Option<String>, Option<u64>) {
    match (run, golden) {
        (Ok((out, stats)), Ok(want)) => (mismatch(&out, &want), stats.cycles.map(|c| c.cycles)),
        (Err(e), _) => (Some(e.to_string()), None),
        (_, Err(e)) => (Some(format!("golden model: {e}")), None),
    }
}

fn gemm_case(dev: &mut dyn Device, rng: &mut ChaCha8Rng, i: usize, p: GemmProblem) -> SelfTestCase {
    let (a, b) = (operands(rng, p.m * p.k, i == 1), operands(rng, p.k * p.n, i == 1));
    let bias: Option<Vec<i32>> = p.bias.then(|| (0..p.n).map(|j| if j == 0 { i32::MAX } else { rng.gen() }).collect());
    let (failure, cycles) =
        outcome(ops::gemm(dev, &p, &a, &b, bias.as_deref()), gemm(&p, &a, &b, bias.as_deref()), |out, want| {
            out.first_mismatch(want).map(|(i, got, exp)| format!("element {i}: got {got}, golden {exp}"))
        });
    let epilogue = [(p.bias, " bias"), (p.relu, " relu"), (p.requant.is_some(), " requant")]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, s)| *s)
        .collect::<String>();
    SelfTestCase { problem: format!("{}×{}×{}{epilogue}", p.m, p.n, p.k), failure, cycles }
}

fn attention_case(dev: &mut dyn Device, rng: &mut ChaCha8Rng, i: usize, p: AttentionProblem) -> SelfTestCase {
    let (nq, nkv) = (p.heads_total() * p.seq_q * p.dim, p.heads_total() * p.seq_kv * p.dim);
    let extreme = i == 1;
    let (q, k, v) = (operands(rng, nq, extreme), operands(rng, nkv, extreme), operands(rng, nkv, false));
    let (failure, cycles) = outcome(ops::attention(dev, &p, &q, &k, &v), attention(&p, &q, &k, &v), attention_mismatch);
    let out = if p.params.out.is_some() { "int8" } else { "Q16" };
    SelfTestCase {
        problem: format!(
            "{}×{} heads, {}×{} keys, d={} {out}{}{}",
            p.batch,
            p.heads,
            p.seq_q,
            p.seq_kv,
            p.dim,
            if p.causal { " causal" } else { "" },
            if p.kv_len.is_some() { " kv_len" } else { "" }
        ),
        failure,
        cycles,
    }
}

fn attention_mismatch(out: &AttentionOutput, want: &AttentionOutput) -> Option<String> {
    if std::mem::discriminant(out) != std::mem::discriminant(want) || out.len() != want.len() {
        return Some(format!("output kind/length differ ({} vs golden {} elements)", out.len(), want.len()));
    }
    (0..out.len())
        .find(|&i| out.get(i) != want.get(i))
        .map(|i| format!("element {i}: got {}, golden {}", out.get(i), want.get(i)))
}

fn moe_case(dev: &mut dyn Device, rng: &mut ChaCha8Rng, i: usize, p: MoeProblem) -> SelfTestCase {
    let extreme = i == 2;
    let (x, w) = (operands(rng, p.tokens * p.hidden, extreme), operands(rng, p.experts * p.hidden, extreme));
    let bias: Option<Vec<i32>> = p.bias.then(|| (0..p.experts).map(|_| rng.gen_range(-5000..5000)).collect());
    let (failure, cycles) =
        outcome(ops::moe(dev, &p, &x, &w, bias.as_deref()), route(&p, &x, &w, bias.as_deref()), moe_mismatch);
    SelfTestCase {
        problem: format!(
            "T={} H={} E={} k={} {:?}{}{}{}",
            p.tokens,
            p.hidden,
            p.experts,
            p.top_k,
            p.mode,
            if p.renormalize { " renormalize" } else { "" },
            if p.capacity.is_some() { " capacity" } else { "" },
            if p.bias { " bias" } else { "" }
        ),
        failure,
        cycles,
    }
}

/// The first field of the routing result that differs from the golden one.
fn moe_mismatch(out: &MoeOutput, want: &MoeOutput) -> Option<String> {
    fn first<T: PartialEq + std::fmt::Debug>(name: &str, a: &[T], b: &[T]) -> Option<String> {
        if a.len() != b.len() {
            return Some(format!("{name}: {} entries, golden {}", a.len(), b.len()));
        }
        a.iter().zip(b).position(|(x, y)| x != y).map(|i| format!("{name}[{i}]: got {:?}, golden {:?}", a[i], b[i]))
    }
    first("experts", &out.experts, &want.experts)
        .or_else(|| first("weights", &out.weights, &want.weights))
        .or_else(|| first("slots", &out.slots, &want.slots))
        .or_else(|| first("load", &out.load, &want.load))
        .or_else(|| first("dropped", &[out.dropped], &[want.dropped]))
        .or_else(|| first("capacity", &[out.capacity], &[want.capacity]))
        .or_else(|| first("dispatch", &out.dispatch, &want.dispatch))
}

/// Bytes of DMA memory the self-test needs at once: its largest case's
/// buffers, each rounded up to the [`BUFFER_ALIGN`] pages drivers give them.
pub fn self_test_dma_bytes(unit: &UnitConfig) -> u64 {
    let page = |b: u64| b.max(1).div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN;
    let sizes: Vec<u64> = match unit {
        UnitConfig::Gemm(cfg) => gemm_problems(cfg)
            .iter()
            .map(|p| {
                let l = GemmLayout::new(cfg, p);
                page(l.a_bytes) + page(l.b_bytes) + if p.bias { page(l.bias_bytes) } else { 0 } + page(l.c_bytes)
            })
            .collect(),
        UnitConfig::Attention(cfg) => attention_problems(cfg)
            .iter()
            .map(|p| {
                let l = AttentionLayout::new(p, cfg.port_bytes() as u64);
                let kv_len = if p.kv_len.is_some() { page(l.kv_len_bytes) } else { 0 };
                page(l.q_bytes) + 2 * page(l.kv_bytes) + page(l.o_bytes) + kv_len
            })
            .collect(),
        UnitConfig::Moe(cfg) => moe_problems(cfg)
            .iter()
            .map(|p| {
                let l = MoeLayout::new(cfg, p);
                let bias = if p.bias { page(l.bias_bytes) } else { 0 };
                page(l.x_bytes)
                    + page(l.w_bytes)
                    + bias
                    + page(l.route_bytes)
                    + page(l.dispatch_bytes)
                    + page(l.stats_bytes)
            })
            .collect(),
    };
    sizes.into_iter().max().unwrap_or(0)
}

fn load(manifest: &Path) -> Result<LoadedManifest> {
    Manifest::load(manifest).with_context(|| format!("loading {}", manifest.display()))
}

/// Load the manifest, open its board, run the self-test; `Err` unless every case is bit-exact.
pub fn deploy(manifest: &Path, device: Option<&str>) -> Result<Vec<SelfTestCase>> {
    let loaded = load(manifest)?;
    let mut dev = if loaded.manifest.board.is_alveo() {
        open_alveo(&loaded, device)?
    } else {
        if let Some(d) = device {
            bail!(
                "--device {d}: a {} has one programmable logic region; --device picks an XRT card",
                loaded.manifest.board
            );
        }
        open_pynq(&loaded, &Default::default())?
    };
    run_self_test(&loaded, dev.as_mut())
}

/// [`deploy`] for a PYNQ image with explicit filesystem roots and timeout (a fake tree in tests).
#[cfg(target_os = "linux")]
pub fn deploy_pynq(manifest: &Path, options: &crate::backend::pynq::PynqOptions) -> Result<Vec<SelfTestCase>> {
    let loaded = load(manifest)?;
    let mut dev = open_pynq(&loaded, options)?;
    run_self_test(&loaded, dev.as_mut())
}

fn run_self_test(loaded: &LoadedManifest, dev: &mut dyn Device) -> Result<Vec<SelfTestCase>> {
    let cases = self_test(dev, &loaded.manifest.unit);
    let failed: Vec<&SelfTestCase> = cases.iter().filter(|c| c.failure.is_some()).collect();
    if let Some(first) = failed.first() {
        bail!(
            "self-test on {}: {} of {} cases failed (first, {}: {})",
            dev.info().name,
            failed.len(),
            cases.len(),
            first.problem,
            first.failure.as_deref().unwrap_or_default()
        );
    }
    Ok(cases)
}

#[cfg(target_os = "linux")]
fn open_pynq(loaded: &LoadedManifest, options: &crate::backend::pynq::PynqOptions) -> Result<Box<dyn Device>> {
    use crate::backend::pynq::{PynqDevice, PynqOptions};
    let need = self_test_dma_bytes(&loaded.manifest.unit);
    let options = PynqOptions { min_dma_bytes: options.min_dma_bytes.max(need), ..options.clone() };
    // Flattened into one message: DeviceError::Backend's source repeats its text in an error chain.
    let dev = PynqDevice::open(loaded, &options)
        .map_err(|e| anyhow::anyhow!("loading {} on the {}: {e}", loaded.manifest.kernel, loaded.manifest.board))?;
    Ok(Box::new(dev))
}

#[cfg(not(target_os = "linux"))]
fn open_pynq(loaded: &LoadedManifest, _options: &()) -> Result<Box<dyn Device>> {
    Err(crate::device::DeviceError::MissingTool {
        tool: "the pynq backend",
        hint: format!(
            "the {} image loads through the Linux FPGA manager and UIO; run ferrite on the board",
            loaded.manifest.board
        ),
    }
    .into())
}

#[cfg(feature = "xrt")]
fn open_alveo(loaded: &LoadedManifest, device: Option<&str>) -> Result<Box<dyn Device>> {
    use crate::backend::xrt::{XrtDevice, XrtTarget};
    let target: XrtTarget = device.unwrap_or("0").parse().map_err(|e: String| anyhow::anyhow!(e))?;
    Ok(Box::new(XrtDevice::open(&target, loaded)?))
}

#[cfg(not(feature = "xrt"))]
fn open_alveo(loaded: &LoadedManifest, _device: Option<&str>) -> Result<Box<dyn Device>> {
    Err(crate::device::DeviceError::MissingTool {
        tool: "the xrt backend",
        hint: format!("the {} image loads through XRT; rebuild ferrite with `--features xrt`", loaded.manifest.board),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{CpuDevice, CpuMode};

    #[test]
    fn self_test_passes_on_the_golden_model() {
        let units = [
            (UnitConfig::Gemm(GemmConfig::small(2, 2)), 4),
            (
                UnitConfig::Attention(AttentionConfig {
                    head_dim: 16,
                    lanes: 2,
                    dot_par: 16,
                    port_bits: 128,
                    ..Default::default()
                }),
                3,
            ),
            (UnitConfig::Moe(MoeConfig::small()), 3),
        ];
        for (unit, n) in units {
            let cases = self_test(&mut CpuDevice::new(CpuMode::Fast), &unit);
            assert_eq!(cases.len(), n);
            assert!(cases.iter().all(|c| c.failure.is_none()), "{cases:?}");
            assert!(self_test_dma_bytes(&unit) >= 4 * BUFFER_ALIGN, "{}", unit.name());
        }
    }
}
