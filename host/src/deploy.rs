//! `ferrite deploy`: load a built image on its board and run a self-test of
//! the unit against the golden model.
//!
//! Alveo images load through XRT ([`crate::backend::xrt`], feature `xrt`).
//! PYNQ images need the Linux FPGA manager, a UIO device for the control
//! window and a udmabuf DMA buffer; this build checks those are present and
//! says which is missing, but does not yet drive a unit through them.
use crate::device::{Device, DeviceError};
use crate::manifest::{LoadedManifest, Manifest, UnitConfig};
use crate::ops;
use anyhow::{bail, Context, Result};
use ferrite_hw::gemm::{gemm, GemmConfig, GemmProblem};
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

/// Load the manifest, open its board, run the self-test; `Err` unless every case is bit-exact.
pub fn deploy(manifest: &Path, device: Option<&str>) -> Result<Vec<SelfTestCase>> {
    let loaded = Manifest::load(manifest).with_context(|| format!("loading {}", manifest.display()))?;
    let UnitConfig::Gemm(cfg) = &loaded.manifest.unit;
    let mut dev = open(&loaded, device)?;
    let cases = self_test(dev.as_mut(), cfg);
    let failed = cases.iter().filter(|c| c.failure.is_some()).count();
    if failed > 0 {
        let first = cases.iter().find_map(|c| c.failure.clone()).unwrap_or_default();
        bail!("self-test: {failed} of {} cases differ from the golden model (first: {first})", cases.len());
    }
    Ok(cases)
}

fn open(loaded: &LoadedManifest, device: Option<&str>) -> Result<Box<dyn Device>> {
    let board = loaded.manifest.board;
    if board.is_alveo() {
        return open_alveo(loaded, device);
    }
    check_pynq_platform(Path::new("/"))?;
    bail!(
        "the {board} image's platform checks passed, but loading through the FPGA manager and \
         driving the unit over UIO and udmabuf is not implemented in this ferrite yet"
    )
}

#[cfg(feature = "xrt")]
fn open_alveo(loaded: &LoadedManifest, device: Option<&str>) -> Result<Box<dyn Device>> {
    use crate::backend::xrt::{XrtDevice, XrtTarget};
    let target: XrtTarget = device.unwrap_or("0").parse().map_err(|e: String| anyhow::anyhow!(e))?;
    Ok(Box::new(XrtDevice::open(&target, loaded)?))
}

#[cfg(not(feature = "xrt"))]
fn open_alveo(loaded: &LoadedManifest, _device: Option<&str>) -> Result<Box<dyn Device>> {
    Err(DeviceError::MissingTool {
        tool: "the xrt backend",
        hint: format!("the {} image loads through XRT; rebuild ferrite with `--features xrt`", loaded.manifest.board),
    }
    .into())
}

/// What a PYNQ deploy needs from the running Linux, under `root` (`/` on a
/// board; a fake tree in tests): the FPGA manager to load the bitstream, UIO
/// for the control window, and a udmabuf device for DMA buffers.
pub fn check_pynq_platform(root: &Path) -> Result<(), DeviceError> {
    let need = |path: &str, what: &str, hint: &str| -> Result<(), DeviceError> {
        if root.join(path).exists() {
            Ok(())
        } else {
            Err(DeviceError::MissingTool {
                tool: "PYNQ platform",
                hint: format!("no {what} (/{path} missing): {hint}"),
            })
        }
    };
    need("sys/class/fpga_manager/fpga0", "FPGA manager", "not a Zynq board, or its kernel lacks FPGA manager support")?;
    need("sys/class/uio", "UIO", "load the uio_pdrv_genirq driver with a device-tree node for the unit")?;
    need("dev/udmabuf0", "udmabuf DMA buffer", "load the u-dma-buf module (PYNQ images ship it)")
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

    #[test]
    fn pynq_checks_name_what_is_missing() {
        let root = tempfile::tempdir().unwrap();
        let e = check_pynq_platform(root.path()).unwrap_err().to_string();
        assert!(e.contains("no FPGA manager"), "{e}");
        std::fs::create_dir_all(root.path().join("sys/class/fpga_manager/fpga0")).unwrap();
        std::fs::create_dir_all(root.path().join("sys/class/uio")).unwrap();
        let e = check_pynq_platform(root.path()).unwrap_err().to_string();
        assert!(e.contains("udmabuf"), "{e}");
    }
}
