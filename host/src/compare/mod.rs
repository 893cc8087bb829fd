//! `ferrite compare`: the same seeded inputs on every available device, with
//! latency, throughput, energy and accuracy side by side.
//!
//! CPU and GPU figures are measured (median launch time over repeated runs).
//! FPGA figures are projected from the simulated unit's exact cycle count at
//! a [`Clock`] that names its source (a post-route Fmax from the timing cache,
//! else an assumed clock), with the board and the resource estimate beside them; FPGA
//! energy comes from the power model in [`energy`] and is labelled estimated.
//! The simulator's own wall time is kept apart: it says how fast Verilator
//! is, not how fast the hardware would be.
pub mod baseline;
pub mod chart;
pub mod energy;
pub mod report;

use crate::backend::cpu::{CpuDevice, CpuMode};
use crate::backend::sim::{Engine, SimDevice};
use crate::bitstream::board::Board;
use crate::block::{run_block_resident, BlockDevices, BlockRun, OneDevice, PerUnit, Resident};
use crate::checks::{self, FULL_CHECK_MACS};
use crate::clock::Clock;
use crate::device::{Device, DeviceError, DeviceKind, RunStats};
use crate::manifest::{LoadedManifest, Manifest, UnitConfig};
use crate::ops;
use anyhow::{bail, ensure, Context, Result};
use energy::Meter;
use ferrite_hw::attention::model::rel_fro_error;
use ferrite_hw::attention::model::{attention_f64_rows, attention_rows};
use ferrite_hw::attention::{
    attention, attention_f64, AttentionConfig, AttentionOutput, AttentionParams, AttentionProblem,
};
use ferrite_hw::block::{
    block, block_f64, expert_agreement, random_input, relative_error, BlockOutput, BlockShape, BlockWeights,
    FloatBlock, Scales,
};
use ferrite_hw::gemm::model::{error_vs_f64, gemm_rows};
use ferrite_hw::gemm::{gemm, gemm_f64, GemmConfig, GemmOutput, GemmProblem};
use ferrite_hw::moe::{route, route_f64, CapacityFactor, GateMode, MoeConfig, MoeOutput, MoeProblem, RouterF64};
use ferrite_hw::numerics::Requant;
use ferrite_sim::{verilator_available, MemoryConfig};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use report::{
    Accuracy, BoardRun, Case, DeviceId, Energy, Figure, FpgaProjection, HostInfo, Report, Resources, Row, Skip,
    UnitShare, Workload,
};
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// The size of one problem, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// `M×N×K` (or `S` for a cube).
    Gemm { m: usize, n: usize, k: usize },
    /// `HEADS×SEQ×DIM`: one batch entry, self-attention.
    Attention { heads: usize, seq: usize, dim: usize },
    /// `TOKENS×HIDDEN×EXPERTS×K`.
    Moe { tokens: usize, hidden: usize, experts: usize, top_k: usize },
    /// `TOKENSxHIDDENxHEADSxEXPERTSxKxFFN`: the decoder block, top-k then
    /// softmax, capacity factor 1.25 (`ferrite block`'s defaults).
    Block { tokens: usize, hidden: usize, heads: usize, experts: usize, top_k: usize, ffn: usize },
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gemm { m, n, k } => write!(f, "{m}x{n}x{k}"),
            Self::Attention { heads, seq, dim } => write!(f, "{heads}x{seq}x{dim}"),
            Self::Moe { tokens, hidden, experts, top_k } => write!(f, "{tokens}x{hidden}x{experts}x{top_k}"),
            Self::Block { tokens, hidden, heads, experts, top_k, ffn } => {
                write!(f, "{tokens}x{hidden}x{heads}x{experts}x{top_k}x{ffn}")
            }
        }
    }
}

impl Size {
    pub fn workload(&self) -> Workload {
        match self {
            Self::Gemm { .. } => Workload::Gemm,
            Self::Attention { .. } => Workload::Attention,
            Self::Moe { .. } => Workload::Moe,
            Self::Block { .. } => Workload::Block,
        }
    }

    /// `s` for `workload`: `S` or `MxNxK` (gemm), `HEADSxSEQxDIM` (attention),
    /// `TOKENSxHIDDENxEXPERTSxK` (moe); every number ≥ 1.
    pub fn parse(workload: Workload, s: &str) -> Result<Self> {
        let dims: Vec<usize> = s
            .split(['x', 'X', '×'])
            .map(|d| {
                d.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&v| v > 0)
                    .with_context(|| format!("size `{s}`: `{d}` is not a positive integer"))
            })
            .collect::<Result<_>>()?;
        Ok(match (workload, dims.as_slice()) {
            (Workload::Gemm, &[s]) => Self::Gemm { m: s, n: s, k: s },
            (Workload::Gemm, &[m, n, k]) => Self::Gemm { m, n, k },
            (Workload::Attention, &[heads, seq, dim]) => Self::Attention { heads, seq, dim },
            (Workload::Moe, &[tokens, hidden, experts, top_k]) => Self::Moe { tokens, hidden, experts, top_k },
            (Workload::Block, &[tokens, hidden, heads, experts, top_k, ffn]) => {
                Self::Block { tokens, hidden, heads, experts, top_k, ffn }
            }
            (w, _) => bail!("size `{s}` for {}: expected {}", w.id(), Self::syntax(w)),
        })
    }

    fn syntax(w: Workload) -> &'static str {
        match w {
            Workload::Gemm => "S or MxNxK",
            Workload::Attention => "HEADSxSEQxDIM",
            Workload::Moe => "TOKENSxHIDDENxEXPERTSxK",
            Workload::Block => "TOKENSxHIDDENxHEADSxEXPERTSxKxFFN",
        }
    }

    /// Sizes that finish in seconds on two cores, on units whose Verilator
    /// builds are small.
    pub fn defaults(w: Workload) -> Vec<Self> {
        match w {
            Workload::Gemm => vec![Self::Gemm { m: 64, n: 64, k: 64 }, Self::Gemm { m: 128, n: 128, k: 128 }],
            Workload::Attention => {
                vec![Self::Attention { heads: 2, seq: 64, dim: 16 }, Self::Attention { heads: 2, seq: 128, dim: 16 }]
            }
            Workload::Moe => vec![Self::Moe { tokens: 256, hidden: 64, experts: 12, top_k: 2 }],
            Workload::Block => {
                let s = BlockShape::small();
                vec![Self::Block {
                    tokens: s.tokens,
                    hidden: s.hidden,
                    heads: s.heads,
                    experts: s.experts,
                    top_k: s.top_k,
                    ffn: s.ffn,
                }]
            }
        }
    }
}

