//! A library user of the `Device` trait gets the runtime without the CLI's
//! crates: `ferrite-runtime`'s dependency tree has no clap, plotters,
//! comfy-table or indicatif, with every backend feature on.
use std::process::Command;

#[test]
fn the_runtime_pulls_no_cli_plot_table_or_progress_crate() {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-p", "ferrite-runtime", "--all-features", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8(out.stdout).unwrap();
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains(&"ferrite-hw") && crates.contains(&"cudarc"), "the tree was not read: {tree}");
    for banned in ["clap", "plotters", "comfy-table", "indicatif"] {
        assert!(!crates.contains(&banned), "ferrite-runtime depends on {banned}:\n{tree}");
    }
}
