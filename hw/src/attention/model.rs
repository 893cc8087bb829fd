//! Bit-exact golden model of the streaming attention unit, and its float64
//! reference. Per query row, keys are consumed in order with the recurrence
//!
//! ```text
//! s = q·k (int32)             t = round(s · Ms / 2^Ss)      (log2 domain, F frac bits)
//! e = floor(t)  (integer)     first key: m = e, δ = 0;  e > m: δ = e − m, m = e;  else δ = 0
//! p = 2^((t − m·2^F) / 2^F)   (Q1.14: LUT on the fraction, shift by the integer part)
//! l = rnd(l / 2^δ) + p        o[x] = rnd(o[x] / 2^δ) + p · v[x]
//! ```
//! `m` stays on an integer grid, so every rescale is an exact shift (rounded
//! half away from zero). At the end `r = floor(2^32 / l)` (a 32-step divider),
//! the output is `avg = round(o · r / 2^16)`, the attention output in V units
//! as Q16 fixed point, optionally requantized to int8.
use super::AttentionProblem;
use crate::numerics::{exp2_fixed, exp2_lut, requantize, round_shift, EXP2_FRAC_BITS};
use crate::unit::{check_len, Output};
use crate::HwError;

/// Row-major [batch·heads][seq_q][dim]: Q16 fixed point in V's integer units
/// (`I32`), or int8 when requantized.
pub type AttentionOutput = Output;

pub fn check_operands(p: &AttentionProblem, q: &[i8], k: &[i8], v: &[i8]) -> Result<(), HwError> {
    p.validate()?;
    let dims = |seq: usize| move || format!("batch·heads={}, seq={seq}, dim={}", p.heads_total(), p.dim);
    check_len("Q", q.len(), p.heads_total() * p.seq_q * p.dim, dims(p.seq_q))?;
    check_len("K", k.len(), p.heads_total() * p.seq_kv * p.dim, dims(p.seq_kv))?;
    check_len("V", v.len(), p.heads_total() * p.seq_kv * p.dim, dims(p.seq_kv))
}

/// Keys that query `i` of batch entry `b` attends to.
fn keys_for(p: &AttentionProblem, b: usize, i: usize) -> usize {
    let keys = p.keys(b);
    if p.causal {
        keys.min(i + 1)
    } else {
        keys
    }
}

/// The golden model: exactly what the unit writes to O.
pub fn attention(p: &AttentionProblem, q: &[i8], k: &[i8], v: &[i8]) -> Result<AttentionOutput, HwError> {
    check_operands(p, q, k, v)?;
    let lut = exp2_lut();
    let d = p.dim;
    let mut fixed = Vec::with_capacity(p.heads_total() * p.seq_q * d);
    let mut o = vec![0i64; d];
    for h in 0..p.heads_total() {
        let b = h / p.heads;
        let (qh, kh, vh) = (&q[h * p.seq_q * d..], &k[h * p.seq_kv * d..], &v[h * p.seq_kv * d..]);
        for i in 0..p.seq_q {
            let qi = &qh[i * d..(i + 1) * d];
            let (mut m, mut l) = (0i64, 0i64);
            o.iter_mut().for_each(|x| *x = 0);
            for j in 0..keys_for(p, b, i) {
                let kj = &kh[j * d..(j + 1) * d];
                let s: i32 = qi.iter().zip(kj).map(|(&a, &b)| a as i32 * b as i32).sum();
                let t = round_shift(s as i64 * p.params.score.multiplier as i64, p.params.score.shift);
                let e = t >> EXP2_FRAC_BITS;
                let delta = if j == 0 {
                    m = e;
                    0
                } else if e > m {
                    let dl = e - m;
                    m = e;
                    dl
                } else {
                    0
                };
                let pj = exp2_fixed(&lut, t - (m << EXP2_FRAC_BITS)) as i64;
                let shift = delta.min(62) as u32;
                l = round_shift(l, shift) + pj;
                for (x, ox) in o.iter_mut().enumerate() {
                    *ox = round_shift(*ox, shift) + pj * vh[j * d + x] as i64;
                }
            }
            // l ≥ 2^14: the running maximum's own key contributes p = 1.0.
            let r = (1i64 << 32) / l;
            fixed.extend(o.iter().map(|&ox| round_shift(ox * r, 16) as i32));
        }
    }
    Ok(match p.params.out {
        None => AttentionOutput::I32(fixed),
        Some(rq) => AttentionOutput::I8(fixed.into_iter().map(|x| requantize(x, rq)).collect()),
    })
}