/// What to compare, and how.
#[derive(Debug, Clone)]
pub struct Options {
    pub sizes: Vec<Size>,
    /// Devices to try, in this order; the rest are not opened.
    pub devices: Vec<DeviceId>,
    pub seed: u64,
    /// Clock of every simulated unit for the projection, assumed (default: a
    /// measured post-route Fmax of the unit when the timing cache has one, else
    /// the board's nominal kernel clock).
    pub clock_mhz: Option<f64>,
    /// Board the projection is for: resource family, capacity, static power.
    pub board: Board,
    /// Run yosys for resource estimates (cached by configuration).
    pub resources: bool,
    /// Measured devices repeat a launch until this much time has passed (at least [`MIN_RUNS`]).
    pub min_time: Duration,
    /// Show progress bars on stderr.
    pub progress: bool,
    /// A built image for the board devices (xrt, pynq): their rows are
    /// measured on the board, and the sim rows of its workload simulate the
    /// image's own unit at the image's clock.
    pub image: Option<BoardImage>,
}

/// Where `ferrite compare` finds a board and the image loaded on it.
#[derive(Debug, Clone)]
pub struct BoardImage {
    /// manifest.json of the built image.
    pub manifest: std::path::PathBuf,
    /// XRT card: index or PCIe BDF (default 0).
    pub card: Option<String>,
    /// Root of a PYNQ board's filesystem: `/` on a board, a fake tree in tests.
    pub pynq_root: std::path::PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            sizes: Workload::ALL.iter().flat_map(|w| Size::defaults(*w)).collect(),
            devices: DeviceId::ALL.to_vec(),
            seed: 0,
            clock_mhz: None,
            board: Board::U55c,
            resources: false,
            min_time: Duration::from_millis(200),
            progress: false,
            image: None,
        }
    }
}

/// Fewest timed launches behind a measured median.
pub const MIN_RUNS: usize = 3;
/// Most timed launches behind a measured median.
pub const MAX_RUNS: usize = 200;

/// Real value of one int8 LSB of attention Q, K and V: σ = 32 LSB inputs are unit-variance reals.
const ATTENTION_SCALE: f64 = 1.0 / 32.0;

/// One problem with its seeded inputs, the golden output and the float64
/// reference: whole, or on the sampled `rows` only when the problem is larger
/// than [`FULL_CHECK_MACS`] (then only those rows of a device's output are checked).
enum Inputs {
    Gemm {
        p: GemmProblem,
        a: Vec<i8>,
        b: Vec<i8>,
        bias: Vec<i32>,
        golden: GemmOutput,
        reference: Vec<f64>,
        rows: Option<Vec<usize>>,
    },
    Attention {
        p: AttentionProblem,
        q: Vec<i8>,
        k: Vec<i8>,
        v: Vec<i8>,
        golden: AttentionOutput,
        reference: Vec<f64>,
        rows: Option<Vec<(usize, usize)>>,
    },
    Moe {
        p: MoeProblem,
        x: Vec<i8>,
        w: Vec<i8>,
        bias: Vec<i32>,
        golden: MoeOutput,
        reference: RouterF64,
    },
    Block {
        s: BlockShape,
        w: Box<BlockWeights>,
        sc: Scales,
        x: Vec<i8>,
        golden: BlockOutput,
        reference: FloatBlock,
    },
}

/// A device's output of one launch.
enum Output {
    Gemm(GemmOutput),
    Attention(AttentionOutput),
    Moe(MoeOutput),
    Block(BlockRun),
}

/// Int8 values of a Gaussian with σ = 32 LSB (Box–Muller), clamped: the
/// inputs the attention unit's error budget is stated for.
fn gaussian_i8(rng: &mut ChaCha8Rng, len: usize) -> Vec<i8> {
    (0..len)
        .map(|_| {
            let (u1, u2): (f64, f64) = (rng.gen_range(f64::MIN_POSITIVE..1.0), rng.gen());
            let g = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (g * 32.0).round().clamp(-128.0, 127.0) as i8
        })
        .collect()
}

