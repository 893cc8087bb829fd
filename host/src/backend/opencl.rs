//! The OpenCL device (feature `opencl`, crate `opencl3`).
//!
//! On a Xilinx platform the unit is the hardware kernel of an xclbin, loaded
//! as a program binary from a checked manifest; everywhere else (PoCL, GPU
//! drivers) the unit's integer arithmetic is built from the OpenCL C ports in
//! `kernels/opencl/` ([`SOURCES`]). Both take their arguments in the order of
//! the unit's register map, which is also the order of `kernel.xml` and of
//! the ports' parameter lists, so one launch path serves both.
use crate::backend::cpu::dense_layout;
use crate::device::{
    check_gemm_buffers, Buffer, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RunStats,
};
use crate::driver;
use crate::manifest::{LoadedManifest, UnitConfig};
use ferrite_hw::gemm::{GemmConfig, GemmLayout, GemmProblem};
use ferrite_hw::regmap::{ArgKind, RegisterMap};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device as ClDevice, CL_DEVICE_TYPE_ALL};
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{Buffer as ClBuffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::{cl_mem, CL_BLOCKING};
use std::collections::HashMap;
use std::time::Instant;

/// OpenCL C ports of the units, by kernel name. Attention and MoE add
/// theirs here (and a `Launch` arm in [`OpenClDevice::launch`]).
pub const SOURCES: &[(&str, &str)] = &[("ferrite_gemm", include_str!("../../../kernels/opencl/gemm.cl"))];

/// Held while platforms are discovered and programs built: two threads doing
/// that at once crash ocl-icd with PoCL 3.1 (SIGSEGV, seen with parallel tests).
static DISCOVERY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn discovery_lock() -> std::sync::MutexGuard<'static, ()> {
    DISCOVERY.lock().unwrap_or_else(|e| e.into_inner())
}

fn cl_error(what: &str, e: impl std::fmt::Display) -> DeviceError {
    DeviceError::Backend { backend: "opencl", source: format!("{what}: {e}").into() }
}

/// One OpenCL device as the `devices` report and [`OpenClDevice::open`] see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClDeviceSummary {
    pub platform_index: usize,
    pub device_index: usize,
    pub platform: String,
    pub device: String,
    pub version: String,
    pub compute_units: u32,
    pub global_mem_bytes: u64,
}

/// Is this platform Xilinx's (XRT's OpenCL), where units are xclbins?
fn is_xilinx(platform_name: &str) -> bool {
    platform_name.contains("Xilinx") || platform_name.contains("AMD Xilinx")
}

/// Every OpenCL device of every platform the ICD loader finds.
pub fn list() -> Result<Vec<ClDeviceSummary>, DeviceError> {
    let _guard = discovery_lock();
    let mut out = Vec::new();
    for (pi, p) in get_platforms().map_err(|e| cl_error("listing platforms", e))?.iter().enumerate() {
        let platform = p.name().unwrap_or_default();
        for (di, id) in p.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default().into_iter().enumerate() {
            let d = ClDevice::new(id);
            out.push(ClDeviceSummary {
                platform_index: pi,
                device_index: di,
                platform: platform.clone(),
                device: d.name().unwrap_or_default(),
                version: d.version().unwrap_or_default(),
                compute_units: d.max_compute_units().unwrap_or(0),
                global_mem_bytes: d.global_mem_size().unwrap_or(0),
            });
        }
    }
    Ok(out)
}

/// Where the unit's kernel comes from.
enum Flavor {
    /// The OpenCL C port; any layout works, so operands are dense.
    Port,
    /// The hardware kernel of an xclbin: its config fixes the beat and limits.
    Xclbin,
}

/// A unit on an OpenCL device.
pub struct OpenClDevice {
    name: String,
    flavor: Flavor,
    /// The unit's configuration (for the port: the default, whose register
    /// map gives the argument order; the port has no array or buffer limits).
    cfg: GemmConfig,
    map: RegisterMap,
    context: Context,
    queue: CommandQueue,
    kernel: Kernel,
    buffers: HashMap<u64, ClBuffer<u8>>,
    /// Bound to BIAS when a launch has none: kernels may not get a null buffer everywhere.
    dummy: ClBuffer<u8>,
    next_id: u64,
}

