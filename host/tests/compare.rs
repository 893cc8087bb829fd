//! `ferrite compare` plumbing on real small runs: the report survives JSON,
//! projected figures are never labelled or shown as measured, baselines
//! classify slowdowns and correctness losses, and the CLI's exit status
//! follows the worst classification.
use assert_cmd::Command;
use ferrite_host::compare::baseline::{classify, worst, Baseline, Severity, Thresholds};
use ferrite_host::compare::report::{DeviceId, Provenance, Report, Workload, LEGEND};
use ferrite_host::compare::{self, Options, Size};
use std::time::Duration;

/// Small problems of every workload, quick on the golden model.
fn small(devices: &[DeviceId]) -> Options {
    Options {
        sizes: vec![
            Size::Gemm { m: 24, n: 16, k: 40 },
            Size::Attention { heads: 1, seq: 16, dim: 16 },
            Size::Moe { tokens: 32, hidden: 16, experts: 6, top_k: 2 },
        ],
        devices: devices.to_vec(),
        seed: 11,
        min_time: Duration::ZERO,
        ..Options::default()
    }
}

/// Whether simulator tests can run; under CI a missing Verilator fails instead.
fn verilator_or_skip() -> bool {
    if ferrite_sim::verilator_available() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but Verilator is missing: run scripts/install-deps.sh");
    eprintln!("skipped: Verilator is not installed (scripts/install-deps.sh installs it)");
    false
}

#[test]
fn report_round_trips_and_writes_every_output() {
    let report = compare::run(&small(&[DeviceId::Cpu, DeviceId::CpuFast])).unwrap();
    assert_eq!(report.cases.len(), 3);
    for case in &report.cases {
        assert!(case.ops > 0);
        let cpu = case.rows.iter().find(|r| r.device == DeviceId::Cpu).expect("a cpu row");
        assert!(cpu.bit_exact, "the golden model is bit-exact with itself");
        assert!(cpu.runs >= compare::MIN_RUNS as u32);
        assert_eq!(cpu.latency_s.label, Provenance::Measured);
        assert!(cpu.latency_s.value > 0.0 && cpu.ops_per_s.value > 0.0);
        assert!(cpu.fpga.is_none());
        // cpu-fast runs GEMM only and says why it skips the rest.
        let fast = case.rows.iter().any(|r| r.device == DeviceId::CpuFast);
        assert_eq!(fast, case.workload == Workload::Gemm, "{:?}", case.workload);
        if !fast {
            assert!(case.skipped.iter().any(|s| s.device == DeviceId::CpuFast && s.reason.contains("GEMM path only")));
        }
    }
    let moe = &report.cases[2].rows[0].accuracy;
    assert!(moe.expert_agreement.is_some_and(|a| a > 0.5 && a <= 1.0), "{moe:?}");

    let json = report.to_json().unwrap();
    assert_eq!(Report::from_json(&json).unwrap(), report);
    let bumped = json.replacen("\"version\": 1", "\"version\": 99", 1);
    assert!(Report::from_json(&bumped).unwrap_err().to_string().contains("version 99"));

    let dir = tempfile::tempdir().unwrap();
    let written = report.write(dir.path()).unwrap();
    assert_eq!(written.len(), 3);
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains(LEGEND) && md.contains(" [M]") && md.contains("## gemm 24x16x40"), "{md}");
    // Seven cells a row: pipes inside cells (`max |err|`) are escaped, the separators are not.
    let row = md.lines().find(|l| l.starts_with("| cpu (golden model) | ")).expect("a cpu row in report.md");
    assert_eq!(row.matches(" | ").count(), 6, "{row}");
    assert!(md.contains("max \\|err\\| vs f64"), "{md}");
    let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.contains("<svg"), "not an SVG");
    assert!(svg.contains("gemm 24x16x40 · cpu") && svg.contains("[M]"), "chart lacks labelled bars");
}