impl Inputs {
    fn new(size: Size, seed: u64) -> Result<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Ok(match size {
            Size::Gemm { m, n, k } => {
                let requant = Requant::from_scale(1.0 / 512.0).context("GEMM requantization scale")?;
                let p = GemmProblem { bias: true, relu: true, requant: Some(requant), ..GemmProblem::new(m, n, k) };
                p.validate()?;
                let a: Vec<i8> = (0..m * k).map(|_| rng.gen()).collect();
                let b: Vec<i8> = (0..k * n).map(|_| rng.gen()).collect();
                let bias: Vec<i32> = (0..n).map(|_| rng.gen_range(-(1 << 16)..1 << 16)).collect();
                let rows = (p.macs() > FULL_CHECK_MACS).then(|| checks::gemm_rows(m));
                let (golden, reference) = match &rows {
                    None => (gemm(&p, &a, &b, Some(&bias))?, gemm_f64(&p, &a, &b, Some(&bias))?),
                    Some(rows) => gemm_rows(&p, &a, &b, Some(&bias), rows)?,
                };
                Self::Gemm { p, a, b, bias, golden, reference, rows }
            }
            Size::Attention { heads, seq, dim } => {
                let s = ATTENTION_SCALE;
                let p = AttentionProblem {
                    batch: 1,
                    heads,
                    seq_q: seq,
                    seq_kv: seq,
                    dim,
                    causal: false,
                    kv_len: None,
                    params: AttentionParams::from_scales(dim, s, s, s, None)?,
                };
                p.validate()?;
                let len = heads * seq * dim;
                let (q, k, v) = (gaussian_i8(&mut rng, len), gaussian_i8(&mut rng, len), gaussian_i8(&mut rng, len));
                let rows = (p.macs() > FULL_CHECK_MACS).then(|| checks::attention_rows(&p));
                let (golden, reference) = match &rows {
                    None => (attention(&p, &q, &k, &v)?, attention_f64(&p, &q, &k, &v)?),
                    Some(rows) => (attention_rows(&p, &q, &k, &v, rows)?, attention_f64_rows(&p, &q, &k, &v, rows)?),
                };
                Self::Attention { p, q, k, v, golden, reference, rows }
            }
            Size::Moe { tokens, hidden, experts, top_k } => {
                let (sx, sw) = crate::routing::generated_scales(hidden);
                let p = MoeProblem {
                    bias: true,
                    capacity: Some(CapacityFactor::ONE),
                    ..MoeProblem::new(tokens, hidden, experts, top_k, GateMode::SoftmaxTopk, sx, sw)?
                };
                p.validate()?;
                let x: Vec<i8> = (0..tokens * hidden).map(|_| rng.gen()).collect();
                let w: Vec<i8> = (0..experts * hidden).map(|_| rng.gen()).collect();
                let bias: Vec<i32> = (0..experts).map(|_| rng.gen_range(-5000..5000)).collect();
                let golden = route(&p, &x, &w, Some(&bias))?;
                let reference = route_f64(&p, &x, &w, Some(&bias))?;
                Self::Moe { p, x, w, bias, golden, reference }
            }
            Size::Block { tokens, hidden, heads, experts, top_k, ffn } => {
                let s = BlockShape::with_dims(tokens, hidden, heads, experts, top_k, ffn)?;
                let (w, x, sc) = (BlockWeights::random(&s, seed), random_input(&s, seed ^ 0xb10c), Scales::default());
                let golden = block(&s, &w, &sc, &x)?;
                let reference = block_f64(&s, &w, &sc, &x);
                Self::Block { s, w: Box::new(w), sc, x, golden, reference }
            }
        })
    }

    /// How the outputs are checked, for the report.
    fn verified(&self) -> String {
        let sampled = match self {
            Self::Gemm { rows, .. } => rows.as_ref().map(Vec::len),
            Self::Attention { rows, .. } => rows.as_ref().map(Vec::len),
            Self::Moe { .. } | Self::Block { .. } => None,
        };
        sampled.map_or_else(|| "full".into(), |n| format!("{n} sampled rows"))
    }

    fn describe(&self) -> String {
        match self {
            Self::Gemm { p, .. } => {
                format!("int8 GEMM M={} N={} K={} +bias +relu, requantized to int8 by 1/512", p.m, p.n, p.k)
            }
            Self::Attention { p, .. } => format!(
                "int8 attention, {} heads, {} queries × {} keys, d={}, Q16 output, σ = 32 LSB inputs",
                p.heads, p.seq_q, p.seq_kv, p.dim
            ),
            Self::Moe { p, .. } => format!(
                "MoE router T={} H={} E={} top-{}, softmax-top-k, bias, capacity factor 1",
                p.tokens, p.hidden, p.experts, p.top_k
            ),
            Self::Block { s, .. } => format!(
                "int8 MoE decoder block T={} H={} ({} heads of {}) E={} top-{} FFN {}, top-k-softmax, capacity factor 1.25",
                s.tokens, s.hidden, s.heads, s.head_dim, s.experts, s.top_k, s.ffn
            ),
        }
    }

    /// Two operations per useful multiply-accumulate.
    fn ops(&self) -> u64 {
        2 * match self {
            Self::Gemm { p, .. } => p.macs(),
            Self::Attention { p, .. } => p.macs(),
            Self::Moe { p, .. } => p.macs(),
            // The experts' MACs count the choices the router kept.
            Self::Block { s, golden, .. } => s.macs(s.tokens * s.top_k - golden.route.dropped as usize),
        }
    }

    /// Tokens a run processes, for per-token figures.
    fn tokens(&self) -> Option<u64> {
        match self {
            Self::Block { s, .. } => Some(s.tokens as u64),
            _ => None,
        }
    }

    /// One run on `devs` (one device, or the block's simulated units); a
    /// block's weights stay on the devices in `resident` between runs.
    fn run(&self, devs: &mut dyn BlockDevices, resident: &mut Resident) -> Result<(Output, RunStats), DeviceError> {
        Ok(match self {
            Self::Gemm { p, a, b, bias, .. } => {
                let (o, s) = ops::gemm(devs.device("gemm"), p, a, b, Some(bias))?;
                (Output::Gemm(o), s)
            }
            Self::Attention { p, q, k, v, .. } => {
                let (o, s) = ops::attention(devs.device("attention"), p, q, k, v)?;
                (Output::Attention(o), s)
            }
            Self::Moe { p, x, w, bias, .. } => {
                let (o, s) = ops::moe(devs.device("moe"), p, x, w, Some(bias))?;
                (Output::Moe(o), s)
            }
            Self::Block { s, w, sc, x, .. } => {
                let run = run_block_resident(devs, resident, s, w, sc, x)?;
                let stats = run.total();
                (Output::Block(run), stats)
            }
        })
    }

    /// Bit-exactness with the golden model and the error against float64.
    fn check(&self, out: &Output) -> Result<(bool, Accuracy)> {
        Ok(match (self, out) {
            (Self::Gemm { p, golden, reference, rows, .. }, Output::Gemm(o)) => {
                let o = &match rows {
                    Some(rows) => gemm_output_rows(o, p.n, rows),
                    None => o.clone(),
                };
                let e = error_vs_f64(o, reference);
                let unit = if matches!(o, GemmOutput::I8(_)) { "LSB (int8, unsaturated)" } else { "int32" };
                (
                    o == golden,
                    Accuracy { max_abs: e.max_abs, rel_fro: e.rel_fro, expert_agreement: None, unit: unit.into() },
                )
            }
            (Self::Attention { p, golden, reference, rows, .. }, Output::Attention(o)) => {
                let o = &match rows {
                    Some(rows) => attention_output_rows(o, p, rows),
                    None => o.clone(),
                };
                let max_abs = reference.iter().enumerate().fold(0f64, |m, (i, &r)| {
                    let got = match o {
                        AttentionOutput::I32(_) => o.get(i) as f64 / 65536.0,
                        AttentionOutput::I8(_) => o.get(i) as f64,
                    };
                    m.max((got - r).abs())
                });
                let accuracy = Accuracy {
                    max_abs,
                    rel_fro: rel_fro_error(o, reference),
                    expert_agreement: None,
                    unit: "V LSB".into(),
                };
                (o == golden, accuracy)
            }
            (Self::Moe { p, golden, reference, .. }, Output::Moe(o)) => (o == golden, moe_accuracy(p, o, reference)),
            (Self::Block { s, sc, golden, reference, .. }, Output::Block(run)) => {
                let out = &run.output;
                let max_abs = out
                    .out
                    .iter()
                    .zip(&reference.out)
                    .fold(0f64, |m, (&v, &r)| m.max((v as f64 - r / sc.residual).abs()));
                let accuracy = Accuracy {
                    max_abs,
                    rel_fro: relative_error(&out.out, sc.residual, &reference.out),
                    expert_agreement: Some(expert_agreement(&out.route, s.top_k, &reference.experts)),
                    unit: "LSB of the residual stream".into(),
                };
                (out == golden, accuracy)
            }
            _ => bail!("a device answered with the output of another unit"),
        })
    }

    fn workload(&self) -> Workload {
        match self {
            Self::Gemm { .. } => Workload::Gemm,
            Self::Attention { .. } => Workload::Attention,
            Self::Moe { .. } => Workload::Moe,
            Self::Block { .. } => Workload::Block,
        }
    }

    /// The units the simulator builds for this problem, projected at
    /// `clock_mhz`: the board image's own unit when `image` holds this
    /// workload, so that projection and board run the same configuration;
    /// the block's three units for a block.
    fn sim_units(&self, clock_mhz: f64, image: Option<&LoadedManifest>) -> Result<Vec<UnitConfig>> {
        if let Some(unit) = image.map(|m| &m.manifest.unit).filter(|u| u.name() == self.workload().id()) {
            return Ok(vec![with_clock(unit, clock_mhz)]);
        }
        Ok(match self {
            Self::Gemm { .. } => vec![UnitConfig::Gemm(GemmConfig { clock_mhz, ..GemmConfig::default() })],
            Self::Attention { p, .. } => {
                // Four lanes and the narrowest port that carries a K/V row: quick Verilator builds.
                vec![UnitConfig::Attention(AttentionConfig {
                    head_dim: p.dim,
                    lanes: 4,
                    dot_par: p.dim,
                    port_bits: (8 * p.dim).max(128),
                    read_fifo_depth: 32,
                    clock_mhz,
                })]
            }
            Self::Moe { p, .. } => {
                let small = MoeConfig::small();
                let fits = p.validate_for(&small).is_ok();
                let cfg = if fits { small } else { MoeConfig::default() };
                vec![UnitConfig::Moe(MoeConfig { clock_mhz, ..cfg })]
            }
            Self::Block { s, .. } => {
                let (g, a, m) = crate::block::sim_units(s, clock_mhz)?;
                vec![g.into(), a.into(), m.into()]
            }
        })
    }
}

