//! Board-path artifacts that need no board: generated recipes checked against
//! the register map, manifests round-tripped and corrupted, deploy and
//! devices failing or reporting cleanly.
use assert_cmd::Command;
use ferrite_host::bitstream::board::Board;
use ferrite_host::bitstream::tcl::{check_syntax, TclCheck};
use ferrite_host::bitstream::{build, kernel_xml, BuildRequest, Outcome};
use ferrite_host::manifest::{Manifest, ManifestError, UnitConfig};
use ferrite_hw::attention::AttentionConfig;
use ferrite_hw::gemm::GemmConfig;
use ferrite_hw::moe::MoeConfig;
use std::path::Path;

fn build_small(board: Board, dir: &Path) -> ferrite_host::bitstream::BuildReport {
    let cfg = GemmConfig::small(2, 2);
    build(&BuildRequest {
        unit: UnitConfig::Gemm(cfg),
        board,
        clock_mhz: board.spec().default_clock_mhz,
        out: dir.to_path_buf(),
        run_vendor_tools: false,
    })
    .unwrap()
}

#[test]
fn every_board_builds_valid_recipes() {
    for board in Board::ALL {
        let dir = tempfile::tempdir().unwrap();
        let report = build_small(board, dir.path());
        assert!(report.success(), "{report}");
        let tcl_checked = report.checks.iter().any(|(n, o)| n.ends_with("syntax") && matches!(o, Outcome::Pass(_)));
        assert!(tcl_checked, "tclsh must be installed where the tests run: {report}");
        let loaded = Manifest::load(&report.manifest).unwrap();
        assert_eq!(loaded.manifest.board, board);
        assert!(loaded.manifest.image.is_none());
        assert!(loaded.manifest.timing.is_none(), "no vendor run, no recorded timing");
        // The recipe that implements the design also records its timing.
        let recorder = if board.is_alveo() { "timing.tcl" } else { "overlay.tcl" };
        let tcl = std::fs::read_to_string(dir.path().join(recorder)).unwrap();
        assert!(tcl.contains("report_timing_summary") && tcl.contains("timing.json"), "{recorder}: {tcl}");
        let map = GemmConfig::small(2, 2).register_map();
        if board.is_alveo() {
            let xml = std::fs::read_to_string(dir.path().join("kernel.xml")).unwrap();
            kernel_xml::check(&xml, &map).unwrap();
            let tcl = std::fs::read_to_string(dir.path().join("package_xo.tcl")).unwrap();
            for r in &map.registers {
                assert!(
                    tcl.contains(&format!("    {} {:#x} {}", r.name, r.offset, r.bits)),
                    "{} missing from package_xo.tcl",
                    r.name
                );
            }
            let link = std::fs::read_to_string(dir.path().join("link.cfg")).unwrap();
            assert!(link.contains(&format!("sp={}_1.m_axi_gmem:", map.kernel)), "{link}");
        } else {
            let tcl = std::fs::read_to_string(dir.path().join("overlay.tcl")).unwrap();
            let overlay = loaded.manifest.overlay.unwrap();
            assert!(
                tcl.contains(&format!("-offset {:#x}", overlay.control_base)),
                "overlay address differs from the manifest"
            );
        }
    }
}

#[test]
fn tcl_checker_finds_unbalanced_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.tcl");
    // A missing close brace, and a bracket left open at the top level.
    for text in ["set a 1\nif {$a} {\n  puts x\nputs done\n", "puts [string length x\nputs done\n"] {
        std::fs::write(&bad, text).unwrap();
        match check_syntax(&bad) {
            TclCheck::Invalid(e) => assert!(e.contains("incomplete"), "{e}"),
            other => panic!("expected Invalid for {text:?}, got {other:?}"),
        }
    }
    // Brackets inside braces are literal text: complete.
    std::fs::write(&bad, "if {1} {\n  puts \"[\"\n}\n").unwrap();
    assert_eq!(check_syntax(&bad), TclCheck::Ok);
}

/// A file with an xclbin's magic that names `kernel` (what Manifest::load can check without XRT).
fn fake_xclbin(kernel: &str) -> Vec<u8> {
    let mut v = b"xclbin2\0".to_vec();
    v.extend_from_slice(&[0; 56]);
    v.extend_from_slice(kernel.as_bytes());
    v
}

