//! Energy: measured on the CPU (RAPL) and the GPU (NVML), estimated for the
//! FPGA from a documented power model (see docs/compare.md).
//!
//! A meter brackets a timed loop of launches: [`Meter::start`] before,
//! [`Meter::stop`] after, and the joules are divided by the launches. Neither
//! meter isolates our process: RAPL counts the whole CPU package, NVML the
//! whole GPU board, so figures include whatever else was running.
use super::report::Resources;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running energy measurement.
pub trait Meter {
    /// What is measured, for the report ("RAPL package 0 (whole CPU package)").
    fn source(&self) -> String;
    fn start(&mut self) -> Result<()>;
    /// Joules since [`Meter::start`].
    fn stop(&mut self) -> Result<f64>;
}

/// RAPL package 0 through the powercap sysfs interface.
pub struct Rapl {
    dir: PathBuf,
    /// Counter range; the counter wraps to 0 past it.
    max_uj: u64,
    start_uj: Option<u64>,
}

/// Where Linux exposes RAPL package 0.
pub const RAPL_DIR: &str = "/sys/class/powercap/intel-rapl:0";

impl Rapl {
    /// Package 0 in `dir` (normally [`RAPL_DIR`]); an error says why it is unusable
    /// (absent: no Intel/AMD RAPL driver or a VM; unreadable: root-only since CVE-2020-8694).
    pub fn open(dir: &Path) -> Result<Self> {
        let file = dir.join("energy_uj");
        if !file.exists() {
            bail!("RAPL not available: {} does not exist (no powercap RAPL driver, e.g. in a VM)", file.display());
        }
        let read = |name: &str| -> Result<u64> {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    anyhow::anyhow!("RAPL not readable: {} needs root (restricted since CVE-2020-8694)", path.display())
                }
                _ => anyhow::anyhow!("reading {}: {e}", path.display()),
            })?;
            text.trim().parse().with_context(|| format!("{} is not a number: {text:?}", path.display()))
        };
        read("energy_uj")?;
        let max_uj = read("max_energy_range_uj").unwrap_or(u64::MAX);
        Ok(Self { dir: dir.to_path_buf(), max_uj, start_uj: None })
    }

    fn read_uj(&self) -> Result<u64> {
        let path = self.dir.join("energy_uj");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        text.trim().parse().with_context(|| format!("{} is not a number: {text:?}", path.display()))
    }
}

impl Meter for Rapl {
    fn source(&self) -> String {
        format!("RAPL {} (whole CPU package, all processes)", self.dir.display())
    }

    fn start(&mut self) -> Result<()> {
        self.start_uj = Some(self.read_uj()?);
        Ok(())
    }

    fn stop(&mut self) -> Result<f64> {
        let start = self.start_uj.take().context("RAPL meter stopped before it was started")?;
        let now = self.read_uj()?;
        let delta = if now >= start { now - start } else { self.max_uj - start + now };
        Ok(delta as f64 * 1e-6)
    }
}

type NvmlReturn = i32;
type NvmlDevice = *mut std::ffi::c_void;

/// NVML entry points, resolved once from `libnvidia-ml.so.1`.
struct Nvml {
    _lib: libloading::Library,
    device: NvmlDevice,
    power_usage: unsafe extern "C" fn(NvmlDevice, *mut u32) -> NvmlReturn,
    /// Balances the `nvmlInit_v2` of [`Nvml::open`] (NVML counts them).
    shutdown: unsafe extern "C" fn() -> NvmlReturn,
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: NVML was initialized by `open`; no handle is used after this.
        unsafe { (self.shutdown)() };
    }
}

// SAFETY: NVML is thread-safe (its documentation says all calls are), and the
// device handle is an opaque pointer that NVML owns for the library's lifetime.
unsafe impl Send for Nvml {}
unsafe impl Sync for Nvml {}