/// `unit` projected at `clock_mhz`.
fn with_clock(unit: &UnitConfig, clock_mhz: f64) -> UnitConfig {
    match unit {
        UnitConfig::Gemm(c) => UnitConfig::Gemm(GemmConfig { clock_mhz, ..c.clone() }),
        UnitConfig::Attention(c) => UnitConfig::Attention(AttentionConfig { clock_mhz, ..c.clone() }),
        UnitConfig::Moe(c) => UnitConfig::Moe(MoeConfig { clock_mhz, ..c.clone() }),
    }
}

/// Rows `rows` of an M×`n` GEMM output, in that order.
fn gemm_output_rows(o: &GemmOutput, n: usize, rows: &[usize]) -> GemmOutput {
    match o {
        GemmOutput::I32(v) => GemmOutput::I32(rows.iter().flat_map(|&r| v[r * n..(r + 1) * n].to_vec()).collect()),
        GemmOutput::I8(v) => GemmOutput::I8(rows.iter().flat_map(|&r| v[r * n..(r + 1) * n].to_vec()).collect()),
    }
}

/// (head, query) rows of an attention output, in that order.
fn attention_output_rows(o: &AttentionOutput, p: &AttentionProblem, rows: &[(usize, usize)]) -> AttentionOutput {
    let d = p.dim;
    let at = |&(h, i): &(usize, usize)| (h * p.seq_q + i) * d..(h * p.seq_q + i + 1) * d;
    match o {
        AttentionOutput::I32(v) => AttentionOutput::I32(rows.iter().flat_map(|r| v[at(r)].to_vec()).collect()),
        AttentionOutput::I8(v) => AttentionOutput::I8(rows.iter().flat_map(|r| v[at(r)].to_vec()).collect()),
    }
}

/// Expert-set agreement with the float router over all tokens, and the
/// weight error over the tokens that agree (weights of different experts are
/// not comparable).
fn moe_accuracy(p: &MoeProblem, o: &MoeOutput, r: &RouterF64) -> Accuracy {
    let k = p.top_k;
    let (mut agree, mut max_abs, mut num, mut den) = (0usize, 0f64, 0f64, 0f64);
    for t in 0..p.tokens {
        let ours: Vec<usize> = o.experts[t * k..(t + 1) * k].iter().map(|&e| e as usize).collect();
        let theirs = &r.experts[t * k..(t + 1) * k];
        let (mut a, mut b) = (ours.clone(), theirs.to_vec());
        a.sort_unstable();
        b.sort_unstable();
        if a != b {
            continue;
        }
        agree += 1;
        for (i, e) in ours.iter().enumerate() {
            let j = theirs.iter().position(|x| x == e).unwrap_or(i);
            let (got, want) = (o.weights[t * k + i] as f64 / 65536.0, r.weights[t * k + j]);
            max_abs = max_abs.max((got - want).abs());
            num += (got - want) * (got - want);
            den += want * want;
        }
    }
    Accuracy {
        max_abs,
        rel_fro: if den > 0.0 { (num / den).sqrt() } else { 0.0 },
        expert_agreement: Some(agree as f64 / p.tokens.max(1) as f64),
        unit: "gate weight (of 1)".into(),
    }
}

