//! `Launch::Attention` on the GPU: the streaming attention unit's golden model
//! (`ferrite_hw::attention::attention`) bit for bit on the integer tensor
//! cores, `kernels/cuda/attention_mma.cu` (its header explains the scheme).
use super::runtime::{driver, ATTENTION_MMA};
use super::CudaDevice;
use crate::device::{AttentionArgs, DeviceError};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use ferrite_hw::attention::{AttentionLayout, AttentionProblem};

/// Query rows per block: four warps of 16.
const ROWS_PER_BLOCK: usize = 64;
/// The kernel keeps o/256 in int32: exact while keys·2^14 < 2^31.
const MAX_KEYS: usize = 1 << 17;
/// The exp2 LUT, one copy per lane (256 × 32 words).
const LUT_SMEM: u32 = 256 * 32 * 4;

/// K/V stages in shared memory for the instance holding `dp` dims: the
/// kernel's `ATTENTION_MMA_STAGES` (dp ≥ 64 keeps a six-stage mbarrier ring so
/// warps drift apart, dp = 32 two stages and a CTA barrier per block).
/// Keys a block are `ATTENTION_MMA_BK` ([`kernel_for`]).
fn kv_stages(dp: u32) -> u32 {
    if dp >= 64 {
        6
    } else {
        2
    }
}

/// The kernel instance for head dim d and the score shift: (name, dims it
/// holds, keys a block). Shifts ≥ 33 take the `_hi` instance, which reads t
/// from the product's high word alone.
fn kernel_for(d: usize, score_shift: u32) -> (String, u32, u32) {
    let (dp, bk) = match d {
        0..=32 => (32, 64),
        33..=64 => (64, 32),
        _ => (128, 32),
    };
    (format!("ferrite_attention_mma_d{dp}{}", if score_shift >= 33 { "_hi" } else { "" }), dp, bk)
}

/// What the kernel can index: d ≤ 128, at most [`MAX_KEYS`] keys, 32-bit
/// counts, and scores whose log2-domain value t fits the unit's register
/// (the kernel keeps e = t >> 8 in int32).
pub(super) fn check_limits(p: &AttentionProblem, device: &str) -> Result<(), DeviceError> {
    p.validate()?;
    let too_big = |reason: String| Err(DeviceError::TooBig { device: device.into(), reason });
    if p.dim > 128 {
        return too_big(format!("dim = {} (the attention twin holds at most 128)", p.dim));
    }
    if p.seq_kv > MAX_KEYS {
        return too_big(format!("seq_kv = {} (the attention twin is exact up to {MAX_KEYS} keys)", p.seq_kv));
    }
    p.check_score_range()?;
    let blocks = p.heads_total() as u64 * p.seq_q.div_ceil(ROWS_PER_BLOCK) as u64;
    if i32::try_from(p.heads_total()).is_err() || i32::try_from(p.seq_q).is_err() || blocks > i32::MAX as u64 {
        return too_big("more rows or heads than the kernel indexes".into());
    }
    Ok(())
}

impl CudaDevice {
    /// One attention launch on the stream, not waited for. The valid key
    /// counts come from the problem (as on the cpu backend), so the kv_len
    /// buffer only has to exist when it is set; without one the kernel gets a
    /// null pointer and every entry has `seq_kv` keys (nothing to upload, so
    /// the launch can be captured in a CUDA graph).
    pub fn enqueue_attention(&mut self, a: &AttentionArgs) -> Result<(), DeviceError> {
        let (p, l) = (&a.problem, &a.layout);
        check_limits(p, &self.gpu.name)?;
        check_buffers(a)?;
        self.lut()?;
        let dkv = match &p.kv_len {
            Some(kv) => {
                let kv: Vec<i32> = kv.iter().map(|&n| n as i32).collect();
                Some(self.gpu.stream.clone_htod(&kv).map_err(driver("uploading kv_len"))?)
            }
            None => None,
        };
        let null = 0u64;
        let (name, dp, bk) = kernel_for(p.dim, p.params.score.shift);
        let func = self.gpu.function(ATTENTION_MMA, &name)?;
        // The LUT copies, then the stages of K and V blocks, rows padded by 16 bytes.
        let smem = LUT_SMEM + 2 * kv_stages(dp) * bk * (dp + 16);
        self.gpu.set_dynamic_smem(&func, smem)?;
        let (q, k, v, o) = (self.slice(a.q)?, self.slice(a.k)?, self.slice(a.v)?, self.slice(a.o)?);
        let lut = self.lut.as_ref().expect("uploaded above");
        let (heads, heads_total) = (p.heads as i32, p.heads_total() as i32);
        let (seq_q, seq_kv, dim) = (p.seq_q as i32, p.seq_kv as i32, p.dim as i32);
        let (qs, kvs, os) = (l.q_stride as i64, l.kv_stride as i64, l.o_stride as i64);
        let causal = i32::from(p.causal);
        let (sm, ss) = (p.params.score.multiplier, p.params.score.shift);
        let requant = i32::from(p.params.out.is_some());
        let (om, osh) = p.params.out.map_or((0, 0), |rq| (rq.multiplier, rq.shift));
        let blocks = p.heads_total() * p.seq_q.div_ceil(ROWS_PER_BLOCK);
        let cfg = LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: smem };
        let mut launch = self.gpu.stream.launch_builder(&func);
        launch.arg(q).arg(k).arg(v).arg(lut);
        match &dkv {
            Some(kv) => launch.arg(kv),
            None => launch.arg(&null),
        };
        launch
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
        // SAFETY: argument order and types match ferrite_attention_mma_d*; the
        // strides and buffer sizes were checked against the problem above.
        unsafe { launch.launch(cfg) }.map_err(driver("launching ferrite_attention_mma"))?;
        Ok(())
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

#[cfg(test)]
mod tests {
    //! The kernel's scheme emulated per query row on the CPU — blocks of keys,
    //! running maxima per key, segments of equal maximum, P split into u8
    //! halves with o/256 and o mod 256 in checked int32, the fold every 32768
    //! keys — against the golden model, so the arithmetic is settled before
    //! the GPU tests check the kernel itself.
    use super::MAX_KEYS;
    use ferrite_hw::attention::{attention, AttentionParams, AttentionProblem};
    use ferrite_hw::numerics::{exp2_lut, round_shift, Requant, EXP2_FRAC_BITS};
    use rand::{Rng, SeedableRng};

