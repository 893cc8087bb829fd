//! The XRT backend against the real XRT library (Debian's libxrt-dev in CI):
//! the bindgen bindings link and run, and a machine without a card gets clear
//! errors. With a card (`FERRITE_XRT_MANIFEST` naming a built image), the
//! self-test runs on it; without one it is skipped with the reason printed.
#![cfg(feature = "xrt")]
use ferrite_host::backend::xrt::{open_device, sysfs_cards, XrtTarget};
use ferrite_host::bitstream::board::Board;
use ferrite_host::bitstream::{build, BuildRequest};
use ferrite_host::deploy::deploy;
use ferrite_host::manifest::{Manifest, UnitConfig};
use ferrite_hw::attention::AttentionConfig;
use ferrite_hw::moe::MoeConfig;
use std::path::{Path, PathBuf};

/// Where Debian installs XRT's libraries (there is no $XILINX_XRT/lib layout).
const DEBIAN_LIBS: &str = "/usr/lib/x86_64-linux-gnu";

/// A U55C build of `unit` whose image is a stand-in xclbin (magic and kernel
/// name, what the manifest check reads); returns the manifest path.
fn image_with_xclbin(dir: &Path, unit: UnitConfig) -> PathBuf {
    let report = build(&BuildRequest {
        unit,
        board: Board::U55c,
        clock_mhz: 300.0,
        out: dir.to_path_buf(),
        run_vendor_tools: false,
    })
    .unwrap();
    let m = Manifest::load(&report.manifest).unwrap().manifest;
    let mut xclbin = b"xclbin2\0".to_vec();
    xclbin.extend_from_slice(m.kernel.as_bytes());
    std::fs::write(dir.join("k.xclbin"), xclbin).unwrap();
    let mut files: Vec<String> = m.files.keys().cloned().collect();
    files.push("k.xclbin".into());
    Manifest::new(m.unit, m.board, m.clock_mhz, Some("k.xclbin".into()), None, dir, &files).unwrap().write(dir).unwrap()
}

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
    // Attention and MoE images take the same path: to the runtime check, not an "unsupported unit".
    for unit in [
        UnitConfig::Attention(AttentionConfig {
            head_dim: 16,
            lanes: 2,
            dot_par: 16,
            port_bits: 128,
            ..Default::default()
        }),
        UnitConfig::Moe(MoeConfig::small()),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let manifest = image_with_xclbin(dir.path(), unit);
        let e = format!("{:#}", deploy(&manifest, Some("0")).unwrap_err());
        assert!(e.contains("XILINX_XRT is not set"), "{e}");
    }

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

/// `ferrite run … --device xrt` on this machine (no card): XRT's runtime
/// check, a bad `--card` and an image of another unit are one error line;
/// with Debian's XRT libraries, XRT starts and finds no card.
#[test]
fn run_cli_on_xrt_without_a_card_is_a_clear_error() {
    if !sysfs_cards().is_empty() {
        eprintln!("skipped: a card is present; `ferrite run --device xrt` is tested by deploying an image to it");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let manifest = image_with_xclbin(dir.path(), UnitConfig::Gemm(ferrite_hw::gemm::GemmConfig::default()));
    let m = manifest.to_str().unwrap();
    let run = |args: &[&str], xrt: Option<&Path>| {
        let mut cmd = assert_cmd::Command::cargo_bin("ferrite").unwrap();
        cmd.args(["run"]).args(args).args(["--device", "xrt", "--manifest", m]);
        match xrt {
            Some(root) => cmd.env("XILINX_XRT", root),
            None => cmd.env_remove("XILINX_XRT"),
        };
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(err.lines().filter(|l| l.starts_with("error")).count(), 1, "{args:?}: {err}");
        err
    };
    let gemm = ["gemm", "--m", "4", "--n", "4", "--k", "4"];
    let err = run(&gemm, None);
    assert!(err.contains("XILINX_XRT is not set") && err.lines().count() == 1, "{err}");
    let err = run(&["gemm", "--m", "4", "--n", "4", "--k", "4", "--card", "first"], None);
    assert!(err.contains("`first` is neither a device index nor a PCIe BDF"), "{err}");
    let err = run(&["attention", "--seq", "4", "--dim", "16"], None);
    assert!(err.contains("holds the gemm unit: run it with `ferrite run gemm`"), "{err}");

    if !Path::new(DEBIAN_LIBS).join("libxrt_core.so.2").is_file() {
        eprintln!("skipped the live XRT call: no libxrt_core.so.2 in {DEBIAN_LIBS} (install libxrt-dev)");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(DEBIAN_LIBS, root.path().join("lib")).unwrap();
    let err = run(&gemm, Some(root.path()));
    assert!(err.contains("no XRT device 0"), "{err}");
    let err = run(&["gemm", "--m", "4", "--n", "4", "--k", "4", "--card", "0000:65:00.1"], Some(root.path()));
    assert!(err.contains("no XRT device 0000:65:00.1"), "{err}");
}

/// `ferrite compare --devices xrt --manifest …` on this machine (no card):
/// the board is opened before any simulation, and its absence is one line;
/// an image for a PYNQ board is not driven by XRT (its row is skipped, said why).
#[test]
fn compare_on_xrt_without_a_card_is_a_clear_error() {
    if !sysfs_cards().is_empty() {
        eprintln!("skipped: a card is present; compare's board rows are tested by running it there");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let manifest = image_with_xclbin(dir.path(), UnitConfig::Gemm(ferrite_hw::gemm::GemmConfig::small(2, 2)));
    let out = assert_cmd::Command::cargo_bin("ferrite")
        .unwrap()
        .args(["compare", "--workload", "gemm", "8", "--devices", "cpu,xrt", "--quiet", "--manifest"])
        .arg(&manifest)
        .arg("--out")
        .arg(dir.path().join("report"))
        .env_remove("XILINX_XRT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--devices xrt") && err.contains("XILINX_XRT is not set"), "{err}");
    assert!(!dir.path().join("report").exists(), "nothing written before the board opened");
}
