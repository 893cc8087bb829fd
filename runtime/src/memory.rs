//! Host memory a run may use. On Linux an allocation larger than free memory
//! usually succeeds (overcommit) and the process is killed while filling it,
//! so devices that hold buffers in host memory check `MemAvailable` first.
use crate::device::DeviceError;

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes of host memory available to new allocations without swapping, or
/// `None` where the kernel does not say (not Linux).
pub fn available() -> Option<u64> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `Err(OutOfMemory)` when `bytes` exceeds the available host memory; passes
/// where it is unknown.
pub fn check_host(bytes: u64) -> Result<(), DeviceError> {
    match available() {
        Some(available) if bytes > available => Err(DeviceError::OutOfMemory { requested: bytes, available }),
        _ => Ok(()),
    }
}

/// `bytes` for people: `512 B`, `3.2 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_mem_available_in_bytes() {
        let text = "MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:   23422956 kB\n";
        assert_eq!(parse_meminfo(text), Some(23_422_956 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
    }

    /// The refusal says how much there is (a failed reservation alone would say 0).
    #[test]
    #[cfg(target_os = "linux")]
    fn the_cpu_device_refuses_buffers_beyond_mem_available() {
        use crate::backend::cpu::{CpuDevice, CpuMode};
        use crate::Device;
        match CpuDevice::new(CpuMode::Golden).alloc(1 << 62) {
            Err(DeviceError::OutOfMemory { requested, available }) => {
                assert_eq!(requested, 1 << 62);
                assert!(available > 0, "the refusal should give MemAvailable");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
