//! The CUDA runtime under every CUDA kernel: opening the GPU, run-time
//! compilation with NVRTC, and the two caches of compiled modules.
//!
//! cudarc loads `libcuda` and `libnvrtc` with `dlopen` on first use, so nothing
//! CUDA is needed to build; but its loader panics when a library is missing.
//! [`Gpu::open`] therefore probes both libraries first and turns their absence
//! into [`DeviceError::MissingTool`], before any cudarc call can panic.
use crate::device::DeviceError;
use cudarc::driver::{result::DriverError, sys, CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::{result as nvrtc, Ptx};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// Kernel sources, embedded so a built binary needs no source tree. The
/// `#include "common_*.cuh"` lines are expanded by [`expand`], because NVRTC
/// gets one string and no include path.
pub(crate) const COMMON_BF16: &str = include_str!("../../../../kernels/cuda/common_bf16.cuh");
pub(crate) const COMMON_HOPPER: &str = include_str!("../../../../kernels/cuda/common_hopper.cuh");
/// The fixed-point helpers of the bit-exact twins (the CUDA side of `fixed.cl`).
pub(crate) const FIXED: &str = include_str!("../../../../kernels/cuda/fixed.cuh");

/// One `.cu` file of `kernels/cuda/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source {
    pub name: &'static str,
    pub text: &'static str,
}

pub const GEMM_I8: Source = Source { name: "gemm_i8.cu", text: include_str!("../../../../kernels/cuda/gemm_i8.cu") };
pub const GEMM_I8_WGMMA: Source =
    Source { name: "gemm_i8_wgmma.cu", text: include_str!("../../../../kernels/cuda/gemm_i8_wgmma.cu") };
pub const ATTENTION_MMA: Source =
    Source { name: "attention_mma.cu", text: include_str!("../../../../kernels/cuda/attention_mma.cu") };
pub const MOE_ROUTER: Source =
    Source { name: "moe_router.cu", text: include_str!("../../../../kernels/cuda/moe_router.cu") };
pub const MOE_GATE: Source = Source { name: "moe_gate.cu", text: include_str!("../../../../kernels/cuda/moe_gate.cu") };
pub const GEMM_BF16: Source =
    Source { name: "gemm_bf16.cu", text: include_str!("../../../../kernels/cuda/gemm_bf16.cu") };
pub const GEMM_BF16_WGMMA: Source =
    Source { name: "gemm_bf16_wgmma.cu", text: include_str!("../../../../kernels/cuda/gemm_bf16_wgmma.cu") };
pub const FLASH_ATTN: Source =
    Source { name: "flash_attn.cu", text: include_str!("../../../../kernels/cuda/flash_attn.cu") };
pub const FLASH_ATTN_WGMMA: Source =
    Source { name: "flash_attn_wgmma.cu", text: include_str!("../../../../kernels/cuda/flash_attn_wgmma.cu") };

/// Every kernel source, for tools that compile them all ahead of a benchmark.
pub const ALL_SOURCES: [Source; 9] = [
    GEMM_I8,
    GEMM_I8_WGMMA,
    ATTENTION_MMA,
    MOE_ROUTER,
    MOE_GATE,
    GEMM_BF16,
    GEMM_BF16_WGMMA,
    FLASH_ATTN,
    FLASH_ATTN_WGMMA,
];

fn expand(src: &str) -> String {
    src.replace("#include \"common_bf16.cuh\"", COMMON_BF16)
        .replace("#include \"common_hopper.cuh\"", COMMON_HOPPER)
        .replace("#include \"fixed.cuh\"", FIXED)
}

/// The constants the twins share with the golden models, as `-D` options:
/// taken from the Rust definitions, so the two cannot drift (`fixed.cuh`
/// lists them; the OpenCL build passes the same ones).
fn defines() -> [(&'static str, u64); 12] {
    use ferrite_hw::gemm::config as gemm;
    use ferrite_hw::moe::{config as moe, model as moe_model};
    use ferrite_hw::numerics;
    [
        ("EXP2_FRAC_BITS", numerics::EXP2_FRAC_BITS.into()),
        ("GEMM_FLAG_BIAS", gemm::FLAG_BIAS.into()),
        ("GEMM_FLAG_RELU", gemm::FLAG_RELU.into()),
        ("GEMM_FLAG_REQUANT", gemm::FLAG_REQUANT.into()),
        ("MOE_K_LIMIT", moe::K_LIMIT as u64),
        ("MOE_RECORD_BYTES", moe::RECORD_BYTES as u64),
        ("MOE_REC_SLOTS", moe::REC_SLOTS as u64),
        ("MOE_RECIP_BITS", moe_model::RECIP_BITS.into()),
        ("MOE_WEIGHT_SHIFT", moe_model::WEIGHT_SHIFT.into()),
        ("MOE_FLAG_BIAS", moe::FLAG_BIAS.into()),
        ("MOE_FLAG_TOPK_SOFTMAX", moe::FLAG_TOPK_SOFTMAX.into()),
        ("MOE_FLAG_RENORMALIZE", moe::FLAG_RENORMALIZE.into()),
    ]
}

/// A driver error as a [`DeviceError`], with what was being done.
pub fn driver(what: &str) -> impl FnOnce(DriverError) -> DeviceError + '_ {
    move |e| DeviceError::Backend { backend: "cuda", source: format!("{what}: {e}").into() }
}