/// Q, K and V of one problem.
type Operands<'a> = (&'a [i8], &'a [i8], &'a [i8]);

/// Query `i` of head `h` as a one-query problem over exactly its keys, with
/// its slices of Q, K and V: the model computes every row on its own.
fn row_problem<'a>(
    p: &AttentionProblem,
    (q, k, v): Operands<'a>,
    (h, i): (usize, usize),
) -> Result<(AttentionProblem, Operands<'a>), HwError> {
    if h >= p.heads_total() || i >= p.seq_q {
        return Err(HwError::Problem(format!(
            "row ({h}, {i}) outside {} heads × {} queries",
            p.heads_total(),
            p.seq_q
        )));
    }
    let (d, keys) = (p.dim, keys_for(p, h / p.heads, i));
    let one = AttentionProblem { batch: 1, heads: 1, seq_q: 1, seq_kv: keys, causal: false, kv_len: None, ..p.clone() };
    let kv = h * p.seq_kv * d..(h * p.seq_kv + keys) * d;
    Ok((one, (&q[(h * p.seq_q + i) * d..][..d], &k[kv.clone()], &v[kv])))
}

/// The golden model on some (head, query) rows only, for checks of problems
/// too large to run whole: their output rows in that order, the same values
/// as those rows of [`attention`].
pub fn attention_rows(
    p: &AttentionProblem,
    q: &[i8],
    k: &[i8],
    v: &[i8],
    rows: &[(usize, usize)],
) -> Result<AttentionOutput, HwError> {
    check_operands(p, q, k, v)?;
    let (mut fixed, mut int8) = (Vec::new(), Vec::new());
    for &row in rows {
        let (one, (q1, k1, v1)) = row_problem(p, (q, k, v), row)?;
        match attention(&one, q1, k1, v1)? {
            AttentionOutput::I32(x) => fixed.extend(x),
            AttentionOutput::I8(x) => int8.extend(x),
        }
    }
    Ok(if p.params.out.is_some() { AttentionOutput::I8(int8) } else { AttentionOutput::I32(fixed) })
}

/// [`attention_f64`] on the same rows as [`attention_rows`].
pub fn attention_f64_rows(
    p: &AttentionProblem,
    q: &[i8],
    k: &[i8],
    v: &[i8],
    rows: &[(usize, usize)],
) -> Result<Vec<f64>, HwError> {
    check_operands(p, q, k, v)?;
    let mut out = Vec::new();
    for &row in rows {
        let (one, (q1, k1, v1)) = row_problem(p, (q, k, v), row)?;
        out.extend(attention_f64(&one, q1, k1, v1)?);
    }
    Ok(out)
}

/// Float64 attention on the same (integer-valued) inputs with the real score
/// scale the parameters encode: softmax(q·k · c) · v, in V's units.
pub fn attention_f64(p: &AttentionProblem, q: &[i8], k: &[i8], v: &[i8]) -> Result<Vec<f64>, HwError> {
    check_operands(p, q, k, v)?;
    let d = p.dim;
    // score multiplier maps to log2 units · 2^F; undo both to get natural-log units.
    let c = p.params.score.multiplier as f64 / 2f64.powi(p.params.score.shift as i32) / (1u32 << EXP2_FRAC_BITS) as f64
        * std::f64::consts::LN_2;
    let mut out = Vec::with_capacity(p.heads_total() * p.seq_q * d);
    for h in 0..p.heads_total() {
        let b = h / p.heads;
        let (qh, kh, vh) = (&q[h * p.seq_q * d..], &k[h * p.seq_kv * d..], &v[h * p.seq_kv * d..]);
        for i in 0..p.seq_q {
            let n = keys_for(p, b, i);
            let s: Vec<f64> =
                (0..n).map(|j| (0..d).map(|x| qh[i * d + x] as f64 * kh[j * d + x] as f64).sum::<f64>() * c).collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|&x| (x - mx).exp()).collect();
            let sum: f64 = w.iter().sum();
            for x in 0..d {
                out.push((0..n).map(|j| w[j] * vh[j * d + x] as f64).sum::<f64>() / sum);
            }
        }
    }
    Ok(out)
}

