//! The XRT backend against the real XRT library (Debian's libxrt-dev in CI):
//! the bindgen bindings link and run, and a machine without a card gets clear
//! errors. With a card (`FERRITE_XRT_MANIFEST` naming a built image), the
//! self-test runs on it; without one it is skipped with the reason printed.
#![cfg(feature = "xrt")]
use ferrite_host::backend::xrt::{open_device, sysfs_cards, XrtTarget};
use ferrite_host::deploy::deploy;
use std::path::Path;

/// Where Debian installs XRT's libraries (there is no $XILINX_XRT/lib layout).
const DEBIAN_LIBS: &str = "/usr/lib/x86_64-linux-gnu";

/// One test: XRT reads XILINX_XRT once per process, so the steps run in order.
#[test]
fn opening_without_a_card_is_a_clear_error() {
    if let Ok(manifest) = std::env::var("FERRITE_XRT_MANIFEST") {
        let cases = deploy(Path::new(&manifest), Some("0")).expect("self-test on the card");
        eprintln!("self-test on the card: {} cases bit-exact", cases.len());
        return;
    }
    if !sysfs_cards().is_empty() {
        eprintln!("skipped: a card is present; set FERRITE_XRT_MANIFEST to a built image to self-test it");
        return;
    }
    std::env::remove_var("XILINX_XRT");
    let e = open_device(&XrtTarget::Index(0)).unwrap_err().to_string();
    assert!(e.contains("XILINX_XRT is not set"), "{e}");

    if !Path::new(DEBIAN_LIBS).join("libxrt_core.so.2").is_file() {
        eprintln!("skipped the live XRT call: no libxrt_core.so.2 in {DEBIAN_LIBS} (install libxrt-dev)");
        return;
    }
    // An XRT root whose lib/ is Debian's library directory: XRT starts, finds no card.
    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(DEBIAN_LIBS, root.path().join("lib")).unwrap();
    std::env::set_var("XILINX_XRT", root.path());
    let e = open_device(&XrtTarget::Index(0)).unwrap_err().to_string();
    assert!(e.contains("no XRT device 0"), "{e}");
    let e = open_device(&XrtTarget::Bdf("0000:65:00.1".into())).unwrap_err().to_string();
    assert!(e.contains("no XRT device 0000:65:00.1"), "{e}");
}
