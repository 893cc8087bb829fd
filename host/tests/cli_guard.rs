//! Bad input to `ferrite run` is one error line before anything runs: the
//! issue's examples (problems larger than memory, simulations of hours,
//! malformed `.npy` files, unusable `--out` paths), each checked here.
mod common;

use common::{ferrite, stderr, stdout};

/// Run `args`, expect exit status 1 with a single `error:` line (after any
/// `estimate` line), and return stderr.
fn one_line_error(args: &[&str]) -> String {
    let out = ferrite().args(args).assert().code(1);
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("estimate ")).collect();
    assert_eq!(lines.len(), 1, "{args:?}: {err}");
    assert!(lines[0].starts_with("error: "), "{args:?}: {err}");
    assert!(stdout(&out).is_empty(), "{args:?} ran: {}", stdout(&out));
    err
}

#[test]
fn problems_larger_than_memory_are_refused_saying_how_much() {
    for args in [
        ["run", "gemm", "--device", "cpu", "--m", "1000000", "--n", "1000000", "--k", "1000000"].as_slice(),
        &["run", "gemm", "--device", "sim", "--m", "100000", "--n", "100000", "--k", "100000"],
        &["run", "attention", "--device", "cpu", "--heads", "1000", "--seq", "100000", "--dim", "128"],
        &["run", "moe", "--device", "cpu", "--tokens", "16000000", "--hidden", "4096", "--experts", "8"],
    ] {
        let err = one_line_error(args);
        assert!(err.contains("of host memory") && err.contains("is available (MemAvailable"), "{args:?}: {err}");
    }
}

#[test]
fn long_runs_print_an_estimate_and_need_yes() {
    for args in [
        // 2^28 cycles at least on the 16×16 array: over ten minutes of simulation.
        ["run", "gemm", "--device", "sim", "--m", "4096", "--n", "4096", "--k", "4096"].as_slice(),
        // 5.5·10^11 MACs on the golden model.
        &["run", "gemm", "--device", "cpu", "--m", "8192", "--n", "8192", "--k", "8192"],
        &["run", "attention", "--device", "cpu", "--seq", "65536", "--dim", "128"],
    ] {
        let err = one_line_error(args);
        assert!(err.contains("estimate "), "{args:?}: {err}");
        assert!(err.contains("pass --yes to start it anyway"), "{args:?}: {err}");
    }
    let err = one_line_error(&["run", "gemm", "--device", "sim", "--m", "4096", "--n", "4096", "--k", "4096"]);
    assert!(err.contains("at least 268435456 cycles"), "{err}");
}

#[test]
fn malformed_npy_files_say_what_was_expected_once() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.npy");
    ndarray_npy::write_npy(&good, &ndarray::Array2::<i8>::zeros((3, 4))).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let cases = [
        (
            "short.npy",
            bytes[..bytes.len() - 7].to_vec(),
            "shape [3, 4] of |i1 needs 12 bytes of data after the header, the file has 5",
        ),
        ("text.npy", b"a,b\n1,2\n".to_vec(), "expected the magic"),
        ("cut.npy", bytes[..9].to_vec(), "the file ends inside the header-length field"),
    ];
    for (name, content, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let err = one_line_error(&["run", "gemm", "--a", path.to_str().unwrap(), "--b", good.to_str().unwrap()]);
        assert!(err.contains(want) && err.contains(name), "{name}: {err}");
        assert_eq!(err.matches(want).count(), 1, "{name}: a cause is repeated: {err}");
    }
}

#[test]
fn unusable_out_paths_fail_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let missing = dir.path().join("no/such/dir/c.npy");
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    for (args, want) in [
        (vec!["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--out", d], "is a directory"),
        (
            vec!["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--out", missing.to_str().unwrap()],
            "cannot be written",
        ),
        (vec!["run", "attention", "--seq", "4", "--dim", "16", "--out", d], "is a directory"),
        (
            vec!["run", "moe", "--tokens", "4", "--hidden", "16", "--experts", "4", "--out", file.to_str().unwrap()],
            "is a file",
        ),
    ] {
        let err = one_line_error(&args);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(!missing.exists());
}

/// A backend left out of the build is one line naming the `cargo` command
/// that adds it (these run in builds without the feature, the default).
#[test]
#[cfg(not(all(feature = "opencl", feature = "xrt")))]
fn a_backend_left_out_names_the_cargo_command() {
    #[cfg(not(feature = "opencl"))]
    {
        let err = one_line_error(&["run", "gemm", "--device", "opencl", "--m", "2", "--n", "2", "--k", "2"]);
        assert!(err.contains("cargo build -p ferrite-host --features opencl"), "{err}");
    }
    #[cfg(not(feature = "xrt"))]
    {
        let err =
            one_line_error(&["run", "moe", "--device", "xrt", "--tokens", "4", "--hidden", "16", "--experts", "4"]);
        assert!(err.contains("cargo build -p ferrite-host --features xrt"), "{err}");
    }
}
