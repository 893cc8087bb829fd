//! Bounded fuzzing (proptest over bytes) of the two parsers that read user
//! files: the `.npy` reader and `Manifest::load`. Whatever the bytes, they
//! answer with a one-line error naming the file, never a panic, an abort on a
//! huge allocation, or a hang; a valid input still reads back.
use ferrite_host::bitstream::board::Board;
use ferrite_host::bitstream::{build, BuildRequest};
use ferrite_host::manifest::{Manifest, UnitConfig};
use ferrite_host::npy;
use ferrite_hw::gemm::GemmConfig;
use ndarray::Array2;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Cases per property: a few seconds in the normal test run.
const CASES: u32 = 256;

/// A valid 3×4 int8 `.npy` file's bytes.
fn valid_npy() -> Vec<u8> {
    let mut bytes = Vec::new();
    ndarray_npy::WriteNpyExt::write_npy(&Array2::<i8>::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as i8), &mut bytes)
        .unwrap();
    bytes
}

/// The error of a failed read is one line and names the file.
fn check_error(e: &dyn std::fmt::Display, path: &Path) {
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "not one line: {msg}");
    assert!(msg.contains(&*path.to_string_lossy()), "the file is not named: {msg}");
}

fn read_npy_bytes(bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, bytes).unwrap();
    match npy::read_i8_matrix(&path) {
        Ok(a) => assert_eq!(a.len(), a.nrows() * a.ncols()),
        Err(e) => check_error(&e, &path),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn npy_reader_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        read_npy_bytes(&bytes);
    }

    /// Valid files with one byte changed or cut short: the header is where the parser can be fooled.
    #[test]
    fn npy_reader_survives_mutated_files(at in 0usize..200, byte in any::<u8>(), cut in 0usize..200) {
        let mut bytes = valid_npy();
        let at = at % bytes.len();
        bytes[at] = byte;
        bytes.truncate(bytes.len() - cut % bytes.len());
        read_npy_bytes(&bytes);
    }

    #[test]
    fn manifest_loader_survives_mutated_manifests(at in 0usize..4096, byte in any::<u8>(), cut in 0usize..4096) {
        let (dir, manifest) = image();
        let mut bytes = std::fs::read(manifest).unwrap();
        let at = at % bytes.len();
        bytes[at] = byte;
        bytes.truncate(bytes.len() - cut % bytes.len());
        let path = dir.join(format!("m{at}_{byte}_{cut}.json"));
        std::fs::write(&path, &bytes).unwrap();
        if let Err(e) = Manifest::load(&path) {
            check_error(&e, &path);
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn manifest_loader_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        std::fs::write(&path, &bytes).unwrap();
        let e = Manifest::load(&path).expect_err("random bytes are not a manifest");
        check_error(&e, &path);
    }
}

/// One built image (a U55C build without vendor tools) shared by the cases.
fn image() -> (&'static Path, &'static Path) {
    static IMAGE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (dir, manifest) = IMAGE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let unit = UnitConfig::Gemm(GemmConfig { rows: 4, cols: 4, port_bits: 128, ..GemmConfig::default() });
        let report = build(&BuildRequest {
            unit,
            board: Board::U55c,
            clock_mhz: 300.0,
            out: dir.path().to_path_buf(),
            run_vendor_tools: false,
        })
        .unwrap();
        (dir, report.manifest)
    });
    (dir.path(), manifest.as_path())
}

#[test]
fn the_unmutated_inputs_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, valid_npy()).unwrap();
    assert_eq!(npy::read_i8_matrix(&path).unwrap().dim(), (3, 4));
    let (_, manifest) = image();
    Manifest::load(manifest).unwrap();
}
