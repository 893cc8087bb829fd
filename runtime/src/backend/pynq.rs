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
use crate::bitfile::BitFile;
use crate::device::{
    Buffer, CycleStats, Device, DeviceError, DeviceInfo, DeviceKind, Launch, Layout, Problem, RunStats,
};
use crate::driver::{self, ControlPort, Poll};
use crate::manifest::{LoadedManifest, UnitConfig};
use ferrite_hw::gemm::config::BUFFER_ALIGN;
use ferrite_hw::regmap::RegisterMap;
use memmap2::{MmapMut, MmapOptions};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
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

fn pynq_error(msg: String) -> DeviceError {
    DeviceError::Backend { backend: "pynq", source: msg.into() }
}

/// An I/O error on `path`; permission problems say how to get permission.
fn io_error(action: &str, path: &Path, e: std::io::Error) -> DeviceError {
    let hint = if e.kind() == ErrorKind::PermissionDenied {
        " (the FPGA manager, configfs, /lib/firmware and the UIO/u-dma-buf nodes need root: run as root, e.g. with sudo)"
    } else {
        ""
    };
    pynq_error(format!("{action} {}: {e}{hint}", path.display()))
}

/// A sysfs attribute, trimmed.
fn read_attr(path: &Path) -> Result<String, DeviceError> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(|e| io_error("reading", path, e))
}

/// Write an existing sysfs attribute (never creates one: sysfs cannot, so neither may a fake tree).
fn write_attr(path: &Path, value: &str) -> Result<(), DeviceError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| io_error("writing", path, e))
}

/// A number as sysfs prints it: `0x`-prefixed hex (addresses) or decimal (sizes).
fn read_number(path: &Path) -> Result<u64, DeviceError> {
    let text = read_attr(path)?;
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| pynq_error(format!("{}: `{text}` is not a number", path.display())))
}

fn require_dir(path: &Path, tool: &'static str, what: &str, hint: &str) -> Result<(), DeviceError> {
    if path.is_dir() {
        Ok(())
    } else {
        Err(DeviceError::MissingTool { tool, hint: format!("no {what} ({} missing): {hint}", path.display()) })
    }
}

/// Check the FPGA manager exists; the first thing a PYNQ deploy needs.
fn require_fpga_manager(paths: &PynqPaths) -> Result<(), DeviceError> {
    require_dir(
        &paths.fpga_manager,
        "FPGA manager",
        "FPGA manager",
        "not a Zynq board running Linux, or its kernel lacks FPGA manager support",
    )
}

fn require_uio(paths: &PynqPaths) -> Result<(), DeviceError> {
    require_dir(
        &paths.uio_class,
        "UIO",
        "UIO",
        "load uio_pdrv_genirq (PYNQ images boot with uio_pdrv_genirq.of_id=generic-uio)",
    )
}

/// Load `bin` (FPGA-manager format) into the PL under the firmware name `name`.
pub fn program_fpga(paths: &PynqPaths, name: &str, bin: &[u8]) -> Result<(), DeviceError> {
    require_fpga_manager(paths)?;
    require_dir(&paths.firmware, "firmware directory", "firmware directory", "the FPGA manager loads from it")?;
    let file = paths.firmware.join(name);
    std::fs::write(&file, bin).map_err(|e| io_error("copying the bitstream to", &file, e))?;
    write_attr(&paths.fpga_manager.join("flags"), "0")?;
    write_attr(&paths.fpga_manager.join("firmware"), name)?;
    let state = read_attr(&paths.fpga_manager.join("state"))?;
    if state != "operating" {
        return Err(pynq_error(format!(
            "the FPGA manager is in state `{state}` after loading {name}, not `operating`: \
             the PL refused the bitstream (built for another part?); see dmesg"
        )));
    }
    Ok(())
}

