//! DMA memory: one u-dma-buf region, carved into page-aligned blocks.
use super::sysfs::{map_shared, pynq_error, read_number, require_dir, write_attr};
use super::PynqPaths;
use crate::device::DeviceError;
use ferrite_hw::gemm::config::BUFFER_ALIGN;
use memmap2::MmapMut;
use std::collections::BTreeMap;
use std::path::PathBuf;

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
    pub(super) fn bytes(&self, offset: u64, len: usize) -> &[u8] {
        &self.map[offset as usize..offset as usize + len]
    }

    pub(super) fn bytes_mut(&mut self, offset: u64, len: usize) -> &mut [u8] {
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
}