    const EMASK: i32 = -(3 << 29);
    const FOLD_KEYS: usize = 32768;
    /// The kernel's NARROW_L: rows with l below it rescale o in int32.
    const NARROW_L: i64 = 1 << 22;

    /// The constants above and the host's shared-memory rule are the kernel's.
    #[test]
    fn constants_match_the_kernel() {
        let text = super::ATTENTION_MMA.text;
        for line in [
            "#define EMASK (-(3 << 29))".to_string(),
            format!("#define FOLD_KEYS {FOLD_KEYS}"),
            format!("#define NARROW_L (1ll << {})", NARROW_L.trailing_zeros()),
            format!("#define KV_STAGES {}", super::kv_stages(128)),
            "#define ATTENTION_MMA_BK(dp) ((dp) >= 64 ? 32 : 64)".to_string(),
            "#define ATTENTION_MMA_RING(dp) ((dp) >= 64)".to_string(),
            "#define ATTENTION_MMA_STAGES(dp) (ATTENTION_MMA_RING(dp) ? KV_STAGES : 2)".to_string(),
        ] {
            assert!(text.contains(&line), "attention_mma.cu lacks `{line}`");
        }
        assert_eq!((super::kv_stages(32), super::kv_stages(64)), (2, 6));
        for (d, bk) in [(32, 64), (64, 32), (128, 32)] {
            assert_eq!(super::kernel_for(d, 0).2, bk, "d = {d}");
        }
    }

    fn emulate_row(p: &AttentionProblem, q: &[i8], k: &[i8], v: &[i8], keys: usize, bk: usize) -> Vec<i32> {
        let (d, lut) = (p.dim, exp2_lut());
        let (mut hi, mut lo) = (vec![0i32; d], vec![0i32; d]);
        let (mut m, mut l) = (EMASK, 0i64);
        let add = |acc: &mut [i32], j: usize, w: i32| {
            for (x, a) in acc.iter_mut().enumerate() {
                *a = a.checked_add(w * v[j * d + x] as i32).expect("int32 accumulator overflow");
            }
        };
        for kb in (0..keys).step_by(bk) {
            let js: Vec<usize> = (kb..keys.min(kb + bk)).collect();
            let (mut e, mut frac) = (Vec::new(), Vec::new());
            for &j in &js {
                let s: i32 = (0..d).map(|x| q[x] as i32 * k[j * d + x] as i32).sum();
                let t = round_shift(s as i64 * p.params.score.multiplier as i64, p.params.score.shift);
                e.push(i32::try_from(t >> EXP2_FRAC_BITS).unwrap());
                frac.push((t & 255) as usize);
            }
            let mut run = m;
            let big_m: Vec<i32> = e
                .iter()
                .map(|&x| {
                    run = run.max(x);
                    run
                })
                .collect();
            let pj: Vec<i32> =
                (0..js.len()).map(|i| (lut[frac[i]] >> (big_m[i] as i64 - e[i] as i64).min(31)) as i32).collect();
            let mut cur = m;
            loop {
                for (i, &j) in js.iter().enumerate().filter(|&(i, _)| big_m[i] == cur) {
                    add(&mut hi, j, pj[i] >> 8);
                    add(&mut lo, j, pj[i] & 255);
                    l += pj[i] as i64;
                }
                let Some(&nxt) = big_m.iter().filter(|&&x| x > cur).min() else { break };
                let dl = ((nxt as i64 - cur as i64) as u32).min(62);
                let narrow = l < NARROW_L;
                l = round_shift(l, dl);
                for (h, o) in hi.iter_mut().zip(lo.iter_mut()) {
                    let x = round_shift(*h as i64 * 256 + *o as i64, dl);
                    if narrow {
                        // The kernel's int32 rescale (`rescale_rows`, narrow):
                        // o wrapped to 32 bits, the shift clamped to 31, all of
                        // the result kept in the low accumulator.
                        let o32 = (*h as u32).wrapping_mul(256).wrapping_add(*o as u32) as i32;
                        assert_eq!(o32 as i64, *h as i64 * 256 + *o as i64, "o beyond int32 with l < NARROW_L");
                        let d2 = dl.min(31);
                        let (half, neg) = if d2 > 0 { (1i32 << (d2 - 1), -1) } else { (0, 0) };
                        let sum = o32.checked_add(half).and_then(|y| y.checked_add((o32 >> 31) & neg));
                        let y = sum.expect("narrow rescale overflows int32") >> d2;
                        assert_eq!(y as i64, x, "narrow rescale differs from round_shift");
                        (*h, *o) = (0, y);
                    } else {
                        (*h, *o) = ((x >> 8) as i32, (x & 255) as i32);
                    }
                }
                cur = nxt;
            }
            m = cur;
            if (kb + bk).is_multiple_of(FOLD_KEYS) {
                for (h, o) in hi.iter_mut().zip(lo.iter_mut()) {
                    *h = h.checked_add(*o >> 8).expect("int32 accumulator overflow");
                    *o &= 255;
                }
            }
        }
        let r = (1i64 << 32) / l;
        hi.iter().zip(&lo).map(|(&h, &o)| round_shift((h as i64 * 256 + o as i64) * r, 16) as i32).collect()
    }

