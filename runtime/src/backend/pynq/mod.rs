//! The PYNQ device: a unit in the programmable logic of a Zynq board running
//! Linux, driven the way PYNQ drives overlays, without Python.
//!
//! * **FPGA manager**: the manifest's `.bit` is converted to the raw `.bin` the
//!   kernel loads ([`BitFile::fpga_manager_bin`]), written to the firmware
//!   directory, and loaded by writing `flags` (0: full bitstream) and then its
//!   name to `fpga0/firmware`; `state` must then read `operating`.
//! * **Device-tree overlay** (when the manifest lists `overlay.dtbo`): copied to
//!   the firmware directory and applied through configfs, which creates the
//!   unit's UIO node (`ferrite_host::bitstream::dts`).
//! * **UIO**: the `/sys/class/uio/uioN` whose `name` is the kernel name gives
//!   the control window; `/dev/uioN` is mapped and [`Registers`] is the
//!   [`ControlPort`] over it, so [`driver::launch`] runs the same register
//!   sequence as the simulator and XRT.
//! * **DMA buffers**: one u-dma-buf region, mapped cached and carved up by an
//!   [`Arena`]; a buffer's device address is `phys_addr + offset`. Caches are
//!   handed to the device (`sync_for_device`) before a launch and back to the
//!   CPU (`sync_for_cpu`) after it.
//!
//! Every filesystem root is in [`PynqPaths`], so the whole sequence runs
//! against a fake tree in tests (regular files stand in for the device nodes).
mod dma;
mod sysfs;

pub use dma::{block_bytes, Arena, UdmaBuf};
pub use sysfs::{apply_overlay, find_uio, program_fpga, remove_overlay, Registers, UioMap};
use sysfs::{io_error, pynq_error, require_dir, require_fpga_manager, require_uio};

use crate::bitfile::BitFile;
use crate::device::{
    Buffer, CycleStats, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RunStats,
};
use crate::driver::{self, ControlPort, Poll};
use crate::manifest::{LoadedManifest, UnitConfig};
use ferrite_hw::regmap::RegisterMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Microseconds between two polls of CTRL.
const POLL_INTERVAL_US: u64 = 20;

/// Where the kernel interfaces live; `Default` is a real board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PynqPaths {
    /// Where the kernel's firmware loader finds bitstreams and overlays.
    pub firmware: PathBuf,
    /// The FPGA manager of the PL.
    pub fpga_manager: PathBuf,
    /// configfs device-tree overlays.
    pub overlays: PathBuf,
    /// The UIO class (one `uioN` directory per device).
    pub uio_class: PathBuf,
    /// The u-dma-buf class (one directory per buffer device).
    pub udmabuf_class: PathBuf,
    /// Device nodes (`uioN`, `udmabufN`).
    pub dev: PathBuf,
}

impl Default for PynqPaths {
    fn default() -> Self {
        Self::under(Path::new("/"))
    }
}

impl PynqPaths {
    /// The standard layout below `root` (`/` on a board, a temporary directory in tests).
    pub fn under(root: &Path) -> Self {
        Self {
            firmware: root.join("lib/firmware"),
            fpga_manager: root.join("sys/class/fpga_manager/fpga0"),
            overlays: root.join("sys/kernel/config/device-tree/overlays"),
            uio_class: root.join("sys/class/uio"),
            udmabuf_class: root.join("sys/class/u-dma-buf"),
            dev: root.join("dev"),
        }
    }
}

/// How to open a PYNQ device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PynqOptions {
    pub paths: PynqPaths,
    /// The u-dma-buf device that holds every buffer.
    pub udmabuf: String,
    /// Refuse the u-dma-buf before touching the FPGA when it is smaller than this.
    pub min_dma_bytes: u64,
    /// How long a launch may run before [`DeviceError::Timeout`].
    pub timeout: Duration,
}

impl Default for PynqOptions {
    fn default() -> Self {
        Self {
            paths: PynqPaths::default(),
            udmabuf: "udmabuf0".into(),
            min_dma_bytes: 0,
            timeout: Duration::from_secs(10),
        }
    }
}

/// A Ferrite unit (GEMM, attention or MoE) in the PL of a PYNQ board.
pub struct PynqDevice {
    name: String,
    unit: UnitConfig,
    map: RegisterMap,
    regs: Registers,
    mem: UdmaBuf,
    /// Buffer id → offset in the u-dma-buf.
    buffers: HashMap<u64, u64>,
    next_id: u64,
    /// How long a launch may run before [`DeviceError::Timeout`].
    pub timeout: Duration,
}

