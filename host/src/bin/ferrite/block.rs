//! `ferrite block`: one int8 MoE decoder block (docs/block.md) on a device,
//! checked bit for bit against its golden model, with its error against
//! float64, the router's agreement with a float router, and where the time goes.
use super::guard;
use super::{engine, sim_clock, sim_device, SimArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use ferrite_host::backend::cpu::{CpuDevice, CpuMode};
use ferrite_host::backend::sim::Engine;
use ferrite_host::block::{
    default_units, project_block, run_block, run_block_resident, sim_units, Basis, BlockDevices, BlockRun, OneDevice,
    PerUnit, ProjectedStep, Projection, Resident,
};
use ferrite_host::clock::round_mhz;
use ferrite_host::clock::Clock;
use ferrite_host::compare::energy::Meter;
use ferrite_host::compare::meter_for;
use ferrite_host::compare::report::DeviceId;
use ferrite_host::npy;
use ferrite_host::weights;
use ferrite_host::Device;
use ferrite_hw::block::{
    block, block_f64, expert_agreement, random_input, relative_error, BlockOutput, BlockShape, BlockWeights, Scales,
};
use ferrite_hw::moe::{CapacityFactor, GateMode};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum BlockDevice {
    /// The golden models, one launch per unit step.
    Cpu,
    /// The fast CPU paths (GEMMs through matrixmultiply).
    CpuFast,
    /// A simulated GEMM, attention and MoE unit (Verilator), one per unit.
    Sim,
    /// The CUDA bit-exact twins.
    Cuda,
    /// The OpenCL ports on the first non-Xilinx device.
    Opencl,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Units {
    /// A 4×4 GEMM array, a 2-lane attention unit, a 2-lane router: quick to build (CI).
    Small,
    /// The default units: 16×16 GEMM, 8-lane attention, 16-lane 64-expert router (as deployed).
    Default,
}

#[derive(Args)]
pub(super) struct BlockArgs {
    #[arg(long, value_enum, default_value_t = BlockDevice::Cpu)]
    device: BlockDevice,
    /// Tokens T (the attention is causal over them).
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Hidden size H = heads · head dim.
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    #[arg(long, default_value_t = 2)]
    heads: usize,
    #[arg(long, default_value_t = 4)]
    experts: usize,
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    /// Each expert's FFN width F.
    #[arg(long, default_value_t = 128)]
    ffn: usize,
    /// Per-expert capacity factor (0 = unlimited).
    #[arg(long, default_value_t = 1.25)]
    capacity_factor: f64,
    /// topk-softmax (Mixtral) or softmax-topk (Switch, DeepSeek).
    #[arg(long, default_value = "topk-softmax")]
    mode: GateMode,
    /// Seed of the weights and the input tokens.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A layer's weights and scales: int8 `.npy` tensors and block.json (docs/block.md). H, the
    /// heads, E, k, F and the gate mode come from the files.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["hidden", "heads", "experts", "top_k", "ffn", "mode"])]
    weights: Option<PathBuf>,
    /// Write the block's weights and scales (seeded, or those of --weights) to DIR in that layout.
    #[arg(long, value_name = "DIR")]
    save_weights: Option<PathBuf>,
    /// After the checked run, time the block for at least this long (at least 3 runs) under the
    /// device's energy meter (NVML on CUDA, RAPL on CPUs): median latency, tokens/s, J/token.
    /// 0 skips it; simulations are never repeated.
    #[arg(long, default_value_t = 500)]
    min_time_ms: u64,
    /// With --device sim: which units simulate the block.
    #[arg(long, value_enum, default_value_t = Units::Small)]
    units: Units,
    /// With --device sim: project a block too large to simulate whole. Each launch with at most
    /// 2^22 multiply-accumulates is simulated; a larger one at two sizes of one dimension in which
    /// the unit's cycles are affine (GEMM: N, attention: heads, router: tokens), then
    /// extrapolated. Cycles only: the data is the golden block's (docs/block.md).
    #[arg(long)]
    project: bool,
    /// Answer yes to a long simulation.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    sim: SimArgs,
    /// `--opencl-device` for `--device opencl`.
    #[command(flatten)]
    board: super::boards::BoardArgs,
}

impl BlockArgs {
    /// The block's shape, weights and scales: from --weights, else the flags and seeded weights.
    fn layer(&self) -> Result<(BlockShape, BlockWeights, Scales)> {
        let capacity = match self.capacity_factor {
            0.0 => None,
            c => Some(CapacityFactor::from_f64(c)?),
        };
        let loaded = match &self.weights {
            Some(dir) => Some(weights::load(dir).with_context(|| format!("--weights {}", dir.display()))?),
            None => None,
        };
        let (hidden, heads, experts, top_k, ffn, mode) = match &loaded {
            Some(l) => (l.hidden, l.config.heads, l.experts, l.config.top_k, l.ffn, l.config.mode),
            None => (self.hidden, self.heads, self.experts, self.top_k, self.ffn, self.mode),
        };
        let s =
            BlockShape { mode, capacity, ..BlockShape::with_dims(self.tokens, hidden, heads, experts, top_k, ffn)? };
        Ok(match loaded {
            Some(l) => {
                let sc = l.scales();
                l.weights.check(&s).with_context(|| {
                    format!("--weights {}", self.weights.as_ref().map_or(String::new(), |d| d.display().to_string()))
                })?;
                (s, l.weights, sc)
            }
            None => {
                let w = BlockWeights::random(&s, self.seed);
                (s, w, Scales::default())
            }
        })
    }
}

pub(super) fn run(args: &BlockArgs) -> Result<()> {
    if args.device != BlockDevice::Sim && (args.project || args.units != Units::Small) {
        bail!("--project and --units need --device sim: they choose how the simulated units run the block");
    }
    let (s, w, sc) = args.layer()?;
    let macs = s.macs(s.tokens * s.top_k);
    // The simulated units, and the refusal of a long simulation, before any work.
    let units = match args.device {
        BlockDevice::Sim => {
            let (g, a, m) = match args.units {
                Units::Small => sim_units(&s, 300.0)?,
                Units::Default => default_units(&s, 300.0)?,
            };
            // Every multiplier of the GEMM array busy every cycle: a lower bound.
            let cycles = macs / g.macs() as u64;
            let estimate = guard::Estimate::sim(cycles, guard::VERILATOR_CYCLES_PER_S);
            if !args.project {
                if estimate.wall > guard::LONG_RUN && !args.yes {
                    bail!(
                        "simulating this block would take at least {} ({cycles} cycles): pass --project to project \
                         it from simulated launches, or --yes to simulate it whole",
                        guard::human_duration(estimate.wall)
                    );
                }
                estimate.confirm(args.yes)?;
            }
            Some((g, a, m, estimate))
        }
        _ => None,
    };
    let x = random_input(&s, args.seed ^ 0xb10c);
    // Computed once: the spec every device is checked against (and saved beside the weights).
    let bar = super::spinner("the golden block (the integer spec, on this CPU)".into());
    let golden = block(&s, &w, &sc, &x);
    bar.finish_and_clear();
    let golden = golden?;
    if let Some(dir) = &args.save_weights {
        let mut files = weights::save(dir, &s, &w, &sc)?;
        // The input and the golden output beside them, so another implementation can check itself.
        let (xp, op) = (dir.join("x.npy"), dir.join("out.npy"));
        npy::write_i8_array(&xp, &[s.tokens, s.hidden], x.clone())?;
        npy::write_i8_array(&op, &[s.tokens, s.hidden], golden.out.clone())?;
        files.extend([xp, op]);
        println!(
            "weights      wrote {} files to {} (with the input x.npy and the golden out.npy)",
            files.len(),
            dir.display()
        );
    }
    println!(
        "block        T={} H={} heads={}×{} E={} k={} F={} capacity factor {} ({:?})",
        s.tokens,
        s.hidden,
        s.heads,
        s.head_dim,
        s.experts,
        s.top_k,
        s.ffn,
        s.capacity.map_or("unlimited".to_string(), |c| format!("{:.3}", c.0 as f64 / 65536.0)),
        s.mode
    );
    let mut clocks: Vec<(&'static str, Clock)> = Vec::new();
    let mut measured = None;
    let run = match args.device {
        BlockDevice::Cpu | BlockDevice::CpuFast | BlockDevice::Cuda | BlockDevice::Opencl => {
            let (mut dev, id): (Box<dyn Device>, DeviceId) = match args.device {
                BlockDevice::Cpu | BlockDevice::CpuFast => {
                    guard::Estimate::golden(macs).confirm(args.yes)?;
                    match args.device {
                        BlockDevice::Cpu => (Box::new(CpuDevice::new(CpuMode::Golden)), DeviceId::Cpu),
                        _ => (Box::new(CpuDevice::new(CpuMode::Fast)), DeviceId::CpuFast),
                    }
                }
                BlockDevice::Cuda => (ferrite_host::backend::open_cuda()?, DeviceId::Cuda),
                _ => (super::boards::open_opencl(&args.board, "block")?, DeviceId::Opencl),
            };
            let name = dev.info().name;
            // The weights go to the device once and stay there for the timed runs, as deployed.
            let (mut devs, mut resident) = (OneDevice(dev.as_mut()), Resident::default());
            let run = run_block_resident(&mut devs, &mut resident, &s, &w, &sc, &x)?;
            if args.min_time_ms > 0 {
                let min_time = Duration::from_millis(args.min_time_ms);
                let meter = meter_for(id, &name);
                measured = Some(measure(&mut devs, &mut resident, (&s, &w, &sc, &x), min_time, meter)?);
            }
            resident.free(&mut devs)?;
            run
        }
        BlockDevice::Sim => {
            let (g, a, m, estimate) = units.context("the simulated units were not chosen")?;
            let gemm_cols = g.cols;
            let engine = engine(args.sim.engine)?;
            for (unit, cfg) in [("gemm", g.clone().into()), ("attention", a.clone().into()), ("moe", m.clone().into())]
            {
                clocks.push((unit, sim_clock(cfg, None)?));
            }
            // The three units share one clock domain: all run at the slowest unit's clock.
            let common = Clock::slowest(&clocks);
            clocks.iter_mut().for_each(|(_, c)| *c = common.clone());
            let mut gemm = sim_device(g, &args.sim, engine, args.seed, None)?;
            let mut attention = sim_device(a, &args.sim, engine, args.seed + 1, None)?;
            let mut moe = sim_device(m, &args.sim, engine, args.seed + 2, None)?;
            let counters: Vec<_> = [&gemm, &attention, &moe].iter().filter_map(|d| d.cycles_done()).collect();
            let mut devs = PerUnit { gemm: &mut gemm, attention: &mut attention, moe: &mut moe };
            if args.project {
                let how = Projection { direct_macs: PROJECT_DIRECT_MACS, gemm_cols, seed: args.seed };
                let run = project(&mut devs, (&s, &w, &sc), &golden, &how)?;
                report(&s, &sc, &w, &x, &golden, None, &run, &clocks)?;
                return Ok(());
            }
            estimate.progress(&counters, "simulating the block".into(), || timed(&mut devs, &s, &w, &sc, &x))?
        }
    };
    // The unit table comes from the last timed run when there is one: the first run of a
    // device includes one-time work (CUDA's NVRTC compiles, OpenCL program builds).
    let table = measured.as_ref().map_or(&run, |m| &m.last);
    report(&s, &sc, &w, &x, &golden, Some(&run), table, &clocks)?;
    if let Some(m) = measured {
        anyhow::ensure!(m.last.output == golden, "the last timed run differs from the golden block");
        let per_token = match &m.joules {
            Ok(j) => format!("{:.3} mJ a token [M] ({})", 1e3 * j / s.tokens as f64, m.source),
            Err(reason) => format!("energy not measured: {reason}"),
        };
        println!(
            "measured     {:.3} ms a block (median of {} runs), {:.0} tokens/s [M]; {per_token}",
            1e3 * m.median.as_secs_f64(),
            m.runs,
            s.tokens as f64 / m.median.as_secs_f64()
        );
    }
    Ok(())
}

/// Timed runs of the block and the energy of one.
struct Measured {
    median: Duration,
    runs: usize,
    /// The last timed run, checked too.
    last: BlockRun,
    /// Joules of one block, or why there is no figure.
    joules: Result<f64, String>,
    source: String,
}

/// Runs the block until `min_time` has passed (at least 3 times) under
/// `meter`, its weights resident on the device.
fn measure(
    devs: &mut dyn BlockDevices,
    resident: &mut Resident,
    (s, w, sc, x): (&BlockShape, &BlockWeights, &Scales, &[i8]),
    min_time: Duration,
    meter: Result<Box<dyn Meter>, String>,
) -> Result<Measured> {
    let mut meter = meter;
    if let Ok(m) = &mut meter {
        m.start()?;
    }
    let bar = super::spinner(format!("timing the block for {} ms", min_time.as_millis()));
    let (start, mut times, mut last) = (Instant::now(), Vec::new(), None);
    while times.len() < 3 || start.elapsed() < min_time {
        let t = Instant::now();
        last = Some(run_block_resident(devs, resident, s, w, sc, x)?);
        times.push(t.elapsed());
    }
    bar.finish_and_clear();
    let (joules, source) = match &mut meter {
        Ok(m) => (Ok(m.stop()? / times.len() as f64), m.source()),
        Err(reason) => (Err(reason.clone()), String::new()),
    };
    times.sort();
    let last = last.context("no timed run")?;
    Ok(Measured { median: times[times.len() / 2], runs: times.len(), last, joules, source })
}

/// Launches of at most this many multiply-accumulates are simulated whole by
/// `--project` (262 144 cycles on the 4×4 array at best).
const PROJECT_DIRECT_MACS: u64 = 1 << 22;

/// The block's launches projected on the simulated units `devs`, with a
/// progress bar and a line per unit saying how each launch's cycles came.
fn project(
    devs: &mut dyn BlockDevices,
    layer: (&BlockShape, &BlockWeights, &Scales),
    golden: &BlockOutput,
    how: &Projection,
) -> Result<BlockRun> {
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} launches projected, now {msg} [{elapsed}]") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    let steps = project_block(devs, layer, &golden.route, how, &mut |name, i, n| {
        bar.set_length(n as u64);
        bar.set_position(i as u64);
        bar.set_message(name.to_string());
    });
    bar.finish_and_clear();
    let steps = steps?;
    for unit in ["gemm", "attention", "moe"] {
        let of_unit: Vec<&ProjectedStep> = steps.iter().filter(|p| p.step.unit == unit).collect();
        let simulated = of_unit.iter().filter(|p| p.basis == Basis::Simulated).count();
        let example = of_unit.iter().find(|p| p.basis != Basis::Simulated);
        println!(
            "projection   {unit}: {} launches, {simulated} simulated whole, {} extrapolated{}",
            of_unit.len(),
            of_unit.len() - simulated,
            example.map_or(String::new(), |p| format!(" (e.g. {}: {})", p.step.name, p.basis))
        );
    }
    Ok(BlockRun { output: golden.clone(), steps: steps.into_iter().map(|p| p.step).collect() })
}