/// Rewrite the manifest of `dir` with `image` as its (checksummed) image.
fn with_image(dir: &Path, image: &str, bytes: &[u8]) -> std::path::PathBuf {
    std::fs::write(dir.join(image), bytes).unwrap();
    // Parsed without Manifest::load's checks: the previous image may just have been overwritten.
    let m: Manifest = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let mut files: Vec<String> = m.files.keys().filter(|f| *f != image).cloned().collect();
    files.push(image.into());
    let m = Manifest::new(m.unit, m.board, m.clock_mhz, Some(image.into()), m.overlay, dir, &files).unwrap();
    m.write(dir).unwrap()
}

#[test]
fn manifests_round_trip_and_refuse_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let report = build_small(Board::U280, dir.path());
    let path = report.manifest.clone();
    let good = std::fs::read_to_string(&path).unwrap();
    let loaded = Manifest::load(&path).unwrap();
    assert_eq!(serde_json::from_str::<Manifest>(&loaded.manifest.to_json()).unwrap(), loaded.manifest);

    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    assert!(matches!(Manifest::load(&path), Err(ManifestError::Json { .. })));
    std::fs::write(&path, good.replace("\"rows\": 2", "\"rows\": 3")).unwrap();
    let e = Manifest::load(&path).unwrap_err().to_string();
    assert!(e.contains("kernel"), "{e}");
    std::fs::write(&path, &good).unwrap();

    let xml = dir.path().join("kernel.xml");
    let original = std::fs::read(&xml).unwrap();
    std::fs::write(&xml, b"<root/>").unwrap();
    assert!(matches!(Manifest::load(&path), Err(ManifestError::Checksum { .. })));
    std::fs::write(&xml, &original).unwrap();

    let kernel = GemmConfig::small(2, 2).kernel_name();
    let path = with_image(dir.path(), "k.xclbin", b"not an xclbin");
    let e = Manifest::load(&path).unwrap_err();
    assert!(matches!(&e, ManifestError::Image { reason, .. } if reason.contains("magic")), "{e}");
    let path = with_image(dir.path(), "k.xclbin", &fake_xclbin("ferrite_gemm_8x4_p128"));
    let e = Manifest::load(&path).unwrap_err();
    assert!(matches!(&e, ManifestError::Image { reason, .. } if reason.contains(&kernel)), "{e}");
    let path = with_image(dir.path(), "k.xclbin", &fake_xclbin(&kernel));
    assert_eq!(Manifest::load(&path).unwrap().manifest.image.as_deref(), Some("k.xclbin"));
    // Appending a byte after the build is a checksum error, not a silent load.
    let mut bytes = fake_xclbin(&kernel);
    bytes.push(0);
    std::fs::write(dir.path().join("k.xclbin"), bytes).unwrap();
    assert!(matches!(Manifest::load(&path), Err(ManifestError::Checksum { .. })));
}

fn ferrite() -> Command {
    let mut c = Command::cargo_bin("ferrite").unwrap();
    c.env_remove("XILINX_XRT");
    c
}

#[test]
fn deploy_fails_cleanly_without_a_board() {
    let dir = tempfile::tempdir().unwrap();
    build_small(Board::U55c, dir.path());
    let out = ferrite().args(["deploy", "--manifest"]).arg(dir.path().join("manifest.json")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    // With XRT: the build made no xclbin (no v++ here). Without: it names the missing feature.
    let want = if cfg!(feature = "xrt") { "no xclbin" } else { "--features xrt" };
    assert!(err.contains(want), "{err}");

    let kernel = GemmConfig::small(2, 2).kernel_name();
    let manifest = with_image(dir.path(), "k.xclbin", &fake_xclbin(&kernel));
    let out = ferrite().args(["deploy", "--manifest"]).arg(&manifest).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = if cfg!(feature = "xrt") { "XILINX_XRT is not set" } else { "--features xrt" };
    assert!(err.contains(expected), "{err}");

    let z2 = tempfile::tempdir().unwrap();
    build_small(Board::PynqZ2, z2.path());
    let out = ferrite().args(["deploy", "--manifest"]).arg(z2.path().join("manifest.json")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no FPGA manager"), "{err}");

    let out = ferrite().args(["deploy", "--manifest", "/nonexistent/manifest.json"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));
}

#[test]
fn bitstream_build_cli_reports_missing_tools_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = ferrite()
        .args([
            "bitstream",
            "build",
            "--unit",
            "gemm",
            "--board",
            "u250",
            "--rows",
            "2",
            "--cols",
            "2",
            "--port-bits",
            "128",
            "--k-max",
            "256",
            "--n-max",
            "256",
            "--out",
        ])
        .arg(dir.path())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("`vivado` is not on PATH; would have run: vivado -mode batch -notrace -source package_xo.tcl"),
        "{text}"
    );
    assert!(text.contains("ok       kernel.xml"), "{text}");
    Manifest::load(&dir.path().join("manifest.json")).unwrap();
}

