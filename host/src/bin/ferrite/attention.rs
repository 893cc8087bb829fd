//! `ferrite run attention` and the attention table of `ferrite demo`: the
//! streaming attention unit on the golden model (`cpu`) or simulated cycle by
//! cycle (`sim`), checked bit for bit against the golden model and measured
//! against float64 attention.
use super::{demo_devices, demo_row, demo_table, print_stats, sim_clock, sim_device, spinner, SimArgs};
use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use ferrite_host::backend::cpu::{CpuDevice, CpuMode};
use ferrite_host::backend::sim::Engine;
use ferrite_host::{npy, ops, Device};
use ferrite_hw::attention::model::rel_fro_error;
use ferrite_hw::attention::{
    attention, attention_f64, AttentionConfig, AttentionLayout, AttentionOutput, AttentionParams, AttentionProblem,
};
use ndarray::ArrayD;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};

/// Default real value of one LSB of Q, K and V: generated operands have σ = 32
/// LSB, so with this scale they are unit-variance reals.
const DEFAULT_SCALE: f64 = 1.0 / 32.0;
/// Standard deviation, in LSB, of generated operands (before clamping to int8).
const SIGMA: f64 = 32.0;

/// Devices with an attention path through the `Device` trait (cpu-fast has
/// no faster bit-exact attention than the golden model).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum AttentionDevice {
    /// The golden model.
    Cpu,
    /// The RTL in cycle-level simulation.
    Sim,
    /// The bit-exact twin on an NVIDIA GPU (needs the driver and NVRTC).
    Cuda,
    /// An OpenCL device (feature `opencl`): the OpenCL C port.
    Opencl,
    /// An Alveo card through XRT (feature `xrt`), with the image of --manifest.
    Xrt,
    /// A PYNQ board's programmable logic, with the image of --manifest.
    Pynq,
}

/// Generation-time parameters of the attention unit (see `AttentionConfig`);
/// its head dimension is the problem's `--dim`.
#[derive(Args)]
struct AttentionUnitArgs {
    /// Query lanes: queries processed in parallel (1..=32).
    #[arg(long, default_value_t = AttentionConfig::default().lanes)]
    lanes: usize,
    /// Width of the memory port in bits (128, 256, 512, 1024; at least 8·dim).
    #[arg(long, default_value_t = AttentionConfig::default().port_bits)]
    port_bits: usize,
    /// Depth of the K/V stream FIFOs in beats (a power of two, 4..=256).
    #[arg(long, default_value_t = AttentionConfig::default().read_fifo_depth)]
    fifo_depth: usize,
    /// Clock for projected times in MHz, assumed (default: the unit's post-route Fmax when
    /// `ferrite timing` measured this config, else 300).
    #[arg(long)]
    clock_mhz: Option<f64>,
}