fn timed(devs: &mut dyn BlockDevices, s: &BlockShape, w: &BlockWeights, sc: &Scales, x: &[i8]) -> Result<BlockRun> {
    Ok(run_block(devs, s, w, sc, x)?)
}

#[allow(clippy::too_many_arguments)]
fn report(
    s: &BlockShape,
    sc: &Scales,
    w: &BlockWeights,
    x: &[i8],
    golden: &BlockOutput,
    run: Option<&BlockRun>,
    table_run: &BlockRun,
    clocks: &[(&'static str, Clock)],
) -> Result<()> {
    match run {
        None => println!("correct      not checked: a projection counts cycles, its data is the golden block's"),
        Some(run) => match golden.out.iter().zip(&run.output.out).position(|(a, b)| a != b) {
            None if *golden == run.output => {
                println!("correct      bit-exact vs the golden block ({} outputs, route and h1 too)", golden.out.len())
            }
            None => anyhow::bail!("the output matches the golden block but the route or h1 does not"),
            Some(i) => anyhow::bail!(
                "MISMATCH at token {} column {}: got {}, golden {}",
                i / s.hidden,
                i % s.hidden,
                run.output.out[i],
                golden.out[i]
            ),
        },
    }
    let bar = super::spinner("the float64 block (the accuracy reference, on this CPU)".into());
    let real = block_f64(s, w, sc, x);
    bar.finish_and_clear();
    println!(
        "accuracy     {:.2} % relative error vs float64 ({:.2} % after attention), expert sets agree on {:.1} % of tokens, {} of {} choices dropped",
        100.0 * relative_error(&golden.out, sc.residual, &real.out),
        100.0 * relative_error(&golden.h1, sc.residual, &real.h1),
        100.0 * expert_agreement(&golden.route, s.top_k, &real.experts),
        golden.route.dropped,
        s.tokens * s.top_k
    );
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["unit", "launches", "wall", "share", "cycles", "projected"]);
    let units = table_run.by_unit();
    let total_wall: f64 = units.iter().map(|u| u.1.as_secs_f64()).sum();
    let mut projected_total = Some(0.0);
    for (unit, wall, cycles, _) in &units {
        let launches = table_run.steps.iter().filter(|s| s.unit == *unit).count();
        let clock = clocks.iter().find(|(u, _)| u == unit).map(|(_, c)| c);
        let projected = cycles.zip(clock).map(|(c, clk)| c as f64 / (clk.mhz * 1e6));
        projected_total = projected_total.zip(projected).map(|(a, b)| a + b);
        table.add_row([
            unit.to_string(),
            launches.to_string(),
            format!("{:.3?}", wall),
            format!("{:.1} %", 100.0 * wall.as_secs_f64() / total_wall.max(f64::MIN_POSITIVE)),
            cycles.map_or("n/a".into(), |c| c.to_string()),
            match (projected, clock) {
                (Some(t), Some(_)) => format!("{:.1} µs", t * 1e6),
                _ => "n/a".into(),
            },
        ]);
    }
    println!("{table}");
    if let Some((_, clock)) = clocks.first() {
        println!("clock        {clock}");
    }
    if run.is_some() {
        println!(
            "throughput   {:.0} tokens/s by launch wall time ({:.3} ms a block; glue on the host not counted)",
            s.tokens as f64 / total_wall.max(f64::MIN_POSITIVE),
            1e3 * total_wall
        );
    }
    if let (Some(t), false) = (projected_total, clocks.is_empty()) {
        println!(
            "projected    {:.0} tokens/s on the units in sequence ({:.1} µs a block at that clock)",
            s.tokens as f64 / t,
            t * 1e6
        );
    }
    Ok(())
}

/// The demo's block table: the CI block on the golden models, the fast CPU
/// paths, the three simulated units (projected at their common clock) and the
/// first CUDA GPU where there is one; returns whether every device was bit-exact.
pub(super) fn demo(sim: &SimArgs, engine: Option<Engine>) -> Result<bool> {
    let s = BlockShape::small();
    let (w, sc, x) = (BlockWeights::random(&s, 1), Scales::default(), random_input(&s, 1 ^ 0xb10c));
    let golden = block(&s, &w, &sc, &x)?;
    println!();
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "device",
        "wall a block",
        "tokens/s",
        "cycles",
        "projected tokens/s",
        "dominant unit",
        "bit-exact",
    ]);
    let mut all_exact = true;
    let mut add = |name: String, run: BlockRun, clock: Option<&Clock>| {
        let exact = run.output == golden;
        all_exact &= exact;
        let total = run.total();
        let units = run.by_unit();
        // On a simulator the cycles say where the time goes; elsewhere the launch wall time.
        let weight = |u: &(&str, std::time::Duration, Option<u64>, u64)| u.2.map_or(u.1.as_secs_f64(), |c| c as f64);
        let sum: f64 = units.iter().map(weight).sum();
        let top = units.iter().max_by(|a, b| weight(a).total_cmp(&weight(b)));
        let na = || "—".to_string();
        table.add_row([
            name,
            format!("{:.3?}", total.wall),
            format!("{:.0}", s.tokens as f64 / total.wall.as_secs_f64().max(f64::MIN_POSITIVE)),
            total.cycles.map_or_else(na, |c| c.cycles.to_string()),
            match (total.cycles, clock) {
                (Some(c), Some(clk)) => format!(
                    "{:.0} at {} MHz {}",
                    s.tokens as f64 * clk.mhz * 1e6 / c.cycles as f64,
                    round_mhz(clk.mhz),
                    clk.kind()
                ),
                _ => na(),
            },
            top.map_or_else(na, |u| format!("{} {:.0} %", u.0, 100.0 * weight(u) / sum.max(f64::MIN_POSITIVE))),
            if exact { "yes" } else { "NO" }.to_string(),
        ]);
    };
    for mode in [CpuMode::Golden, CpuMode::Fast] {
        let mut dev = CpuDevice::new(mode);
        let name = dev.info().name;
        add(name, run_block(&mut OneDevice(&mut dev), &s, &w, &sc, &x)?, None);
    }
    let mut clock = None;
    match engine {
        Some(engine) => {
            let mut clocks = Vec::new();
            let (g, a, m) = sim_units(&s, 300.0)?;
            for (unit, cfg) in [("gemm", g.clone().into()), ("attention", a.clone().into()), ("moe", m.clone().into())]
            {
                clocks.push((unit, sim_clock(cfg, None)?));
            }
            let common = Clock::slowest(&clocks);
            let (mut g, mut a, mut m) = (
                sim_device(g, sim, engine, 0, None)?,
                sim_device(a, sim, engine, 1, None)?,
                sim_device(m, sim, engine, 2, None)?,
            );
            let bar = super::spinner("simulating the block".into());
            let run = run_block(&mut PerUnit { gemm: &mut g, attention: &mut a, moe: &mut m }, &s, &w, &sc, &x);
            bar.finish_and_clear();
            add(format!("sim ({engine}, 3 units)"), run?, Some(&common));
            clock = Some(common);
        }
        None => println!("sim: skipped ({})", super::NO_VERILATOR),
    }
    match ferrite_host::backend::open_cuda() {
        Ok(mut dev) => {
            let name = dev.info().name;
            add(name, run_block(&mut OneDevice(dev.as_mut()), &s, &w, &sc, &x)?, None);
        }
        Err(e) => println!("cuda: skipped ({e})"),
    }
    println!(
        "int8 MoE decoder block T={} H={} ({} heads of {}) E={} top-{} F={} (docs/block.md), glue on the host",
        s.tokens, s.hidden, s.heads, s.head_dim, s.experts, s.top_k, s.ffn
    );
    println!("{table}");
    if let Some(clock) = clock {
        println!("projected at {clock}");
    }
    Ok(all_exact)
}
