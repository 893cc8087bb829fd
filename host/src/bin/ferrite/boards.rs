//! `--device opencl|xrt|pynq` for `ferrite run`: user data on an OpenCL
//! device, an Alveo card (XRT) or a PYNQ board, each opened from the image a
//! build wrote (`--manifest`), with the same npy in/out and golden check as
//! the other devices. A backend left out of the build is a one-line error
//! that names the `cargo` command adding it.
use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite_host::clock::Clock;
use ferrite_host::manifest::{LoadedManifest, Manifest};
use ferrite_host::Device;
use std::path::{Path, PathBuf};

/// Where to find a board device.
#[derive(Args)]
pub(super) struct BoardArgs {
    /// manifest.json of a deployed image (`ferrite bitstream build`): needed by xrt and
    /// pynq, and by opencl on a Xilinx platform.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// XRT card: index in `xbutil examine` or PCIe BDF such as 0000:65:00.1 (default 0).
    #[arg(long)]
    card: Option<String>,
    /// OpenCL device: its index in the OpenCL rows of `ferrite devices` (default 0).
    #[arg(long, default_value_t = 0)]
    opencl_device: usize,
    /// Root of the PYNQ board's filesystem (sysfs, /dev, /lib/firmware): `/` on a board.
    #[arg(long, default_value = "/", hide = true)]
    pynq_root: PathBuf,
}

/// The manifest of `--manifest`, checked to hold `unit` (gemm, attention, moe).
fn manifest(args: &BoardArgs, device: &str, unit: &str) -> Result<LoadedManifest> {
    let path = args
        .manifest
        .as_deref()
        .with_context(|| format!("--device {device} needs --manifest DIR/manifest.json of a built image"))?;
    let loaded = Manifest::load(path).with_context(|| format!("loading {}", path.display()))?;
    let held = loaded.manifest.unit.name();
    if held != unit {
        bail!("{} holds the {held} unit: run it with `ferrite run {held}`", path.display());
    }
    Ok(loaded)
}

/// The clock of the image `--manifest` names, as its build recorded it (see [`Clock::of_image`]).
pub(super) fn image_clock(args: &BoardArgs, device: &str, unit: &str) -> Result<Clock> {
    Ok(Clock::of_image(&manifest(args, device, unit)?.manifest))
}

/// The error of a backend this ferrite was built without.
#[cfg(not(all(feature = "opencl", feature = "xrt")))]
fn not_built(device: &str, feature: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "--device {device}: this ferrite was built without the `{feature}` feature; rebuild with \
         `cargo install --path host --features {feature}` (or `cargo build -p ferrite-host --features {feature}`)"
    )
}

/// OpenCL device `--opencl-device` (counted over every platform, as `ferrite devices` lists them).
pub(super) fn open_opencl(args: &BoardArgs, unit: &str) -> Result<Box<dyn Device>> {
    #[cfg(feature = "opencl")]
    {
        use ferrite_host::backend::opencl::{list, OpenClDevice};
        let devices = list()?;
        let d = devices.get(args.opencl_device).with_context(|| {
            format!(
                "--opencl-device {}: {} OpenCL devices found (`ferrite devices` lists them)",
                args.opencl_device,
                devices.len()
            )
        })?;
        let image = args.manifest.as_ref().map(|_| manifest(args, "opencl", unit)).transpose()?;
        Ok(Box::new(OpenClDevice::open(d.platform_index, d.device_index, image.as_ref())?))
    }
    #[cfg(not(feature = "opencl"))]
    {
        let _ = (args, unit);
        Err(not_built("opencl", "opencl"))
    }
}

/// The Alveo card `--card` with the image of `--manifest`.
pub(super) fn open_xrt(args: &BoardArgs, unit: &str) -> Result<Box<dyn Device>> {
    #[cfg(feature = "xrt")]
    {
        use ferrite_host::backend::xrt::{XrtDevice, XrtTarget};
        let image = manifest(args, "xrt", unit)?;
        let target: XrtTarget =
            args.card.as_deref().unwrap_or("0").parse().map_err(|e: String| anyhow::anyhow!("--card {e}"))?;
        Ok(Box::new(XrtDevice::open(&target, &image)?))
    }
    #[cfg(not(feature = "xrt"))]
    {
        let _ = (args, unit);
        Err(not_built("xrt", "xrt"))
    }
}

/// The PYNQ board's programmable logic, programmed with the image of `--manifest`.
pub(super) fn open_pynq(args: &BoardArgs, unit: &str) -> Result<Box<dyn Device>> {
    let image = manifest(args, "pynq", unit)?;
    open_pynq_image(&image, &args.pynq_root)
}

#[cfg(target_os = "linux")]
fn open_pynq_image(image: &LoadedManifest, root: &Path) -> Result<Box<dyn Device>> {
    use ferrite_host::backend::pynq::{PynqDevice, PynqOptions, PynqPaths};
    let options = PynqOptions { paths: PynqPaths::under(root), ..PynqOptions::default() };
    // One line: DeviceError::Backend's source repeats its text in an error chain.
    let dev = PynqDevice::open(image, &options)
        .map_err(|e| anyhow::anyhow!("loading {} on the {}: {e}", image.manifest.kernel, image.manifest.board))?;
    Ok(Box::new(dev))
}

#[cfg(not(target_os = "linux"))]
fn open_pynq_image(image: &LoadedManifest, _root: &Path) -> Result<Box<dyn Device>> {
    bail!("the {} image loads through the Linux FPGA manager and UIO: run ferrite on the board", image.manifest.board)
}
