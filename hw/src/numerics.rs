//! The numerics contract shared by every unit, backend and kernel.
//!
//! These functions are the single definition of Ferrite's integer arithmetic; the
//! RTL, the golden models, and the CUDA/OpenCL twins all implement exactly these
//! (see `docs/numerics.md`).

/// Largest requantization shift. `|acc · mult| < 2^62`, so adding the rounding
/// constant `2^(shift-1)` cannot overflow an i64 for `shift ≤ 62`.
pub const MAX_REQUANT_SHIFT: u32 = 62;

/// Requantization parameters: `y = sat8(round(x · multiplier / 2^shift))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Requant {
    pub multiplier: i32,
    pub shift: u32,
}

impl Requant {
    /// Integer multiplier and shift closest to a real scale, using a 31-bit
    /// mantissa like TFLite's `QuantizeMultiplier`.
    pub fn from_scale(scale: f64) -> Option<Self> {
        if !(scale.is_finite() && scale > 0.0) {
            return None;
        }
        let exp = scale.log2().floor() as i32;
        // scale = mant · 2^exp with mant ∈ [1, 2); multiplier = mant · 2^30.
        let shift = 30 - exp;
        if !(0..=MAX_REQUANT_SHIFT as i32).contains(&shift) {
            return None;
        }
        let m = (scale * 2f64.powi(shift)).round();
        if m > i32::MAX as f64 {
            return None;
        }
        Some(Self { multiplier: m as i32, shift: shift as u32 })
    }
}

/// `x · multiplier / 2^shift`, rounded half away from zero, saturated to int8.
///
/// Hardware form: `p = x·m` (64-bit), `q = (p + 2^(s-1) - [p<0]) >> s`
/// (arithmetic shift), which equals round-half-away-from-zero.
pub fn requantize(x: i32, rq: Requant) -> i8 {
    let p = x as i64 * rq.multiplier as i64;
    let q = round_shift(p, rq.shift);
    q.clamp(i8::MIN as i64, i8::MAX as i64) as i8
}

/// `p / 2^s` rounded half away from zero (`s = 0` returns `p`).
pub fn round_shift(p: i64, s: u32) -> i64 {
    if s == 0 {
        return p;
    }
    let half = 1i64 << (s - 1);
    (p + half - i64::from(p < 0)) >> s
}

/// Fractional bits of log2-domain scores (`t` in the attention unit, logits in the MoE router).
pub const EXP2_FRAC_BITS: u32 = 8;
/// Fractional bits of `2^x` values from the LUT (Q1.14: 1.0 = 2^14), so every
/// value is below 2^15 and multiplies as a 16-bit signed operand.
pub const EXP2_ONE_BITS: u32 = 14;

/// `2^(i / 2^EXP2_FRAC_BITS)` in Q1.14 for every fraction `i`, rounded to nearest:
/// the LUT the hardware holds, values in [2^14, 2^15).
pub fn exp2_lut() -> Vec<u32> {
    (0..1u32 << EXP2_FRAC_BITS)
        .map(|i| {
            (2f64.powf(i as f64 / (1u32 << EXP2_FRAC_BITS) as f64) * (1u32 << EXP2_ONE_BITS) as f64).round() as u32
        })
        .collect()
}

/// `2^(u / 2^F)` in Q1.14 for a log2-domain value `u < 2^F` (so the result is < 2):
/// LUT on the fractional bits, right shift by the (non-positive) integer part.
pub fn exp2_fixed(lut: &[u32], u: i64) -> u32 {
    debug_assert!(u < 1 << EXP2_FRAC_BITS);
    let ip = u >> EXP2_FRAC_BITS; // floor, ≤ 0
    let fp = (u & ((1 << EXP2_FRAC_BITS) - 1)) as usize;
    let sh = (-ip).min(31) as u32;
    lut[fp] >> sh
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_shift_is_half_away_from_zero() {
        let cases =
            [(3, 1, 2), (-3, 1, -2), (-1, 1, -1), (1, 1, 1), (-5, 2, -1), (-6, 2, -2), (5, 2, 1), (6, 2, 2), (7, 0, 7)];
        for (p, s, want) in cases {
            assert_eq!(round_shift(p, s), want, "{p} >> {s}");
            let exact = p as f64 / 2f64.powi(s as i32);
            assert_eq!(want as f64, (exact.abs() + 0.5).floor().copysign(exact));
        }
    }

    #[test]
    fn requantize_saturates() {
        let rq = Requant { multiplier: 1 << 30, shift: 30 };
        assert_eq!(requantize(1000, rq), 127);
        assert_eq!(requantize(-1000, rq), -128);
        assert_eq!(requantize(-128, rq), -128);
        assert_eq!(requantize(i32::MIN, Requant { multiplier: i32::MIN, shift: 62 }), 1);
    }

    #[test]
    fn from_scale_round_trips() {
        for scale in [1.0, 0.5, 0.0123, 3.7e-5, 1.9] {
            let rq = Requant::from_scale(scale).unwrap();
            let back = rq.multiplier as f64 / 2f64.powi(rq.shift as i32);
            assert!((back / scale - 1.0).abs() < 1e-8, "{scale} -> {rq:?}");
        }
        assert!(Requant::from_scale(0.0).is_none());
        assert!(Requant::from_scale(f64::NAN).is_none());
    }
}
