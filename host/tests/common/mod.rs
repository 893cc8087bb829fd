//! Helpers shared by the CLI tests (each test binary uses a subset).
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
