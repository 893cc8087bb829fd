//! The board-path subcommands of `ferrite` (`bitstream`, `deploy`, `devices`,
//! `resources`), kept here so the binary only wires them in.
use crate::bitstream::board::Board;
use crate::bitstream::{build, BuildRequest};
use crate::manifest::UnitConfig;
use crate::resources::{companion, largest_fit, synthesize, Measured, Model, FIT_FRACTION};
use anyhow::{bail, ensure, Result};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use ferrite_hw::gemm::GemmConfig;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum BoardCmd {
    /// Generate, check and (with Vivado/Vitis on PATH) build a board image.
    Bitstream {
        #[command(subcommand)]
        cmd: BitstreamCmd,
    },
    /// Load a built image on its board and self-test it against the golden model.
    Deploy(DeployArgs),
    /// List the CPU, GPUs, OpenCL devices, XRT cards and tools of this machine.
    Devices(DevicesArgs),
    /// Estimate FPGA resources with yosys and the largest array each board fits.
    Resources(ResourcesArgs),
}

#[derive(Subcommand)]
pub enum BitstreamCmd {
    /// Export the unit and write kernel.xml, Tcl, link config, build.sh and manifest.json.
    /// Exits 1 only if a generated file fails its check or a vendor tool that ran failed;
    /// missing vendor tools are reported with the command they would have run.
    Build(BuildArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnitArg {
    Gemm,
}

/// The GEMM configuration flags (defaults: `GemmConfig::default()`).
#[derive(Args)]
pub struct GemmFlags {
    #[arg(long, default_value_t = 16)]
    rows: usize,
    #[arg(long, default_value_t = 16)]
    cols: usize,
    /// Memory port width in bits (128, 256, 512, 1024).
    #[arg(long, default_value_t = 512)]
    port_bits: usize,
    #[arg(long)]
    k_max: Option<usize>,
    #[arg(long)]
    n_max: Option<usize>,
}

impl GemmFlags {
    fn config(&self, clock_mhz: f64) -> Result<GemmConfig> {
        let d = GemmConfig::default();
        let cfg = GemmConfig {
            rows: self.rows,
            cols: self.cols,
            port_bits: self.port_bits,
            k_max: self.k_max.unwrap_or(d.k_max),
            n_max: self.n_max.unwrap_or(d.n_max),
            clock_mhz,
            ..d
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(Args)]
pub struct BuildArgs {
    #[arg(long, value_enum)]
    unit: UnitArg,
    #[arg(long, value_enum)]
    board: Board,
    #[command(flatten)]
    gemm: GemmFlags,
    /// Kernel clock in MHz (default: the board's, 300 for Alveo, 100 PYNQ-Z2, 200 ZCU104).
    #[arg(long)]
    clock_mhz: Option<f64>,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
pub struct DeployArgs {
    /// manifest.json of a build (`ferrite bitstream build`).
    #[arg(long)]
    manifest: PathBuf,
    /// XRT device index or PCIe BDF (default 0); Alveo only (a PYNQ board has one PL).
    #[arg(long)]
    device: Option<String>,
}

#[derive(Args)]
pub struct DevicesArgs {
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ResourcesArgs {
    #[arg(long, value_enum)]
    unit: UnitArg,
    #[command(flatten)]
    gemm: GemmFlags,
    /// Board to compare with (default: all); also picks the yosys family (xc7 for PYNQ-Z2).
    #[arg(long, value_enum)]
    board: Option<Board>,
    #[arg(long)]
    json: bool,
}

impl BoardCmd {
    pub fn run(&self) -> Result<()> {
        match self {
            Self::Bitstream { cmd: BitstreamCmd::Build(a) } => bitstream_build(a),
            Self::Deploy(a) => deploy(a),
            Self::Devices(a) => devices(a),
            Self::Resources(a) => resources(a),
        }
    }
}

fn bitstream_build(a: &BuildArgs) -> Result<()> {
    let UnitArg::Gemm = a.unit;
    let clock = a.clock_mhz.unwrap_or(a.board.spec().default_clock_mhz);
    let cfg = a.gemm.config(clock)?;
    let report = build(&BuildRequest {
        unit: UnitConfig::Gemm(cfg),
        board: a.board,
        clock_mhz: clock,
        out: a.out.clone(),
        run_vendor_tools: true,
    })?;
    println!("{report}");
    ensure!(report.success(), "the build of {} for {} failed (see above)", a.out.display(), a.board);
    Ok(())
}

fn deploy(a: &DeployArgs) -> Result<()> {
    let cases = crate::deploy::deploy(&a.manifest, a.device.as_deref())?;
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(["M×N×K", "epilogue", "cycles", "bit-exact"]);
    for c in &cases {
        let p = &c.problem;
        t.add_row([
            format!("{}×{}×{}", p.m, p.n, p.k),
            format!(
                "{}{}{}",
                if p.bias { "bias " } else { "" },
                if p.relu { "relu " } else { "" },
                if p.requant.is_some() { "requant" } else { "" }
            ),
            c.cycles.map_or("—".into(), |c| c.to_string()),
            "yes".into(),
        ]);
    }
    println!("{t}\nself-test passed");
    Ok(())
}

fn devices(a: &DevicesArgs) -> Result<()> {
    let entries = crate::devices::detect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(["kind", "name", "detail"]);
    for e in entries {
        t.add_row([e.kind, e.name, e.detail]);
    }
    println!("{t}");
    Ok(())
}

fn resources(a: &ResourcesArgs) -> Result<()> {
    let UnitArg::Gemm = a.unit;
    let cfg = a.gemm.config(GemmConfig::default().clock_mhz)?;
    let family = a.board.map_or("xcup", |b| b.spec().yosys_family);
    let other = companion(&cfg);
    let mut measured: Vec<Measured> = Vec::new();
    for c in [&cfg, &other] {
        eprintln!("synthesizing {} with yosys synth_xilinx -family {family} ...", c.kernel_name());
        measured.push(synthesize(c, family)?);
    }
    let model = Model::fit(&measured[0], &measured[1])?;
    let boards: Vec<Board> = a.board.map_or_else(|| Board::ALL.to_vec(), |b| vec![b]);
    let fits: Vec<_> = boards.iter().map(|&b| largest_fit(&model, b, cfg.port_bits)).collect();
    if a.json {
        let v = serde_json::json!({
            "family": family,
            "measured": measured,
            "fit_fraction": FIT_FRACTION,
            "extrapolated": true,
            "fits": fits,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header([
        "config",
        "LUT (of which RAM)",
        "FF",
        "DSP",
        "BRAM36",
        "URAM",
        "yosys",
    ]);
    for m in &measured {
        let c = &m.counts;
        t.add_row([
            m.config.kernel_name(),
            format!("{} ({})", c.lut, c.lutram),
            c.ff.to_string(),
            c.dsp.to_string(),
            format!("{:.1}", c.bram36),
            c.uram.to_string(),
            if m.cached { format!("cached ({:.0} s)", m.seconds) } else { format!("{:.0} s", m.seconds) },
        ]);
    }
    println!("measured (yosys synth_xilinx -flatten -family {family}):\n{t}");
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header([
        "board",
        "this config uses (LUT/FF/DSP/BRAM/URAM)",
        "largest array (extrapolated)",
        "limited by",
        "capacity source",
    ]);
    for f in &fits {
        let spec = f.board.spec();
        let util = measured[0].counts.utilization(&spec.capacity);
        t.add_row([
            format!("{} ({})", spec.name, spec.part),
            util.iter().map(|(_, u)| format!("{:.1}%", 100.0 * u)).collect::<Vec<_>>().join(" / "),
            f.rows.map_or("none fits".into(), |r| format!("{r}×{} ({} MACs)", f.cols, r * f.cols)),
            f.limit.clone(),
            spec.capacity_source.to_string(),
        ]);
    }
    println!("{t}");
    println!(
        "The largest arrays are EXTRAPOLATED linearly in rows×cols from the two measured configs above \
         (same port width and buffers), at ≤ {:.0}% of every resource; cols is the widest the {}-bit port allows.",
        100.0 * FIT_FRACTION,
        cfg.port_bits
    );
    if a.board.is_none() {
        println!("Counts are for the xcup family; pass --board pynq-z2 for a 7-series (xc7) synthesis.");
    }
    if measured.iter().any(|m| m.counts.lut == 0) {
        bail!("yosys reported no LUTs: the synthesis result is not usable");
    }
    Ok(())
}
