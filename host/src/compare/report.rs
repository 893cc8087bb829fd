//! The comparison report: what `ferrite compare` measured, projected and
//! estimated, written as JSON (serde), Markdown and a terminal table.
//!
//! Every figure is a [`Figure`] carrying its [`Provenance`], so a projected
//! FPGA latency can never be read as a measured one: the JSON has the label,
//! the table and Markdown append a marker (`[M]`, `[P]`, `[E]`), the chart colours
//! and tags each bar.
use crate::clock::round_mhz;
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// Version of the report JSON layout; bumped on any incompatible change.
pub const REPORT_VERSION: u32 = 1;

/// Where a number comes from. Measured and projected figures are never
/// combined into one number, and every output shows which one it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Provenance {
    /// Timed or metered on this machine.
    Measured,
    /// Computed from exact simulated cycles at a clock (an FPGA that was not there).
    Projected,
    /// From a model with assumed constants (FPGA power).
    Estimated,
}

impl Provenance {
    /// The marker appended to a figure in the table and the Markdown.
    pub fn marker(self) -> &'static str {
        match self {
            Self::Measured => " [M]",
            Self::Projected => " [P]",
            Self::Estimated => " [E]",
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Self::Measured => "measured",
            Self::Projected => "projected",
            Self::Estimated => "estimated",
        }
    }
}

/// One number with its provenance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub value: f64,
    pub label: Provenance,
}

impl Figure {
    pub fn measured(value: f64) -> Self {
        Self { value, label: Provenance::Measured }
    }

    pub fn projected(value: f64) -> Self {
        Self { value, label: Provenance::Projected }
    }

    pub fn estimated(value: f64) -> Self {
        Self { value, label: Provenance::Estimated }
    }
}

/// The units a comparison can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Gemm,
    Attention,
    Moe,
    /// The int8 MoE decoder block (docs/block.md): all three units and the glue.
    Block,
}

impl Workload {
    pub const ALL: [Workload; 4] = [Workload::Gemm, Workload::Attention, Workload::Moe, Workload::Block];

    pub fn id(self) -> &'static str {
        match self {
            Self::Gemm => "gemm",
            Self::Attention => "attention",
            Self::Moe => "moe",
            Self::Block => "block",
        }
    }
}

/// The devices a comparison knows how to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceId {
    /// The golden model.
    Cpu,
    /// matrixmultiply's dgemm with an integer epilogue (GEMM only).
    CpuFast,
    /// The RTL under Verilator: its cycles give the projected FPGA figures.
    Sim,
    /// The first OpenCL device (PoCL here): the OpenCL C ports.
    Opencl,
    /// The first CUDA GPU: the bit-exact twins.
    Cuda,
    /// An Alveo card through XRT, with the image of `--manifest` (not in [`DeviceId::ALL`]).
    Xrt,
    /// A PYNQ board's programmable logic, with the image of `--manifest` (not in [`DeviceId::ALL`]).
    Pynq,
}

impl DeviceId {
    /// The devices of a plain `ferrite compare`; the boards need an image and are asked for by name.
    pub const ALL: [DeviceId; 5] = [DeviceId::Cpu, DeviceId::CpuFast, DeviceId::Sim, DeviceId::Opencl, DeviceId::Cuda];

    pub fn id(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::CpuFast => "cpu-fast",
            Self::Sim => "sim",
            Self::Opencl => "opencl",
            Self::Cuda => "cuda",
            Self::Xrt => "xrt",
            Self::Pynq => "pynq",
        }
    }
}

/// Error of one device's output against the float64 reference on the same inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Largest absolute error, in `unit`.
    pub max_abs: f64,
    /// Relative Frobenius error (GEMM, attention); for MoE, of the weights of agreeing tokens.
    pub rel_fro: f64,
    /// MoE only: fraction of tokens whose chosen expert set equals the float router's.
    pub expert_agreement: Option<f64>,
    /// What `max_abs` is measured in.
    pub unit: String,
}

/// Energy of one run, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Joules of one run.
    pub joules: Option<Figure>,
    /// Joules per operation (a MAC is two operations).
    pub per_op: Option<Figure>,
    /// The meter or model used, or why energy is not available.
    pub source: String,
}

