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
use ferrite_hw::gemm::config::BUFFER_ALIGN;
use ferrite_hw::gemm::{gemm, GemmConfig, GemmLayout, GemmProblem};
use ferrite_hw::numerics::Requant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// One self-test case and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct SelfTestCase {
    pub problem: GemmProblem,
    /// `None` when bit-exact with the golden model; else the first mismatch or error.
    pub failure: Option<String>,
    pub cycles: Option<u64>,
}

/// The problems of the self-test: K = 1, −128·−128 with a wrapping bias,
/// shapes that are not multiples of the array, requantization with
/// saturation, and one as large as the unit's buffers allow.
pub fn self_test_problems(cfg: &GemmConfig) -> Vec<GemmProblem> {
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

/// Run the self-test on `dev`; operands are seeded random with −128 included.
pub fn self_test(dev: &mut dyn Device, cfg: &GemmConfig) -> Vec<SelfTestCase> {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    self_test_problems(cfg)
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let (a, b): (Vec<i8>, Vec<i8>) = if i == 1 {
                (vec![-128; p.m * p.k], vec![-128; p.k * p.n])
            } else {
                ((0..p.m * p.k).map(|_| rng.gen()).collect(), (0..p.k * p.n).map(|_| rng.gen()).collect())
            };
            let bias: Option<Vec<i32>> =
                p.bias.then(|| (0..p.n).map(|j| if j == 0 { i32::MAX } else { rng.gen() }).collect());
            let run = ops::gemm(dev, &p, &a, &b, bias.as_deref());
            let golden = gemm(&p, &a, &b, bias.as_deref());
            let (failure, cycles) = match (run, golden) {
                (Ok((out, stats)), Ok(want)) => (
                    out.first_mismatch(&want).map(|(i, got, exp)| format!("element {i}: got {got}, golden {exp}")),
                    stats.cycles.map(|c| c.cycles),
                ),
                (Err(e), _) => (Some(e.to_string()), None),
                (_, Err(e)) => (Some(format!("golden model: {e}")), None),
            };
            SelfTestCase { problem: p, failure, cycles }
        })
        .collect()
}

/// Bytes of DMA memory the self-test needs at once: its largest case's
/// buffers, each rounded up to the [`BUFFER_ALIGN`] pages drivers give them.
pub fn self_test_dma_bytes(cfg: &GemmConfig) -> u64 {
    let page = |b: u64| b.max(1).div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN;
    self_test_problems(cfg)
        .iter()
        .map(|p| {
            let l = GemmLayout::new(cfg, p);
            page(l.a_bytes) + page(l.b_bytes) + if p.bias { page(l.bias_bytes) } else { 0 } + page(l.c_bytes)
        })
        .max()
        .unwrap_or(0)
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
    let UnitConfig::Gemm(cfg) = &loaded.manifest.unit;
    let cases = self_test(dev, cfg);
    let failed: Vec<&SelfTestCase> = cases.iter().filter(|c| c.failure.is_some()).collect();
    if let Some(first) = failed.first() {
        let p = &first.problem;
        bail!(
            "self-test on {}: {} of {} cases failed (first, {}×{}×{}: {})",
            dev.info().name,
            failed.len(),
            cases.len(),
            p.m,
            p.n,
            p.k,
            first.failure.as_deref().unwrap_or_default()
        );
    }
    Ok(cases)
}

#[cfg(target_os = "linux")]
fn open_pynq(loaded: &LoadedManifest, options: &crate::backend::pynq::PynqOptions) -> Result<Box<dyn Device>> {
    use crate::backend::pynq::{PynqDevice, PynqOptions};
    let UnitConfig::Gemm(cfg) = &loaded.manifest.unit;
    let options = PynqOptions { min_dma_bytes: options.min_dma_bytes.max(self_test_dma_bytes(cfg)), ..options.clone() };
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
        let cfg = GemmConfig::small(2, 2);
        let cases = self_test(&mut CpuDevice::new(CpuMode::Fast), &cfg);
        assert_eq!(cases.len(), 4);
        assert!(cases.iter().all(|c| c.failure.is_none()), "{cases:?}");
    }
}
