//! The decoder block of [`ferrite_hw::block`] on devices: each unit step is a
//! launch on the device that runs that unit, the glue steps (norm, head
//! split/merge, residual adds, the experts' gather, the combine) run on the
//! host between them, exactly as the golden model defines them, and an
//! expert's up and down projections chain on the device without a host round
//! trip ([`ops::gemm_pair`]). The result must equal [`ferrite_hw::block::block`]
//! bit for bit on every device.
use crate::device::{CycleStats, Device, DeviceError, Layout, Problem, RunStats};
use crate::ops::{self, Packed};
use ferrite_hw::attention::{AttentionConfig, AttentionOutput, AttentionProblem};
use ferrite_hw::block::{
    combine, gather, merge_heads, residual, rmsnorm, split_heads, BlockOutput, BlockPlan, BlockShape, BlockWeights,
    Matrix, Scales,
};
use ferrite_hw::gemm::{GemmConfig, GemmOutput, GemmProblem};
use ferrite_hw::moe::{MoeConfig, MoeOutput, MoeProblem};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Which device runs each unit: one device for all (cpu, cuda, opencl), or
/// one per unit (a simulator holds one unit).
pub trait BlockDevices {
    fn device(&mut self, unit: &'static str) -> &mut dyn Device;
}

/// One device runs every unit.
pub struct OneDevice<'a>(pub &'a mut dyn Device);

impl BlockDevices for OneDevice<'_> {
    fn device(&mut self, _: &'static str) -> &mut dyn Device {
        self.0
    }
}

/// A device per unit, e.g. three simulated units.
pub struct PerUnit<'a> {
    pub gemm: &'a mut dyn Device,
    pub attention: &'a mut dyn Device,
    pub moe: &'a mut dyn Device,
}

impl BlockDevices for PerUnit<'_> {
    fn device(&mut self, unit: &'static str) -> &mut dyn Device {
        match unit {
            "attention" => self.attention,
            "moe" => self.moe,
            _ => self.gemm,
        }
    }
}

/// Small units that run the block `s` in simulation: the 4×4 GEMM array whose
/// clock `ferrite timing` measures in CI (K, N ≤ 256, more when the block
/// needs it), a 2-lane attention unit for its head dim, a 2-lane router, all
/// at `clock_mhz` (one kernel clock domain).
pub fn sim_units(s: &BlockShape, clock_mhz: f64) -> Result<(GemmConfig, AttentionConfig, MoeConfig), DeviceError> {
    let k_max = s.hidden.max(s.ffn).next_power_of_two().max(256);
    let gemm = GemmConfig { k_max, n_max: k_max, read_fifo_depth: 64, clock_mhz, ..GemmConfig::small(4, 4) };
    let d = s.head_dim;
    let attention = AttentionConfig {
        head_dim: d,
        lanes: 2,
        dot_par: d,
        port_bits: (8 * d).max(128),
        read_fifo_depth: 32,
        clock_mhz,
    };
    let moe = MoeConfig {
        e_max: s.experts,
        k_max: s.top_k,
        h_max: s.hidden.next_power_of_two().max(16),
        lanes: 2,
        port_bits: 128,
        clock_mhz,
    };
    gemm.validate()?;
    attention.validate().map_err(|e| DeviceError::Config(format!("the attention unit for head dim {d}: {e}")))?;
    moe.validate()?;
    Ok((gemm, attention, moe))
}

/// The default (demo) units, as a deployment would build them, for the block
/// `s` at `clock_mhz`: the 16×16 GEMM array (K, N ≤ 4096), the 8-lane
/// attention unit for its head dim, the 16-lane router of 64 experts.
pub fn default_units(s: &BlockShape, clock_mhz: f64) -> Result<(GemmConfig, AttentionConfig, MoeConfig), DeviceError> {
    let gemm = GemmConfig { clock_mhz, ..GemmConfig::default() };
    let d = s.head_dim;
    let attention = AttentionConfig { head_dim: d, dot_par: d, clock_mhz, ..AttentionConfig::default() };
    let moe = MoeConfig { clock_mhz, ..MoeConfig::default() };
    let too_big = |what: String| DeviceError::Problem(format!("the default units hold {what}: use the small units"));
    if s.hidden.max(s.ffn) > gemm.k_max.min(gemm.n_max) {
        return Err(too_big(format!("K, N ≤ {}, the block needs {}", gemm.k_max, s.hidden.max(s.ffn))));
    }
    if s.experts > moe.e_max || s.top_k > moe.k_max || s.hidden > moe.h_max {
        return Err(too_big(format!("E ≤ {}, k ≤ {}, H ≤ {}", moe.e_max, moe.k_max, moe.h_max)));
    }
    attention.validate().map_err(|e| DeviceError::Config(format!("the attention unit for head dim {d}: {e}")))?;
    Ok((gemm, attention, moe))
}

