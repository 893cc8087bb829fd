//! Helpers shared by the host tests (each test binary uses a subset).
#![allow(dead_code)]
use assert_cmd::Command;

/// The `ferrite` binary of this build.
pub fn ferrite() -> Command {
    Command::cargo_bin("ferrite").expect("ferrite binary")
}

pub fn stdout(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stdout).to_string()
}

pub fn stderr(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stderr).to_string()
}

/// The decoder block (issue 17) on `dev`, bit for bit against its golden model:
/// the CI block and the tight variant that drops choices.
pub fn block_is_bit_exact_on(dev: &mut dyn ferrite_host::Device) {
    use ferrite_host::block::{run_block, OneDevice};
    use ferrite_hw::block::{block, random_input, BlockShape, BlockWeights, Scales};
    for (i, s) in [BlockShape::small(), BlockShape::tight()].iter().enumerate() {
        let (w, x, sc) = (BlockWeights::random(s, 60 + i as u64), random_input(s, 70 + i as u64), Scales::default());
        let got = run_block(&mut OneDevice(&mut *dev), s, &w, &sc, &x).unwrap();
        assert_eq!(got.output, block(s, &w, &sc, &x).unwrap(), "{s:?}");
    }
}
