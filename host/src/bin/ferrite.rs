//! `ferrite`: export units, run them on any device, compare devices.
//!
//! Every failure ends as one `error: ...` line and exit status 1 (2 for usage
//! errors, from clap); nothing here panics on user input.
// Under `ferrite/`: a module file directly in src/bin would be built as a binary of its own.
#[path = "ferrite/attention.rs"]
mod attention;
#[path = "ferrite/block.rs"]
mod block;
#[path = "ferrite/boards.rs"]
mod boards;
#[path = "ferrite/compare.rs"]
mod compare;
#[path = "ferrite/guard.rs"]
mod guard;
#[path = "ferrite/moe.rs"]
mod moe;

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use ferrite_host::backend::cpu::{CpuDevice, CpuMode};
use ferrite_host::backend::sim::{Engine, SimDevice};
use ferrite_host::clock::Clock;
use ferrite_host::manifest::UnitConfig;
use ferrite_host::{npy, ops, Device, RunStats};
use ferrite_hw::gemm::model::{error_vs_f64, ErrorStats};
use ferrite_hw::gemm::{gemm, gemm_f64, rtl, GemmConfig, GemmOutput, GemmProblem};
use ferrite_hw::numerics::Requant;
use ferrite_hw::vitis::{lint_args, LINT_WAIVERS};
use ferrite_sim::{verilator_available, MemoryConfig};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

#[derive(Parser)]
#[command(name = "ferrite", version, about = "Ferrite dataflow accelerators: export, run and compare units")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write a unit's Verilog, register map and configuration, then lint the Verilog.
    Export {
        #[command(subcommand)]
        unit: ExportUnit,
    },
    /// Run a unit on a device and check it against the golden model.
    Run {
        #[command(subcommand)]
        unit: RunUnit,
    },
    /// Run one GEMM on cpu, cpu-fast, sim (and cuda where a GPU exists), then one
    /// attention problem on cpu and sim, then one MoE routing problem, and compare them.
    Demo(DemoArgs),
    /// One int8 MoE decoder block (norm, attention, router, experts) on a device, checked
    /// bit for bit against its golden model, with its error against float64 (docs/block.md).
    Block(Box<block::BlockArgs>),
    /// Run the same seeded problems on every available device and compare latency, throughput,
    /// energy and accuracy; write report.json, report.md and chart.svg; track regressions.
    Compare(Box<compare::CompareArgs>),
    /// Board images, deployment, device listing and resource estimates.
    #[command(flatten)]
    Board(ferrite_host::board_cli::BoardCmd),
    /// Benchmarks against reference implementations.
    #[cfg(feature = "cuda")]
    Bench {
        #[command(subcommand)]
        target: BenchTarget,
    },
}

#[cfg(feature = "cuda")]
#[derive(Subcommand)]
enum BenchTarget {
    /// The CUDA float kernels against PyTorch (cuBLAS, SDPA, softmax+topk) on this GPU.
    Gpu(ferrite_host::gpu_bench::BenchGpuArgs),
}

#[derive(Subcommand)]
enum ExportUnit {
    /// The int8 GEMM unit.
    Gemm(ExportGemm),
    /// The streaming attention unit.
    Attention(ExportAttention),
    /// The MoE router unit.
    Moe(moe::ExportMoe),
}

