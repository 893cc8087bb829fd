//! Smoke tests of the `ferrite` binary.
mod common;

use common::ferrite;
use ferrite_hw::regmap::RegisterMap;

#[test]
fn export_writes_verilog_regmap_and_config() {
    let dir = tempfile::tempdir().unwrap();
    let out = ferrite()
        .args(["export", "gemm", "--rows", "4", "--cols", "4", "--port-bits", "128", "--out"])
        .arg(dir.path())
        // A PATH of only the empty output directory hides Verilator: this test checks the files alone.
        .env("PATH", dir.path())
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(stdout.contains("lint: skipped"), "{stdout}");
    let name = "ferrite_gemm_4x4_p128";
    let verilog = std::fs::read_to_string(dir.path().join(format!("{name}.sv"))).unwrap();
    assert!(verilog.contains(&format!("module {name}")), "top module missing");
    let map = RegisterMap::from_json(&std::fs::read_to_string(dir.path().join(format!("{name}.regmap.json"))).unwrap())
        .unwrap();
    assert_eq!(map.kernel, name);
    let cfg: ferrite_hw::gemm::GemmConfig =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("{name}.config.json"))).unwrap())
            .unwrap();
    assert_eq!((cfg.rows, cfg.cols, cfg.port_bits), (4, 4, 128));
}

#[test]
fn run_on_cpu_is_bit_exact_and_writes_npy() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("c.npy");
    let out = ferrite()
        .args(["run", "gemm", "--device", "cpu-fast", "--m", "7", "--n", "5", "--k", "3", "--bias", "--relu"])
        .args(["--requant", "1073741824,36", "--out"])
        .arg(&c)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(stdout.contains("bit-exact"), "{stdout}");
    let back = ferrite_host::npy::read_i8_matrix(&c).unwrap();
    assert_eq!(back.dim(), (7, 5));

    // The written operands read back in: A from a file, shapes from the files.
    let a = dir.path().join("a.npy");
    ndarray_npy::write_npy(&a, &ndarray::Array2::<i8>::from_elem((7, 3), -128)).unwrap();
    let b = dir.path().join("b.npy");
    ndarray_npy::write_npy(&b, &ndarray::Array2::<i8>::from_elem((3, 5), -128)).unwrap();
    ferrite().args(["run", "gemm", "--device", "cpu", "--a"]).arg(&a).arg("--b").arg(&b).assert().success();
}

#[test]
fn user_errors_are_one_line_and_non_zero() {
    for args in [
        vec!["run", "gemm", "--device", "cpu", "--m", "0", "--n", "1", "--k", "1"],
        vec!["run", "gemm", "--device", "cpu", "--n", "1", "--k", "1"],
        vec!["run", "gemm", "--device", "cpu", "--m", "1", "--n", "1", "--k", "1", "--requant", "x"],
        vec!["run", "gemm", "--device", "cpu", "--a", "/nonexistent/a.npy", "--b", "/nonexistent/b.npy"],
        vec!["export", "gemm", "--cols", "3", "--out", "/tmp"],
    ] {
        let out = ferrite().args(&args).assert().failure();
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.trim_start().starts_with("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn export_lints_clean_with_verilator() {
    if !ferrite_sim::verilator_available() {
        assert!(std::env::var_os("CI").is_none(), "CI is set but Verilator is missing");
        eprintln!("skipped: Verilator is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = ferrite()
        .args(["export", "gemm", "--rows", "4", "--cols", "4", "--port-bits", "128", "--out"])
        .arg(dir.path())
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(stdout.contains("lint: clean"), "{stdout}");
}

/// `ferrite … | head`: a reader that closes the pipe early ends ferrite
/// quietly (SIGPIPE), not with a panic and a backtrace.
#[test]
fn a_closed_stdout_pipe_is_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ferrite"))
        .args(["block", "--device", "cpu", "--min-time-ms", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before ferrite prints its first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}: {err}", out.status);
}