/// Relative Frobenius error of a Q16 fixed-point output against the float64 reference.
pub fn rel_fro_error(out: &AttentionOutput, reference: &[f64]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (i, &r) in reference.iter().enumerate() {
        let got = match out {
            AttentionOutput::I32(_) => out.get(i) as f64 / 65536.0,
            AttentionOutput::I8(_) => out.get(i) as f64,
        };
        num += (got - r) * (got - r);
        den += r * r;
    }
    if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::AttentionParams;
    use rand::{Rng, SeedableRng};

    fn gaussian(rng: &mut rand::rngs::StdRng, n: usize, sigma: f64) -> Vec<i8> {
        (0..n)
            .map(|_| {
                // Box–Muller
                let (u1, u2): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen());
                let g = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                (g * sigma).round().clamp(-128.0, 127.0) as i8
            })
            .collect()
    }

    fn problem(d: usize, seq_q: usize, seq_kv: usize, causal: bool) -> AttentionProblem {
        // Scales for unit-variance reals from int8 with σ = 32 LSB.
        let s = 1.0 / 32.0;
        AttentionProblem {
            batch: 1,
            heads: 1,
            seq_q,
            seq_kv,
            dim: d,
            causal,
            kv_len: None,
            params: AttentionParams::from_scales(d, s, s, s, None).unwrap(),
        }
    }

    #[test]
    fn error_against_f64_is_below_one_percent() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        for (d, n, causal) in [(64, 256, true), (64, 4096, false), (128, 4096, false), (128, 1024, true)] {
            // 32 query rows against n keys keep the float64 reference cheap.
            let p = problem(d, 32, n, causal);
            let q = gaussian(&mut rng, 32 * d, 32.0);
            let k = gaussian(&mut rng, n * d, 32.0);
            let v = gaussian(&mut rng, n * d, 32.0);
            let out = attention(&p, &q, &k, &v).unwrap();
            let err = rel_fro_error(&out, &attention_f64(&p, &q, &k, &v).unwrap());
            println!(
                "attention golden vs float64: d={d} N={n} causal={causal}: relative Frobenius error {:.4}%",
                100.0 * err
            );
            assert!(err <= 0.01, "d={d} N={n}: {err}");
        }
    }

    #[test]
    fn sampled_rows_equal_the_full_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut p = problem(16, 9, 13, true);
        p.batch = 2;
        p.kv_len = Some(vec![13, 5]);
        let n = |s: usize| 2 * s * 16;
        let (q, k, v) =
            (gaussian(&mut rng, n(9), 32.0), gaussian(&mut rng, n(13), 32.0), gaussian(&mut rng, n(13), 32.0));
        let rows = [(0, 0), (0, 8), (1, 3), (1, 8)];
        let full = attention(&p, &q, &k, &v).unwrap();
        let full_f64 = attention_f64(&p, &q, &k, &v).unwrap();
        let some = attention_rows(&p, &q, &k, &v, &rows).unwrap();
        let some_f64 = attention_f64_rows(&p, &q, &k, &v, &rows).unwrap();
        for (r, &(h, i)) in rows.iter().enumerate() {
            for x in 0..16 {
                assert_eq!(some.get(r * 16 + x), full.get((h * 9 + i) * 16 + x), "row ({h}, {i})");
                assert_eq!(some_f64[r * 16 + x], full_f64[(h * 9 + i) * 16 + x]);
            }
        }
        assert!(attention_rows(&p, &q, &k, &v, &[(2, 0)]).is_err());
    }

    #[test]
    fn single_key_returns_v() {
        let p = problem(16, 1, 1, false);
        let v: Vec<i8> = (0..16).map(|x| x as i8 * 8 - 64).collect();
        let out = attention(&p, &[3; 16], &[-128; 16], &v).unwrap();
        // p·v·floor(2^32/p)/2^16 is v in Q16 up to the divider's floor: < 256 units.
        for (x, &vx) in v.iter().enumerate() {
            assert!((out.get(x) - ((vx as i32) << 16)).abs() < 256, "{x}: {}", out.get(x));
        }
    }

    #[test]
    fn shape_errors() {
        let p = problem(16, 2, 3, false);
        assert!(attention(&p, &[0; 31], &[0; 48], &[0; 48]).unwrap_err().to_string().contains("Q has 31"));
        let p = AttentionProblem { seq_kv: 0, ..p };
        assert!(p.validate().is_err());
    }
}