impl PynqDevice {
    /// Check everything a load needs, program the PL with the manifest's
    /// bitstream, apply its overlay, find and map the unit, and check HWINFO.
    /// Nothing is written before every prerequisite is found.
    pub fn open(image: &LoadedManifest, opts: &PynqOptions) -> Result<Self, DeviceError> {
        let m = &image.manifest;
        if m.board.is_alveo() {
            return Err(DeviceError::Config(format!("the image is for {}, not a PYNQ board", m.board)));
        }
        let paths = &opts.paths;
        require_fpga_manager(paths)?;
        let bit_path = image.image_path().ok_or_else(|| {
            DeviceError::Config(
                "the manifest has no bitstream: its build did not run Vivado (see build.sh in its directory)".into(),
            )
        })?;
        let bit_bytes = std::fs::read(&bit_path).map_err(|e| io_error("reading", &bit_path, e))?;
        let bin = BitFile::parse(&bit_bytes)
            .map_err(|e| DeviceError::Config(format!("{}: {e}", bit_path.display())))?
            .fpga_manager_bin();
        let dtbo = match m.overlay.as_ref().and_then(|o| o.dtbo.as_ref()) {
            Some(f) => {
                require_dir(
                    &paths.overlays,
                    "device-tree overlays",
                    "configfs device-tree overlays",
                    "mount configfs (`mount -t configfs none /sys/kernel/config`) on a kernel with overlay support",
                )?;
                let p = image.dir.join(f);
                Some(std::fs::read(&p).map_err(|e| io_error("reading", &p, e))?)
            }
            None => None,
        };
        require_uio(paths)?;
        let mem = UdmaBuf::open(paths, &opts.udmabuf)?;
        if mem.size < opts.min_dma_bytes {
            return Err(pynq_error(format!(
                "u-dma-buf {} has {} bytes, {} are needed: reload it larger (`modprobe u-dma-buf {}={}`)",
                opts.udmabuf, mem.size, opts.min_dma_bytes, opts.udmabuf, opts.min_dma_bytes
            )));
        }

        remove_overlay(paths, &m.kernel)?;
        program_fpga(paths, &format!("{}.bit.bin", m.kernel), &bin)?;
        if let Some(dtbo) = &dtbo {
            apply_overlay(paths, &m.kernel, dtbo)?;
        }

        let uio = find_uio(paths, &m.kernel)?;
        let range = 1u64 << m.register_map.control_addr_bits;
        if let Some(o) = m.overlay.as_ref().filter(|o| o.control_base != uio.addr) {
            return Err(pynq_error(format!(
                "{} `{}` is at {:#x}, but the image's control window is at {:#x} (an overlay from another build?)",
                uio.device, m.kernel, uio.addr, o.control_base
            )));
        }
        if uio.size < range {
            return Err(pynq_error(format!(
                "{}'s window is {:#x} bytes, the register map needs {range:#x}",
                uio.device, uio.size
            )));
        }
        let mut regs = Registers::open(&paths.dev.join(&uio.device), uio.size)?;
        let hwinfo = m.register_map.get("HWINFO").ok_or_else(|| DeviceError::Argument("no HWINFO register".into()))?;
        let found = regs.read32(hwinfo.offset)?;
        if found != m.unit.hwinfo() {
            return Err(DeviceError::HwInfoMismatch { expected: m.unit.hwinfo(), found });
        }
        Ok(Self {
            name: format!("{} {} at {:#x} ({})", m.board, uio.device, uio.addr, m.kernel),
            unit: m.unit.clone(),
            map: m.register_map.clone(),
            regs,
            mem,
            buffers: HashMap::new(),
            next_id: 1,
            timeout: opts.timeout,
        })
    }

    /// Offset of `buf` in the u-dma-buf after checking `offset..offset + len` is inside it.
    fn at(&self, buf: Buffer, offset: u64, len: usize) -> Result<u64, DeviceError> {
        let base = *self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        if offset.checked_add(len as u64).is_none_or(|end| end > buf.len()) {
            return Err(DeviceError::OutOfBounds { id: buf.id(), offset, len: len as u64, size: buf.len() });
        }
        Ok(base + offset)
    }
}

impl Device for PynqDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo { name: self.name.clone(), kind: DeviceKind::Fpga, clock_mhz: Some(self.unit.clock_mhz()) }
    }

    /// Beat-aligned pitches, as the unit's bursts require.
    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        self.unit.layout(&self.name, problem)
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let offset = self.mem.alloc(bytes)?;
        self.mem.bytes_mut(offset, bytes as usize).fill(0);
        let id = self.next_id;
        self.next_id += 1;
        self.buffers.insert(id, offset);
        Ok(Buffer::new(id, bytes))
    }

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let at = self.at(buf, offset, data.len())?;
        self.mem.bytes_mut(at, data.len()).copy_from_slice(data);
        Ok(())
    }

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let at = self.at(buf, offset, out.len())?;
        out.copy_from_slice(self.mem.bytes(at, out.len()));
        Ok(())
    }

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        let offset = self.buffers.remove(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        self.mem.free(offset);
        Ok(())
    }

    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        let address = |buf: Buffer| {
            self.buffers.get(&buf.id()).map(|&o| self.mem.device_address(o)).ok_or(DeviceError::UnknownBuffer(buf.id()))
        };
        let args = self.unit.launch_args(&self.name, launch, &address)?;
        let poll = Poll { interval: POLL_INTERVAL_US, limit: self.timeout.as_micros() as u64 };
        self.mem.sync_for_device()?;
        let ran = driver::launch(&mut self.regs, &self.map, &args, poll);
        // Hand the buffers back to the CPU whatever happened, so downloads read memory, not stale cache.
        let synced = self.mem.sync_for_cpu();
        let cycles = ran?;
        synced?;
        Ok(RunStats {
            wall: start.elapsed(),
            useful_macs: launch.useful_macs(),
            cycles: Some(CycleStats { cycles, clock_mhz: self.unit.clock_mhz(), multipliers: self.unit.multipliers() }),
        })
    }
}