/// A shared device (cpu, cpu-fast, opencl, cuda), or why it cannot be used.
pub fn open_device(id: DeviceId) -> Result<Box<dyn Device>, String> {
    match id {
        DeviceId::Cpu => Ok(Box::new(CpuDevice::new(CpuMode::Golden))),
        DeviceId::CpuFast => Ok(Box::new(CpuDevice::new(CpuMode::Fast))),
        DeviceId::Opencl => open_opencl().map_err(|e| e.to_string()),
        DeviceId::Cuda => crate::backend::open_cuda().map_err(|e| e.to_string()),
        DeviceId::Sim => Err("the simulator is built per unit: use open_sim".into()),
        DeviceId::Xrt | DeviceId::Pynq => {
            Err(format!("{} runs a built image: pass --manifest DIR/manifest.json", id.id()))
        }
    }
}

/// The board device `id` (xrt or pynq) with `image`, or why it cannot run it.
/// `Ok(Err(reason))`: the image is for the other kind of board, so this one
/// is skipped; `Err`: the image's own board could not be opened, which fails
/// the comparison (the user asked for measured rows of that board).
fn open_board(id: DeviceId, image: &LoadedManifest, where_: &BoardImage) -> Result<Result<Box<dyn Device>, String>> {
    let m = &image.manifest;
    let theirs = if m.board.is_alveo() { DeviceId::Xrt } else { DeviceId::Pynq };
    if id != theirs {
        return Ok(Err(format!(
            "the image {} is for the {}, which {} does not drive",
            where_.manifest.display(),
            m.board,
            id.id()
        )));
    }
    let opened = match id {
        DeviceId::Xrt => open_xrt(image, where_.card.as_deref()),
        _ => open_pynq(image, &where_.pynq_root),
    };
    // One line: DeviceError::Backend's source repeats its text in an error chain.
    opened.map(Ok).map_err(|e| anyhow::anyhow!("--devices {}: {} on the {}: {e}", id.id(), m.kernel, m.board))
}

#[cfg(feature = "xrt")]
fn open_xrt(image: &LoadedManifest, card: Option<&str>) -> Result<Box<dyn Device>, DeviceError> {
    use crate::backend::xrt::{XrtDevice, XrtTarget};
    let target: XrtTarget =
        card.unwrap_or("0").parse().map_err(|e: String| DeviceError::Config(format!("--card {e}")))?;
    Ok(Box::new(XrtDevice::open(&target, image)?))
}

#[cfg(not(feature = "xrt"))]
fn open_xrt(_image: &LoadedManifest, _card: Option<&str>) -> Result<Box<dyn Device>, DeviceError> {
    Err(DeviceError::MissingTool {
        tool: "XRT support",
        hint: "this ferrite was built without the `xrt` feature (cargo build -p ferrite-host --features xrt)".into(),
    })
}

#[cfg(target_os = "linux")]
fn open_pynq(image: &LoadedManifest, root: &std::path::Path) -> Result<Box<dyn Device>, DeviceError> {
    use crate::backend::pynq::{PynqDevice, PynqOptions, PynqPaths};
    let options = PynqOptions { paths: PynqPaths::under(root), ..PynqOptions::default() };
    Ok(Box::new(PynqDevice::open(image, &options)?))
}

#[cfg(not(target_os = "linux"))]
fn open_pynq(_image: &LoadedManifest, _root: &std::path::Path) -> Result<Box<dyn Device>, DeviceError> {
    Err(DeviceError::Config(
        "the PYNQ backend loads images through the Linux FPGA manager: run ferrite on the board".into(),
    ))
}

/// The first device of the first OpenCL platform (PoCL's CPU device here).
/// Without the `opencl` feature this is an error that says so.
pub fn open_opencl() -> Result<Box<dyn Device>, DeviceError> {
    #[cfg(feature = "opencl")]
    {
        Ok(Box::new(crate::backend::opencl::OpenClDevice::open(0, 0, None)?))
    }
    #[cfg(not(feature = "opencl"))]
    {
        Err(DeviceError::MissingTool {
            tool: "OpenCL support",
            hint: "this ferrite was built without the `opencl` feature (cargo build --features opencl)".into(),
        })
    }
}

/// Why simulator rows are missing without Verilator.
pub const NO_VERILATOR: &str = "verilator not found (scripts/install-deps.sh installs it); rust-hdl's own \
    simulator is too slow for comparisons and is not used";

/// The unit in Verilator; `Ok(Err(reason))` when Verilator is missing outside CI.
pub fn open_sim(unit: UnitConfig, seed: u64) -> Result<Result<SimDevice, String>> {
    if !verilator_available() {
        ensure!(std::env::var_os("CI").is_none(), "CI is set but {NO_VERILATOR}");
        return Ok(Err(NO_VERILATOR.into()));
    }
    let name = unit.kernel_name();
    let mem = MemoryConfig { seed, ..MemoryConfig::default() };
    Ok(Ok(SimDevice::new(unit, mem, Engine::Verilator, None).with_context(|| format!("building {name}"))?))
}

/// The energy meter for a measured device, or why there is none.
pub fn meter_for(id: DeviceId, name: &str) -> Result<Box<dyn Meter>, String> {
    let on_cpu = match id {
        DeviceId::Cpu | DeviceId::CpuFast => true,
        // PoCL runs kernels on the host CPU, where RAPL sees them.
        DeviceId::Opencl => {
            let n = name.to_lowercase();
            n.contains("cpu") || n.contains("pthread")
        }
        DeviceId::Cuda | DeviceId::Sim | DeviceId::Xrt | DeviceId::Pynq => false,
    };
    if on_cpu {
        energy::Rapl::open(std::path::Path::new(energy::RAPL_DIR))
            .map(|m| Box::new(m) as Box<dyn Meter>)
            .map_err(|e| format!("{e:#}"))
    } else if id == DeviceId::Cuda {
        energy::NvmlMeter::open(0).map(|m| Box::new(m) as Box<dyn Meter>).map_err(|e| format!("{e:#}"))
    } else if matches!(id, DeviceId::Xrt | DeviceId::Pynq) {
        Err("no power meter on the board".into())
    } else {
        Err("no power meter for this OpenCL device".into())
    }
}

/// Progress on stderr, or nothing (tests, `--quiet`).
fn progress_bar(show: bool, len: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg} [{elapsed}]") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Devices opened once per comparison: shared ones by id, simulators by kernel.
#[derive(Default)]
struct Pool {
    shared: HashMap<DeviceId, Result<Box<dyn Device>, String>>,
    sims: HashMap<String, Result<SimDevice, String>>,
    resources: HashMap<String, (Option<Resources>, String)>,
    clocks: HashMap<String, Clock>,
    /// The image of `--manifest`, loaded once.
    image: Option<LoadedManifest>,
}