impl Nvml {
    fn open(index: u32) -> Result<Self> {
        // SAFETY: loading NVML runs its initializers, which have no preconditions.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .context("NVML not available: libnvidia-ml.so.1 could not be loaded (no NVIDIA driver)")?;
        // SAFETY: the signatures are NVML's documented C API (nvml.h).
        unsafe {
            let init: libloading::Symbol<unsafe extern "C" fn() -> NvmlReturn> =
                lib.get(b"nvmlInit_v2\0").context("NVML has no nvmlInit_v2")?;
            let by_index: libloading::Symbol<unsafe extern "C" fn(u32, *mut NvmlDevice) -> NvmlReturn> =
                lib.get(b"nvmlDeviceGetHandleByIndex_v2\0").context("NVML has no nvmlDeviceGetHandleByIndex_v2")?;
            let power: libloading::Symbol<unsafe extern "C" fn(NvmlDevice, *mut u32) -> NvmlReturn> =
                lib.get(b"nvmlDeviceGetPowerUsage\0").context("NVML has no nvmlDeviceGetPowerUsage")?;
            let shutdown: libloading::Symbol<unsafe extern "C" fn() -> NvmlReturn> =
                lib.get(b"nvmlShutdown\0").context("NVML has no nvmlShutdown")?;
            let rc = init();
            if rc != 0 {
                bail!("nvmlInit_v2 failed with NVML error {rc}");
            }
            let mut device = std::ptr::null_mut();
            let rc = by_index(index, &mut device);
            if rc != 0 {
                shutdown();
                bail!("nvmlDeviceGetHandleByIndex_v2({index}) failed with NVML error {rc}");
            }
            let (power_usage, shutdown) = (*power, *shutdown);
            let nvml = Self { _lib: lib, device, power_usage, shutdown };
            nvml.milliwatts().context("nvmlDeviceGetPowerUsage is not supported on this GPU")?;
            Ok(nvml)
        }
    }

    fn milliwatts(&self) -> Result<u32> {
        let mut mw = 0u32;
        // SAFETY: a valid device handle from nvmlDeviceGetHandleByIndex_v2 and an out pointer.
        let rc = unsafe { (self.power_usage)(self.device, &mut mw) };
        if rc != 0 {
            bail!("nvmlDeviceGetPowerUsage failed with NVML error {rc}");
        }
        Ok(mw)
    }
}

/// GPU board power sampled by a thread every [`NVML_PERIOD`] and integrated
/// (trapezoids) over the bracketed interval.
pub struct NvmlMeter {
    nvml: Arc<Nvml>,
    index: u32,
    running: Option<(Arc<AtomicBool>, JoinHandle<Result<f64>>)>,
}

/// Sampling period of the NVML thread. The driver refreshes its power reading
/// at about this rate, so faster sampling would only repeat values.
pub const NVML_PERIOD: Duration = Duration::from_millis(10);

impl NvmlMeter {
    pub fn open(index: u32) -> Result<Self> {
        Ok(Self { nvml: Arc::new(Nvml::open(index)?), index, running: None })
    }
}

impl Meter for NvmlMeter {
    fn source(&self) -> String {
        format!(
            "NVML power of GPU {} sampled every {} ms and integrated (whole board, all processes)",
            self.index,
            NVML_PERIOD.as_millis()
        )
    }

    fn start(&mut self) -> Result<()> {
        let stop = Arc::new(AtomicBool::new(false));
        let (nvml, flag) = (self.nvml.clone(), stop.clone());
        let handle = std::thread::spawn(move || -> Result<f64> {
            let mut last = (Instant::now(), nvml.milliwatts()? as f64 * 1e-3);
            let mut joules = 0.0;
            loop {
                let done = flag.load(Ordering::Acquire);
                if !done {
                    std::thread::sleep(NVML_PERIOD);
                }
                let now = (Instant::now(), nvml.milliwatts()? as f64 * 1e-3);
                joules += 0.5 * (last.1 + now.1) * (now.0 - last.0).as_secs_f64();
                last = now;
                if done {
                    return Ok(joules);
                }
            }
        });
        self.running = Some((stop, handle));
        Ok(())
    }

    fn stop(&mut self) -> Result<f64> {
        let (stop, handle) = self.running.take().context("NVML meter stopped before it was started")?;
        stop.store(true, Ordering::Release);
        handle.join().map_err(|_| anyhow::anyhow!("the NVML sampling thread panicked"))?
    }
}