/// One unit launch of the block and what it cost.
#[derive(Debug, Clone)]
pub struct Step {
    /// `q`, `k`, `v`, `attention`, `o`, `router`, `up[e]`, `down[e]`.
    pub name: String,
    pub unit: &'static str,
    pub stats: RunStats,
}

/// The block's output and its launches in order.
#[derive(Debug, Clone)]
pub struct BlockRun {
    pub output: BlockOutput,
    pub steps: Vec<Step>,
}

impl BlockRun {
    /// The whole block as one run: launch wall times and useful MACs summed,
    /// and, where every launch counted cycles, the units' cycles in sequence
    /// with all their multipliers (the units share one clock domain; only one
    /// works at a time, so utilization is of the whole design).
    pub fn total(&self) -> RunStats {
        let cycles: Option<u64> = self.steps.iter().map(|s| s.stats.cycles.map(|c| c.cycles)).sum();
        let mut units: Vec<(&str, CycleStats)> = Vec::new();
        for s in &self.steps {
            if let (Some(c), false) = (s.stats.cycles, units.iter().any(|(u, _)| *u == s.unit)) {
                units.push((s.unit, c));
            }
        }
        RunStats {
            wall: self.steps.iter().map(|s| s.stats.wall).sum(),
            useful_macs: self.steps.iter().map(|s| s.stats.useful_macs).sum(),
            cycles: cycles.zip(units.first()).map(|(cycles, (_, first))| CycleStats {
                cycles,
                clock_mhz: first.clock_mhz,
                multipliers: units.iter().map(|(_, c)| c.multipliers).sum(),
            }),
        }
    }

    /// Total launch wall time and, where every step counted cycles, total cycles, per unit.
    pub fn by_unit(&self) -> Vec<(&'static str, std::time::Duration, Option<u64>, u64)> {
        let mut out: Vec<(&'static str, std::time::Duration, Option<u64>, u64)> = Vec::new();
        for s in &self.steps {
            let cycles = s.stats.cycles.map(|c| c.cycles);
            match out.iter_mut().find(|(u, ..)| *u == s.unit) {
                Some((_, wall, total, macs)) => {
                    *wall += s.stats.wall;
                    *total = total.zip(cycles).map(|(a, b)| a + b);
                    *macs += s.stats.useful_macs;
                }
                None => out.push((s.unit, s.stats.wall, cycles, s.stats.useful_macs)),
            }
        }
        out
    }
}

fn int8(out: GemmOutput) -> Vec<i8> {
    match out {
        GemmOutput::I8(v) => v,
        GemmOutput::I32(_) => unreachable!("every block GEMM requantizes to int8"),
    }
}

/// The block's weights on its devices, uploaded at first use and reused by
/// every later run, as a deployment keeps its weights in device memory: a run
/// then moves only activations. One cache serves one block's weights on one
/// set of devices; [`Resident::free`] releases the buffers.
#[derive(Debug, Default)]
pub struct Resident {
    packed: Vec<(&'static str, String, Packed)>,
}

impl Resident {
    /// `data` (`rows × cols`) as unit `unit`'s device holds it for `problem`'s layout.
    fn get(
        &mut self,
        devs: &mut dyn BlockDevices,
        unit: &'static str,
        name: String,
        data: &[i8],
        problem: Problem,
    ) -> Result<Packed, DeviceError> {
        if let Some((.., p)) = self.packed.iter().find(|(u, n, _)| *u == unit && *n == name) {
            return Ok(*p);
        }
        let dev = devs.device(unit);
        let (rows, cols, pitch, bytes) = match (&problem, dev.layout(&problem)?) {
            (Problem::Gemm(p), Layout::Gemm(l)) => (p.k, p.n, l.ldb, l.b_bytes),
            (Problem::Moe(p), Layout::Moe(l)) => (p.experts, p.hidden, l.ldw, l.w_bytes),
            _ => return Err(DeviceError::Problem(format!("no resident weights for {name}'s problem"))),
        };
        let packed = Packed::upload(dev, data, rows, cols, pitch, bytes)?;
        self.packed.push((unit, name, packed));
        Ok(packed)
    }