/// Run the comparison `opts` describes.
pub fn run(opts: &Options) -> Result<Report> {
    if let Some(c) = opts.clock_mhz {
        ensure!(c.is_finite() && c > 0.0, "--clock-mhz {c} must be a positive number of MHz");
    }
    ensure!(!opts.sizes.is_empty(), "nothing to compare: no sizes");
    ensure!(!opts.devices.is_empty(), "nothing to compare: no devices");
    if let (Some(id), None) = (opts.devices.iter().find(|id| matches!(id, DeviceId::Xrt | DeviceId::Pynq)), &opts.image)
    {
        bail!("--devices {} measures a built image on the board: pass --manifest DIR/manifest.json", id.id());
    }
    let mut pool = Pool::default();
    if let Some(where_) = &opts.image {
        let path = &where_.manifest;
        let image = Manifest::load(path).with_context(|| format!("loading {}", path.display()))?;
        // Open the boards first: a board that is not there fails before minutes of simulation.
        for &id in opts.devices.iter().filter(|id| matches!(id, DeviceId::Xrt | DeviceId::Pynq)) {
            pool.shared.insert(id, open_board(id, &image, where_)?);
        }
        pool.image = Some(image);
    }
    let bar = progress_bar(opts.progress, (opts.sizes.len() * opts.devices.len()) as u64);
    let mut cases = Vec::new();
    for size in &opts.sizes {
        bar.set_message(format!("{} {size}: preparing inputs and the float64 reference", size.workload().id()));
        let inputs = Inputs::new(*size, opts.seed).with_context(|| format!("{} {size}", size.workload().id()))?;
        let mut case = Case {
            workload: size.workload(),
            size: size.to_string(),
            problem: inputs.describe(),
            ops: inputs.ops(),
            rows: Vec::new(),
            skipped: Vec::new(),
            verified: inputs.verified(),
            tokens: inputs.tokens(),
        };
        for &id in &opts.devices {
            bar.set_message(format!("{} {size} on {}", case.workload.id(), id.id()));
            match run_one(opts, &mut pool, &inputs, id, &bar)
                .with_context(|| format!("{} {size} on {}", case.workload.id(), id.id()))?
            {
                Ok(row) => case.rows.push(row),
                Err(reason) => case.skipped.push(Skip { device: id, reason }),
            }
            bar.inc(1);
        }
        cases.push(case);
    }
    bar.finish_and_clear();
    Ok(Report {
        version: report::REPORT_VERSION,
        created_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        ferrite_version: env!("CARGO_PKG_VERSION").into(),
        host: HostInfo::current(),
        seed: opts.seed,
        fpga_power_model: energy::fpga_model_text(),
        cases,
    })
}

