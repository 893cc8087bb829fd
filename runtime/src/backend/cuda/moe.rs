//! `Launch::Moe` on the GPU: the MoE router unit's golden model
//! (`ferrite_hw::moe::route`) bit for bit, `kernels/cuda/moe_router.cu`.
//!
//! It writes exactly the bytes the unit (and the cpu backend) writes: every
//! route record whole, the E + 2 statistics words, and per expert only its
//! kept dispatch entries; the rest of each buffer keeps whatever it held.
use super::runtime::{driver, MOE_ROUTER};
use super::{CudaDevice, PITCH_ALIGN};
use crate::device::{check_moe_buffers, DeviceError, MoeArgs};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use ferrite_hw::moe::MoeProblem;

/// Tokens per chunk of the slot scan (the kernel's CHUNK).
const CHUNK: usize = 256;
/// Tokens per block of the route kernel: one warp each.
const ROUTE_WARPS: usize = 8;

/// What the kernels index: the problem's own limits, and 32-bit shapes.
pub(super) fn check_limits(p: &MoeProblem, device: &str) -> Result<(), DeviceError> {
    p.validate()?;
    if i32::try_from(p.hidden).is_err() {
        return Err(DeviceError::TooBig { device: device.into(), reason: format!("H = {} exceeds int32", p.hidden) });
    }
    Ok(())
}

/// Expert lanes per warp (a power of two ≥ E up to 32; the rest of the warp
/// splits H) and experts per lane, the route kernel's template parameter.
fn lanes(experts: usize) -> (usize, usize) {
    let el = experts.next_power_of_two().min(32);
    (el, experts.div_ceil(el).next_power_of_two())
}

impl CudaDevice {
    /// Enqueue the router's four kernels on the GPU's stream without waiting
    /// (the benchmark times them with events; [`crate::Device::launch`] syncs).
    pub fn enqueue_moe(&mut self, m: &MoeArgs) -> Result<(), DeviceError> {
        let (p, l) = (&m.problem, &m.layout);
        check_limits(p, &self.gpu.name)?;
        check_moe_buffers(m)?;
        for (name, ld) in [("LDX", l.ldx), ("LDW", l.ldw)] {
            if ld % PITCH_ALIGN != 0 {
                return Err(DeviceError::Problem(format!(
                    "{name} {ld} is not a multiple of {PITCH_ALIGN} bytes (use CudaDevice::layout)"
                )));
            }
        }
        if l.dpitch % 4 != 0 {
            return Err(DeviceError::Problem(format!("DPITCH {} is not a multiple of 4 bytes", l.dpitch)));
        }
        self.lut()?;
        let chunks = p.tokens.div_ceil(CHUNK);
        let counts_len = chunks * p.experts;
        if self.moe_counts.as_ref().is_none_or(|c| c.len() < counts_len) {
            let grown = self.gpu.stream.alloc_zeros::<u32>(counts_len).map_err(driver("allocating MoE scratch"))?;
            self.moe_counts = Some(grown);
        }
        let (el, per_lane) = lanes(p.experts);
        let route_fn = self.gpu.function(MOE_ROUTER, &format!("ferrite_moe_route_c{per_lane}"))?;
        let count_fn = self.gpu.function(MOE_ROUTER, "ferrite_moe_count")?;
        let scan_fn = self.gpu.function(MOE_ROUTER, "ferrite_moe_scan")?;
        let place_fn = self.gpu.function(MOE_ROUTER, "ferrite_moe_place")?;
        let (x, w, route, dispatch, stats) =
            (self.slice(m.x)?, self.slice(m.w)?, self.slice(m.route)?, self.slice(m.dispatch)?, self.slice(m.stats)?);
        // Without a bias the kernel never reads its bias pointer; X stands in.
        let bias = match m.bias {
            Some(b) => self.slice(b)?,
            None => x,
        };
        let lut = self.lut.as_ref().expect("uploaded above");
        let counts = self.moe_counts.as_ref().expect("allocated above");
        let (t, h, e, k) = (p.tokens as i32, p.hidden as i32, p.experts as i32, p.top_k as i32);
        let (ldx, ldw, dpitch) = (l.ldx as i64, l.ldw as i64, l.dpitch as i64);
        let (el, flags) = (el as i32, p.flags() as i32);
        let (smult, sshift) = (p.logit.multiplier, p.logit.shift);
        let (cap, nchunks) = (p.capacity_slots() as u32, chunks as i32);
        let s = &self.gpu.stream;
        let blocks = |n: usize, per: usize| (n.div_ceil(per) as u32, 1, 1);

        let cfg = LaunchConfig {
            grid_dim: blocks(p.tokens, ROUTE_WARPS),
            block_dim: (32 * ROUTE_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = s.launch_builder(&route_fn);
        launch.arg(x).arg(w).arg(bias).arg(lut).arg(route).arg(&t).arg(&h).arg(&e).arg(&k);
        launch.arg(&ldx).arg(&ldw).arg(&el).arg(&flags).arg(&smult).arg(&sshift);
        // SAFETY: argument order and types match ferrite_moe_route_c*; the
        // buffers were checked against the layout, pitches are 16-byte multiples.
        unsafe { launch.launch(cfg) }.map_err(driver("launching ferrite_moe_route"))?;

        let chunk_cfg =
            LaunchConfig { grid_dim: blocks(p.tokens, CHUNK), block_dim: (CHUNK as u32, 1, 1), shared_mem_bytes: 0 };
        let mut launch = s.launch_builder(&count_fn);
        launch.arg(route).arg(counts).arg(&t).arg(&e).arg(&k);
        // SAFETY: matches ferrite_moe_count; counts holds chunks × E words.
        unsafe { launch.launch(chunk_cfg) }.map_err(driver("launching ferrite_moe_count"))?;

        let scan_cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
        let mut launch = s.launch_builder(&scan_fn);
        launch.arg(counts).arg(stats).arg(&nchunks).arg(&e).arg(&cap);
        // SAFETY: matches ferrite_moe_scan; stats holds E + 2 words.
        unsafe { launch.launch(scan_cfg) }.map_err(driver("launching ferrite_moe_scan"))?;

        let mut launch = s.launch_builder(&place_fn);
        launch.arg(route).arg(counts).arg(dispatch).arg(&t).arg(&e).arg(&k).arg(&dpitch).arg(&cap);
        // SAFETY: matches ferrite_moe_place; a slot is < cap ≤ DPITCH/4 entries of its row.
        unsafe { launch.launch(chunk_cfg) }.map_err(driver("launching ferrite_moe_place"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::lanes;

    #[test]
    fn lane_split_covers_every_expert() {
        for e in 1..=256 {
            let (el, c) = lanes(e);
            assert!(el.is_power_of_two() && el <= 32 && 32 % el == 0, "E={e}");
            assert!(el * c >= e && [1, 2, 4, 8].contains(&c), "E={e}: {el}×{c}");
        }
    }
}