    /// Free every buffer on the devices that hold them; the first error wins.
    pub fn free(self, devs: &mut dyn BlockDevices) -> Result<(), DeviceError> {
        let mut result = Ok(());
        for (unit, _, p) in self.packed {
            result = result.and(devs.device(unit).free(p.buf));
        }
        result
    }
}

/// Runs the block on `devs` once, its weights uploaded for this run only
/// ([`run_block_resident`] keeps them for many runs).
pub fn run_block(
    devs: &mut dyn BlockDevices,
    s: &BlockShape,
    w: &BlockWeights,
    sc: &Scales,
    x: &[i8],
) -> Result<BlockRun, DeviceError> {
    let mut resident = Resident::default();
    let run = run_block_resident(devs, &mut resident, s, w, sc, x);
    let freed = resident.free(devs);
    let run = run?;
    freed.map(|()| run)
}

/// Runs the block on `devs`: the same steps as the golden model, unit steps
/// on the devices, weights from `resident` (uploaded there at first use, so
/// `resident` must only ever see these weights `w`).
pub fn run_block_resident(
    devs: &mut dyn BlockDevices,
    resident: &mut Resident,
    s: &BlockShape,
    w: &BlockWeights,
    sc: &Scales,
    x: &[i8],
) -> Result<BlockRun, DeviceError> {
    let plan = BlockPlan::new(s, w, sc)?;
    let (t, h, nh, d) = (s.tokens, s.hidden, s.heads, s.head_dim);
    if x.len() != t * h {
        return Err(DeviceError::Problem(format!("x has {} values, the block needs T·H = {}", x.len(), t * h)));
    }
    let mut steps = Vec::new();
    let mut step = |name: &str, unit, stats| steps.push(Step { name: name.into(), unit, stats });

    let n1 = rmsnorm(x, &w.g1);
    let mut proj = |name: &str, p: &GemmProblem, m: &Matrix, a: &[i8], devs: &mut dyn BlockDevices| {
        let b = resident.get(devs, "gemm", name.into(), &m.data, Problem::Gemm(*p))?;
        ops::gemm_packed(devs.device("gemm"), p, a, &b, None)
    };
    let mut heads = |name: &str, p, m, step: &mut dyn FnMut(&str, &'static str, RunStats)| {
        let (out, stats) = proj(name, p, m, &n1, devs)?;
        step(name, "gemm", stats);
        Ok::<_, DeviceError>(split_heads(&int8(out), t, nh, d))
    };
    let q = heads("q", &plan.q, &w.wq, &mut step)?;
    let k = heads("k", &plan.k, &w.wk, &mut step)?;
    let v = heads("v", &plan.v, &w.wv, &mut step)?;
    let (o, stats) = ops::attention(devs.device("attention"), &plan.attention, &q, &k, &v)?;
    step("attention", "attention", stats);
    let AttentionOutput::I8(o) = o else { unreachable!("the block's attention has int8 output") };
    let (a, stats) = proj("o", &plan.o, &w.wo, &merge_heads(&o, t, nh, d), devs)?;
    step("o", "gemm", stats);
    let h1 = residual(x, &int8(a));
    let n2 = rmsnorm(&h1, &w.g2);
    let gate = resident.get(devs, "moe", "gate".into(), &w.gate.data, Problem::Moe(plan.router))?;
    let (route, stats) = ops::moe_packed(devs.device("moe"), &plan.router, &n2, &gate, None)?;
    step("router", "moe", stats);
    let mut y = Vec::with_capacity(s.experts);
    for (e, tokens) in route.dispatch.iter().enumerate() {
        if tokens.is_empty() {
            y.push(Vec::new());
            continue;
        }
        let (up, down) = (plan.up_problem(tokens.len(), s), plan.down_problem(tokens.len(), s));
        let b1 = resident.get(devs, "gemm", format!("up[{e}]"), &w.w1[e].data, Problem::Gemm(up))?;
        let b2 = resident.get(devs, "gemm", format!("down[{e}]"), &w.w2[e].data, Problem::Gemm(down))?;
        let xe = gather(&n2, h, tokens);
        let (ye, [s1, s2]) = ops::gemm_pair_packed(devs.device("gemm"), &up, &down, &xe, &b1, &b2)?;
        step(&format!("up[{e}]"), "gemm", s1);
        step(&format!("down[{e}]"), "gemm", s2);
        y.push(int8(ye));
    }
    let out = residual(&h1, &combine(&route, &y, t, s.top_k, h));
    Ok(BlockRun { output: BlockOutput { out, h1, route }, steps })
}

/// How a projected launch got its cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The launch's problem itself was simulated (on seeded random operands).
    Simulated,
    /// Affine in one dimension (`dim`) through two simulated launches of the
    /// same problem cut down in it: `at` holds (size, cycles) of each.
    Affine { dim: &'static str, at: [(usize, u64); 2] },
}

impl std::fmt::Display for Basis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Simulated => write!(f, "simulated"),
            Self::Affine { dim, at: [(a, ca), (b, cb)] } => {
                write!(f, "affine in {dim} through {dim} = {a} ({ca} cycles) and {b} ({cb})")
            }
        }
    }
}