impl AttentionUnitArgs {
    fn config(&self, head_dim: usize) -> Result<AttentionConfig> {
        let cfg = AttentionConfig {
            head_dim,
            lanes: self.lanes,
            dot_par: head_dim,
            port_bits: self.port_bits,
            read_fifo_depth: self.fifo_depth,
            clock_mhz: self.clock_mhz.unwrap_or(AttentionConfig::default().clock_mhz),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(Args)]
pub(super) struct RunAttention {
    #[arg(long, value_enum, default_value_t = AttentionDevice::Cpu)]
    device: AttentionDevice,
    #[command(flatten)]
    sim: SimArgs,
    #[command(flatten)]
    board: super::boards::BoardArgs,
    /// Batch entries (default 1; taken from --q when it is 4-D).
    #[arg(long)]
    batch: Option<usize>,
    /// Heads per batch entry (default 1; taken from --q when it is 4-D).
    #[arg(long)]
    heads: Option<usize>,
    /// Query rows per head (taken from --q when given).
    #[arg(long)]
    seq: Option<usize>,
    /// Key/value rows per head (default: --seq; taken from --k when given).
    #[arg(long)]
    seq_kv: Option<usize>,
    /// Head dimension d; `sim` builds its unit for it (taken from --q when given).
    #[arg(long)]
    dim: Option<usize>,
    /// Mask key j for query i when j > i.
    #[arg(long)]
    causal: bool,
    /// Valid keys per batch entry, for padded batches: L1,L2,... (one per batch entry).
    #[arg(long, value_delimiter = ',')]
    kv_len: Option<Vec<usize>>,
    /// Requantize the output to int8 (default: int32 Q16 fixed point in V's units).
    #[arg(long)]
    int8_out: bool,
    /// Real value of one LSB of Q.
    #[arg(long, default_value_t = DEFAULT_SCALE)]
    q_scale: f64,
    /// Real value of one LSB of K.
    #[arg(long, default_value_t = DEFAULT_SCALE)]
    k_scale: f64,
    /// Real value of one LSB of V.
    #[arg(long, default_value_t = DEFAULT_SCALE)]
    v_scale: f64,
    /// Real value of one LSB of the int8 output (implies --int8-out; default: --v-scale).
    #[arg(long)]
    out_scale: Option<f64>,
    /// Seed of the random operands, and of the memory's stalls.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    unit: AttentionUnitArgs,
    /// Write a VCD waveform of the simulation (verilator engine).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Q as int8 .npy, [batch, heads, seq, dim] or [batch·heads, seq, dim].
    #[arg(long, requires_all = ["k", "v"])]
    q: Option<PathBuf>,
    /// K as int8 .npy, [batch, heads, seq_kv, dim] or [batch·heads, seq_kv, dim].
    #[arg(long, requires_all = ["q", "v"])]
    k: Option<PathBuf>,
    /// V as int8 .npy, the same shape as K.
    #[arg(long, requires_all = ["q", "k"])]
    v: Option<PathBuf>,
    /// Write O as .npy, [batch, heads, seq, dim]: int32 Q16, or int8 with --int8-out.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a run estimated to take more than ten minutes.
    #[arg(long)]
    yes: bool,
}

/// Q, K and V of one problem, dense `[batch·heads][seq][dim]`.
struct Operands {
    problem: AttentionProblem,
    q: Vec<i8>,
    k: Vec<i8>,
    v: Vec<i8>,
}

/// Int8 values of a Gaussian with σ = [`SIGMA`] LSB (Box–Muller), clamped:
/// the inputs the unit's error budget is stated for.
fn gaussian_i8(rng: &mut ChaCha8Rng, len: usize) -> Vec<i8> {
    (0..len)
        .map(|_| {
            let (u1, u2): (f64, f64) = (rng.gen_range(f64::MIN_POSITIVE..1.0), rng.gen());
            let g = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (g * SIGMA).round().clamp(-128.0, 127.0) as i8
        })
        .collect()
}

/// A size given by a flag and/or a file; both must agree.
fn agree(name: &str, flag: Option<usize>, file: Option<usize>) -> Result<Option<usize>> {
    match (flag, file) {
        (Some(f), Some(g)) if f != g => {
            bail!("--{name} {f} disagrees with the input files ({name} = {g})")
        }
        (f, g) => Ok(f.or(g)),
    }
}

/// Q, K, V from `.npy` files, with their shapes checked against each other.
struct Files {
    q: ArrayD<i8>,
    k: ArrayD<i8>,
    v: ArrayD<i8>,
}

impl Files {
    fn read(q: &Path, k: &Path, v: &Path) -> Result<Self> {
        let files = Self { q: npy::read_i8_heads(q)?, k: npy::read_i8_heads(k)?, v: npy::read_i8_heads(v)? };
        let (qs, ks, vs) = (files.q.shape(), files.k.shape(), files.v.shape());
        ensure!(ks == vs, "K has shape {ks:?} but V has shape {vs:?}: they must be equal");
        let lead = |s: &[usize]| s[..s.len() - 2].to_vec();
        ensure!(
            qs.len() == ks.len() && lead(qs) == lead(ks) && qs.last() == ks.last(),
            "Q has shape {qs:?} but K has shape {ks:?}: batch, heads and dim must agree"
        );
        Ok(files)
    }

    /// `(batch, heads)` of 4-D files; `None` for 3-D ones.
    fn batch_heads(&self) -> Option<(usize, usize)> {
        let s = self.q.shape();
        (s.len() == 4).then(|| (s[0], s[1]))
    }

    /// batch·heads, query rows, key rows, dim.
    fn sizes(&self) -> (usize, usize, usize, usize) {
        let (q, k) = (self.q.shape(), self.k.shape());
        let r = q.len();
        (q[..r - 2].iter().product(), q[r - 2], k[r - 2], q[r - 1])
    }
}

/// Batch and heads for `heads_total` flattened heads (3-D files): from the
/// flags where given, batch 1 otherwise.
fn split_heads(heads_total: usize, batch: Option<usize>, heads: Option<usize>) -> Result<(usize, usize)> {
    let (b, h) = match (batch, heads) {
        (None, None) => (1, heads_total),
        (Some(b), None) => (b, heads_total / b.max(1)),
        (None, Some(h)) => (heads_total / h.max(1), h),
        (Some(b), Some(h)) => (b, h),
    };
    ensure!(
        b * h == heads_total,
        "--batch {b} × --heads {h} does not match the {heads_total} heads of the input files"
    );
    Ok((b, h))
}

fn params(args: &RunAttention, dim: usize) -> Result<AttentionParams> {
    let out_scale = (args.int8_out || args.out_scale.is_some()).then(|| args.out_scale.unwrap_or(args.v_scale));
    for (name, s) in [
        ("q-scale", Some(args.q_scale)),
        ("k-scale", Some(args.k_scale)),
        ("v-scale", Some(args.v_scale)),
        ("out-scale", out_scale),
    ] {
        if let Some(s) = s {
            ensure!(s.is_finite() && s > 0.0, "--{name} {s} must be a positive number");
        }
    }
    Ok(AttentionParams::from_scales(dim, args.q_scale, args.k_scale, args.v_scale, out_scale)?)
}

fn operands(args: &RunAttention) -> Result<Operands> {
    let files = match (&args.q, &args.k, &args.v) {
        (Some(q), Some(k), Some(v)) => Some(Files::read(q, k, v)?),
        _ => None,
    };
    let (batch, heads) = match &files {
        Some(f) => match f.batch_heads() {
            Some((b, h)) => {
                (agree("batch", args.batch, Some(b))?.unwrap_or(b), agree("heads", args.heads, Some(h))?.unwrap_or(h))
            }
            None => split_heads(f.sizes().0, args.batch, args.heads)?,
        },
        None => (args.batch.unwrap_or(1), args.heads.unwrap_or(1)),
    };
    let sizes = files.as_ref().map(Files::sizes);
    let required =
        |name: &str, v: Option<usize>| v.with_context(|| format!("--{name} is required without --q/--k/--v"));
    let seq_q = required("seq", agree("seq", args.seq, sizes.map(|s| s.1))?)?;
    let seq_kv = agree("seq-kv", args.seq_kv, sizes.map(|s| s.2))?.unwrap_or(seq_q);
    let dim = required("dim", agree("dim", args.dim, sizes.map(|s| s.3))?)?;
    let problem = AttentionProblem {
        batch,
        heads,
        seq_q,
        seq_kv,
        dim,
        causal: args.causal,
        kv_len: args.kv_len.clone(),
        params: params(args, dim)?,
    };
    problem.validate()?;
    super::guard::check_memory(host_bytes(&problem), &format!("attention {}", describe(&problem)))?;
    Ok(match files {
        Some(f) => Operands {
            problem,
            q: f.q.iter().copied().collect(),
            k: f.k.iter().copied().collect(),
            v: f.v.iter().copied().collect(),
        },
        None => {
            let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
            let (nq, nkv) = (batch * heads * seq_q * dim, batch * heads * seq_kv * dim);
            Operands {
                q: gaussian_i8(&mut rng, nq),
                k: gaussian_i8(&mut rng, nkv),
                v: gaussian_i8(&mut rng, nkv),
                problem,
            }
        }
    })
}

/// Host bytes of one run: Q, K, V and O with their device copies (cpu and
/// sim buffers are host memory), the golden O and the float64 reference.
fn host_bytes(p: &AttentionProblem) -> u64 {
    let nh = p.heads_total() as u64;
    let q = nh.saturating_mul(p.seq_q as u64).saturating_mul(p.dim as u64);
    let kv = nh.saturating_mul(p.seq_kv as u64).saturating_mul(p.dim as u64);
    let o = q.saturating_mul(AttentionLayout::out_elem_bytes(p) as u64);
    let io = q.saturating_add(kv.saturating_mul(2)).saturating_add(o);
    io.saturating_mul(2).saturating_add(o).saturating_add(q.saturating_mul(8))
}

fn describe(p: &AttentionProblem) -> String {
    let mut s = format!("batch={} heads={} seq={} seq_kv={} d={}", p.batch, p.heads, p.seq_q, p.seq_kv, p.dim);
    if p.causal {
        s += " +causal";
    }
    if let Some(kv) = &p.kv_len {
        s += &format!(" +kv_len{kv:?}");
    }
    s += match p.params.out {
        Some(_) => " → int8",
        None => " → Q16",
    };
    s
}

/// Relative Frobenius error of the golden model's output against float64
/// attention, in the output's own units: Q16 in V's units, or int8 in units
/// of the output scale (the reference is rescaled by `v_scale / out_scale`).
fn golden_error(p: &AttentionProblem, ops: &Operands, golden: &AttentionOutput, v_per_out: f64) -> Result<f64> {
    let mut reference = attention_f64(p, &ops.q, &ops.k, &ops.v)?;
    if p.params.out.is_some() {
        reference.iter_mut().for_each(|r| *r *= v_per_out);
    }
    Ok(rel_fro_error(golden, &reference))
}

fn first_mismatch(out: &AttentionOutput, golden: &AttentionOutput) -> Option<(usize, i32, i32)> {
    (0..golden.len()).find(|&i| out.get(i) != golden.get(i)).map(|i| (i, out.get(i), golden.get(i)))
}

pub(super) fn run(args: &RunAttention) -> Result<()> {
    let ops = operands(args)?;
    let p = &ops.problem;
    ensure!(args.trace.is_none() || args.device == AttentionDevice::Sim, "--trace needs --device sim");
    if let Some(path) = &args.out {
        super::guard::check_out_file(path)?;
    }
    let engine = match args.device {
        AttentionDevice::Sim => Some(super::engine(args.sim.engine)?),
        _ => None,
    };
    // The unit flags describe the simulated unit only; a board's unit comes from its image.
    let cfg = engine.map(|_| args.unit.config(p.dim)).transpose()?;
    let multipliers = cfg.as_ref().map_or(1, |c| c.multipliers() as u64);
    let est = super::estimate(p.macs(), multipliers, engine, args.device == AttentionDevice::Cpu);
    est.confirm(args.yes)?;
    let mut dev: Box<dyn Device> = match args.device {
        AttentionDevice::Cpu => Box::new(CpuDevice::new(CpuMode::Golden)),
        AttentionDevice::Sim => Box::new(sim_device(
            cfg.context("no unit configuration")?,
            &args.sim,
            engine.context("no simulator engine")?,
            args.seed,
            args.trace.as_deref(),
        )?),
        AttentionDevice::Cuda => ferrite_host::backend::open_cuda()?,
        AttentionDevice::Opencl => super::boards::open_opencl(&args.board, "attention")?,
        AttentionDevice::Xrt => super::boards::open_xrt(&args.board, "attention")?,
        AttentionDevice::Pynq => super::boards::open_pynq(&args.board, "attention")?,
    };
    let name = dev.info().name;
    let counters: Vec<_> = dev.cycles_done().into_iter().collect();
    let result = est.progress(&counters, format!("running {} on {name}", describe(p)), || {
        ops::attention(dev.as_mut(), p, &ops.q, &ops.k, &ops.v)
    });
    let (out, stats) = result.with_context(|| format!("attention on {name}"))?;
    let golden = attention(p, &ops.q, &ops.k, &ops.v)?;
    let v_per_out = args.v_scale / args.out_scale.unwrap_or(args.v_scale);
    let err = golden_error(p, &ops, &golden, v_per_out)?;

    println!("device       {name}");
    println!("problem      {}", describe(p));
    let mismatch = first_mismatch(&out, &golden);
    match mismatch {
        None => println!("correct      bit-exact vs the golden model ({} elements)", out.len()),
        Some((i, got, want)) => {
            let (row, head) = (i / p.dim, i / (p.seq_q * p.dim));
            println!(
                "correct      NO: first mismatch at batch {}, head {}, row {}, column {}: got {got}, golden {want}",
                head / p.heads,
                head % p.heads,
                row % p.seq_q,
                i % p.dim
            );
        }
    }
    let units = if p.params.out.is_some() { "int8 output" } else { "Q16 output" };
    println!("golden/f64   rel. Frobenius {:.2e} ({units} vs float64 attention)", err);
    let clock = match args.device {
        AttentionDevice::Sim => Some(sim_clock(args.unit.config(p.dim)?.into(), args.unit.clock_mhz)?),
        AttentionDevice::Xrt => Some(super::boards::image_clock(&args.board, "xrt", "attention")?),
        AttentionDevice::Pynq => Some(super::boards::image_clock(&args.board, "pynq", "attention")?),
        _ => None,
    };
    print_stats(&stats, clock.as_ref());
    if let Some(path) = &args.out {
        npy::write_attention(path, &out, &[p.batch, p.heads, p.seq_q, p.dim])?;
        println!("wrote        {}", path.display());
    }
    ensure!(mismatch.is_none(), "{name} output differs from the golden model");
    Ok(())
}

/// The attention table of `ferrite demo`: one problem on the golden model and
/// on a small unit (d = 16, 4 lanes, 128-bit port) whose Verilator build takes
/// about a minute rather than the default unit's several. `engine` is `None`
/// when the demo skips simulation. Returns whether every device was bit-exact.
pub(super) fn demo(sim: &SimArgs, engine: Option<Engine>) -> Result<bool> {
    let cfg = AttentionConfig {
        head_dim: 16,
        lanes: 4,
        dot_par: 16,
        port_bits: 128,
        read_fifo_depth: 32,
        ..AttentionConfig::default()
    };
    let clock = sim_clock(cfg.clone().into(), None)?;
    let cfg = AttentionConfig { clock_mhz: clock.mhz, ..cfg };
    let problem = AttentionProblem {
        batch: 1,
        heads: 2,
        seq_q: 64,
        seq_kv: 64,
        dim: cfg.head_dim,
        causal: false,
        kv_len: None,
        params: AttentionParams::from_scales(cfg.head_dim, DEFAULT_SCALE, DEFAULT_SCALE, DEFAULT_SCALE, None)?,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let n = problem.heads_total() * problem.seq_q * problem.dim;
    let ops =
        Operands { q: gaussian_i8(&mut rng, n), k: gaussian_i8(&mut rng, n), v: gaussian_i8(&mut rng, n), problem };
    let p = &ops.problem;
    let golden = attention(p, &ops.q, &ops.k, &ops.v)?;
    println!();
    let devices = demo_devices(cfg.clone(), sim, engine)?;
    println!(
        "attention {} on a small {} unit ({} lanes, {}-bit port: a quick Verilator build; the default unit is d=64, 8 lanes, 1024-bit), projected at {clock}",
        describe(p),
        cfg.kernel_name(),
        cfg.lanes,
        cfg.port_bits,
    );
    println!("golden model vs float64 attention: rel. Frobenius {:.2e}", golden_error(p, &ops, &golden, 1.0)?);
    let mut table = demo_table();
    let mut all_exact = true;
    for mut dev in devices {
        let name = dev.info().name;
        let bar = spinner(format!("running attention on {name}"));
        let result = ops::attention(dev.as_mut(), p, &ops.q, &ops.k, &ops.v);
        bar.finish_and_clear();
        let (out, stats) = result.with_context(|| format!("attention on {name}"))?;
        let exact = first_mismatch(&out, &golden).is_none();
        all_exact &= exact;
        table.add_row(demo_row(name, &stats, exact));
    }
    println!("{table}");
    Ok(all_exact)
}