/// One device on one problem: a row, `Ok(Err(reason))` when the device is
/// unavailable or refuses the unit, `Err` when it fails.
fn run_one(
    opts: &Options,
    pool: &mut Pool,
    inputs: &Inputs,
    id: DeviceId,
    bar: &ProgressBar,
) -> Result<Result<Row, String>> {
    if id == DeviceId::CpuFast && !matches!(inputs, Inputs::Gemm { .. } | Inputs::Block { .. }) {
        return Ok(Err("cpu-fast has a GEMM path only; other units run the same golden model as cpu".into()));
    }
    let is_board = matches!(id, DeviceId::Xrt | DeviceId::Pynq);
    if let Some(unit) =
        pool.image.as_ref().map(|m| m.manifest.unit.name()).filter(|u| is_board && *u != inputs.workload().id())
    {
        return Ok(Err(format!("the image holds the {unit} unit")));
    }
    if id == DeviceId::Sim {
        // A problem no simulated unit is built for (e.g. a head dim the attention unit lacks) is skipped.
        if let Err(e) = inputs.sim_units(opts.board.spec().default_clock_mhz, pool.image.as_ref()) {
            return Ok(Err(format!("{e:#}")));
        }
    }
    let clock = if id == DeviceId::Sim { Some(projection_clock(opts, pool, inputs)?) } else { None };
    let units = match &clock {
        Some(c) => inputs.sim_units(c.mhz, pool.image.as_ref())?,
        None => Vec::new(),
    };
    let kernels: Vec<String> = units.iter().map(UnitConfig::kernel_name).collect();
    for (unit, kernel) in units.iter().zip(&kernels) {
        if !pool.sims.contains_key(kernel) {
            bar.set_message(format!("building {kernel} with Verilator (minutes the first time, cached after)"));
            pool.sims.insert(kernel.clone(), open_sim(unit.clone(), opts.seed)?);
        }
        if let Some(Err(reason)) = pool.sims.get(kernel) {
            return Ok(Err(reason.clone()));
        }
    }
    let (mut one, mut per);
    let devs: &mut dyn BlockDevices = match kernels.as_slice() {
        [] => match pool.shared.entry(id).or_insert_with(|| open_device(id)) {
            Ok(d) => {
                one = OneDevice(d.as_mut());
                &mut one
            }
            Err(reason) => return Ok(Err(reason.clone())),
        },
        [k] => match pool.sims.get_mut(k) {
            Some(Ok(d)) => {
                one = OneDevice(d);
                &mut one
            }
            _ => bail!("simulator {k} vanished from the pool"),
        },
        [g, a, m] => match pool.sims.get_disjoint_mut([g, a, m]) {
            [Some(Ok(gemm)), Some(Ok(attention)), Some(Ok(moe))] => {
                per = PerUnit { gemm, attention, moe };
                &mut per
            }
            _ => bail!("the block's simulators vanished from the pool"),
        },
        _ => bail!("{} simulated units for one problem", kernels.len()),
    };
    let mut info = devs.device("gemm").info();
    if kernels.len() > 1 {
        info.name = format!("sim (verilator, {})", kernels.join(" + "));
    }
    // A block's weights stay on the devices between its runs here, freed after the last.
    let mut resident = Resident::default();
    let (out, first) = match inputs.run(devs, &mut resident) {
        Ok(r) => r,
        Err(e @ (DeviceError::Unsupported { .. } | DeviceError::TooBig { .. })) => {
            resident.free(devs)?;
            return Ok(Err(e.to_string()));
        }
        Err(e) => {
            let _ = resident.free(devs);
            return Err(e).context(format!("running on {}", info.name));
        }
    };
    let (bit_exact, accuracy) = inputs.check(&out)?;
    let ops = inputs.ops() as f64;
    if let (DeviceKind::Simulator, Some(clock)) = (info.kind, clock) {
        resident.free(devs)?;
        let cycles = first.cycles.context("the simulator reported no cycle count")?;
        let latency = first.projected().context("the simulator reported no projected time")?.as_secs_f64();
        let each: Vec<_> = units
            .iter()
            .zip(&kernels)
            .map(|(unit, kernel)| {
                if opts.resources {
                    bar.set_message(format!("yosys synth_xilinx of {kernel} (minutes the first time, cached after)"));
                }
                (kernel.as_str(), fpga_resources(opts, pool, unit))
            })
            .collect();
        let (resources, resources_note) = one_fpga(each);
        let energy = match &resources {
            Some(r) => {
                let watts = energy::fpga_watts(opts.board, r, cycles.clock_mhz);
                Energy {
                    joules: Some(Figure::estimated(watts * latency)),
                    per_op: Some(Figure::estimated(watts * latency / ops)),
                    source: format!(
                        "FPGA power model: {watts:.2} W on {} at {clock} (estimate, see report)",
                        opts.board.spec().name
                    ),
                }
            }
            None => Energy {
                joules: None,
                per_op: None,
                source: "no FPGA estimate: the power model needs the resource estimate".into(),
            },
        };
        return Ok(Ok(Row {
            device: id,
            name: info.name,
            latency_s: Figure::projected(latency),
            ops_per_s: Figure::projected(ops / latency),
            runs: 1,
            energy,
            bit_exact,
            accuracy,
            units: unit_shares(&out, Some(clock.mhz)),
            fpga: Some(FpgaProjection {
                kernel: kernels.join(" + "),
                board: opts.board.spec().name.into(),
                clock_mhz: cycles.clock_mhz,
                clock_source: clock.source.clone(),
                cycles: cycles.cycles,
                utilization: first.utilization().unwrap_or(0.0),
                multipliers: cycles.multipliers,
                resources,
                resources_note,
                sim_wall_s: first.wall.as_secs_f64(),
            }),
            board: None,
        }));
    }
    let board = match pool.image.as_ref().filter(|_| is_board) {
        Some(image) => {
            let m = &image.manifest;
            let clock = Clock::of_image(m);
            let manifest = opts.image.as_ref().map_or_else(String::new, |i| i.manifest.display().to_string());
            let cycles = first.cycles.context("the board reported no cycle count")?.cycles;
            Some(BoardRun {
                kernel: m.kernel.clone(),
                manifest,
                clock_mhz: clock.mhz,
                clock_source: clock.source,
                cycles,
            })
        }
        None => None,
    };
    let measured = measure(devs, &mut resident, inputs, id, &info.name, opts.min_time, ops);
    let freed = resident.free(devs);
    let (median, runs, energy, last) = measured?;
    freed?;
    // From a timed run: the first one may include one-time work (program builds, uploads).
    let units = unit_shares(&last, None);
    Ok(Ok(Row {
        device: id,
        name: info.name,
        latency_s: Figure::measured(median),
        ops_per_s: Figure::measured(ops / median),
        runs,
        energy,
        bit_exact,
        accuracy,
        fpga: None,
        board,
        units,
    }))
}

/// Timed launches until `min_time` has passed (at least [`MIN_RUNS`], at most
/// [`MAX_RUNS`]) under the device's energy meter: the median launch time, the
/// launches, the energy of one call, and the last call's output.
fn measure(
    devs: &mut dyn BlockDevices,
    resident: &mut Resident,
    inputs: &Inputs,
    id: DeviceId,
    name: &str,
    min_time: Duration,
    ops: f64,
) -> Result<(f64, u32, Energy, Output)> {
    let mut meter = meter_for(id, name);
    if let Ok(m) = &mut meter {
        m.start()?;
    }
    let start = Instant::now();
    let (mut times, mut last) = (Vec::new(), None);
    while times.len() < MIN_RUNS || (start.elapsed() < min_time && times.len() < MAX_RUNS) {
        let (out, stats) = inputs.run(devs, resident).with_context(|| format!("timed run on {name}"))?;
        times.push(stats.wall.as_secs_f64());
        last = Some(out);
    }
    let calls = times.len();
    let energy = match &mut meter {
        Ok(m) => {
            let joules = m.stop()? / calls as f64;
            Energy {
                joules: Some(Figure::measured(joules)),
                per_op: Some(Figure::measured(joules / ops)),
                source: format!("{}, over {calls} calls including host-side packing", m.source()),
            }
        }
        Err(reason) => Energy { joules: None, per_op: None, source: format!("not measured: {reason}") },
    };
    times.sort_by(f64::total_cmp);
    Ok((times[calls / 2], calls as u32, energy, last.context("no timed run")?))
}

/// The clock of the simulated unit's projections, once per kernel: the
/// user's, else the board image's clock for its unit, else a measured Fmax of
/// this exact Verilog, else the board's nominal.
fn projection_clock(opts: &Options, pool: &mut Pool, inputs: &Inputs) -> Result<Clock> {
    let spec = opts.board.spec();
    let units = inputs.sim_units(spec.default_clock_mhz, pool.image.as_ref())?;
    let key = units.iter().map(UnitConfig::kernel_name).collect::<Vec<_>>().join(" + ");
    if let Some(c) = pool.clocks.get(&key) {
        return Ok(c.clone());
    }
    let image = pool.image.as_ref().map(|m| &m.manifest).filter(|m| m.unit.name() == inputs.workload().id());
    let clock = match (image, opts.clock_mhz) {
        // The image's unit is projected at the clock the image runs at, as its board row is.
        (Some(m), None) => Clock::of_image(m),
        _ => {
            let nominal = format!("{} nominal kernel clock", spec.name);
            let clocks = units
                .iter()
                .map(|u| Ok((u.name(), Clock::for_unit(u, opts.clock_mhz, (spec.default_clock_mhz, &nominal))?)))
                .collect::<Result<Vec<_>>>()?;
            Clock::slowest(&clocks)
        }
    };
    pool.clocks.insert(key, clock.clone());
    Ok(clock)
}