    fn emulate(p: &AttentionProblem, q: &[i8], k: &[i8], v: &[i8], bk: usize) -> Vec<i32> {
        let d = p.dim;
        let mut out = Vec::new();
        for h in 0..p.heads_total() {
            let keys = p.keys(h / p.heads);
            let (kh, vh) = (&k[h * p.seq_kv * d..], &v[h * p.seq_kv * d..]);
            for i in 0..p.seq_q {
                let n = if p.causal { keys.min(i + 1) } else { keys };
                let qi = &q[(h * p.seq_q + i) * d..][..d];
                out.extend(emulate_row(p, qi, kh, vh, n, bk));
            }
        }
        out
    }

    fn fixed(p: &AttentionProblem, q: &[i8], k: &[i8], v: &[i8]) -> Vec<i32> {
        let out = attention(p, q, k, v).unwrap();
        (0..out.len()).map(|i| out.get(i)).collect()
    }

    fn problem(d: usize, seq_q: usize, seq_kv: usize, causal: bool, score: Requant) -> AttentionProblem {
        AttentionProblem {
            batch: 1,
            heads: 2,
            seq_q,
            seq_kv,
            dim: d,
            causal,
            kv_len: None,
            params: AttentionParams { score, out: None },
        }
    }

    #[test]
    fn tile_scheme_matches_the_golden_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for case in 0..60 {
            let d = [1, 16, 20, 64, 128][case % 5];
            let (seq_q, seq_kv) = (rng.gen_range(1..40), rng.gen_range(1..300));
            // Scales from gentle (few rises of the maximum) to steep (many).
            let s = [1.0 / 32.0, 1.0 / 8.0, 1.0][case % 3];
            let mut p =
                problem(d, seq_q, seq_kv, case % 2 == 0, AttentionParams::from_scales(d, s, s, s, None).unwrap().score);
            if case % 4 == 1 {
                p.batch = 2;
                p.kv_len = Some(vec![rng.gen_range(1..=seq_kv), seq_kv]);
            }
            let mut gen =
                |n: usize| -> Vec<i8> { (0..n).map(|_| if rng.gen_ratio(1, 8) { -128 } else { rng.gen() }).collect() };
            let nh = p.heads_total();
            let (q, k, v) = (gen(nh * seq_q * d), gen(nh * seq_kv * d), gen(nh * seq_kv * d));
            let want = fixed(&p, &q, &k, &v);
            for bk in [32, 64] {
                assert_eq!(emulate(&p, &q, &k, &v, bk), want, "case {case} bk {bk}: {p:?}");
            }
        }
    }

    /// The bound the host enforces: MAX_KEYS tied keys with p at the LUT's
    /// largest entry and V = −128 put o/256 next to −2^31, and L is folded.
    #[test]
    fn accumulators_hold_at_the_key_limit() {
        let d = 2;
        // s = 2·(−128·−128) for every key; pick Ms so that t's fraction is 255 (largest p).
        let s = 2 * 16384i64;
        let score = (1..)
            .map(|mult| Requant { multiplier: (1 << 30) + mult, shift: 36 })
            .find(|rq| round_shift(s * rq.multiplier as i64, rq.shift) & 255 == 255)
            .unwrap();
        let mut p = problem(d, 1, MAX_KEYS, false, score);
        p.heads = 1;
        let (q, k, v) = (vec![-128i8; d], vec![-128i8; MAX_KEYS * d], vec![-128i8; MAX_KEYS * d]);
        assert_eq!(emulate(&p, &q, &k, &v, 64), fixed(&p, &q, &k, &v));
    }
}