#[derive(Args)]
struct ExportAttention {
    /// Head dimension the unit is built for (16, 32, 64, 128).
    #[arg(long, default_value_t = 64)]
    d: usize,
    /// Query lanes processed in parallel.
    #[arg(long, default_value_t = 8)]
    lanes: usize,
    /// Memory port width in bits (at least 8·d).
    #[arg(long, default_value_t = 1024)]
    port_bits: usize,
    /// Directory to write `<kernel>.sv`, `<kernel>.regmap.json` and `<kernel>.config.json` into.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Subcommand)]
enum RunUnit {
    /// The int8 GEMM unit.
    Gemm(Box<RunGemm>),
    /// The streaming attention unit.
    Attention(Box<attention::RunAttention>),
    /// The MoE router unit (or expert-choice routing on the cpu).
    Moe(Box<moe::RunMoe>),
}

/// Generation-time parameters of the GEMM unit (see `GemmConfig`).
#[derive(Args)]
struct UnitArgs {
    /// Systolic array rows.
    #[arg(long, default_value_t = 16)]
    rows: usize,
    /// Systolic array columns (a power of two).
    #[arg(long, default_value_t = 16)]
    cols: usize,
    /// Width of the memory port in bits (128, 256, 512, 1024).
    #[arg(long, default_value_t = 512)]
    port_bits: usize,
    /// Largest K (A-panel buffer depth); default: 4096.
    #[arg(long)]
    k_max: Option<usize>,
    /// Largest N with a bias (bias buffer depth); default: 4096.
    #[arg(long)]
    n_max: Option<usize>,
    /// Clock for projected times in MHz, assumed (default: the unit's post-route Fmax when
    /// `ferrite timing` measured this config, else 300).
    #[arg(long)]
    clock_mhz: Option<f64>,
}

impl UnitArgs {
    fn config(&self) -> Result<GemmConfig> {
        let d = GemmConfig::default();
        let cfg = GemmConfig {
            rows: self.rows,
            cols: self.cols,
            port_bits: self.port_bits,
            k_max: self.k_max.unwrap_or(d.k_max),
            n_max: self.n_max.unwrap_or(d.n_max),
            clock_mhz: self.clock_mhz.unwrap_or(d.clock_mhz),
            ..d
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(Args)]
struct ExportGemm {
    #[command(flatten)]
    unit: UnitArgs,
    /// Directory to write `<kernel>.sv`, `<kernel>.regmap.json` and `<kernel>.config.json` into.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DeviceArg {
    /// The golden model.
    Cpu,
    /// matrixmultiply's dgemm with an integer epilogue.
    CpuFast,
    /// The RTL in cycle-level simulation.
    Sim,
    /// The bit-exact twin on the first CUDA GPU (integer tensor cores).
    Cuda,
    /// An OpenCL device (feature `opencl`): the OpenCL C port, or an xclbin on a Xilinx platform.
    Opencl,
    /// An Alveo card through XRT (feature `xrt`), with the image of --manifest.
    Xrt,
    /// A PYNQ board's programmable logic, with the image of --manifest.
    Pynq,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EngineArg {
    /// Verilator if installed, else rust-hdl (an error under CI).
    Auto,
    Verilator,
    RustHdl,
}

/// Simulator options shared by `run` and `demo`.
#[derive(Args)]
struct SimArgs {
    /// Simulator engine for `--device sim`.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    engine: EngineArg,
    /// Memory read and write latency in cycles (default: the memory model's 20/10).
    #[arg(long)]
    latency: Option<u32>,
    /// Probability (0..1) that the memory stalls each handshake in a cycle.
    #[arg(long, default_value_t = 0.0)]
    backpressure: f64,
}

#[derive(Args)]
struct RunGemm {
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    device: DeviceArg,
    #[command(flatten)]
    sim: SimArgs,
    #[command(flatten)]
    board: boards::BoardArgs,
    /// Rows of A and C (taken from --a when given).
    #[arg(long)]
    m: Option<usize>,
    /// Columns of B and C (taken from --b when given).
    #[arg(long)]
    n: Option<usize>,
    /// Columns of A, rows of B (taken from --a when given).
    #[arg(long)]
    k: Option<usize>,
    /// Add a per-column int32 bias (random unless --bias-file).
    #[arg(long)]
    bias: bool,
    /// Apply ReLU after the bias.
    #[arg(long)]
    relu: bool,
    /// Requantize to int8: `MULT,SHIFT` computes sat8(round(x·MULT / 2^SHIFT)).
    #[arg(long, value_parser = parse_requant)]
    requant: Option<Requant>,
    /// Seed of the random operands, and of the memory's stalls.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    unit: UnitArgs,
    /// Write a VCD waveform of the simulation (verilator engine).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// A as an int8 M×K .npy.
    #[arg(long, requires = "b")]
    a: Option<PathBuf>,
    /// B as an int8 K×N .npy.
    #[arg(long, requires = "a")]
    b: Option<PathBuf>,
    /// Bias as an int32 N .npy (implies --bias).
    #[arg(long)]
    bias_file: Option<PathBuf>,
    /// Write C as .npy (int32, or int8 with --requant).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a run estimated to take more than ten minutes.
    #[arg(long)]
    yes: bool,
}

#[derive(Args)]
struct DemoArgs {
    #[command(flatten)]
    sim: SimArgs,
    /// Shape of the demo GEMM: M = N = K = SIZE.
    #[arg(long, default_value_t = 64)]
    size: usize,
}

fn parse_requant(s: &str) -> Result<Requant, String> {
    let (m, sh) = s.split_once(',').ok_or("expected MULT,SHIFT (e.g. 1073741824,38)")?;
    let multiplier = m.trim().parse().map_err(|e| format!("MULT `{m}`: {e}"))?;
    let shift = sh.trim().parse().map_err(|e| format!("SHIFT `{sh}`: {e}"))?;
    Ok(Requant { multiplier, shift })
}

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so printing into a closed pipe (`ferrite … | head`)
    // would panic; the default disposition ends the process quietly, as Unix tools do.
    // SAFETY: first thing in main, before any thread exists; SIG_DFL is always valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Export { unit: ExportUnit::Gemm(args) } => export_gemm(&args),
        Cmd::Export { unit: ExportUnit::Attention(args) } => export_attention(&args),
        Cmd::Export { unit: ExportUnit::Moe(args) } => moe::export_unit(&args),
        Cmd::Run { unit: RunUnit::Gemm(args) } => run_gemm(&args),
        Cmd::Run { unit: RunUnit::Attention(args) } => attention::run(&args),
        Cmd::Run { unit: RunUnit::Moe(args) } => moe::run(&args),
        Cmd::Demo(args) => demo(&args),
        Cmd::Compare(args) => compare::run(&args),
        Cmd::Block(args) => block::run(&args),
        Cmd::Board(cmd) => cmd.run(),
        #[cfg(feature = "cuda")]
        Cmd::Bench { target: BenchTarget::Gpu(args) } => ferrite_host::gpu_bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn spinner(msg: String) -> ProgressBar {
    let bar = ProgressBar::new_spinner().with_message(msg);
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

fn export_gemm(args: &ExportGemm) -> Result<()> {
    let cfg = args.unit.config()?;
    let verilog = rtl::verilog(&cfg).context("generating Verilog")?;
    let cfg_json = serde_json::to_string_pretty(&cfg).context("serializing the config")?;
    export(&args.out, &cfg.kernel_name(), verilog, cfg.register_map().to_json(), cfg_json)
}

fn export_attention(args: &ExportAttention) -> Result<()> {
    let cfg = ferrite_hw::attention::AttentionConfig {
        head_dim: args.d,
        lanes: args.lanes,
        dot_par: args.d,
        port_bits: args.port_bits,
        ..Default::default()
    };
    cfg.validate()?;
    let verilog = ferrite_hw::attention::rtl::verilog(&cfg).context("generating Verilog")?;
    let cfg_json = serde_json::to_string_pretty(&cfg).context("serializing the config")?;
    export(&args.out, &cfg.kernel_name(), verilog, cfg.register_map().to_json(), cfg_json)
}

/// Write a unit's Verilog, register map and config into `out`, then lint it.
fn export(out: &Path, name: &str, verilog: String, regmap: String, cfg_json: String) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let v_path = out.join(format!("{name}.{}", ferrite_hw::portable::EXTENSION));
    for (path, text) in [
        (v_path.clone(), verilog),
        (out.join(format!("{name}.regmap.json")), regmap),
        (out.join(format!("{name}.config.json")), cfg_json),
    ] {
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if !verilator_available() {
        println!("lint: skipped (verilator not found)");
        return Ok(());
    }
    lint(&v_path, name)
}

/// `verilator --lint-only -Wall` with the waivers `ferrite_hw::vitis::LINT_WAIVERS`
/// justifies; anything else it reports is a defect. The log goes next to the Verilog.
fn lint(v_path: &Path, top: &str) -> Result<()> {
    let file = v_path.to_str().with_context(|| format!("{} is not a UTF-8 path", v_path.display()))?;
    let out = Command::new("verilator").args(lint_args(file, top)).output().context("running verilator --lint-only")?;
    let waived: Vec<&str> = LINT_WAIVERS.iter().map(|(w, _)| *w).collect();
    if out.status.success() {
        println!("lint: clean (verilator --lint-only -Wall, waived: {})", waived.join(", "));
        return Ok(());
    }
    let log = String::from_utf8_lossy(&out.stderr);
    let log_path = v_path.with_extension("lint.log");
    std::fs::write(&log_path, log.as_bytes()).with_context(|| format!("writing {}", log_path.display()))?;
    let first = log.lines().find(|l| l.starts_with('%')).unwrap_or("(no message)");
    println!("lint: FAILED, log: {}; first: {first}", log_path.display());
    bail!("verilator lint failed on {}", v_path.display())
}

fn memory_config(sim: &SimArgs, seed: u64) -> Result<MemoryConfig> {
    ensure!((0.0..1.0).contains(&sim.backpressure), "--backpressure {} must be in 0..1", sim.backpressure);
    let d = MemoryConfig::default();
    Ok(MemoryConfig {
        read_latency: sim.latency.unwrap_or(d.read_latency),
        write_latency: sim.latency.unwrap_or(d.write_latency),
        ready_stall_prob: sim.backpressure,
        valid_stall_prob: sim.backpressure,
        seed,
        ..d
    })
}

fn engine(arg: EngineArg) -> Result<Engine> {
    Ok(match arg {
        EngineArg::Verilator => Engine::Verilator,
        EngineArg::RustHdl => Engine::RustHdl,
        EngineArg::Auto => {
            let engine = Engine::detect()?;
            if engine == Engine::RustHdl {
                eprintln!("warning: verilator not found, simulating with rust-hdl (slow)");
            }
            engine
        }
    })
}

/// Why the demo has no sim rows without Verilator.
const NO_VERILATOR: &str = "verilator not found, and the demo does not fall back to rust-hdl's \
    own simulator, which overflows its stack or runs out of memory on the 16×16 GEMM unit: install \
    Verilator with scripts/install-deps.sh, or force rust-hdl with --engine rust-hdl";

/// The engine of the demo's sim rows, or `None` to skip them: with `auto` and
/// no Verilator, the demo skips simulation (saying why, see [`NO_VERILATOR`])
/// rather than fall back to rust-hdl; under CI that is an error instead.
fn demo_engine(arg: EngineArg) -> Result<Option<Engine>> {
    if arg == EngineArg::Auto && !verilator_available() && std::env::var_os("CI").is_none() {
        return Ok(None);
    }
    engine(arg).map(Some)
}

fn sim_device(
    unit: impl Into<UnitConfig>,
    sim: &SimArgs,
    engine: Engine,
    seed: u64,
    vcd: Option<&Path>,
) -> Result<SimDevice> {
    let unit = unit.into();
    let mem = memory_config(sim, seed)?;
    let bar = spinner(format!("building {} with {engine}", unit.kernel_name()));
    let dev = SimDevice::new(unit, mem, engine, vcd);
    bar.finish_and_clear();
    Ok(dev?)
}

/// Operands of one GEMM, from files or a seeded RNG.
struct Operands {
    problem: GemmProblem,
    a: Vec<i8>,
    b: Vec<i8>,
    bias: Option<Vec<i32>>,
}

fn random_operands(problem: GemmProblem, seed: u64) -> Operands {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let a = (0..problem.m * problem.k).map(|_| rng.gen()).collect();
    let b = (0..problem.k * problem.n).map(|_| rng.gen()).collect();
    let bias = problem.bias.then(|| (0..problem.n).map(|_| rng.gen_range(-(1 << 16)..1 << 16)).collect());
    Operands { problem, a, b, bias }
}

/// A dimension given on the command line and/or by a file; both must agree.
fn dim(name: &str, flag: Option<usize>, file: Option<usize>) -> Result<usize> {
    match (flag, file) {
        (Some(f), Some(g)) if f != g => {
            bail!("--{name} {f} disagrees with the input files ({name} = {g})")
        }
        (f, g) => f.or(g).with_context(|| format!("--{name} is required without --a/--b")),
    }
}

fn operands(args: &RunGemm) -> Result<Operands> {
    let bias_flag = args.bias || args.bias_file.is_some();
    let files = match (&args.a, &args.b) {
        (Some(a), Some(b)) => Some((npy::read_i8_matrix(a)?, npy::read_i8_matrix(b)?)),
        _ => None,
    };
    let (fm, fk) = files.as_ref().map(|(a, _)| a.dim()).unzip();
    let (fk2, fn_) = files.as_ref().map(|(_, b)| b.dim()).unzip();
    if let (Some(ka), Some(kb)) = (fk, fk2) {
        ensure!(ka == kb, "A is {}×{ka} but B is {kb}×{}: inner dimensions differ", fm.unwrap_or(0), fn_.unwrap_or(0));
    }
    let problem = GemmProblem {
        bias: bias_flag,
        relu: args.relu,
        requant: args.requant,
        ..GemmProblem::new(dim("m", args.m, fm)?, dim("n", args.n, fn_)?, dim("k", args.k, fk)?)
    };
    problem.validate()?;
    guard::check_memory(gemm_host_bytes(&problem), &format!("GEMM {}", describe(&problem)))?;
    let mut ops = random_operands(problem, args.seed);
    if let Some((a, b)) = files {
        ops.a = a.iter().copied().collect();
        ops.b = b.iter().copied().collect();
    }
    if let Some(path) = &args.bias_file {
        let bias = npy::read_i32_vector(path)?;
        ensure!(bias.len() == problem.n, "{}: bias has {} entries, N = {}", path.display(), bias.len(), problem.n);
        ops.bias = Some(bias.to_vec());
    }
    Ok(ops)
}

/// Host bytes of one GEMM run: the operands and their device copies (cpu and
/// sim buffers are host memory), the result, the golden result and the
/// float64 reference.
fn gemm_host_bytes(p: &GemmProblem) -> u64 {
    let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
    let c = m.saturating_mul(n).saturating_mul(p.out_elem_bytes() as u64);
    let inputs = m.saturating_mul(k).saturating_add(k.saturating_mul(n)).saturating_add(4 * n);
    inputs.saturating_add(c).saturating_mul(2).saturating_add(c).saturating_add(m.saturating_mul(n).saturating_mul(8))
}

/// The run-time estimate of `macs` on a simulator (`engine`), on a golden
/// model (`golden`), or none for the fast devices; a simulation's cycles are
/// at least `macs / multipliers`.
fn estimate(macs: u64, multipliers: u64, engine: Option<Engine>, golden: bool) -> guard::Estimate {
    match engine {
        Some(e) => {
            let rate =
                if e == Engine::Verilator { guard::VERILATOR_CYCLES_PER_S } else { guard::RUST_HDL_CYCLES_PER_S };
            guard::Estimate::sim(macs.div_ceil(multipliers.max(1)), rate)
        }
        None if golden => guard::Estimate::golden(macs),
        None => guard::Estimate::NONE,
    }
}

fn run_gemm(args: &RunGemm) -> Result<()> {
    let ops = operands(args)?;
    let p = &ops.problem;
    let cfg = args.unit.config()?;
    ensure!(args.trace.is_none() || args.device == DeviceArg::Sim, "--trace needs --device sim");
    if let Some(path) = &args.out {
        guard::check_out_file(path)?;
    }
    let engine = match args.device {
        DeviceArg::Sim => Some(engine(args.sim.engine)?),
        _ => None,
    };
    let est = estimate(p.macs(), (cfg.rows * cfg.cols) as u64, engine, args.device == DeviceArg::Cpu);
    est.confirm(args.yes)?;
    let mut dev: Box<dyn Device> = match args.device {
        DeviceArg::Cpu => Box::new(CpuDevice::new(CpuMode::Golden)),
        DeviceArg::CpuFast => Box::new(CpuDevice::new(CpuMode::Fast)),
        DeviceArg::Sim => Box::new(sim_device(
            cfg.clone(),
            &args.sim,
            engine.context("no simulator engine")?,
            args.seed,
            args.trace.as_deref(),
        )?),
        DeviceArg::Cuda => ferrite_host::backend::open_cuda()?,
        DeviceArg::Opencl => boards::open_opencl(&args.board, "gemm")?,
        DeviceArg::Xrt => boards::open_xrt(&args.board, "gemm")?,
        DeviceArg::Pynq => boards::open_pynq(&args.board, "gemm")?,
    };
    let name = dev.info().name;
    let counters: Vec<_> = dev.cycles_done().into_iter().collect();
    let result = est.progress(&counters, format!("running {}×{}×{} on {name}", p.m, p.n, p.k), || {
        ops::gemm(dev.as_mut(), p, &ops.a, &ops.b, ops.bias.as_deref())
    });
    let (out, stats) = result.with_context(|| format!("GEMM on {name}"))?;
    let golden = gemm(p, &ops.a, &ops.b, ops.bias.as_deref())?;
    let err = error_vs_f64(&golden, &gemm_f64(p, &ops.a, &ops.b, ops.bias.as_deref())?);

    println!("device       {name}");
    println!("problem      {}", describe(p));
    let mismatch = out.first_mismatch(&golden);
    match mismatch {
        None => println!("correct      bit-exact vs the golden model ({} elements)", out.len()),
        Some((i, got, want)) => {
            println!("correct      NO: first mismatch at ({}, {}): got {got}, golden {want}", i / p.n, i % p.n)
        }
    }
    println!("golden/f64   {}", describe_error(&err, &golden));
    let clock = match args.device {
        DeviceArg::Sim => Some(sim_clock(cfg.clone().into(), args.unit.clock_mhz)?),
        DeviceArg::Xrt => Some(boards::image_clock(&args.board, "xrt", "gemm")?),
        DeviceArg::Pynq => Some(boards::image_clock(&args.board, "pynq", "gemm")?),
        _ => None,
    };
    print_stats(&stats, clock.as_ref());
    if let Some(path) = &args.out {
        npy::write_output(path, &out, p.m, p.n)?;
        println!("wrote        {}", path.display());
    }
    ensure!(mismatch.is_none(), "{name} output differs from the golden model");
    Ok(())
}

fn describe(p: &GemmProblem) -> String {
    let mut s = format!("M={} N={} K={}", p.m, p.n, p.k);
    if p.bias {
        s += " +bias";
    }
    if p.relu {
        s += " +relu";
    }
    if let Some(rq) = p.requant {
        s += &format!(" +requant(×{} >>{})", rq.multiplier, rq.shift);
    }
    s
}

fn describe_error(e: &ErrorStats, out: &GemmOutput) -> String {
    let unit = if matches!(out, GemmOutput::I8(_)) { " LSB" } else { "" };
    format!("max |err| {:.3}{unit}, rel. Frobenius {:.2e}, {} saturated", e.max_abs, e.rel_fro, e.saturated)
}

/// The clock a simulated unit's cycles are projected at: the user's
/// `--clock-mhz`, else the post-route Fmax `ferrite timing` measured for
/// exactly this unit, else the unit's default.
fn sim_clock(unit: UnitConfig, user: Option<f64>) -> Result<Clock> {
    let default = unit.clock_mhz();
    Clock::for_unit(&unit, user, (default, "the unit's default clock"))
}

/// Wall time, and for a cycle-level device its cycles, utilization and the
/// time they take at `clock`, which names its source.
fn print_stats(stats: &RunStats, clock: Option<&Clock>) {
    println!("wall         {:.3?}", stats.wall);
    let Some(c) = stats.cycles else {
        println!("cycles       n/a (not a cycle-level device)");
        return;
    };
    println!("cycles       {}", c.cycles);
    println!("utilization  {:.1} %", 100.0 * stats.utilization().unwrap_or(0.0));
    match clock {
        Some(clock) => {
            let t = Duration::from_secs_f64(c.cycles as f64 / (clock.mhz * 1e6));
            println!("projected    {t:.3?} at {clock}");
        }
        None => println!("projected    n/a (no clock is known for this device)"),
    }
}

fn demo(args: &DemoArgs) -> Result<()> {
    let s = args.size;
    let requant = Requant::from_scale(1.0 / 512.0).context("demo requantization scale")?;
    let problem = GemmProblem { bias: true, relu: true, requant: Some(requant), ..GemmProblem::new(s, s, s) };
    let ops = random_operands(problem, 0);
    let golden = gemm(&problem, &ops.a, &ops.b, ops.bias.as_deref())?;
    let clock = sim_clock(GemmConfig::default().into(), None)?;
    let cfg = GemmConfig { clock_mhz: clock.mhz, ..GemmConfig::default() };
    let engine = demo_engine(args.sim.engine)?;
    let mut devices = demo_devices(cfg.clone(), &args.sim, engine)?;
    devices.insert(1, Box::new(CpuDevice::new(CpuMode::Fast)));
    println!("{} on the default {} unit, projected at {clock}", describe(&problem), cfg.kernel_name());
    let mut table = demo_table();
    let mut all_exact = true;
    for mut dev in devices {
        let name = dev.info().name;
        let bar = spinner(format!("running on {name}"));
        let result = ops::gemm(dev.as_mut(), &problem, &ops.a, &ops.b, ops.bias.as_deref());
        bar.finish_and_clear();
        let (out, stats) = result.with_context(|| format!("GEMM on {name}"))?;
        let exact = out.first_mismatch(&golden).is_none();
        all_exact &= exact;
        table.add_row(demo_row(name, &stats, exact));
    }
    println!("{table}");
    let attention_exact = attention::demo(&args.sim, engine)?;
    let moe_exact = moe::demo(&args.sim, engine)?;
    let block_exact = block::demo(&args.sim, engine)?;
    ensure!(all_exact && attention_exact && moe_exact && block_exact, "a device disagrees with the golden model");
    Ok(())
}

/// The devices of a unit's demo table: the golden model, the simulated
/// `unit` (unless `engine` is `None`), and the first CUDA GPU where there is
/// one; each skipped device is printed with the reason.
fn demo_devices(unit: impl Into<UnitConfig>, sim: &SimArgs, engine: Option<Engine>) -> Result<Vec<Box<dyn Device>>> {
    let mut devices: Vec<Box<dyn Device>> = vec![Box::new(CpuDevice::new(CpuMode::Golden))];
    match engine {
        Some(engine) => devices.push(Box::new(sim_device(unit, sim, engine, 0, None)?)),
        None => println!("sim: skipped ({NO_VERILATOR})"),
    }
    match ferrite_host::backend::open_cuda() {
        Ok(dev) => devices.push(dev),
        Err(e) => println!("cuda: skipped ({e})"),
    }
    Ok(devices)
}

/// The comparison table of `demo`, one row per device ([`demo_row`]).
fn demo_table() -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "device",
        "wall",
        "cycles",
        "utilization",
        "projected",
        "bit-exact",
    ]);
    table
}

fn demo_row(name: String, stats: &RunStats, exact: bool) -> [String; 6] {
    let na = || "—".to_string();
    [
        name,
        format!("{:.3?}", stats.wall),
        stats.cycles.map_or_else(na, |c| c.cycles.to_string()),
        stats.utilization().map_or_else(na, |u| format!("{:.1} %", 100.0 * u)),
        stats.projected().map_or_else(na, |t| format!("{t:.3?}")),
        if exact { "yes" } else { "NO" }.to_string(),
    ]
}