/// Remove the overlay `name` if an earlier deploy applied it, before the PL is reprogrammed.
pub fn remove_overlay(paths: &PynqPaths, name: &str) -> Result<(), DeviceError> {
    let dir = paths.overlays.join(name);
    if dir.exists() {
        std::fs::remove_dir(&dir).map_err(|e| io_error("removing the overlay applied earlier at", &dir, e))?;
    }
    Ok(())
}

/// Apply `dtbo` as the configfs overlay `name` (the kernel reads it from the firmware directory).
pub fn apply_overlay(paths: &PynqPaths, name: &str, dtbo: &[u8]) -> Result<(), DeviceError> {
    let file = format!("{name}.dtbo");
    let fw = paths.firmware.join(&file);
    std::fs::write(&fw, dtbo).map_err(|e| io_error("copying the device-tree overlay to", &fw, e))?;
    let dir = paths.overlays.join(name);
    std::fs::create_dir(&dir).map_err(|e| io_error("creating the overlay", &dir, e))?;
    // configfs creates `path` with the directory; the kernel applies the overlay on this write.
    let path = dir.join("path");
    std::fs::write(&path, &file).map_err(|e| io_error("applying the overlay through", &path, e))?;
    let status = dir.join("status");
    if status.exists() {
        let s = read_attr(&status)?;
        if s != "applied" {
            return Err(pynq_error(format!("overlay {name} has status `{s}`, not `applied`; see dmesg")));
        }
    }
    Ok(())
}

/// A UIO device's first memory map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UioMap {
    /// `uioN`.
    pub device: String,
    /// Physical address and size of the window (`maps/map0/{addr,size}`).
    pub addr: u64,
    pub size: u64,
}

/// The UIO device whose `name` is `name`.
pub fn find_uio(paths: &PynqPaths, name: &str) -> Result<UioMap, DeviceError> {
    require_uio(paths)?;
    let entries = std::fs::read_dir(&paths.uio_class).map_err(|e| io_error("listing", &paths.uio_class, e))?;
    let mut devices: Vec<(u32, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix("uio").and_then(|i| i.parse().ok()).map(|i| (i, n))
        })
        .collect();
    devices.sort();
    let mut seen = Vec::new();
    for (_, dev) in devices {
        let dir = paths.uio_class.join(&dev);
        let found = read_attr(&dir.join("name"))?;
        if found == name {
            let map = dir.join("maps/map0");
            return Ok(UioMap {
                addr: read_number(&map.join("addr"))?,
                size: read_number(&map.join("size"))?,
                device: dev,
            });
        }
        seen.push(format!("{dev} `{found}`"));
    }
    Err(pynq_error(format!(
        "no UIO device named `{name}` (found: {}): the overlay's node did not bind to uio_pdrv_genirq; \
         apply overlay.dtbo, and boot with uio_pdrv_genirq.of_id=generic-uio",
        if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
    )))
}

/// Map `len` bytes of `path` shared, read-write, from offset 0.
fn map_shared(path: &Path, len: u64, what: &str) -> Result<MmapMut, DeviceError> {
    let file: File = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io_error(&format!("opening {what}"), path, e))?;
    let len =
        usize::try_from(len).map_err(|_| pynq_error(format!("{}: {len} bytes cannot be mapped", path.display())))?;
    // SAFETY: a shared mapping of a device node (or, in tests, a file) that
    // outlives no handle of ours; the other writer, the PL, only writes while a
    // launch runs, and registers are only accessed through volatile reads/writes.
    unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(|e| io_error(&format!("mapping {what}"), path, e))
}

/// A unit's AXI4-Lite control window, mapped from its UIO node; ticks are µs.
pub struct Registers {
    map: MmapMut,
}

impl Registers {
    /// Map `size` bytes of the UIO node `device` (map 0 is at offset 0).
    pub fn open(device: &Path, size: u64) -> Result<Self, DeviceError> {
        Ok(Self { map: map_shared(device, size, "the control window")? })
    }