/// Resource counts of a synthesized unit, as far as yosys got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub lut: u64,
    pub ff: u64,
    pub dsp: u64,
    pub bram36: f64,
    pub uram: u64,
    /// How they were obtained ("yosys synth_xilinx -family xcup", cached or not).
    pub source: String,
}

/// The FPGA side of a simulator row: exact cycles, the clock they are
/// projected at, the board and its resource estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FpgaProjection {
    pub kernel: String,
    pub board: String,
    pub clock_mhz: f64,
    /// Where the clock comes from (see [`crate::clock::Clock`]): `measured
    /// post-route, …` or `assumed (…), not timing-checked`. Empty in reports
    /// written before clocks were labelled.
    #[serde(default)]
    pub clock_source: String,
    pub cycles: u64,
    /// Useful MACs / (multipliers · cycles).
    pub utilization: f64,
    pub multipliers: u64,
    /// `None` with `resources_note` saying why (yosys missing, not requested, ...).
    pub resources: Option<Resources>,
    pub resources_note: String,
    /// Simulator wall time of the run: how long the simulation took on this
    /// machine, not how long the hardware would take.
    pub sim_wall_s: f64,
}

impl FpgaProjection {
    /// `300 MHz assumed` or `37.2 MHz measured`: the clock and the first word
    /// of its source, for a table cell or a chart label (the notes carry the rest).
    pub fn clock_short(&self) -> String {
        clock_short(self.clock_mhz, &self.clock_source)
    }
}

/// `300 MHz assumed`: a clock and the first word of its source.
fn clock_short(mhz: f64, source: &str) -> String {
    let kind = source.split_whitespace().next().unwrap_or("unlabelled");
    format!("{} MHz {kind}", round_mhz(mhz))
}

/// The board side of a board row: the cycles the unit's own counter gave on
/// the first launch, and the clock the image runs at, so the row can be read
/// against the simulated projection of the same unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoardRun {
    pub kernel: String,
    /// The image's manifest.
    pub manifest: String,
    pub clock_mhz: f64,
    /// Where the clock comes from (see [`crate::clock::Clock::of_image`]).
    pub clock_source: String,
    /// The unit's CYCLES register after the first launch.
    pub cycles: u64,
}

/// One device on one problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub device: DeviceId,
    /// The device's own description (`DeviceInfo::name`).
    pub name: String,
    /// Median launch time (measured), or cycles / clock (projected).
    pub latency_s: Figure,
    /// Operations per second: 2 · MACs / latency, with the latency's label.
    pub ops_per_s: Figure,
    /// Timed launches behind the median (1 for a projection).
    pub runs: u32,
    pub energy: Energy,
    /// Output identical, bit for bit, to the golden model's.
    pub bit_exact: bool,
    pub accuracy: Accuracy,
    pub fpga: Option<FpgaProjection>,
    /// Board rows (xrt, pynq) only.
    #[serde(default)]
    pub board: Option<BoardRun>,
    /// Block rows only: where the block's time went, per unit.
    #[serde(default)]
    pub units: Vec<UnitShare>,
}

/// One unit's part of a block run: launch wall time on a measured device,
/// time projected from its cycles on a simulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitShare {
    pub unit: String,
    pub launches: u32,
    pub seconds: f64,
    /// Fraction of the block's time.
    pub share: f64,
}

/// A device left out of a problem, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skip {
    pub device: DeviceId,
    pub reason: String,
}

/// One workload at one size on every device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub workload: Workload,
    /// The size as given on the command line (`64x64x64`), part of baseline keys.
    pub size: String,
    /// Human description of the problem (epilogue, scales, ...).
    pub problem: String,
    /// 2 · useful MACs.
    pub ops: u64,
    pub rows: Vec<Row>,
    pub skipped: Vec<Skip>,
    /// What `bit_exact` and the errors cover: `full`, or `N sampled rows` for
    /// problems too large for the golden model to run whole.
    #[serde(default = "full_check")]
    pub verified: String,
    /// Tokens of one run (the block), for tokens/s and energy per token.
    #[serde(default)]
    pub tokens: Option<u64>,
}

fn full_check() -> String {
    "full".into()
}

/// Where the report was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub cpu: String,
    pub threads: usize,
    pub os: String,
}

impl HostInfo {
    /// This machine: CPU model from /proc/cpuinfo where readable.
    pub fn current() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        Self {
            cpu,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            os: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }
}