/// Where a block's time went, per unit: launch wall time on a measured
/// device, projected time from cycles at `clock_mhz` on a simulator. Empty
/// for single-unit workloads.
fn unit_shares(out: &Output, clock_mhz: Option<f64>) -> Vec<UnitShare> {
    let Output::Block(run) = out else { return Vec::new() };
    let units = run.by_unit();
    let seconds = |(_, wall, cycles, _): &(&str, Duration, Option<u64>, u64)| match (clock_mhz, cycles) {
        (Some(mhz), Some(c)) => *c as f64 / (mhz * 1e6),
        _ => wall.as_secs_f64(),
    };
    let total: f64 = units.iter().map(seconds).sum();
    units
        .iter()
        .map(|u| UnitShare {
            unit: u.0.into(),
            launches: run.steps.iter().filter(|s| s.unit == u.0).count() as u32,
            seconds: seconds(u),
            share: seconds(u) / total.max(f64::MIN_POSITIVE),
        })
        .collect()
}

/// Resource counts of a simulated unit on the board, or why there are none.
fn fpga_resources(opts: &Options, pool: &mut Pool, unit: &UnitConfig) -> (Option<Resources>, String) {
    let kernel = unit.kernel_name();
    pool.resources
        .entry(kernel)
        .or_insert_with(|| {
            if !opts.resources {
                return (None, "not requested: pass --resources (yosys synth_xilinx, cached by configuration)".into());
            }
            let family = opts.board.spec().yosys_family;
            match crate::resources::synthesize(unit, family) {
                Ok(m) => {
                    let how = if m.cached { "cached".to_string() } else { format!("took {:.0} s", m.seconds) };
                    let c = m.counts;
                    let r = Resources {
                        lut: c.lut,
                        ff: c.ff,
                        dsp: c.dsp,
                        bram36: c.bram36,
                        uram: c.uram,
                        source: format!("yosys synth_xilinx -family {family}, {how}; an estimate, not Vivado"),
                    };
                    (Some(r), String::new())
                }
                Err(e) => (None, format!("no resource estimate: {e:#}")),
            }
        })
        .clone()
}

/// The resources of one FPGA that holds every unit of a problem: the sum of
/// the units' estimates (a block's GEMM, attention and MoE units side by
/// side, all clocked for the whole block), or none with every unit's reason.
fn one_fpga(each: Vec<(&str, (Option<Resources>, String))>) -> (Option<Resources>, String) {
    if let [(_, one)] = each.as_slice() {
        return one.clone();
    }
    if let Some((kernel, (_, why))) = each.iter().find(|(_, (r, _))| r.is_none()) {
        return (None, format!("{kernel}: {why}"));
    }
    let parts: Vec<(&str, Resources)> = each.into_iter().filter_map(|(k, (r, _))| Some((k, r?))).collect();
    let sum = Resources {
        lut: parts.iter().map(|(_, r)| r.lut).sum(),
        ff: parts.iter().map(|(_, r)| r.ff).sum(),
        dsp: parts.iter().map(|(_, r)| r.dsp).sum(),
        bram36: parts.iter().map(|(_, r)| r.bram36).sum(),
        uram: parts.iter().map(|(_, r)| r.uram).sum(),
        source: format!(
            "the sum of its {} units on one FPGA: {}",
            parts.len(),
            parts
                .iter()
                .map(|(k, r)| format!("{k} {} LUT, {} FF, {} DSP ({})", r.lut, r.ff, r.dsp, r.source))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    (Some(sum), String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block's FPGA is the sum of its units, or unestimated with the
    /// reason of the first unit that has no estimate.
    #[test]
    fn one_fpga_sums_units_or_says_why_not() {
        let r = |lut, dsp, bram36| Resources { lut, ff: 2 * lut, dsp, bram36, uram: 0, source: format!("s{lut}") };
        let (sum, note) =
            one_fpga(vec![("a", (Some(r(10, 1, 0.5)), String::new())), ("b", (Some(r(20, 2, 1.0)), String::new()))]);
        let sum = sum.unwrap();
        assert_eq!((sum.lut, sum.ff, sum.dsp, sum.bram36, note.as_str()), (30, 60, 3, 1.5, ""));
        assert!(
            sum.source.contains("2 units") && sum.source.contains("b 20 LUT, 40 FF, 2 DSP (s20)"),
            "{}",
            sum.source
        );
        let (none, note) =
            one_fpga(vec![("a", (Some(r(10, 1, 0.5)), String::new())), ("b", (None, "yosys failed".into()))]);
        assert_eq!((none, note.as_str()), (None, "b: yosys failed"));
        let (one, _) = one_fpga(vec![("a", (Some(r(7, 0, 0.0)), String::new()))]);
        assert_eq!(one.unwrap().source, "s7", "a single unit keeps its own source");
    }

    /// Above FULL_CHECK_MACS only the sampled rows are compared: junk
    /// elsewhere passes, one wrong element in a sampled row fails.
    #[test]
    fn large_problems_are_checked_on_sampled_rows() {
        let small = Inputs::new(Size::Gemm { m: 8, n: 8, k: 8 }, 1).unwrap();
        assert_eq!(small.verified(), "full");
        // 1300³ ≈ 2.2·10⁹ MACs, just past the limit.
        let inputs = Inputs::new(Size::Gemm { m: 1300, n: 1300, k: 1300 }, 1).unwrap();
        assert_eq!(inputs.verified(), "16 sampled rows");
        let Inputs::Gemm { golden: GemmOutput::I8(want), rows: Some(rows), .. } = &inputs else {
            panic!("a requantized GEMM with sampled rows expected")
        };
        let mut out = vec![77i8; 1300 * 1300];
        for (r, &row) in rows.iter().enumerate() {
            out[row * 1300..(row + 1) * 1300].copy_from_slice(&want[r * 1300..(r + 1) * 1300]);
        }
        assert!(inputs.check(&Output::Gemm(GemmOutput::I8(out.clone()))).unwrap().0);
        out[rows[5] * 1300 + 3] ^= 1;
        assert!(!inputs.check(&Output::Gemm(GemmOutput::I8(out))).unwrap().0);
    }
}
