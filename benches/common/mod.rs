//! Shared by the benches: which backends this machine has, and why one is skipped.
use ferrite::host::compare::open_device;
use ferrite::host::compare::report::DeviceId;
use ferrite::host::{Device, DeviceError};

/// The OpenCL and CUDA devices that can run a unit's problem: each is opened
/// and `probe` runs the problem once on it. A device that cannot be opened,
/// or that refuses the problem (`Unsupported`, `TooBig`), is left out and the
/// reason printed as `UNIT-DEVICE skipped: ...`.
pub fn gpu_devices(
    unit: &str,
    mut probe: impl FnMut(&mut dyn Device) -> Result<(), DeviceError>,
) -> Vec<(DeviceId, Box<dyn Device>)> {
    let mut usable = Vec::new();
    for id in [DeviceId::Opencl, DeviceId::Cuda] {
        match open_device(id) {
            Err(reason) => eprintln!("{unit}-{} skipped: {reason}", id.id()),
            Ok(mut dev) => match probe(dev.as_mut()) {
                Err(e) => eprintln!("{unit}-{} skipped: {e}", id.id()),
                Ok(()) => usable.push((id, dev)),
            },
        }
    }
    usable
}

/// Whether the Verilator benches of `group` can run; prints why not. Under
/// `CI` a missing Verilator is an error, so a bench run cannot silently skip them.
pub fn verilator_or_skip(group: &str) -> bool {
    if ferrite::sim::verilator_available() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but Verilator is missing");
    eprintln!("{group} skipped: Verilator is not installed (scripts/install-deps.sh)");
    false
}
