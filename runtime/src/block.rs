//! The decoder block of [`ferrite_hw::block`] on devices: each unit step is a
//! launch on the device that runs that unit, the glue steps (norm, head
//! split/merge, residual adds, the experts' gather, the combine) run on the
//! host between them, exactly as the golden model defines them, and an
//! expert's up and down projections chain on the device without a host round
//! trip ([`ops::gemm_pair`]). The result must equal [`ferrite_hw::block::block`]
//! bit for bit on every device.
use crate::device::{CycleStats, Device, DeviceError, Layout, Problem, RunStats};
use crate::ops::{self, Packed};
use ferrite_hw::attention::{AttentionConfig, AttentionOutput};
use ferrite_hw::block::{
    combine, gather, merge_heads, residual, rmsnorm, split_heads, BlockOutput, BlockPlan, BlockShape, BlockWeights,
    Matrix, Scales,
};
use ferrite_hw::gemm::{GemmConfig, GemmOutput, GemmProblem};
use ferrite_hw::moe::MoeConfig;

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
