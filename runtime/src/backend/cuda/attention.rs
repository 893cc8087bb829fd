//! `Launch::Attention` on the GPU: the streaming attention unit's golden model
//! (`ferrite_hw::attention::attention`) bit for bit, `kernels/cuda/attention_fixed.cu`.
use super::runtime::{driver, ATTENTION_FIXED};
use super::CudaDevice;
use crate::device::{AttentionArgs, DeviceError};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use ferrite_hw::attention::{AttentionLayout, AttentionProblem};

/// Query rows per block: one warp each.
const ROWS_PER_BLOCK: u64 = 4;

/// What the kernel can index: d ≤ 128 (four values per lane), 32-bit counts.
pub(super) fn check_limits(p: &AttentionProblem, device: &str) -> Result<(), DeviceError> {
    p.validate()?;
    let too_big = |reason: String| Err(DeviceError::TooBig { device: device.into(), reason });
    if p.dim > 128 {
        return too_big(format!("dim = {} (the attention twin holds at most 128 per warp)", p.dim));
    }
    let rows = p.heads_total() as u64 * p.seq_q as u64;
    let fits = |x: usize| i32::try_from(x).is_ok();
    if !(fits(p.heads_total()) && fits(p.seq_q) && fits(p.seq_kv)) || rows.div_ceil(ROWS_PER_BLOCK) > u32::MAX as u64 {
        return too_big("more rows or heads than the kernel indexes".into());
    }
    Ok(())
}

impl CudaDevice {
    /// One attention launch. The valid key counts come from the problem (as on
    /// the cpu backend), so the kv_len buffer only has to exist when it is set.
    pub(super) fn run_attention(&mut self, a: &AttentionArgs) -> Result<(), DeviceError> {
        let (p, l) = (&a.problem, &a.layout);
        check_limits(p, &self.gpu.name)?;
        check_buffers(a)?;
        self.lut()?;
        let kv: Vec<i32> = (0..p.batch).map(|b| p.keys(b) as i32).collect();
        let dkv = self.gpu.stream.clone_htod(&kv).map_err(driver("uploading kv_len"))?;
        let func = self.gpu.function(ATTENTION_FIXED, "ferrite_attention_fixed")?;
        let (q, k, v, o) = (self.slice(a.q)?, self.slice(a.k)?, self.slice(a.v)?, self.slice(a.o)?);
        let lut = self.lut.as_ref().expect("uploaded above");
        let (heads, heads_total) = (p.heads as i32, p.heads_total() as i32);
        let (seq_q, seq_kv, dim) = (p.seq_q as i32, p.seq_kv as i32, p.dim as i32);
        let (qs, kvs, os) = (l.q_stride as i64, l.kv_stride as i64, l.o_stride as i64);
        let causal = i32::from(p.causal);
        let (sm, ss) = (p.params.score.multiplier, p.params.score.shift);
        let requant = i32::from(p.params.out.is_some());
        let (om, osh) = p.params.out.map_or((0, 0), |rq| (rq.multiplier, rq.shift));
        let rows = p.heads_total() as u64 * p.seq_q as u64;
        let cfg = LaunchConfig {
            grid_dim: (rows.div_ceil(ROWS_PER_BLOCK) as u32, 1, 1),
            block_dim: (32 * ROWS_PER_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.gpu.stream.launch_builder(&func);
        launch
            .arg(q)
            .arg(k)
            .arg(v)
            .arg(lut)
            .arg(&dkv)
            .arg(o)
            .arg(&heads)
            .arg(&heads_total)
            .arg(&seq_q)
            .arg(&seq_kv)
            .arg(&dim)
            .arg(&qs)
            .arg(&kvs)
            .arg(&os)
            .arg(&causal)
            .arg(&sm)
            .arg(&ss)
            .arg(&requant)
            .arg(&om)
            .arg(&osh);
        // SAFETY: argument order and types match ferrite_attention_fixed; the
        // strides and buffer sizes were checked against the problem above.
        unsafe { launch.launch(cfg) }.map_err(driver("launching ferrite_attention_fixed"))?;
        self.gpu.sync()
    }
}

/// Strides hold a head's rows (Q16 output rows 4-byte aligned) and buffers
/// hold every head, so the kernel never reads or writes outside a buffer.
fn check_buffers(a: &AttentionArgs) -> Result<(), DeviceError> {
    let (p, l) = (&a.problem, &a.layout);
    let elem = AttentionLayout::out_elem_bytes(p) as u64;
    let (d, nh) = (p.dim as u64, p.heads_total() as u64);
    let (q_row, kv_row, o_row) = (p.seq_q as u64 * d, p.seq_kv as u64 * d, p.seq_q as u64 * d * elem);
    for (name, buf, stride, row) in [
        ("Q", a.q, l.q_stride, q_row),
        ("K", a.k, l.kv_stride, kv_row),
        ("V", a.v, l.kv_stride, kv_row),
        ("O", a.o, l.o_stride, o_row),
    ] {
        if stride < row {
            return Err(DeviceError::Problem(format!("{name} head stride {stride} is below its {row} bytes")));
        }
        let need = stride * (nh - 1) + row;
        if buf.len() < need {
            return Err(DeviceError::Problem(format!(
                "buffer {name} has {} bytes, the layout needs {need}",
                buf.len()
            )));
        }
    }
    if l.o_stride % elem != 0 {
        return Err(DeviceError::Problem(format!("O head stride {} is not a multiple of {elem} bytes", l.o_stride)));
    }
    match (&p.kv_len, a.kv_len) {
        (Some(_), None) => Err(DeviceError::Problem("kv_len set but no kv_len buffer given".into())),
        (None, Some(_)) => Err(DeviceError::Problem("kv_len buffer given but the problem has no kv_len".into())),
        _ => Ok(()),
    }
}