/// Stand-ins for `vivado` and `v++` that write what the real ones would
/// (the `.xo`, an xclbin naming the kernel, the timing the recipe records).
const FAKE_VIVADO: &str = r#"#!/bin/sh
k=$(ls *.regmap.json | sed 's/\.regmap\.json$//')
case "$5" in
  package_xo.tcl) : > "$k.xo" ;;
  timing.tcl) echo '{"tool": "Vivado 2099.1", "part": "xcu280-fsvh2892-2L-e", "target_mhz": 300, "wns_ns": -0.437, "achieved_mhz": 263.46}' > timing.json ;;
esac
"#;
const FAKE_VPP: &str = r#"#!/bin/sh
k=$(ls *.regmap.json | sed 's/\.regmap\.json$//')
printf 'xclbin2\000' > "$7"
head -c 56 /dev/zero >> "$7"
printf '%s' "$k" >> "$7"
"#;

#[test]
fn a_vendor_run_records_the_achieved_clock_in_the_manifest() {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    for (name, text) in [("vivado", FAKE_VIVADO), ("v++", FAKE_VPP)] {
        let path = bin.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("ferrite")
        .unwrap()
        .args(["bitstream", "build", "--unit", "gemm", "--board", "u280", "--rows", "2", "--cols", "2"])
        .args(["--port-bits", "128", "--k-max", "256", "--n-max", "256", "--out"])
        .arg(dir.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.path().display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("ran      vivado -mode batch -notrace -source timing.tcl"), "{text}");
    let loaded = Manifest::load(&dir.path().join("manifest.json")).unwrap();
    let t = loaded.manifest.timing.clone().expect("the recorded timing");
    assert_eq!((t.wns_ns, t.achieved_mhz, t.target_mhz), (-0.437, 263.46, 300.0));
    assert!(loaded.manifest.files.contains_key("timing.json"), "timing.json is checksummed");
    // Deploy and run project at the clock the image met, and say it was measured.
    let clock = ferrite_host::clock::Clock::of_image(&loaded.manifest);
    assert!(clock.measured && clock.mhz == 263.46, "{clock}");
    assert!(clock.to_string().contains("WNS -0.437 ns at 300 MHz"), "{clock}");
}

#[test]
fn devices_lists_cpu_and_tools() {
    let out = ferrite().args(["devices", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = v.as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    for k in ["cpu", "cuda", "opencl", "xrt", "tool"] {
        assert!(kinds.contains(&k), "{kinds:?}");
    }
    if cfg!(feature = "opencl") && std::env::var_os("CI").is_some() {
        let pocl = v.as_array().unwrap().iter().any(|e| {
            e["kind"] == "opencl" && e["detail"].as_str().unwrap_or("").contains("Portable Computing Language")
        });
        assert!(pocl, "CI installs PoCL: {v}");
    }
}

fn small_attention() -> AttentionConfig {
    AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, ..AttentionConfig::default() }
}

#[test]
fn attention_and_moe_builds_are_checked_against_their_register_maps() {
    let units = [
        (UnitConfig::Attention(small_attention()), "\"lanes\": 2", "\"lanes\": 3"),
        (UnitConfig::Moe(MoeConfig::small()), "\"e_max\": 12", "\"e_max\": 13"),
    ];
    for (unit, field, edited) in units {
        let map = unit.register_map();
        for board in [Board::U55c, Board::PynqZ2] {
            let dir = tempfile::tempdir().unwrap();
            let report = build(&BuildRequest {
                unit: unit.clone(),
                board,
                clock_mhz: board.spec().default_clock_mhz,
                out: dir.path().to_path_buf(),
                run_vendor_tools: false,
            })
            .unwrap();
            assert!(report.success(), "{report}");
            let syntax_ok =
                report.checks.iter().filter(|(n, o)| n.ends_with("syntax") && matches!(o, Outcome::Pass(_)));
            // Alveo: package_xo.tcl and timing.tcl; PYNQ: overlay.tcl.
            let scripts = if board.is_alveo() { 2 } else { 1 };
            assert_eq!(syntax_ok.count(), scripts, "tclsh checked every Tcl script: {report}");
            let verilog = std::fs::read_to_string(dir.path().join(format!("{}.sv", map.kernel))).unwrap();
            assert!(verilog.contains(&format!("module {}(", map.kernel)));
            let loaded = Manifest::load(&report.manifest).unwrap();
            assert_eq!(loaded.manifest.unit, unit);
            assert_eq!(loaded.manifest.register_map, map);
            assert_eq!(serde_json::from_str::<Manifest>(&loaded.manifest.to_json()).unwrap(), loaded.manifest);
            if board.is_alveo() {
                let xml = std::fs::read_to_string(dir.path().join("kernel.xml")).unwrap();
                kernel_xml::check(&xml, &map).unwrap();
                for r in map.arguments() {
                    assert!(xml.contains(&format!("name=\"{}\"", r.name)), "{} missing from kernel.xml", r.name);
                }
                let tcl = std::fs::read_to_string(dir.path().join("package_xo.tcl")).unwrap();
                for r in &map.registers {
                    assert!(tcl.contains(&format!("    {} {:#x} {}", r.name, r.offset, r.bits)), "{}", r.name);
                }
                let link = std::fs::read_to_string(dir.path().join("link.cfg")).unwrap();
                assert!(link.contains(&format!("sp={}_1.m_axi_gmem:", map.kernel)), "{link}");
            } else {
                let dtso = std::fs::read_to_string(dir.path().join("overlay.dtso")).unwrap();
                assert!(dtso.contains(&format!("{}@", map.kernel)), "{dtso}");
            }
            // A configuration edited after the build no longer generates the recorded kernel.
            let good = std::fs::read_to_string(&report.manifest).unwrap();
            assert!(good.contains(field), "{good}");
            std::fs::write(&report.manifest, good.replace(field, edited)).unwrap();
            let e = Manifest::load(&report.manifest).unwrap_err().to_string();
            assert!(e.contains("kernel"), "{e}");
        }
    }
}

#[test]
fn bitstream_build_cli_takes_each_units_flags() {
    let cases: [(&[&str], Board); 2] = [
        (&["--unit", "attention", "--d", "16", "--lanes", "2", "--port-bits", "128"], Board::U280),
        (
            &["--unit", "moe", "--e-max", "12", "--k-max", "8", "--h-max", "64", "--lanes", "4", "--port-bits", "128"],
            Board::Zcu104,
        ),
    ];
    for (flags, board) in cases {
        let dir = tempfile::tempdir().unwrap();
        let out = ferrite()
            .args(["bitstream", "build", "--board", &board.to_string()])
            .args(flags)
            .arg("--out")
            .arg(dir.path())
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("`vivado` is not on PATH; would have run: vivado"), "{text}");
        let m = Manifest::load(&dir.path().join("manifest.json")).unwrap().manifest;
        let want = match flags[1] {
            "attention" => UnitConfig::Attention(AttentionConfig { clock_mhz: m.clock_mhz, ..small_attention() }),
            _ => UnitConfig::Moe(MoeConfig { clock_mhz: m.clock_mhz, ..MoeConfig::small() }),
        };
        assert_eq!(m.unit, want);
    }
    // Another unit's flag is refused rather than silently ignored.
    let dir = tempfile::tempdir().unwrap();
    let out = ferrite()
        .args(["bitstream", "build", "--unit", "attention", "--board", "u55c", "--rows", "4", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--rows is not a flag of the attention unit"), "{err}");
}