/// Why CUDA cannot be used here, or `Ok` when both libraries load.
pub fn probe_libraries() -> Result<(), DeviceError> {
    // SAFETY: these only try `dlopen` on candidate names and drop the handle.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(DeviceError::MissingTool {
            tool: "libcuda (the NVIDIA driver)",
            hint: "no CUDA driver library could be loaded; install the NVIDIA driver, or add the folder holding libcuda.so to LD_LIBRARY_PATH".into(),
        });
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(DeviceError::MissingTool {
            tool: "libnvrtc (CUDA's run-time compiler)",
            hint: "kernels are compiled at run time; install the CUDA toolkit or the nvidia-cuda-nvrtc wheel and add the folder holding libnvrtc.so to LD_LIBRARY_PATH (e.g. /usr/local/cuda/lib64)".into(),
        });
    }
    Ok(())
}

/// An opened GPU: context, one stream, and its loaded modules.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub name: String,
    /// NVRTC target, `sm_90a` on Hopper (wgmma needs the `a` variant).
    pub arch: String,
    pub sm_count: u32,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    /// Functions already looked up, by source then name, so a timed loop of
    /// launches costs no driver lookup (and no allocation) per launch.
    functions: Mutex<HashMap<&'static str, HashMap<String, CudaFunction>>>,
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Self, DeviceError> {
        probe_libraries()?;
        let count = CudaContext::device_count().map_err(driver("counting CUDA devices"))?;
        if count <= 0 {
            return Err(DeviceError::MissingTool {
                tool: "a CUDA GPU",
                hint: "the driver loads but reports no device".into(),
            });
        }
        if ordinal >= count as usize {
            return Err(DeviceError::Config(format!("CUDA device {ordinal} requested, {count} present")));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("creating a CUDA context"))?;
        let (major, minor) = ctx.compute_capability().map_err(driver("reading the compute capability"))?;
        if major < 8 {
            return Err(DeviceError::Config(format!(
                "compute capability {major}.{minor}: the kernels need ≥ 8.0 (mma.sync s8/bf16, cp.async)"
            )));
        }
        let arch = if (major, minor) == (9, 0) { "sm_90a".to_string() } else { format!("sm_{major}{minor}") };
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("reading the SM count"))? as u32;
        let name = ctx.name().map_err(driver("reading the device name"))?;
        // One stream carries all of this device's work, so cudarc's cross-stream
        // event tracking (an event wait and record per buffer per launch) buys
        // nothing; and a created stream, unlike the legacy default one, can be
        // captured into a CUDA graph (`bench gpu` times kernels that way).
        // SAFETY: nothing here uses a second stream, so no buffer is shared across streams.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(driver("creating a CUDA stream"))?;
        Ok(Self {
            ctx,
            stream,
            name,
            arch,
            sm_count,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// Kernel `func` of `src`, compiled (or fetched from a cache) for this GPU.
    pub fn function(&self, src: Source, func: &str) -> Result<CudaFunction, DeviceError> {
        if let Some(f) =
            self.functions.lock().unwrap_or_else(|e| e.into_inner()).get(src.name).and_then(|m| m.get(func))
        {
            return Ok(f.clone());
        }
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        let module = match modules.get(src.name) {
            Some(m) => m.clone(),
            None => {
                let cubin = cubin(src, &self.arch)?;
                let m =
                    self.ctx.load_module(Ptx::from_binary(cubin)).map_err(driver(&format!("loading {}", src.name)))?;
                modules.insert(src.name, m.clone());
                m
            }
        };
        let f = module.load_function(func).map_err(driver(&format!("finding {func} in {}", src.name)))?;
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        functions.entry(src.name).or_default().insert(func.to_string(), f.clone());
        Ok(f)
    }

    /// Let `f` use `bytes` of dynamic shared memory (above the 48 KiB default).
    pub fn set_dynamic_smem(&self, f: &CudaFunction, bytes: u32) -> Result<(), DeviceError> {
        // SAFETY: `f` is a live function of a module this context loaded.
        unsafe {
            cudarc::driver::result::function::set_function_attribute(
                f.cu_function(),
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        }
        .map_err(driver("raising the dynamic shared-memory limit"))
    }

    pub fn sync(&self) -> Result<(), DeviceError> {
        self.stream.synchronize().map_err(driver("running a kernel"))
    }
}

/// Compiled modules of this process, by (source hash, arch).
fn memory_cache() -> &'static Mutex<HashMap<String, Vec<u8>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Vec<u8>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `$FERRITE_CACHE/cuda`, else `~/.cache/ferrite/cuda`; `None` without either.
pub fn cache_dir() -> Option<PathBuf> {
    let root = match std::env::var_os("FERRITE_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/ferrite"),
    };
    Some(root.join("cuda"))
}

fn nvrtc_version() -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the library was probed before.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    format!("{major}.{minor}")
}