    /// Byte offset of an aligned word inside the window.
    fn word(&self, offset: u32) -> Result<usize, DeviceError> {
        let at = offset as usize;
        if !offset.is_multiple_of(4) || at + 4 > self.map.len() {
            return Err(pynq_error(format!(
                "register offset {offset:#x} is unaligned or outside the {:#x}-byte control window",
                self.map.len()
            )));
        }
        Ok(at)
    }
}

impl ControlPort for Registers {
    fn read32(&mut self, offset: u32) -> Result<u32, DeviceError> {
        let at = self.word(offset)?;
        // SAFETY: `at` is 4-aligned and inside the page-aligned mapping; volatile so every poll reaches the bus.
        Ok(unsafe { self.map.as_ptr().add(at).cast::<u32>().read_volatile() })
    }

    fn write32(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
        let at = self.word(offset)?;
        // SAFETY: as in read32; one 32-bit store, as AXI4-Lite expects.
        unsafe { self.map.as_mut_ptr().add(at).cast::<u32>().write_volatile(value) };
        Ok(())
    }
}

/// Bytes an [`Arena`] block of `bytes` occupies (rounded up to [`BUFFER_ALIGN`]).
pub fn block_bytes(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN
}

/// First-fit allocation of [`BUFFER_ALIGN`]-aligned blocks in a region, so
/// every buffer starts on a page (the unit's bursts never cross one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arena {
    size: u64,
    /// Offset → block length, of live blocks.
    blocks: BTreeMap<u64, u64>,
}

impl Arena {
    pub fn new(size: u64) -> Self {
        Self { size, blocks: BTreeMap::new() }
    }

    /// The free gaps between live blocks, as (offset, length).
    fn gaps(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let ends = std::iter::once(0).chain(self.blocks.iter().map(|(o, l)| o + l));
        let starts = self.blocks.keys().copied().chain(std::iter::once(self.size));
        ends.zip(starts).filter(|(end, start)| start > end).map(|(end, start)| (end, start - end))
    }

    /// Offset of a new block of at least `bytes`.
    pub fn alloc(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        let len = block_bytes(bytes);
        let Some((offset, _)) = self.gaps().find(|&(_, gap)| gap >= len) else {
            let available = self.gaps().map(|(_, g)| g).max().unwrap_or(0);
            return Err(DeviceError::OutOfMemory { requested: bytes, available });
        };
        self.blocks.insert(offset, len);
        Ok(offset)
    }

    /// Release the block at `offset`; false when there is none.
    pub fn free(&mut self, offset: u64) -> bool {
        self.blocks.remove(&offset).is_some()
    }

    /// End of the last live block: the range a cache sync must cover.
    pub fn extent(&self) -> u64 {
        self.blocks.iter().next_back().map_or(0, |(o, l)| o + l)
    }
}

/// One u-dma-buf region, mapped with the CPU cache on and synced by hand.
pub struct UdmaBuf {
    sysfs: PathBuf,
    /// Physical (bus) address of byte 0, as the PL sees it.
    pub phys_addr: u64,
    pub size: u64,
    map: MmapMut,
    arena: Arena,
}

impl UdmaBuf {
    /// Open `/dev/<name>` with its sysfs attributes; transfers are bidirectional.
    pub fn open(paths: &PynqPaths, name: &str) -> Result<Self, DeviceError> {
        let sysfs = paths.udmabuf_class.join(name);
        require_dir(
            &sysfs,
            "u-dma-buf",
            &format!("u-dma-buf device {name}"),
            &format!("load the u-dma-buf module with a buffer, e.g. `modprobe u-dma-buf {name}=4194304`"),
        )?;
        let phys_addr = read_number(&sysfs.join("phys_addr"))?;
        let size = read_number(&sysfs.join("size"))?;
        if size == 0 {
            return Err(pynq_error(format!("u-dma-buf {name} has size 0")));
        }
        let map = map_shared(&paths.dev.join(name), size, &format!("u-dma-buf {name}"))?;
        write_attr(&sysfs.join("sync_direction"), "0")?;
        Ok(Self { sysfs, phys_addr, size, map, arena: Arena::new(size) })
    }

