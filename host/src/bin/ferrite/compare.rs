//! `ferrite compare`: command-line glue over `ferrite_host::compare` — size
//! parsing, the outputs, and the baseline check that sets the exit status.
use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use ferrite_host::bitstream::board::Board;
use ferrite_host::compare::baseline::{self, Baseline, Severity, Thresholds};
use ferrite_host::compare::report::{DeviceId, Workload};
use ferrite_host::compare::{self, BoardImage, Options, Size};
use ferrite_host::manifest::Manifest;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum WorkloadArg {
    Gemm,
    Attention,
    Moe,
    /// The int8 MoE decoder block: all three units and the glue (docs/block.md).
    Block,
    /// Every workload.
    All,
}

#[derive(Args)]
pub(super) struct CompareArgs {
    /// Which workload(s) to run.
    #[arg(long, value_enum, default_value_t = WorkloadArg::All)]
    workload: WorkloadArg,
    /// Problem sizes: gemm `S` or `MxNxK`, attention `HEADSxSEQxDIM`, moe
    /// `TOKENSxHIDDENxEXPERTSxK`, block `TOKENSxHIDDENxHEADSxEXPERTSxKxFFN`. With --workload all, prefix each with its
    /// workload (`gemm=256`). Workloads without sizes use their defaults.
    sizes: Vec<String>,
    /// Devices to try (default: all but the boards); unavailable ones are skipped with the reason.
    /// xrt and pynq need --manifest, and the image's own board must open.
    #[arg(long, value_enum, value_delimiter = ',')]
    devices: Option<Vec<DeviceId>>,
    /// Seed of the inputs (and of the simulated memory's stalls).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory for report.json, report.md and chart.svg.
    #[arg(long, default_value = "ferrite-compare")]
    out: PathBuf,
    /// Clock of the simulated units for projected FPGA figures (default: each unit's, 300 MHz).
    #[arg(long)]
    clock_mhz: Option<f64>,
    /// Board of the FPGA projection: resource family and static power (default: the board of
    /// --manifest's image, else u55c).
    #[arg(long, value_parser = ferrite_host::board_cli::board_arg())]
    board: Option<Board>,
    /// Estimate FPGA resources with yosys (slow the first time, cached by configuration).
    #[arg(long)]
    resources: bool,
    /// Time each measured device repeats a problem for, at least 3 runs, in ms.
    #[arg(long, default_value_t = 200)]
    min_time_ms: u64,
    /// Save this run as a regression baseline (JSON).
    #[arg(long)]
    save_baseline: Option<PathBuf>,
    /// Classify this run against a saved baseline; exit status 1 on any severe row.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Slowdown thresholds in percent for --baseline.
    #[arg(long, requires = "baseline", default_value = "minor=5,moderate=15,severe=30")]
    thresholds: String,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    /// manifest.json of a built image: `--devices xrt` or `pynq` measure it on the board, beside
    /// the simulated projection of the same unit.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// XRT card: index in `xbutil examine` or PCIe BDF such as 0000:65:00.1 (default 0).
    #[arg(long, requires = "manifest")]
    card: Option<String>,
    /// Root of the PYNQ board's filesystem (sysfs, /dev, /lib/firmware): `/` on a board.
    #[arg(long, default_value = "/", hide = true)]
    pynq_root: PathBuf,
}

/// The sizes to run, in workload order: the given ones, defaults for the rest.
fn sizes(args: &CompareArgs) -> Result<Vec<Size>> {
    let selected: Vec<Workload> = match args.workload {
        WorkloadArg::Gemm => vec![Workload::Gemm],
        WorkloadArg::Attention => vec![Workload::Attention],
        WorkloadArg::Moe => vec![Workload::Moe],
        WorkloadArg::Block => vec![Workload::Block],
        WorkloadArg::All => Workload::ALL.to_vec(),
    };
    let mut given = Vec::new();
    for s in &args.sizes {
        let (w, dims) = match s.split_once('=') {
            Some((w, dims)) => {
                let w = Workload::from_str(w.trim(), true)
                    .map_err(|_| anyhow::anyhow!("size `{s}`: unknown workload `{w}` (gemm, attention, moe)"))?;
                ensure!(selected.contains(&w), "size `{s}` is for {}, which --workload does not select", w.id());
                (w, dims)
            }
            None if selected.len() == 1 => (selected[0], s.as_str()),
            None => bail!(
                "size `{s}`: with --workload all, prefix each size with its workload \
                 (gemm=128, attention=2x64x16, moe=256x64x12x2)"
            ),
        };
        given.push(Size::parse(w, dims)?);
    }
    Ok(selected
        .iter()
        .flat_map(|w| {
            let mine: Vec<Size> = given.iter().filter(|s| s.workload() == *w).copied().collect();
            if mine.is_empty() {
                Size::defaults(*w)
            } else {
                mine
            }
        })
        .collect())
}

pub(super) fn run(args: &CompareArgs) -> Result<()> {
    let thresholds: Thresholds = args.thresholds.parse().context("--thresholds")?;
    // Read the baseline first: a bad file should fail before minutes of runs.
    let base = match &args.baseline {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Some((path, Baseline::from_json(&text).with_context(|| path.display().to_string())?))
        }
        None => None,
    };
    // The projection sits beside the board rows, so by default it is of the image's board.
    let board = match (args.board, &args.manifest) {
        (Some(board), _) => board,
        (None, Some(path)) => {
            Manifest::load(path).with_context(|| format!("loading {}", path.display()))?.manifest.board
        }
        (None, None) => Board::U55c,
    };
    let opts = Options {
        sizes: sizes(args)?,
        devices: args.devices.clone().unwrap_or_else(|| DeviceId::ALL.to_vec()),
        seed: args.seed,
        clock_mhz: args.clock_mhz,
        board,
        resources: args.resources,
        min_time: Duration::from_millis(args.min_time_ms),
        progress: !args.quiet,
        image: args.manifest.clone().map(|manifest| BoardImage {
            manifest,
            card: args.card.clone(),
            pynq_root: args.pynq_root.clone(),
        }),
    };
    let report = compare::run(&opts)?;
    print!("{}", report.to_terminal());
    for path in report.write(&args.out)? {
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.save_baseline {
        std::fs::write(path, Baseline::from_report(&report).to_json()?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote baseline {}", path.display());
    }
    let inexact: Vec<String> = report
        .cases
        .iter()
        .flat_map(|c| {
            c.rows.iter().filter(|r| !r.bit_exact).map(move |r| format!("{} {} on {}", c.workload.id(), c.size, r.name))
        })
        .collect();
    if let Some((path, base)) = base {
        let verdicts = baseline::classify(&base, &report, &thresholds)?;
        println!("\nagainst baseline {}:\n{}", path.display(), baseline::verdict_table(&verdicts));
        // For CI artifacts: the classification next to the report.
        let file = args.out.join("regressions.json");
        let json = serde_json::to_string_pretty(&verdicts).context("serializing the classification")?;
        std::fs::write(&file, json).with_context(|| format!("writing {}", file.display()))?;
        println!("wrote {}", file.display());
        let severe = verdicts.iter().filter(|v| v.severity == Severity::Severe).count();
        ensure!(severe == 0, "{severe} severe regression(s) against {}", path.display());
    }
    ensure!(inexact.is_empty(), "not bit-exact with the golden model: {}", inexact.join(", "));
    Ok(())
}
