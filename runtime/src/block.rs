//! The decoder block of [`ferrite_hw::block`] on devices: each unit step is a
//! launch on the device that runs that unit, the glue steps (norm, head
//! split/merge, residual adds, the experts' gather, the combine) run on the
//! host between them, exactly as the golden model defines them, and an
//! expert's up and down projections chain on the device without a host round
//! trip ([`ops::gemm_pair`]). The result must equal [`ferrite_hw::block::block`]
//! bit for bit on every device.
use crate::device::{Device, DeviceError, RunStats};
use crate::ops;
use ferrite_hw::attention::AttentionOutput;
use ferrite_hw::block::{
    combine, gather, merge_heads, residual, rmsnorm, split_heads, BlockOutput, BlockPlan, BlockShape, BlockWeights,
    Scales,
};
use ferrite_hw::gemm::GemmOutput;

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
pub struct PerUnit {
    pub gemm: Box<dyn Device>,
    pub attention: Box<dyn Device>,
    pub moe: Box<dyn Device>,
}

impl BlockDevices for PerUnit {
    fn device(&mut self, unit: &'static str) -> &mut dyn Device {
        match unit {
            "attention" => self.attention.as_mut(),
            "moe" => self.moe.as_mut(),
            _ => self.gemm.as_mut(),
        }
    }
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

/// Runs the block on `devs`: the same steps as the golden model, unit steps on the devices.
pub fn run_block(
    devs: &mut dyn BlockDevices,
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
    let mut step = |name: String, unit, stats| steps.push(Step { name, unit, stats });

    let n1 = rmsnorm(x, &w.g1);
    let mut proj = |name: &str, p, m: &[i8], step: &mut dyn FnMut(String, &'static str, RunStats)| {
        let (out, stats) = ops::gemm(devs.device("gemm"), p, &n1, m, None)?;
        step(name.into(), "gemm", stats);
        Ok::<_, DeviceError>(split_heads(&int8(out), t, nh, d))
    };
    let q = proj("q", &plan.q, &w.wq.data, &mut step)?;
    let k = proj("k", &plan.k, &w.wk.data, &mut step)?;
    let v = proj("v", &plan.v, &w.wv.data, &mut step)?;
    let (o, stats) = ops::attention(devs.device("attention"), &plan.attention, &q, &k, &v)?;
    step("attention".into(), "attention", stats);
    let AttentionOutput::I8(o) = o else { unreachable!("the block's attention has int8 output") };
    let (a, stats) = ops::gemm(devs.device("gemm"), &plan.o, &merge_heads(&o, t, nh, d), &w.wo.data, None)?;
    step("o".into(), "gemm", stats);
    let h1 = residual(x, &int8(a));
    let n2 = rmsnorm(&h1, &w.g2);
    let (route, stats) = ops::moe(devs.device("moe"), &plan.router, &n2, &w.gate.data, None)?;
    step("router".into(), "moe", stats);
    let mut y = Vec::with_capacity(s.experts);
    for (e, tokens) in route.dispatch.iter().enumerate() {
        if tokens.is_empty() {
            y.push(Vec::new());
            continue;
        }
        let (up, down) = (plan.up_problem(tokens.len(), s), plan.down_problem(tokens.len(), s));
        let xe = gather(&n2, h, tokens);
        let (ye, [s1, s2]) = ops::gemm_pair(devs.device("gemm"), &up, &down, &xe, &w.w1[e].data, &w.w2[e].data)?;
        step(format!("up[{e}]"), "gemm", s1);
        step(format!("down[{e}]"), "gemm", s2);
        y.push(int8(ye));
    }
    let out = residual(&h1, &combine(&route, &y, t, s.top_k, h));
    Ok(BlockRun { output: BlockOutput { out, h1, route }, steps })
}