    /// Offset of a new block of `bytes`; [`DeviceError::OutOfMemory`] when no gap fits.
    pub fn alloc(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        self.arena.alloc(bytes)
    }

    pub fn free(&mut self, offset: u64) -> bool {
        self.arena.free(offset)
    }

    /// The address the PL uses for byte `offset` of the region.
    pub fn device_address(&self, offset: u64) -> u64 {
        self.phys_addr + offset
    }

    /// `len` bytes at `offset`, which the caller bounds-checked.
    fn bytes(&self, offset: u64, len: usize) -> &[u8] {
        &self.map[offset as usize..offset as usize + len]
    }

    fn bytes_mut(&mut self, offset: u64, len: usize) -> &mut [u8] {
        &mut self.map[offset as usize..offset as usize + len]
    }

    /// Set the sync range to the live blocks and write 1 to `attr` (`sync_for_device` or `sync_for_cpu`).
    fn sync(&self, attr: &str) -> Result<(), DeviceError> {
        write_attr(&self.sysfs.join("sync_offset"), "0")?;
        write_attr(&self.sysfs.join("sync_size"), &self.arena.extent().to_string())?;
        write_attr(&self.sysfs.join(attr), "1")
    }

    /// Flush CPU writes so the PL reads them; before a launch.
    pub fn sync_for_device(&self) -> Result<(), DeviceError> {
        self.sync("sync_for_device")
    }

    /// Invalidate the CPU's view so it reads what the PL wrote; after a launch.
    pub fn sync_for_cpu(&self) -> Result<(), DeviceError> {
        self.sync("sync_for_cpu")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_is_first_fit_page_aligned_and_reports_the_largest_gap() {
        let mut a = Arena::new(5 * BUFFER_ALIGN);
        assert_eq!(a.alloc(1).unwrap(), 0);
        assert_eq!(a.alloc(BUFFER_ALIGN + 1).unwrap(), BUFFER_ALIGN);
        assert_eq!(a.alloc(BUFFER_ALIGN).unwrap(), 3 * BUFFER_ALIGN);
        assert_eq!(a.extent(), 4 * BUFFER_ALIGN);
        assert!(a.free(BUFFER_ALIGN));
        assert!(!a.free(BUFFER_ALIGN), "a block is freed once");
        // First fit: the two-page hole left by the freed block, not the tail.
        assert_eq!(a.alloc(2 * BUFFER_ALIGN).unwrap(), BUFFER_ALIGN);
        match a.alloc(2 * BUFFER_ALIGN) {
            Err(DeviceError::OutOfMemory { requested, available }) => {
                assert_eq!((requested, available), (2 * BUFFER_ALIGN, BUFFER_ALIGN));
            }
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
        assert_eq!(a.alloc(0).unwrap(), 4 * BUFFER_ALIGN, "an empty buffer still gets its own page");
        assert_eq!(a.extent(), 5 * BUFFER_ALIGN);
    }

    #[test]
    fn permission_errors_say_to_run_as_root() {
        let e =
            io_error("writing", Path::new("/sys/class/fpga_manager/fpga0/flags"), ErrorKind::PermissionDenied.into());
        let msg = e.to_string();
        assert!(msg.contains("fpga0/flags") && msg.contains("run as root"), "{msg}");
        let e = io_error("writing", Path::new("/x"), ErrorKind::NotFound.into()).to_string();
        assert!(!e.contains("root"), "{e}");
    }

    #[test]
    fn sysfs_numbers_parse_as_hex_or_decimal() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("n");
        for (text, want) in [("0x40000000\n", 0x4000_0000), ("0x00001000", 0x1000), ("4194304\n", 4_194_304)] {
            std::fs::write(&f, text).unwrap();
            assert_eq!(read_number(&f).unwrap(), want);
        }
        std::fs::write(&f, "zz").unwrap();
        assert!(read_number(&f).unwrap_err().to_string().contains("not a number"));
    }
}