/// Everything one `ferrite compare` run found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    /// Seconds since the Unix epoch.
    pub created_unix: u64,
    pub ferrite_version: String,
    pub host: HostInfo,
    pub seed: u64,
    /// The FPGA power model behind every `Estimated` energy, in words.
    pub fpga_power_model: String,
    pub cases: Vec<Case>,
}

impl Report {
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).context("serializing the report")
    }

    pub fn from_json(text: &str) -> Result<Self> {
        let r: Self = serde_json::from_str(text).context("parsing a compare report")?;
        anyhow::ensure!(
            r.version == REPORT_VERSION,
            "report version {} is not the supported version {REPORT_VERSION}",
            r.version
        );
        Ok(r)
    }

    /// `report.json`, `report.md` and `chart.svg` in `dir`; returns their paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = dir.join("report.json");
        let md = dir.join("report.md");
        let svg = dir.join("chart.svg");
        std::fs::write(&json, self.to_json()?).with_context(|| format!("writing {}", json.display()))?;
        std::fs::write(&md, self.to_markdown()).with_context(|| format!("writing {}", md.display()))?;
        super::chart::write_svg(self, &svg)?;
        Ok(vec![json, md, svg])
    }

    /// One terminal table per case, with skipped devices and FPGA notes under it.
    pub fn to_terminal(&self) -> String {
        let mut s = String::new();
        for case in &self.cases {
            let _ = writeln!(s, "\n{} {} — {} ({} ops)", case.workload.id(), case.size, case.problem, case.ops);
            let mut table = Table::new();
            table.load_preset(UTF8_FULL_CONDENSED).set_header(HEADER);
            for row in &case.rows {
                table.add_row(cells(row));
            }
            let _ = writeln!(s, "{table}");
            notes(case, &mut s, "  ");
        }
        let _ = writeln!(s, "\n{LEGEND}");
        s
    }

    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Ferrite cross-device comparison\n");
        let _ = writeln!(
            s,
            "ferrite {} on {} ({} threads, {}), seed {}, report format v{}.\n",
            self.ferrite_version, self.host.cpu, self.host.threads, self.host.os, self.seed, self.version
        );
        let _ = writeln!(s, "{LEGEND}\n");
        for case in &self.cases {
            let _ = writeln!(
                s,
                "## {} {}\n\n{} — {} operations (a MAC is 2).\n",
                case.workload.id(),
                case.size,
                case.problem,
                case.ops
            );
            let _ = writeln!(s, "| {} |", HEADER.map(md_cell).join(" | "));
            let _ = writeln!(s, "|{}", "---|".repeat(HEADER.len()));
            for row in &case.rows {
                let _ = writeln!(s, "| {} |", cells(row).map(|c| md_cell(&c)).join(" | "));
            }
            s.push('\n');
            notes(case, &mut s, "- ");
            s.push('\n');
        }
        let _ = writeln!(s, "## FPGA power model\n\n{}", self.fpga_power_model);
        s
    }
}

/// A Markdown table cell: pipes inside it escaped.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

const HEADER: [&str; 7] = ["device", "latency", "throughput", "energy/op", "max |err| vs f64", "bit-exact", "runs"];

/// How the markers read, printed under every table.
pub const LEGEND: &str = "[M] measured on this machine · [P] projected from simulated cycles at the clock named in \
the row, measured post-route or assumed (no FPGA was run; a board row beside it is measured on the board) · [E] estimated from the FPGA power model · simulator wall time is not a device latency and is listed separately";

fn cells(row: &Row) -> [String; 7] {
    let err = match row.accuracy.expert_agreement {
        Some(agree) => {
            format!("{:.3e} {} ({:.1} % same experts)", row.accuracy.max_abs, row.accuracy.unit, 100.0 * agree)
        }
        None => format!("{:.3e} {}", row.accuracy.max_abs, row.accuracy.unit),
    };
    let energy = match row.energy.per_op {
        Some(e) => format!("{}{}", si(e.value, "J"), e.label.marker()),
        None => "—".into(),
    };
    let device = match (&row.fpga, &row.board) {
        (Some(f), _) => format!("{} → {} @ {}", row.name, f.board, f.clock_short()),
        (None, Some(b)) => format!("{} @ {}", row.name, clock_short(b.clock_mhz, &b.clock_source)),
        (None, None) => row.name.clone(),
    };
    [
        device,
        format!("{}{}", si(row.latency_s.value, "s"), row.latency_s.label.marker()),
        format!("{}{}", si(row.ops_per_s.value, "op/s"), row.ops_per_s.label.marker()),
        energy,
        err,
        if row.bit_exact { "yes" } else { "NO" }.into(),
        row.runs.to_string(),
    ]
}