impl OpenClDevice {
    /// Open device `device` of platform `platform`. A Xilinx platform needs
    /// `image`, a manifest with an xclbin; other platforms build the port.
    pub fn open(platform: usize, device: usize, image: Option<&LoadedManifest>) -> Result<Self, DeviceError> {
        let _guard = discovery_lock();
        let platforms = get_platforms()
            .map_err(|e| cl_error("listing platforms (is an OpenCL ICD installed? Debian: pocl-opencl-icd)", e))?;
        let p = platforms.get(platform).ok_or_else(|| {
            DeviceError::Config(format!(
                "no OpenCL platform {platform} ({} found; `ferrite devices` lists them)",
                platforms.len()
            ))
        })?;
        let pname = p.name().map_err(|e| cl_error("platform name", e))?;
        let ids = p.get_devices(CL_DEVICE_TYPE_ALL).map_err(|e| cl_error("listing devices", e))?;
        let id = *ids.get(device).ok_or_else(|| {
            DeviceError::Config(format!("platform {platform} ({pname}) has no device {device} ({} found)", ids.len()))
        })?;
        let dev = ClDevice::new(id);
        let dname = dev.name().map_err(|e| cl_error("device name", e))?;
        let context = Context::from_device(&dev).map_err(|e| cl_error("creating a context", e))?;
        let queue = CommandQueue::create_default_with_properties(&context, 0, 0)
            .map_err(|e| cl_error("creating a queue", e))?;
        let (flavor, cfg, program, kernel_name) = if is_xilinx(&pname) {
            let m =
                image.ok_or_else(|| DeviceError::Config(format!("{pname} runs xclbins: give the image's manifest")))?;
            let UnitConfig::Gemm(cfg) = &m.manifest.unit;
            let path = m
                .image_path()
                .ok_or_else(|| DeviceError::Config("the manifest has no xclbin: its build did not run v++".into()))?;
            let binary = std::fs::read(&path).map_err(|e| cl_error(&format!("reading {}", path.display()), e))?;
            let program = Program::create_and_build_from_binary(&context, &[&binary], "")
                .map_err(|e| cl_error(&format!("loading {}", path.display()), e))?;
            (Flavor::Xclbin, cfg.clone(), program, m.manifest.kernel.clone())
        } else {
            let (kernel, src) = SOURCES[0];
            let program = Program::create_and_build_from_source(&context, src, "-cl-std=CL1.2")
                .map_err(|log| cl_error("building kernels/opencl/gemm.cl", log))?;
            (Flavor::Port, GemmConfig::default(), program, kernel.to_string())
        };
        let kernel =
            Kernel::create(&program, &kernel_name).map_err(|e| cl_error(&format!("kernel {kernel_name}"), e))?;
        // SAFETY: no host pointer; the buffer is owned by the device struct.
        let dummy = unsafe { ClBuffer::<u8>::create(&context, CL_MEM_READ_WRITE, 4, std::ptr::null_mut()) }
            .map_err(|e| cl_error("allocating", e))?;
        Ok(Self {
            name: format!(
                "opencl {platform}:{device} ({dname}, {})",
                if matches!(flavor, Flavor::Port) { "OpenCL C port" } else { "xclbin" }
            ),
            flavor,
            map: cfg.register_map(),
            cfg,
            context,
            queue,
            kernel,
            buffers: HashMap::new(),
            dummy,
            next_id: 1,
        })
    }

    fn buffer(&self, buf: Buffer, offset: u64, len: usize) -> Result<&ClBuffer<u8>, DeviceError> {
        let b = self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        if offset.checked_add(len as u64).is_none_or(|end| end > buf.len()) {
            return Err(DeviceError::OutOfBounds { id: buf.id(), offset, len: len as u64, size: buf.len() });
        }
        Ok(b)
    }

    fn fits(&self, p: &GemmProblem) -> Result<(), DeviceError> {
        p.validate()?;
        match self.flavor {
            Flavor::Port => Ok(()),
            Flavor::Xclbin => p
                .validate_for(&self.cfg)
                .map_err(|e| DeviceError::TooBig { device: self.name.clone(), reason: e.to_string() }),
        }
    }
}