/// Static power of the FPGA device itself (not the card's fans, memory or
/// regulators), in watts, per board: assumed order-of-magnitude values, see
/// docs/compare.md.
pub fn static_watts(board: crate::bitstream::board::Board) -> f64 {
    use crate::bitstream::board::Board;
    match board {
        Board::U55c | Board::U280 => 8.0,
        Board::U250 => 10.0,
        Board::Zcu104 => 0.6,
        Board::PynqZ2 => 0.15,
    }
}

/// Dynamic power per resource, in µW per MHz, at Xilinx Power Estimator's
/// default 12.5 % toggle rate (UG440). Order-of-magnitude assumptions, not
/// vendor figures: calibrate against `report_power` of a placed design.
pub const DSP_UW_PER_MHZ: f64 = 4.0;
pub const LUT_UW_PER_MHZ: f64 = 0.08;
pub const FF_UW_PER_MHZ: f64 = 0.01;
pub const BRAM36_UW_PER_MHZ: f64 = 12.0;
pub const URAM_UW_PER_MHZ: f64 = 20.0;

/// Estimated FPGA power of a unit with `r` resources at `clock_mhz` on `board`:
/// static + Σ count · µW/MHz · MHz.
pub fn fpga_watts(board: crate::bitstream::board::Board, r: &Resources, clock_mhz: f64) -> f64 {
    let dynamic_uw_per_mhz = r.dsp as f64 * DSP_UW_PER_MHZ
        + r.lut as f64 * LUT_UW_PER_MHZ
        + r.ff as f64 * FF_UW_PER_MHZ
        + r.bram36 * BRAM36_UW_PER_MHZ
        + r.uram as f64 * URAM_UW_PER_MHZ;
    static_watts(board) + dynamic_uw_per_mhz * clock_mhz * 1e-6
}

/// The model in one paragraph, stored in every report.
pub fn fpga_model_text() -> String {
    use crate::bitstream::board::Board;
    let statics: Vec<String> =
        Board::ALL.iter().map(|b| format!("{} W ({})", static_watts(*b), b.spec().name)).collect();
    format!(
        "P = P_static(board) + f_MHz · (DSP·{DSP_UW_PER_MHZ} + LUT·{LUT_UW_PER_MHZ} + FF·{FF_UW_PER_MHZ} + \
         BRAM36·{BRAM36_UW_PER_MHZ} + URAM·{URAM_UW_PER_MHZ}) µW, with P_static = {}; resource counts from yosys \
         synth_xilinx. The per-resource constants and static powers are \
         order-of-magnitude assumptions at the Xilinx Power Estimator's default 12.5 % toggle rate (UG440), not vendor \
         figures; energy per run = P · projected latency. Every figure from it is labelled Estimated.",
        statics.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitstream::board::Board;

    #[test]
    fn rapl_reads_counters_and_wraps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("energy_uj"), "999000000\n").unwrap();
        std::fs::write(dir.path().join("max_energy_range_uj"), "1000000000\n").unwrap();
        let mut m = Rapl::open(dir.path()).unwrap();
        m.start().unwrap();
        std::fs::write(dir.path().join("energy_uj"), "500000\n").unwrap();
        // 1 J to the wrap, then 0.5 J.
        assert!((m.stop().unwrap() - 1.5).abs() < 1e-9);
        let missing = Rapl::open(&dir.path().join("nope")).err().unwrap().to_string();
        assert!(missing.contains("does not exist"), "{missing}");
    }

    #[test]
    fn fpga_power_is_static_plus_dynamic() {
        let r = Resources { lut: 1000, ff: 0, dsp: 10, bram36: 0.0, uram: 0, source: String::new() };
        // 10·4 + 1000·0.08 = 120 µW/MHz, at 100 MHz: 12 mW.
        let w = fpga_watts(Board::PynqZ2, &r, 100.0);
        assert!((w - (0.15 + 0.012)).abs() < 1e-12, "{w}");
    }
}