/// Skipped devices, energy sources and FPGA details of a case, one per line.
fn notes(case: &Case, s: &mut String, bullet: &str) {
    let _ = writeln!(s, "{bullet}verified: {} (bit-exact and errors against the golden model)", case.verified);
    for skip in &case.skipped {
        let _ = writeln!(s, "{bullet}{}: skipped ({})", skip.device.id(), skip.reason);
    }
    for row in &case.rows {
        let _ = writeln!(s, "{bullet}{} energy: {}", row.device.id(), row.energy.source);
        if let Some(tokens) = case.tokens {
            let per_token = row.energy.joules.map_or("— (no energy figure)".into(), |j| {
                format!("{}{}", si(j.value / tokens as f64, "J"), j.label.marker())
            });
            let _ = writeln!(
                s,
                "{bullet}{} per token: {} tokens/s{}, {per_token} a token",
                row.device.id(),
                si(tokens as f64 / row.latency_s.value, ""),
                row.latency_s.label.marker()
            );
        }
        if !row.units.is_empty() {
            let shares: Vec<String> = row
                .units
                .iter()
                .map(|u| {
                    format!("{} {:.1} % ({} launches, {})", u.unit, 100.0 * u.share, u.launches, si(u.seconds, "s"))
                })
                .collect();
            let basis = if row.fpga.is_some() { "projected from cycles" } else { "launch wall time" };
            let _ = writeln!(s, "{bullet}{} units ({basis}): {}", row.device.id(), shares.join(", "));
        }
        if let Some(b) = &row.board {
            let _ = writeln!(
                s,
                "{bullet}{} board: {} cycles counted by {} of {} at {} MHz ({}) = {}; the measured latency adds the host's copies and driver calls",
                row.device.id(),
                b.cycles,
                b.kernel,
                b.manifest,
                round_mhz(b.clock_mhz),
                b.clock_source,
                si(b.cycles as f64 / (b.clock_mhz * 1e6), "s")
            );
        }
        if let Some(f) = &row.fpga {
            let _ = writeln!(
                s,
                "{bullet}{} projection: {} cycles of {} at {} MHz ({}), utilization {:.1} % of {} multipliers; simulator wall time {} (not a device latency)",
                row.device.id(),
                f.cycles,
                f.kernel,
                round_mhz(f.clock_mhz),
                f.clock_source,
                100.0 * f.utilization,
                f.multipliers,
                si(f.sim_wall_s, "s")
            );
            match &f.resources {
                Some(r) => {
                    let _ = writeln!(
                        s,
                        "{bullet}{} resources on {}: {} LUT, {} FF, {} DSP, {} BRAM36, {} URAM ({})",
                        row.device.id(),
                        f.board,
                        r.lut,
                        r.ff,
                        r.dsp,
                        r.bram36,
                        r.uram,
                        r.source
                    );
                }
                None => {
                    let _ = writeln!(s, "{bullet}{} resources: {}", row.device.id(), f.resources_note);
                }
            }
        }
    }
}

/// `value` with an SI prefix, three significant digits.
pub fn si(value: f64, unit: &str) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value} {unit}");
    }
    const PREFIXES: [(f64, &str); 9] = [
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
        (1e-3, "m"),
        (1e-6, "µ"),
        (1e-9, "n"),
        (1e-12, "p"),
    ];
    let (scale, p) = PREFIXES.iter().find(|(s, _)| value.abs() >= *s).copied().unwrap_or((1e-15, "f"));
    let v = value / scale;
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {p}{unit}")
}

#[cfg(test)]
mod tests {
    use super::si;

    #[test]
    fn si_prefixes_keep_three_digits() {
        assert_eq!(si(0.000_123_4, "s"), "123 µs");
        assert_eq!(si(1.5e9, "op/s"), "1.50 Gop/s");
        assert_eq!(si(12.34, "J"), "12.3 J");
        assert_eq!(si(0.0, "J"), "0 J");
        assert_eq!(si(2e-16, "J"), "0.20 fJ");
    }
}