impl Device for OpenClDevice {
    fn info(&self) -> DeviceInfo {
        let clock_mhz = matches!(self.flavor, Flavor::Xclbin).then_some(self.cfg.clock_mhz);
        DeviceInfo { name: self.name.clone(), kind: DeviceKind::Gpu, clock_mhz }
    }

    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        match problem {
            Problem::Gemm(p) => {
                self.fits(p)?;
                Ok(Layout::Gemm(match self.flavor {
                    Flavor::Port => dense_layout(p),
                    Flavor::Xclbin => GemmLayout::new(&self.cfg, p),
                }))
            }
            other => Err(DeviceError::Unsupported { device: self.info().name, unit: other.unit() }),
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let size =
            usize::try_from(bytes.max(1)).map_err(|_| DeviceError::OutOfMemory { requested: bytes, available: 0 })?;
        // SAFETY: no host pointer; the buffer lives in the table until freed.
        let b = unsafe { ClBuffer::<u8>::create(&self.context, CL_MEM_READ_WRITE, size, std::ptr::null_mut()) }
            .map_err(|e| cl_error(&format!("allocating {bytes} bytes"), e))?;
        let id = self.next_id;
        self.next_id += 1;
        self.buffers.insert(id, b);
        // OpenCL leaves new buffers undefined; the trait promises zeros.
        let buf = Buffer::new(id, bytes);
        self.upload(buf, 0, &vec![0; bytes as usize])?;
        Ok(buf)
    }

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.buffer(buf, offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let b = self.buffers.get_mut(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        // SAFETY: blocking write of a range checked against the buffer's size.
        unsafe { self.queue.enqueue_write_buffer(b, CL_BLOCKING, offset as usize, data, &[]) }
            .map_err(|e| cl_error("writing a buffer", e))?;
        Ok(())
    }

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let b = self.buffer(buf, offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: blocking read of a range checked against the buffer's size.
        unsafe { self.queue.enqueue_read_buffer(b, CL_BLOCKING, offset as usize, out, &[]) }
            .map_err(|e| cl_error("reading a buffer", e))?;
        Ok(())
    }

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        self.buffers.remove(&buf.id()).map(drop).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        let Launch::Gemm(g) = launch else {
            return Err(DeviceError::Unsupported { device: self.info().name, unit: "attention" });
        };
        check_gemm_buffers(g)?;
        self.fits(&g.problem)?;
        // Buffers are named by handle id here; 0 (no bias) binds the dummy buffer.
        let known = |buf: Buffer| {
            if self.buffers.contains_key(&buf.id()) {
                Ok(buf.id())
            } else {
                Err(DeviceError::UnknownBuffer(buf.id()))
            }
        };
        let args = driver::gemm_args(&self.cfg, g, &known)?;
        let mut mems: Vec<cl_mem> = Vec::new();
        let mut scalars: Vec<u32> = Vec::new();
        let mut order = Vec::new();
        for reg in self.map.arguments() {
            let value = args
                .values
                .iter()
                .find(|(n, _)| *n == reg.name)
                .map(|&(_, v)| v)
                .ok_or_else(|| DeviceError::Argument(format!("no value for {}", reg.name)))?;
            if reg.kind == ArgKind::Buffer {
                let mem = if value == 0 {
                    self.dummy.get()
                } else {
                    self.buffers.get(&value).ok_or(DeviceError::UnknownBuffer(value))?.get()
                };
                order.push((true, mems.len()));
                mems.push(mem);
            } else {
                let v = u32::try_from(value)
                    .map_err(|_| DeviceError::Argument(format!("{} = {value} does not fit 32 bits", reg.name)))?;
                order.push((false, scalars.len()));
                scalars.push(v);
            }
        }
        let p = &g.problem;
        let mut exec = ExecuteKernel::new(&self.kernel);
        for (is_mem, i) in order {
            // SAFETY: the arguments follow the kernel's parameter list (register-map order):
            // cl_mem for buffers, 32-bit values for scalars.
            unsafe {
                if is_mem {
                    exec.set_arg(&mems[i]);
                } else {
                    exec.set_arg(&scalars[i]);
                }
            }
        }
        match self.flavor {
            Flavor::Port => exec.set_global_work_sizes(&[p.n, p.m]),
            Flavor::Xclbin => exec.set_global_work_size(1),
        };
        // SAFETY: every argument is set and the buffers outlive the blocking wait below.
        let event = unsafe { exec.enqueue_nd_range(&self.queue) }.map_err(|e| cl_error("launching", e))?;
        event.wait().map_err(|e| cl_error("waiting for the kernel", e))?;
        Ok(RunStats { wall: start.elapsed(), useful_macs: launch.useful_macs(), cycles: None })
    }
}
