//! `ferrite run moe`, `ferrite export moe` and the MoE table of `ferrite
//! demo`: the router unit on the golden model (`cpu`), simulated cycle by
//! cycle (`sim`) or its CUDA twin (`cuda`), checked bit for bit against the
//! golden model and against a float64 router; plus the host-side statistics
//! (load histogram, load-balancing and z-losses) and expert-choice routing.
use super::{demo_devices, demo_row, demo_table, export, print_stats, sim_clock, sim_device, spinner, SimArgs};
use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use ferrite_host::backend::cpu::{CpuDevice, CpuMode};
use ferrite_host::backend::sim::Engine;
use ferrite_host::manifest::UnitConfig;
use ferrite_host::routing::{expert_choice, generated_scales, load_histogram, losses};
use ferrite_host::{npy, ops, Device};
use ferrite_hw::moe::{agreement, route, route_f64, CapacityFactor, GateMode, MoeConfig, MoeOutput, MoeProblem};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;

/// Default real value of one LSB of the tokens (see [`generated_scales`]).
const DEFAULT_X_SCALE: f64 = 1.0 / 32.0;

fn default_w_scale(hidden: usize) -> f64 {
    generated_scales(hidden).1
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum MoeDevice {
    /// The golden model.
    Cpu,
    /// The RTL in cycle-level simulation.
    Sim,
    /// The bit-exact twin on the first CUDA GPU.
    Cuda,
    /// An OpenCL device (feature `opencl`): the OpenCL C port.
    Opencl,
    /// An Alveo card through XRT (feature `xrt`), with the image of --manifest.
    Xrt,
    /// A PYNQ board's programmable logic, with the image of --manifest.
    Pynq,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// Softmax over all E, then the k largest (Switch, GShard, DeepSeek).
    SoftmaxTopk,
    /// The k largest logits, then softmax over those k (Mixtral).
    TopkSoftmax,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Policy {
    /// Each token picks its top-k experts (what the unit does).
    TokenChoice,
    /// Each expert picks its top-C tokens (Zhou et al. 2022; cpu only).
    ExpertChoice,
}

/// Generation-time parameters of the router unit (see `MoeConfig`).
#[derive(Args)]
pub(super) struct MoeUnitArgs {
    /// Most experts the unit handles (1..=256).
    #[arg(long, default_value_t = MoeConfig::default().e_max)]
    e_max: usize,
    /// Most choices per token (1..=8).
    #[arg(long, default_value_t = MoeConfig::default().k_max)]
    k_max: usize,
    /// Largest hidden size (on-chip gate weights hold e_max × h_max bytes).
    #[arg(long, default_value_t = MoeConfig::default().h_max)]
    h_max: usize,
    /// Expert lanes of the gate projection.
    #[arg(long, default_value_t = MoeConfig::default().lanes)]
    lanes: usize,
    /// Width of the memory port in bits (128, 256, 512).
    #[arg(long, default_value_t = MoeConfig::default().port_bits)]
    port_bits: usize,
    /// Clock for projected times in MHz, assumed (default: the unit's post-route Fmax when
    /// `ferrite timing` measured this config, else 300).
    #[arg(long)]
    clock_mhz: Option<f64>,
}

impl MoeUnitArgs {
    fn config(&self) -> Result<MoeConfig> {
        let cfg = MoeConfig {
            e_max: self.e_max,
            k_max: self.k_max,
            h_max: self.h_max,
            lanes: self.lanes,
            port_bits: self.port_bits,
            clock_mhz: self.clock_mhz.unwrap_or(MoeConfig::default().clock_mhz),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(Args)]
pub(super) struct ExportMoe {
    #[command(flatten)]
    unit: MoeUnitArgs,
    /// Directory to write `<kernel>.sv`, `<kernel>.regmap.json` and `<kernel>.config.json` into.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
pub(super) struct RunMoe {
    #[arg(long, value_enum, default_value_t = MoeDevice::Cpu)]
    device: MoeDevice,
    #[command(flatten)]
    sim: SimArgs,
    #[command(flatten)]
    board: super::boards::BoardArgs,
    /// T: tokens (taken from --x when given).
    #[arg(long)]
    tokens: Option<usize>,
    /// H: hidden size (taken from --x when given).
    #[arg(long)]
    hidden: Option<usize>,
    /// E: experts (taken from --w when given).
    #[arg(long)]
    experts: Option<usize>,
    /// k: experts per token.
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    /// Per-expert capacity ceil(cf·T·k/E); unlimited when absent.
    #[arg(long)]
    capacity_factor: Option<f64>,
    #[arg(long, value_enum, default_value_t = ModeArg::SoftmaxTopk)]
    mode: ModeArg,
    /// softmax-topk only: renormalize the k weights to sum to 1.
    #[arg(long)]
    renormalize: bool,
    /// Add a per-expert int32 logit bias (random unless --bias-file).
    #[arg(long)]
    bias: bool,
    /// Real value of one LSB of x.
    #[arg(long, default_value_t = DEFAULT_X_SCALE)]
    x_scale: f64,
    /// Real value of one LSB of the gate weights (default: 1/(128·√H), nn.Linear's initial range).
    #[arg(long)]
    w_scale: Option<f64>,
    /// Routing policy; expert-choice runs on the cpu device only.
    #[arg(long, value_enum, default_value_t = Policy::TokenChoice)]
    policy: Policy,
    /// Seed of the random operands, and of the memory's stalls.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    unit: MoeUnitArgs,
    /// Write a VCD waveform of the simulation (verilator engine).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Tokens as an int8 T×H .npy.
    #[arg(long, requires = "w")]
    x: Option<PathBuf>,
    /// Gate weights as an int8 E×H .npy (one row per expert, as nn.Linear stores them).
    #[arg(long, requires = "x")]
    w: Option<PathBuf>,
    /// Logit bias as an int32 E .npy (implies --bias).
    #[arg(long)]
    bias_file: Option<PathBuf>,
    /// Directory to write experts/weights/slots/load/dispatch .npy files into.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a run estimated to take more than ten minutes.
    #[arg(long)]
    yes: bool,
}

/// One routing problem with its operands.
struct Operands {
    problem: MoeProblem,
    x: Vec<i8>,
    w: Vec<i8>,
    bias: Option<Vec<i32>>,
}

/// A size from a flag and/or a file; both must agree.
fn size(name: &str, flag: Option<usize>, file: Option<usize>) -> Result<usize> {
    match (flag, file) {
        (Some(f), Some(g)) if f != g => bail!("--{name} {f} disagrees with the input files ({name} = {g})"),
        (f, g) => f.or(g).with_context(|| format!("--{name} is required without --x/--w")),
    }
}

fn operands(args: &RunMoe) -> Result<Operands> {
    let files = match (&args.x, &args.w) {
        (Some(x), Some(w)) => Some((npy::read_i8_matrix(x)?, npy::read_i8_matrix(w)?)),
        _ => None,
    };
    let (ft, fh) = files.as_ref().map(|(x, _)| x.dim()).unzip();
    let (fe, fh2) = files.as_ref().map(|(_, w)| w.dim()).unzip();
    if let (Some(hx), Some(hw)) = (fh, fh2) {
        ensure!(hx == hw, "x has hidden size {hx} but the gate weights have {hw} columns");
    }
    let mode = match args.mode {
        ModeArg::SoftmaxTopk => GateMode::SoftmaxTopk,
        ModeArg::TopkSoftmax => GateMode::TopkSoftmax,
    };
    ensure!(!args.renormalize || mode == GateMode::SoftmaxTopk, "--renormalize applies to --mode softmax-topk only");
    let (t, h, e) =
        (size("tokens", args.tokens, ft)?, size("hidden", args.hidden, fh)?, size("experts", args.experts, fe)?);
    let w_scale = args.w_scale.unwrap_or_else(|| default_w_scale(h));
    for (name, s) in [("x-scale", args.x_scale), ("w-scale", w_scale)] {
        ensure!(s.is_finite() && s > 0.0, "--{name} {s} must be a positive number");
    }
    let problem = MoeProblem {
        renormalize: args.renormalize,
        capacity: args.capacity_factor.map(CapacityFactor::from_f64).transpose()?,
        bias: args.bias || args.bias_file.is_some(),
        ..MoeProblem::new(t, h, e, args.top_k, mode, args.x_scale, w_scale)?
    };
    problem.validate()?;
    super::guard::check_memory(host_bytes(&problem), &format!("MoE routing {}", describe(&problem)))?;
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let (x, w) = match files {
        Some((x, w)) => (x.iter().copied().collect(), w.iter().copied().collect()),
        None => ((0..t * h).map(|_| rng.gen()).collect(), (0..e * h).map(|_| rng.gen()).collect()),
    };
    let bias = match &args.bias_file {
        Some(path) => {
            let b = npy::read_i32_vector(path)?;
            ensure!(b.len() == e, "{}: bias has {} entries, E = {e}", path.display(), b.len());
            Some(b.to_vec())
        }
        // A few logit standard deviations: enough to move choices, not to decide them.
        None => problem.bias.then(|| (0..e).map(|_| rng.gen_range(-(64 * h as i32)..=64 * h as i32)).collect()),
    };
    Ok(Operands { problem, x, w, bias })
}

/// Host bytes of one run: tokens and gate weights with their device copies,
/// and per choice the route records and plans of the result, the golden
/// model and the float64 router (a generous 64 bytes per choice).
fn host_bytes(p: &MoeProblem) -> u64 {
    let (t, h, e) = (p.tokens as u64, p.hidden as u64, p.experts as u64);
    let inputs = t.saturating_add(e).saturating_mul(h).saturating_mul(2);
    inputs.saturating_add(t.saturating_mul(p.top_k as u64).saturating_mul(64))
}

fn describe(p: &MoeProblem) -> String {
    let mode = match p.mode {
        GateMode::SoftmaxTopk if p.renormalize => "softmax-topk+renormalize",
        GateMode::SoftmaxTopk => "softmax-topk",
        GateMode::TopkSoftmax => "topk-softmax",
    };
    let mut s = format!("T={} H={} E={} k={} {mode}", p.tokens, p.hidden, p.experts, p.top_k);
    match p.capacity {
        Some(cf) => s += &format!(" capacity {} (cf {:.6} in Q16.16)", p.capacity_slots(), cf.to_f64()),
        None => s += " capacity unlimited",
    }
    if p.bias {
        s += " +bias";
    }
    s
}

/// The first field where `out` differs from `golden`, described.
fn first_mismatch(p: &MoeProblem, out: &MoeOutput, golden: &MoeOutput) -> Option<String> {
    let k = p.top_k;
    let at = |i: usize| format!("token {}, choice {}", i / k, i % k);
    if let Some(i) = (0..golden.experts.len()).find(|&i| out.experts[i] != golden.experts[i]) {
        return Some(format!("expert at {}: got {}, golden {}", at(i), out.experts[i], golden.experts[i]));
    }
    if let Some(i) = (0..golden.weights.len()).find(|&i| out.weights[i] != golden.weights[i]) {
        return Some(format!("weight at {}: got {}, golden {}", at(i), out.weights[i], golden.weights[i]));
    }
    if let Some(i) = (0..golden.slots.len()).find(|&i| out.slots[i] != golden.slots[i]) {
        return Some(format!("slot at {}: got {}, golden {}", at(i), out.slots[i], golden.slots[i]));
    }
    if out.load != golden.load {
        let e = (0..golden.load.len()).find(|&e| out.load[e] != golden.load[e]).unwrap_or(0);
        return Some(format!("load of expert {e}: got {}, golden {}", out.load[e], golden.load[e]));
    }
    if (out.dropped, out.capacity) != (golden.dropped, golden.capacity) {
        return Some(format!(
            "dropped/capacity: got {}/{}, golden {}/{}",
            out.dropped, out.capacity, golden.dropped, golden.capacity
        ));
    }
    let e = (0..golden.dispatch.len()).find(|&e| out.dispatch[e] != golden.dispatch[e])?;
    Some(format!("dispatch row of expert {e}: got {:?}, golden {:?}", out.dispatch[e], golden.dispatch[e]))
}

fn open(args: &RunMoe, p: &MoeProblem, engine: Option<Engine>) -> Result<Box<dyn Device>> {
    Ok(match args.device {
        MoeDevice::Cpu => Box::new(CpuDevice::new(CpuMode::Golden)),
        MoeDevice::Sim => {
            let cfg = args.unit.config()?;
            // Refuse before the (minutes-long) Verilator build of an unsuitable unit.
            p.validate_for(&cfg).with_context(|| format!("problem too big for {}", cfg.kernel_name()))?;
            let engine = engine.context("no simulator engine")?;
            Box::new(sim_device(cfg, &args.sim, engine, args.seed, args.trace.as_deref())?)
        }
        MoeDevice::Cuda => ferrite_host::backend::open_cuda()?,
        MoeDevice::Opencl => super::boards::open_opencl(&args.board, "moe")?,
        MoeDevice::Xrt => super::boards::open_xrt(&args.board, "moe")?,
        MoeDevice::Pynq => super::boards::open_pynq(&args.board, "moe")?,
    })
}

pub(super) fn run(args: &RunMoe) -> Result<()> {
    let ops = operands(args)?;
    let p = &ops.problem;
    ensure!(args.trace.is_none() || args.device == MoeDevice::Sim, "--trace needs --device sim");
    if args.policy == Policy::ExpertChoice {
        ensure!(
            args.device == MoeDevice::Cpu,
            "expert-choice routing runs on --device cpu only (the unit routes by token choice)"
        );
        ensure!(args.out.is_none(), "--out writes token-choice results; expert-choice prints its summary only");
        return run_expert_choice(&ops);
    }
    if let Some(dir) = &args.out {
        super::guard::check_out_dir(dir)?;
    }
    let engine = match args.device {
        MoeDevice::Sim => Some(super::engine(args.sim.engine)?),
        _ => None,
    };
    // The unit flags describe the simulated unit only; a board's unit comes from its image.
    let multipliers = engine.map(|_| args.unit.config()).transpose()?.map_or(1, |c| c.macs() as u64);
    let est = super::estimate(p.macs(), multipliers, engine, args.device == MoeDevice::Cpu);
    est.confirm(args.yes)?;
    let mut dev = open(args, p, engine)?;
    let name = dev.info().name;
    let counters: Vec<_> = dev.cycles_done().into_iter().collect();
    let result = est.progress(&counters, format!("routing {} on {name}", describe(p)), || {
        ops::moe(dev.as_mut(), p, &ops.x, &ops.w, ops.bias.as_deref())
    });
    let (out, stats) = result.with_context(|| format!("MoE routing on {name}"))?;
    let bias = ops.bias.as_deref();
    let golden = route(p, &ops.x, &ops.w, bias)?;
    let f64_agreement = agreement(p, &golden, &route_f64(p, &ops.x, &ops.w, bias)?);

    println!("device       {name}");
    println!("problem      {}", describe(p));
    let mismatch = first_mismatch(p, &out, &golden);
    match &mismatch {
        None => println!("correct      bit-exact vs the golden model (ids, weights, slots, loads, dispatch plan)"),
        Some(m) => println!("correct      NO: first mismatch: {m}"),
    }
    println!(
        "golden/f64   expert sets agree on {} of {} tokens ({} float near-ties, {} disagreements); max weight error {:.0} LSB of Q0.16",
        p.tokens - f64_agreement.near_ties - f64_agreement.disagreements,
        p.tokens,
        f64_agreement.near_ties,
        f64_agreement.disagreements,
        f64_agreement.max_weight_err_lsb
    );
    println!("dropped      {} of {} choices (capacity {} per expert)", out.dropped, p.tokens * p.top_k, out.capacity);
    let l = losses(p, &out, &ops.x, &ops.w, bias)?;
    println!("aux losses   load-balancing E·Σf·P = {:.4} (1 = balanced), z-loss = {:.4}", l.load_balancing, l.z_loss);
    let clock = match args.device {
        MoeDevice::Sim => Some(sim_clock(args.unit.config()?.into(), args.unit.clock_mhz)?),
        MoeDevice::Xrt => Some(super::boards::image_clock(&args.board, "xrt", "moe")?),
        MoeDevice::Pynq => Some(super::boards::image_clock(&args.board, "pynq", "moe")?),
        _ => None,
    };
    print_stats(&stats, clock.as_ref());
    if let Some(c) = stats.cycles {
        println!("per token    {:.2} cycles", c.cycles as f64 / p.tokens as f64);
    }
    println!("\nper-expert load (tokens routed, kept or dropped)\n{}", load_histogram(&out.load, out.capacity));
    if let Some(dir) = &args.out {
        for path in npy::write_moe(dir, &out, p.top_k)? {
            println!("wrote        {}", path.display());
        }
    }
    ensure!(mismatch.is_none(), "{name} output differs from the golden model");
    ensure!(f64_agreement.disagreements == 0, "the golden model disagrees with the float64 router beyond near-ties");
    Ok(())
}

fn run_expert_choice(ops: &Operands) -> Result<()> {
    let p = &ops.problem;
    let bar = spinner(format!("expert-choice routing {}", describe(p)));
    let ec = expert_choice(p, &ops.x, &ops.w, ops.bias.as_deref());
    bar.finish_and_clear();
    let ec = ec?;
    println!("device       cpu (golden arithmetic, expert choice)");
    println!("problem      {} → each expert takes its top {} tokens", describe(p), ec.capacity);
    let mut per = vec![0usize; p.experts + 1];
    for &n in &ec.experts_per_token {
        per[n as usize] += 1;
    }
    let spread: Vec<String> = per.iter().enumerate().filter(|(_, &c)| c > 0).map(|(n, c)| format!("{n}→{c}")).collect();
    println!("experts/tok  {} (experts → tokens)", spread.join(", "));
    println!("unrouted     {} tokens (no expert took them)", ec.unrouted());
    let load: Vec<u32> = ec.tokens.iter().map(|t| t.len() as u32).collect();
    println!("\nper-expert load\n{}", load_histogram(&load, ec.capacity));
    Ok(())
}

pub(super) fn export_unit(args: &ExportMoe) -> Result<()> {
    let cfg = args.unit.config()?;
    let verilog = UnitConfig::Moe(cfg.clone()).verilog().context("generating Verilog")?;
    let cfg_json = serde_json::to_string_pretty(&cfg).context("serializing the config")?;
    export(&args.out, &cfg.kernel_name(), verilog, cfg.register_map().to_json(), cfg_json)
}

/// The MoE table of `ferrite demo`: one routing problem on the golden model
/// and the small unit (12 experts, 4 lanes, 128-bit port), whose Verilator
/// build is quick. Returns whether every device was bit-exact.
pub(super) fn demo(sim: &SimArgs, engine: Option<Engine>) -> Result<bool> {
    let clock = sim_clock(MoeConfig::small().into(), None)?;
    let cfg = MoeConfig { clock_mhz: clock.mhz, ..MoeConfig::small() };
    let problem = MoeProblem {
        capacity: Some(CapacityFactor::from_f64(1.25)?),
        ..MoeProblem::new(256, 64, 12, 2, GateMode::SoftmaxTopk, DEFAULT_X_SCALE, default_w_scale(64))?
    };
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let x: Vec<i8> = (0..problem.tokens * problem.hidden).map(|_| rng.gen()).collect();
    let w: Vec<i8> = (0..problem.experts * problem.hidden).map(|_| rng.gen()).collect();
    let golden = route(&problem, &x, &w, None)?;
    println!();
    let devices = demo_devices(cfg.clone(), sim, engine)?;
    println!(
        "MoE router {} on the small {} unit ({} lanes, {}-bit port), projected at {clock}",
        describe(&problem),
        cfg.kernel_name(),
        cfg.lanes,
        cfg.port_bits,
    );
    let mut table = demo_table();
    let mut all_exact = true;
    for mut dev in devices {
        let name = dev.info().name;
        let bar = spinner(format!("routing on {name}"));
        let result = ops::moe(dev.as_mut(), &problem, &x, &w, None);
        bar.finish_and_clear();
        match result {
            Ok((out, stats)) => {
                let exact = first_mismatch(&problem, &out, &golden).is_none();
                all_exact &= exact;
                table.add_row(demo_row(name, &stats, exact));
            }
            // A GPU build without the router twin answers Unsupported: say so, don't fail the demo.
            Err(e @ ferrite_host::DeviceError::Unsupported { .. }) => println!("{name}: skipped ({e})"),
            Err(e) => return Err(e).with_context(|| format!("MoE routing on {name}")),
        }
    }
    println!("{table}");
    let l = losses(&problem, &golden, &x, &w, None)?;
    println!(
        "dropped {} of {} choices; load-balancing loss {:.4}, z-loss {:.4}\n{}",
        golden.dropped,
        problem.tokens * problem.top_k,
        l.load_balancing,
        l.z_loss,
        load_histogram(&golden.load, golden.capacity)
    );
    Ok(all_exact)
}