/// Compiler options: the GPU's own target (real SASS, so the driver never
/// JIT-compiles), C++17 for the lambdas, line info for profilers, and the
/// shared constants ([`defines`]).
fn options(arch: &str) -> Vec<String> {
    let mut o = vec![format!("--gpu-architecture={arch}"), "--std=c++17".into(), "--generate-line-info".into()];
    o.extend(defines().iter().map(|(name, value)| format!("-D{name}={value}")));
    o
}

/// The cache key: source, target, compiler version and options. A changed
/// kernel, GPU or NVRTC never reuses a stale binary.
fn cache_key(src: &str, arch: &str) -> String {
    let mut h = Sha256::new();
    h.update(src.as_bytes());
    h.update(arch.as_bytes());
    h.update(nvrtc_version().as_bytes());
    h.update(options(arch).join(" ").as_bytes());
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{arch}-{}", &hex[..32])
}

/// The cubin of `src` for `arch`: from this process's cache, the disk cache, or
/// NVRTC (then stored in both). Disk-cache failures only cost a recompile.
pub fn cubin(src: Source, arch: &str) -> Result<Vec<u8>, DeviceError> {
    let text = expand(src.text);
    let key = cache_key(&text, arch);
    if let Some(bin) = memory_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(bin.clone());
    }
    let file = cache_dir().map(|d| d.join(format!("{}-{key}.cubin", src.name.trim_end_matches(".cu"))));
    let bin = match file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        Some(bin) if !bin.is_empty() => bin,
        _ => {
            let bin = compile(src.name, &text, arch)?;
            if let Some(f) = &file {
                // Write then rename, so a concurrent reader never sees half a file.
                let tmp = f.with_extension(format!("tmp{}", std::process::id()));
                let stored = f
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&tmp, &bin))
                    .and_then(|()| std::fs::rename(&tmp, f));
                if let Err(e) = stored {
                    eprintln!("warning: not caching {} in {}: {e}", src.name, f.display());
                }
            }
            bin
        }
    };
    memory_cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, bin.clone());
    Ok(bin)
}

/// NVRTC: source to cubin for a real architecture, with the log on failure.
fn compile(name: &str, text: &str, arch: &str) -> Result<Vec<u8>, DeviceError> {
    let fail = |what: String| DeviceError::Backend { backend: "nvrtc", source: what.into() };
    let c_src = CString::new(text).map_err(|_| fail(format!("{name} contains a NUL byte")))?;
    let c_name = CString::new(name).map_err(|_| fail(format!("bad kernel name {name}")))?;
    let prog = nvrtc::create_program(&c_src, Some(&c_name))
        .map_err(|e| fail(format!("creating a program for {name}: {e:?}")))?;
    // SAFETY: `prog` is live until the destroy below; c_src/c_name outlive it.
    let result = unsafe {
        match nvrtc::compile_program(prog, &options(arch)) {
            Err(e) => {
                let log = nvrtc::get_program_log(prog)
                    .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
                    .unwrap_or_default();
                Err(fail(format!("compiling {name} for {arch}: {e:?}\n{log}")))
            }
            Ok(()) => {
                let mut size = 0usize;
                let mut bin = Vec::new();
                let r = cudarc::nvrtc::sys::nvrtcGetCUBINSize(prog, &mut size).result();
                r.and_then(|()| {
                    bin.resize(size, 0u8);
                    cudarc::nvrtc::sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast()).result()
                })
                .map(|()| bin)
                .map_err(|e| fail(format!("reading the cubin of {name}: {e:?}")))
            }
        }
    };
    // SAFETY: created above and not destroyed before.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    result
}