#[test]
fn projected_figures_are_never_shown_as_measured() {
    if !verilator_or_skip() {
        return;
    }
    let report = compare::run(&small(&[DeviceId::Cpu, DeviceId::Sim])).unwrap();
    let text = report.to_terminal();
    let md = report.to_markdown();
    for case in &report.cases {
        let sim = case.rows.iter().find(|r| r.device == DeviceId::Sim).expect("a sim row");
        assert!(
            sim.bit_exact,
            "{} {}: the simulated unit differs from the golden model",
            case.workload.id(),
            case.size
        );
        assert_eq!(sim.latency_s.label, Provenance::Projected);
        assert_eq!(sim.ops_per_s.label, Provenance::Projected);
        if let Some(e) = sim.energy.per_op {
            assert_eq!(e.label, Provenance::Estimated);
        }
        let fpga = sim.fpga.as_ref().expect("FPGA projection");
        assert!(fpga.cycles > 0 && fpga.utilization > 0.0 && fpga.utilization <= 1.0);
        // cycles / clock (to the nanosecond of `RunStats::projected`), not the simulator's wall time.
        let expect = fpga.cycles as f64 / (fpga.clock_mhz * 1e6);
        assert!((sim.latency_s.value - expect).abs() <= 1e-9, "{} vs {expect}", sim.latency_s.value);
        assert_ne!(sim.latency_s.value, fpga.sim_wall_s);
        // Every line showing the sim row marks its figures projected and none measured.
        for out in [&text, &md] {
            let line = out.lines().find(|l| l.contains(&sim.name)).expect("sim row shown");
            assert!(line.contains(" [P]") && !line.contains(" [M]"), "{line}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    report.write(dir.path()).unwrap();
    let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap();
    assert!(svg.contains("· sim @ ") && svg.contains("[P]"), "chart lacks projected markers");
    clocks_are_named(&report, &[&text, &md, &svg]);
}

/// No projected figure without its clock's source: the row's clock is
/// measured post-route or assumed, every table row and chart bar with a
/// projected figure shows which, and the notes and the energy source give the
/// whole source.
fn clocks_are_named(report: &Report, outputs: &[&str]) {
    let mut projected = 0;
    for case in &report.cases {
        for row in case.rows.iter().filter(|r| r.latency_s.label == Provenance::Projected) {
            projected += 1;
            let f = row.fpga.as_ref().expect("a projected row carries its projection");
            let src = &f.clock_source;
            assert!(
                src.starts_with("measured post-route, ")
                    || (src.starts_with("assumed (") && src.ends_with("not timing-checked")),
                "{}: clock source {src:?}",
                row.name
            );
            assert!(row.energy.source.contains(src.as_str()) || row.energy.per_op.is_none(), "{}", row.energy.source);
            for out in outputs {
                let note = format!("projection: {} cycles of {}", f.cycles, f.kernel);
                if let Some(line) = out.lines().find(|l| l.contains(&note)) {
                    assert!(line.contains(src.as_str()), "{line}");
                }
            }
        }
    }
    assert!(projected > 0, "no projected figure to check");
    for out in outputs {
        // A projected figure's line (table row, chart bar) names the clock's kind next to it.
        for line in out.lines().filter(|l| l.contains("[P]") && !l.contains("[P] projected from")) {
            assert!(line.contains(" MHz measured") || line.contains(" MHz assumed"), "clock source missing: {line}");
        }
    }
}

#[test]
fn baselines_classify_slowdowns_and_correctness() {
    let report = compare::run(&small(&[DeviceId::Cpu])).unwrap();
    let base = Baseline::from_json(&Baseline::from_report(&report).to_json().unwrap()).unwrap();
    assert_eq!(base, Baseline::from_report(&report));
    let t = Thresholds::default();
    let same = classify(&base, &report, &t).unwrap();
    assert_eq!(same.len(), 3);
    assert!(same.iter().all(|v| v.severity == Severity::Ok), "{same:?}");

    // The same run, slower by a factor: each threshold band in turn.
    let slower = |factor: f64| {
        let mut r = report.clone();
        for row in r.cases.iter_mut().flat_map(|c| c.rows.iter_mut()) {
            row.latency_s.value *= factor;
            row.ops_per_s.value /= factor;
        }
        worst(&classify(&base, &r, &t).unwrap())
    };
    assert_eq!(slower(0.5), Severity::Ok);
    assert_eq!(slower(1.03), Severity::Ok);
    assert_eq!(slower(1.10), Severity::Minor);
    assert_eq!(slower(1.20), Severity::Moderate);
    assert_eq!(slower(1.40), Severity::Severe);

    let mut r = report.clone();
    r.cases[0].rows[0].bit_exact = false;
    let v = classify(&base, &r, &t).unwrap();
    assert_eq!(v[0].severity, Severity::Severe);
    assert!(v[0].reason.contains("bit-exact"));

    let mut r = report.clone();
    r.cases[1].rows[0].accuracy.max_abs *= 1.5;
    assert_eq!(classify(&base, &r, &t).unwrap()[1].severity, Severity::Severe);

    let mut r = report.clone();
    r.cases[2].rows[0].latency_s.label = Provenance::Projected;
    let v = classify(&base, &r, &t).unwrap();
    assert!(v[2].severity == Severity::Severe && v[2].reason.contains("not comparable"), "{v:?}");

    let mut r = report.clone();
    let moved = r.cases.pop().unwrap();
    let v = classify(&base, &r, &t).unwrap();
    assert!(v.iter().any(|v| v.severity == Severity::Severe && v.key.starts_with("moe/")), "{v:?}");
    r.cases.push(moved.clone());
    r.cases.push(ferrite_host::compare::report::Case { size: "other".into(), ..moved });
    assert!(classify(&base, &r, &t).unwrap().iter().any(|v| v.severity == Severity::New));

    let mut r = report.clone();
    r.seed += 1;
    assert!(classify(&base, &r, &t).unwrap_err().to_string().contains("seed"));
}

#[test]
fn sizes_parse_with_clear_errors() {
    assert_eq!(Size::parse(Workload::Gemm, "32").unwrap(), Size::Gemm { m: 32, n: 32, k: 32 });
    assert_eq!(Size::parse(Workload::Moe, "8x16x4x2").unwrap().to_string(), "8x16x4x2");
    assert!(Size::parse(Workload::Gemm, "0").unwrap_err().to_string().contains("positive integer"));
    assert!(Size::parse(Workload::Attention, "2x3").unwrap_err().to_string().contains("HEADSxSEQxDIM"));
}

fn ferrite() -> Command {
    Command::cargo_bin("ferrite").unwrap()
}

/// Scale every baseline latency by `factor` (throughput by its inverse).
fn rescale(path: &std::path::Path, factor: f64) {
    let mut b = Baseline::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    for e in &mut b.entries {
        e.latency_s.value *= factor;
        e.ops_per_s.value /= factor;
    }
    std::fs::write(path, b.to_json().unwrap()).unwrap();
}

#[test]
fn cli_exit_status_follows_the_worst_row() {
    let dir = tempfile::tempdir().unwrap();
    let (out, base) = (dir.path().join("out"), dir.path().join("base.json"));
    let run = |extra: &[&str]| {
        let mut cmd = ferrite();
        cmd.args(["compare", "--workload", "gemm", "16", "--devices", "cpu", "--quiet", "--min-time-ms", "0"]);
        cmd.arg("--out").arg(&out).args(extra);
        cmd.assert()
    };
    let ok = run(&["--save-baseline", base.to_str().unwrap()]).success();
    let stdout = String::from_utf8_lossy(&ok.get_output().stdout).to_string();
    assert!(stdout.contains("gemm 16x16x16") && stdout.contains(" [M]"), "{stdout}");
    assert!(out.join("report.json").exists() && out.join("report.md").exists() && out.join("chart.svg").exists());

    // A baseline 1000× faster than anything this run can do: severe, exit 1.
    rescale(&base, 1e-3);
    let bad = run(&["--baseline", base.to_str().unwrap()]).code(1);
    let stderr = String::from_utf8_lossy(&bad.get_output().stderr).to_string();
    assert!(stderr.contains("severe regression"), "{stderr}");
    let verdicts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("regressions.json")).unwrap()).unwrap();
    assert_eq!(verdicts[0]["key"], "gemm/16x16x16/cpu");
    assert_eq!(verdicts[0]["severity"], "Severe");
    // A baseline 10⁶× slower: this run is faster, exit 0.
    rescale(&base, 1e6);
    run(&["--baseline", base.to_str().unwrap()]).success();

    run(&["--baseline", base.to_str().unwrap(), "--thresholds", "minor=x"]).code(1);
    let mixed = ferrite().args(["compare", "64", "--quiet"]).assert().code(1);
    assert!(String::from_utf8_lossy(&mixed.get_output().stderr).contains("prefix each size"));
}

/// The decoder block as a workload: every device bit-exact with the golden
/// block, accuracy against float64 with the router's agreement, tokens/s and
/// the per-unit breakdown; the three simulated units projected together at
/// one clock whose source is named.
#[test]
fn the_block_runs_as_a_workload_with_per_unit_shares() {
    let mut devices = vec![DeviceId::Cpu, DeviceId::CpuFast, DeviceId::Opencl];
    if verilator_or_skip() {
        devices.push(DeviceId::Sim);
    }
    let opts = Options {
        sizes: vec![
            Size::parse(Workload::Block, "9x32x2x6x3x48").unwrap(),
            // Heads of 8: no attention unit for that head dim, so no sim row.
            Size::parse(Workload::Block, "5x32x4x4x2x32").unwrap(),
        ],
        devices,
        seed: 5,
        min_time: Duration::ZERO,
        ..Options::default()
    };
    let report = compare::run(&opts).unwrap();
    let case = &report.cases[0];
    assert_eq!((case.workload, case.tokens, case.size.as_str()), (Workload::Block, Some(9), "9x32x2x6x3x48"));
    assert!(case.rows.len() >= 2, "{:?}", case.skipped);
    for row in &case.rows {
        assert!(row.bit_exact, "{}", row.name);
        assert!(row.accuracy.expert_agreement.is_some_and(|a| a > 0.5), "{:?}", row.accuracy);
        assert!(row.accuracy.rel_fro > 0.0 && row.accuracy.rel_fro < 0.5, "{:?}", row.accuracy);
        let units: Vec<&str> = row.units.iter().map(|u| u.unit.as_str()).collect();
        assert_eq!(units, ["gemm", "attention", "moe"], "{}", row.name);
        let total: f64 = row.units.iter().map(|u| u.share).sum();
        assert!((total - 1.0).abs() < 1e-9, "{}: shares sum to {total}", row.name);
        // q, k, v, o and two projections per expert that got tokens.
        assert!(row.units[0].launches >= 6, "{:?}", row.units);
    }
    if let Some(sim) = case.rows.iter().find(|r| r.device == DeviceId::Sim) {
        let f = sim.fpga.as_ref().expect("a projection");
        assert_eq!(f.kernel.matches(" + ").count(), 2, "{}", f.kernel);
        assert!(f.clock_source.contains("the slowest of one clock domain: gemm"), "{}", f.clock_source);
        assert_eq!(sim.latency_s.label, Provenance::Projected);
    }
    if opts.devices.contains(&DeviceId::Sim) {
        let skip = report.cases[1].skipped.iter().find(|s| s.device == DeviceId::Sim).expect("no sim row for d = 8");
        assert!(skip.reason.contains("head_dim = 8"), "{}", skip.reason);
    }
    let text = report.to_terminal();
    assert!(text.contains("cpu per token: ") && text.contains("tokens/s [M]"), "{text}");
    assert!(text.contains("cpu units (launch wall time): gemm"), "{text}");
    assert_eq!(Report::from_json(&report.to_json().unwrap()).unwrap(), report);
}