/// One launch of a projected block: its step (cycles projected, wall time
/// the simulation of its points took) and how the cycles were obtained.
#[derive(Debug, Clone)]
pub struct ProjectedStep {
    pub step: Step,
    pub basis: Basis,
}

/// What [`project_block`] simulates.
#[derive(Debug, Clone, Copy)]
pub struct Projection {
    /// Launches of at most this many multiply-accumulates are simulated whole.
    pub direct_macs: u64,
    /// Columns of the simulated GEMM array: its step in N.
    pub gemm_cols: usize,
    /// Seed of the random operands.
    pub seed: u64,
}

/// The cycles of each launch of the block `s` on the simulated units `devs`,
/// for a block too large to simulate whole (the realistic block is about
/// 1.6·10⁹ cycles on the 4×4 array). The launches are those [`run_block`]
/// makes, with the experts' token counts of `route` (the golden block's). A
/// launch of at most `how.direct_macs` multiply-accumulates is simulated as it
/// is; a larger one at two sizes of one dimension in which the units' cycles
/// are affine (they schedule it as a loop of equal steps), then extrapolated:
/// the GEMM's column blocks of N (`how.gemm_cols` wide), the attention
/// unit's heads, the router's tokens (in eights). `progress` hears of each
/// launch (its name, index and the count) before it is projected. Operands are seeded random: the GEMM's
/// cycles do not depend on the data, the attention unit's only through the
/// steps where a row's maximum rises, the router's through its dispatch only.
/// No output is computed: the data of a projected block is the golden one.
pub fn project_block(
    devs: &mut dyn BlockDevices,
    (s, w, sc): (&BlockShape, &BlockWeights, &Scales),
    route: &MoeOutput,
    how: &Projection,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Vec<ProjectedStep>, DeviceError> {
    let plan = BlockPlan::new(s, w, sc)?;
    let mut rng = ChaCha8Rng::seed_from_u64(how.seed);
    let mut memo: Vec<(Problem, ProjectedStep)> = Vec::new();
    let mut launches: Vec<(String, Problem)> = ["q", "k", "v"]
        .into_iter()
        .zip([plan.q, plan.k, plan.v])
        .map(|(n, p)| (n.to_string(), Problem::Gemm(p)))
        .collect();
    launches.push(("attention".into(), Problem::Attention(plan.attention.clone())));
    launches.push(("o".into(), Problem::Gemm(plan.o)));
    launches.push(("router".into(), Problem::Moe(plan.router)));
    for (e, tokens) in route.dispatch.iter().enumerate().filter(|(_, t)| !t.is_empty()) {
        launches.push((format!("up[{e}]"), Problem::Gemm(plan.up_problem(tokens.len(), s))));
        launches.push((format!("down[{e}]"), Problem::Gemm(plan.down_problem(tokens.len(), s))));
    }
    let mut out = Vec::with_capacity(launches.len());
    let total = launches.len();
    for (i, (name, problem)) in launches.into_iter().enumerate() {
        progress(&name, i, total);
        if let Some((_, done)) = memo.iter().find(|(p, _)| *p == problem) {
            // The same shape again (q, k, v; experts with equal token counts): no new simulation.
            let step = Step { name, unit: done.step.unit, stats: RunStats { wall: Duration::ZERO, ..done.step.stats } };
            out.push(ProjectedStep { step, basis: done.basis });
            continue;
        }
        let projected = project_launch(devs, &problem, how, &mut rng)?;
        let done = ProjectedStep { step: Step { name, unit: problem.unit(), stats: projected.0 }, basis: projected.1 };
        memo.push((problem, done.clone()));
        out.push(done);
    }
    Ok(out)
}

/// Cycles of one launch of `problem`, simulated or extrapolated (see [`project_block`]).
fn project_launch(
    devs: &mut dyn BlockDevices,
    problem: &Problem,
    how: &Projection,
    rng: &mut ChaCha8Rng,
) -> Result<(RunStats, Basis), DeviceError> {
    let dev = devs.device(problem.unit());
    let macs = problem.macs();
    if macs <= how.direct_macs {
        return Ok((simulate(dev, problem, rng)?, Basis::Simulated));
    }
    let Some((dim, full, step)) = affine_dim(problem, how.gemm_cols) else {
        return Err(DeviceError::Problem(
            "an attention launch with batches or key lengths is too large to simulate and is not projected".into(),
        ));
    };
    // The smallest two steps that still leave a step to extrapolate.
    let (a, b) = (step, 2 * step);
    if full <= b {
        return Ok((simulate(dev, problem, rng)?, Basis::Simulated));
    }
    let sa = simulate(dev, &resized(problem, a), rng)?;
    let sb = simulate(dev, &resized(problem, b), rng)?;
    let (ca, cb) = (cycles(&sa)?, cycles(&sb)?);
    // Exact on the unit's steps: the GEMM's partial column block costs a whole one.
    let steps = (full.div_ceil(step) - 1) as f64;
    let per_step = cb as f64 - ca as f64;
    let projected = (ca as f64 + steps * per_step).round().max(0.0) as u64;
    let stats = RunStats {
        wall: sa.wall + sb.wall,
        useful_macs: macs,
        cycles: sa.cycles.map(|c| CycleStats { cycles: projected, ..c }),
    };
    Ok((stats, Basis::Affine { dim, at: [(a, ca), (b, cb)] }))
}

/// The dimension a unit's cycles are affine in, its size in `p` and the
/// unit's step in it; none for attention with batches or key lengths.
fn affine_dim(p: &Problem, gemm_cols: usize) -> Option<(&'static str, usize, usize)> {
    match p {
        Problem::Gemm(p) => Some(("N", p.n, gemm_cols)),
        Problem::Attention(p) => (p.kv_len.is_none() && p.batch == 1).then_some(("heads", p.heads, 1)),
        Problem::Moe(p) => Some(("tokens", p.tokens, 8)),
    }
}

/// `p` with its [`affine_dim`] set to `size`.
fn resized(p: &Problem, size: usize) -> Problem {
    match p {
        Problem::Gemm(p) => Problem::Gemm(GemmProblem { n: size, ..*p }),
        Problem::Attention(p) => Problem::Attention(AttentionProblem { heads: size, ..p.clone() }),
        Problem::Moe(p) => Problem::Moe(MoeProblem { tokens: size, ..*p }),
    }
}

fn cycles(s: &RunStats) -> Result<u64, DeviceError> {
    s.cycles
        .map(|c| c.cycles)
        .ok_or_else(|| DeviceError::Problem("the device counted no cycles: nothing to project".into()))
}

/// One launch of `problem` on seeded random operands.
fn simulate(dev: &mut dyn Device, problem: &Problem, rng: &mut ChaCha8Rng) -> Result<RunStats, DeviceError> {
    let mut bytes = |n: usize| -> Vec<i8> { (0..n).map(|_| rng.gen::<i8>()).collect() };
    Ok(match problem {
        Problem::Gemm(p) => {
            let bias = p.bias.then(|| vec![0; p.n]);
            ops::gemm(dev, p, &bytes(p.m * p.k), &bytes(p.k * p.n), bias.as_deref())?.1
        }
        Problem::Attention(p) => {
            let (q, kv) = (p.heads_total() * p.seq_q * p.dim, p.heads_total() * p.seq_kv * p.dim);
            ops::attention(dev, p, &bytes(q), &bytes(kv), &bytes(kv))?.1
        }
        Problem::Moe(p) => {
            let bias = p.bias.then(|| vec![0; p.experts]);
            ops::moe(dev, p, &bytes(p.tokens * p.hidden), &bytes(p.experts * p.hidden), bias.as_deref())?.1
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The realistic block fits the default units; a block wider than they hold is refused.
    #[test]
    fn default_units_hold_the_realistic_block_only_up_to_their_limits() {
        let realistic = BlockShape::with_dims(512, 1024, 16, 64, 8, 2816).unwrap();
        let (g, a, m) = default_units(&realistic, 300.0).unwrap();
        assert_eq!((g.rows, g.cols, a.head_dim, a.lanes, m.e_max), (16, 16, 64, 8, 64));
        let wide = BlockShape::with_dims(16, 1024, 16, 64, 8, 8192).unwrap();
        let err = default_units(&wide, 300.0).unwrap_err().to_string();
        assert!(err.contains("K, N ≤ 4096") && err.contains("small units"), "{err}");
        let many = BlockShape::with_dims(16, 256, 4, 128, 8, 512).unwrap();
        assert!(default_units(&many, 300.0).unwrap_err().to_string().contains("E ≤ 64"));
    }
}
