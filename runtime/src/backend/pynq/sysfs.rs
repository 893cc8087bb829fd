//! The board's kernel interfaces as files: sysfs attributes, the FPGA
//! manager, configfs overlays, UIO discovery, and the mapped control window.
use super::PynqPaths;
use crate::device::DeviceError;
use crate::driver::ControlPort;
use memmap2::{MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;

pub(super) fn pynq_error(msg: String) -> DeviceError {
    DeviceError::Backend { backend: "pynq", source: msg.into() }
}

/// An I/O error on `path`; permission problems say how to get permission.
pub(super) fn io_error(action: &str, path: &Path, e: std::io::Error) -> DeviceError {
    let hint = if e.kind() == ErrorKind::PermissionDenied {
        " (the FPGA manager, configfs, /lib/firmware and the UIO/u-dma-buf nodes need root: run as root, e.g. with sudo)"
    } else {
        ""
    };
    pynq_error(format!("{action} {}: {e}{hint}", path.display()))
}

/// A sysfs attribute, trimmed.
pub(super) fn read_attr(path: &Path) -> Result<String, DeviceError> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(|e| io_error("reading", path, e))
}

/// Write an existing sysfs attribute (never creates one: sysfs cannot, so neither may a fake tree).
pub(super) fn write_attr(path: &Path, value: &str) -> Result<(), DeviceError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| io_error("writing", path, e))
}

/// A number as sysfs prints it: `0x`-prefixed hex (addresses) or decimal (sizes).
pub(super) fn read_number(path: &Path) -> Result<u64, DeviceError> {
    let text = read_attr(path)?;
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| pynq_error(format!("{}: `{text}` is not a number", path.display())))
}

pub(super) fn require_dir(path: &Path, tool: &'static str, what: &str, hint: &str) -> Result<(), DeviceError> {
    if path.is_dir() {
        Ok(())
    } else {
        Err(DeviceError::MissingTool { tool, hint: format!("no {what} ({} missing): {hint}", path.display()) })
    }
}

/// Check the FPGA manager exists; the first thing a PYNQ deploy needs.
pub(super) fn require_fpga_manager(paths: &PynqPaths) -> Result<(), DeviceError> {
    require_dir(
        &paths.fpga_manager,
        "FPGA manager",
        "FPGA manager",
        "not a Zynq board running Linux, or its kernel lacks FPGA manager support",
    )
}

pub(super) fn require_uio(paths: &PynqPaths) -> Result<(), DeviceError> {
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
pub(super) fn map_shared(path: &Path, len: u64, what: &str) -> Result<MmapMut, DeviceError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
