//! Bit-exact golden model of the MoE router unit, and its float64 reference.
//!
//! Per token (see docs/numerics.md, "MoE router"):
//! ```text
//! z[e] = Σ_h x[h]·W[e][h] (+ bias[e])          exact int32, wrapping bias add
//! sel  = the k largest z, in rank order; ties → lower expert index
//! t[e] = round(z[e] · M / 2^S)                  log2 domain, F = 8 fraction bits
//! p[e] = exp2_fixed(t[e] − max t)               Q1.14, the attention unit's LUT
//! L    = Σ_{e<E} p[e]  (softmax-top-k)  or  Σ_{i<k} p[sel_i]  (top-k-softmax, renormalize)
//! r    = floor(2^40 / L)                        one reciprocal per token
//! w_i  = min(round(p[sel_i] · r / 2^24), 65535) Q0.16
//! ```
//! Capacity `C = min(ceil(cf·T·k/E), T)`; tokens take slots in token order:
//! slot = load[e] if load[e] < C, else −1 (dropped); load[e] counts every
//! token routed to e, kept or dropped.
use super::config::{GateMode, MoeProblem, RECORD_BYTES, REC_IDS, REC_SLOTS, REC_WEIGHTS};
use crate::numerics::{exp2_fixed, exp2_lut, round_shift, EXP2_FRAC_BITS};
use crate::unit::{check_bias, check_len};
use crate::HwError;

/// Numerator of the per-token reciprocal `r = floor(2^RECIP_BITS / L)`.
pub const RECIP_BITS: u32 = 40;
/// `w = round(p·r / 2^WEIGHT_SHIFT)`: p/L in Q0.16.
pub const WEIGHT_SHIFT: u32 = RECIP_BITS - 16;

/// What the unit writes, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoeOutput {
    /// T×k expert ids, rank order (largest logit first).
    pub experts: Vec<u8>,
    /// T×k gate weights, unsigned Q0.16 (65535 stands for 1.0).
    pub weights: Vec<u16>,
    /// T×k slots in the chosen expert's buffer, −1 when dropped.
    pub slots: Vec<i32>,
    /// Per expert: tokens routed to it (kept or dropped).
    pub load: Vec<u32>,
    /// (token, choice) pairs dropped for lack of capacity.
    pub dropped: u32,
    /// The capacity used: `min(ceil(cf·T·k/E), T)`, or T when unlimited.
    pub capacity: u32,
    /// Per expert, its kept tokens in slot order (at most `capacity`).
    pub dispatch: Vec<Vec<u32>>,
}

impl MoeOutput {
    /// Token `t`'s 64-byte route record as the unit writes it (unused choices zero).
    pub fn record(&self, t: usize, k: usize) -> [u8; RECORD_BYTES] {
        let mut r = [0u8; RECORD_BYTES];
        for i in 0..k {
            r[REC_IDS + i] = self.experts[t * k + i];
            r[REC_WEIGHTS + 2 * i..REC_WEIGHTS + 2 * i + 2].copy_from_slice(&self.weights[t * k + i].to_le_bytes());
            r[REC_SLOTS + 4 * i..REC_SLOTS + 4 * i + 4].copy_from_slice(&self.slots[t * k + i].to_le_bytes());
        }
        r
    }

    /// Rebuild ids, weights and slots from route records (the inverse of [`Self::record`]).
    pub fn parse_records(bytes: &[u8], tokens: usize, k: usize) -> (Vec<u8>, Vec<u16>, Vec<i32>) {
        let (mut ids, mut ws, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        for rec in bytes.chunks(RECORD_BYTES).take(tokens) {
            for i in 0..k {
                ids.push(rec[REC_IDS + i]);
                ws.push(u16::from_le_bytes([rec[REC_WEIGHTS + 2 * i], rec[REC_WEIGHTS + 2 * i + 1]]));
                let s = &rec[REC_SLOTS + 4 * i..REC_SLOTS + 4 * i + 4];
                slots.push(i32::from_le_bytes([s[0], s[1], s[2], s[3]]));
            }
        }
        (ids, ws, slots)
    }
}

/// Check operand lengths (host or device buffers) against the problem's shapes.
pub fn check_operands(p: &MoeProblem, x_len: usize, w_len: usize, bias: Option<&[i32]>) -> Result<(), HwError> {
    p.validate()?;
    check_len("x", x_len, p.tokens * p.hidden, || format!("T×H = {}×{}", p.tokens, p.hidden))?;
    check_len("W_g", w_len, p.experts * p.hidden, || format!("E×H = {}×{}", p.experts, p.hidden))?;
    check_bias(p.bias, bias, p.experts, || format!("E = {}", p.experts))
}

/// Exact int32 logits of token `t`.
pub fn logits(p: &MoeProblem, x: &[i8], w: &[i8], bias: Option<&[i32]>, t: usize) -> Vec<i32> {
    let h = p.hidden;
    (0..p.experts)
        .map(|e| {
            let dot = x[t * h..(t + 1) * h]
                .iter()
                .zip(&w[e * h..(e + 1) * h])
                .fold(0i32, |acc, (&a, &b)| acc.wrapping_add(a as i32 * b as i32));
            dot.wrapping_add(bias.map_or(0, |b| b[e]))
        })
        .collect()
}

/// The k largest values in rank order; ties go to the lower index.
pub fn top_k(z: &[i32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..z.len()).collect();
    // Stable sort: equal logits keep ascending expert order.
    order.sort_by(|&a, &b| z[b].cmp(&z[a]));
    order.truncate(k);
    order
}

/// `p[e] = exp2_fixed(t[e] − max t)` in Q1.14 for one token's logits.
fn exp_terms(p: &MoeProblem, lut: &[u32], z: &[i32]) -> Vec<i64> {
    let t: Vec<i64> = z.iter().map(|&v| round_shift(v as i64 * p.logit.multiplier as i64, p.logit.shift)).collect();
    let t_max = *t.iter().max().expect("E ≥ 1");
    t.iter().map(|&v| exp2_fixed(lut, v - t_max) as i64).collect()
}

/// `floor(2^40 / L)`; L ≥ 2^14 whenever it includes the top-1 expert, whose p is exactly 1.0.
fn reciprocal(l: i64) -> i64 {
    (1i64 << RECIP_BITS) / l
}

/// `min(round(p · r / 2^24), 65535)`: p/L in Q0.16.
fn weight(p: i64, r: i64) -> u16 {
    round_shift(p * r, WEIGHT_SHIFT).min(u16::MAX as i64) as u16
}

/// Softmax over all E experts of one token's logits, Q0.16, with the unit's
/// arithmetic: entry e equals the weight `route` gives expert e in
/// softmax-top-k mode without renormalization. Expert-choice routing ranks
/// tokens by these.
pub fn softmax_q16(p: &MoeProblem, z: &[i32]) -> Vec<u16> {
    let pe = exp_terms(p, &exp2_lut(), z);
    let r = reciprocal(pe.iter().sum());
    pe.iter().map(|&v| weight(v, r)).collect()
}

/// Whether the k weights are normalized over the chosen experts only.
fn over_chosen(p: &MoeProblem) -> bool {
    p.mode == GateMode::TopkSoftmax || p.renormalize
}

/// The golden model: exactly what the unit writes.
pub fn route(p: &MoeProblem, x: &[i8], w: &[i8], bias: Option<&[i32]>) -> Result<MoeOutput, HwError> {
    check_operands(p, x.len(), w.len(), bias)?;
    let lut = exp2_lut();
    let (k, cap) = (p.top_k, p.capacity_slots());
    let mut out = MoeOutput {
        experts: Vec::with_capacity(p.tokens * k),
        weights: Vec::with_capacity(p.tokens * k),
        slots: Vec::with_capacity(p.tokens * k),
        load: vec![0; p.experts],
        dropped: 0,
        capacity: cap as u32,
        dispatch: vec![Vec::new(); p.experts],
    };
    for tok in 0..p.tokens {
        let z = logits(p, x, w, bias, tok);
        let sel = top_k(&z, k);
        let pe = exp_terms(p, &lut, &z);
        let l: i64 = if over_chosen(p) { sel.iter().map(|&e| pe[e]).sum() } else { pe.iter().sum() };
        let r = reciprocal(l);
        for &e in &sel {
            out.experts.push(e as u8);
            out.weights.push(weight(pe[e], r));
            let slot = out.load[e] as usize;
            if slot < cap {
                out.slots.push(slot as i32);
                out.dispatch[e].push(tok as u32);
            } else {
                out.slots.push(-1);
                out.dropped += 1;
            }
            out.load[e] += 1;
        }
    }
    Ok(out)
}

/// Float64 router on the same integer inputs: real log2-domain scale, real
/// exp2 and division, top-k on the probabilities (softmax-top-k, as a float
/// framework does) or on the logits (top-k-softmax).
#[derive(Debug, Clone, PartialEq)]
pub struct RouterF64 {
    /// T×k chosen experts.
    pub experts: Vec<usize>,
    /// T×k weights in [0, 1].
    pub weights: Vec<f64>,
    /// Per token, the value sorted on for each expert (probability or logit) — to tell near-ties.
    pub keys: Vec<Vec<f64>>,
}

pub fn route_f64(p: &MoeProblem, x: &[i8], w: &[i8], bias: Option<&[i32]>) -> Result<RouterF64, HwError> {
    check_operands(p, x.len(), w.len(), bias)?;
    let scale = p.logit.multiplier as f64 / 2f64.powi(p.logit.shift as i32) / (1u32 << EXP2_FRAC_BITS) as f64;
    let mut r = RouterF64 { experts: Vec::new(), weights: Vec::new(), keys: Vec::new() };
    for tok in 0..p.tokens {
        let z: Vec<f64> = logits(p, x, w, bias, tok).iter().map(|&v| v as f64 * scale).collect();
        let zmax = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e2: Vec<f64> = z.iter().map(|&v| (v - zmax).exp2()).collect();
        let sum: f64 = e2.iter().sum();
        let keys: Vec<f64> =
            if p.mode == GateMode::SoftmaxTopk { e2.iter().map(|v| v / sum).collect() } else { z.clone() };
        let mut order: Vec<usize> = (0..p.experts).collect();
        order.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]));
        order.truncate(p.top_k);
        let denom = if over_chosen(p) { order.iter().map(|&e| e2[e]).sum() } else { sum };
        for &e in &order {
            r.experts.push(e);
            r.weights.push(e2[e] / denom);
        }
        r.keys.push(keys);
    }
    Ok(r)
}

/// How the golden router's result compares with the float64 router's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct F64Agreement {
    /// Tokens whose chosen sets differ at a float near-tie across the k
    /// boundary (keys equal within 10⁻¹² relative): allowed by the contract.
    pub near_ties: usize,
    /// Tokens whose chosen sets differ without a near-tie: contract violations.
    pub disagreements: usize,
    /// Largest |w_fixed − 65536·w_float| over tokens with equal sets, in Q0.16 LSB.
    pub max_weight_err_lsb: f64,
}

/// Compare `fixed` (from [`route`]) with `real` (from [`route_f64`]) as
/// docs/numerics.md states the contract.
pub fn agreement(p: &MoeProblem, fixed: &MoeOutput, real: &RouterF64) -> F64Agreement {
    let k = p.top_k;
    let mut a = F64Agreement::default();
    for tok in 0..p.tokens {
        let ours: Vec<usize> = fixed.experts[tok * k..(tok + 1) * k].iter().map(|&v| v as usize).collect();
        let theirs = &real.experts[tok * k..(tok + 1) * k];
        let outside: Vec<usize> = ours.iter().copied().filter(|e| !theirs.contains(e)).collect();
        if !outside.is_empty() {
            let keys = &real.keys[tok];
            let kth = keys[theirs[k - 1]];
            if outside.iter().all(|&e| (kth - keys[e]).abs() <= 1e-12 * kth.abs().max(1e-300)) {
                a.near_ties += 1;
            } else {
                a.disagreements += 1;
            }
            continue;
        }
        for (i, chosen) in ours.iter().enumerate() {
            let j = theirs.iter().position(|x| x == chosen).expect("equal sets");
            let err = (fixed.weights[tok * k + i] as f64 - real.weights[tok * k + j] * 65536.0).abs();
            a.max_weight_err_lsb = a.max_weight_err_lsb.max(err);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe::config::CapacityFactor;
    use rand::{Rng, SeedableRng};

    fn problem(t: usize, h: usize, e: usize, k: usize, mode: GateMode) -> MoeProblem {
        MoeProblem::new(t, h, e, k, mode, 1.0 / 32.0, 1.0 / 64.0).unwrap()
    }

    fn data(p: &MoeProblem, seed: u64) -> (Vec<i8>, Vec<i8>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let x = (0..p.tokens * p.hidden).map(|_| rng.gen()).collect();
        let w = (0..p.experts * p.hidden).map(|_| rng.gen_range(-40..=40)).collect();
        (x, w)
    }

    /// The documented tolerance of a Q0.16 weight against the float router
    /// (docs/numerics.md): the 2^-8 log2 grid of t dominates.
    fn weight_tol(wf: f64, terms: usize) -> f64 {
        65536.0 * (2.8e-3 * wf + (1.0 + terms as f64 * wf) / 16384.0) + 2.0
    }

    #[test]
    fn agrees_with_float64_router() {
        for (mode, renorm) in
            [(GateMode::SoftmaxTopk, false), (GateMode::SoftmaxTopk, true), (GateMode::TopkSoftmax, false)]
        {
            for (t, h, e, k, seed) in [(64, 256, 64, 8, 1), (64, 64, 8, 2, 2), (32, 1024, 256, 4, 3), (16, 16, 1, 1, 4)]
            {
                let p = MoeProblem { renormalize: renorm, ..problem(t, h, e, k, mode) };
                let (x, w) = data(&p, seed);
                let fixed = route(&p, &x, &w, None).unwrap();
                let real = route_f64(&p, &x, &w, None).unwrap();
                let (mut near_ties, mut worst) = (0, 0f64);
                for tok in 0..t {
                    let ours: Vec<usize> = fixed.experts[tok * k..(tok + 1) * k].iter().map(|&v| v as usize).collect();
                    let theirs = &real.experts[tok * k..(tok + 1) * k];
                    let (mut a, mut b) = (ours.clone(), theirs.to_vec());
                    a.sort();
                    b.sort();
                    if a != b {
                        // Allowed only at a float near-tie across the k boundary.
                        let keys = &real.keys[tok];
                        let kth = keys[theirs[k - 1]];
                        let outside = ours.iter().filter(|e| !theirs.contains(e)).map(|&e| keys[e]);
                        for v in outside {
                            assert!(
                                (kth - v).abs() <= 1e-12 * kth.abs().max(1e-300),
                                "token {tok}: not a near-tie: {kth} vs {v}"
                            );
                        }
                        near_ties += 1;
                        continue;
                    }
                    let terms = if over_chosen(&p) { k } else { e };
                    for (i, chosen) in ours.iter().enumerate() {
                        let j = theirs.iter().position(|x| x == chosen).unwrap();
                        let wf = real.weights[tok * k + j];
                        let err = (fixed.weights[tok * k + i] as f64 - wf * 65536.0).abs();
                        assert!(
                            err <= weight_tol(wf, terms),
                            "token {tok} choice {i}: {} vs {}",
                            fixed.weights[tok * k + i],
                            wf * 65536.0
                        );
                        worst = worst.max(err);
                    }
                }
                println!("{mode:?} renorm={renorm} T={t} H={h} E={e} k={k}: {near_ties} near-ties, worst weight error {worst:.1} LSB");
            }
        }
    }

    #[test]
    fn ties_go_to_the_lower_index() {
        let p = problem(3, 4, 6, 3, GateMode::SoftmaxTopk);
        let out = route(&p, &[0; 12], &[1; 24], None).unwrap();
        assert_eq!(out.experts, vec![0, 1, 2, 0, 1, 2, 0, 1, 2]);
        // All-equal logits: every expert has p = 1.0, weights 1/6 each.
        assert!(out.weights.iter().all(|&w| w == 10923), "{:?}", out.weights);
        let p = MoeProblem { mode: GateMode::TopkSoftmax, ..p };
        let out = route(&p, &[0; 12], &[1; 24], None).unwrap();
        assert!(out.weights.iter().all(|&w| w == 21845), "{:?}", out.weights);
    }

    #[test]
    fn one_expert_gets_full_weight() {
        let p = problem(2, 4, 1, 1, GateMode::SoftmaxTopk);
        let out = route(&p, &[5; 8], &[7; 4], None).unwrap();
        assert_eq!(out.weights, vec![65535, 65535]);
        assert_eq!(out.experts, vec![0, 0]);
    }

    #[test]
    fn capacity_fills_in_token_order() {
        // Every token prefers expert 2 (largest bias): capacity ceil(1·5·1/4) = 2.
        let p = MoeProblem {
            bias: true,
            capacity: Some(CapacityFactor::ONE),
            ..problem(5, 2, 4, 1, GateMode::TopkSoftmax)
        };
        let out = route(&p, &[1; 10], &[0; 8], Some(&[0, 0, 100, 0])).unwrap();
        assert_eq!(out.capacity, 2);
        assert_eq!(out.slots, vec![0, 1, -1, -1, -1]);
        assert_eq!(out.dropped, 3);
        assert_eq!(out.load, vec![0, 0, 5, 0]);
        assert_eq!(out.dispatch[2], vec![0, 1]);
        let rec = out.record(1, 1);
        let (ids, ws, slots) = MoeOutput::parse_records(&rec, 1, 1);
        assert_eq!((ids[0], ws[0], slots[0]), (2, 65535, 1));
    }

    #[test]
    fn shape_errors() {
        let p = problem(2, 4, 3, 1, GateMode::SoftmaxTopk);
        assert!(route(&p, &[0; 7], &[0; 12], None).unwrap_err().to_string().contains("x has 7"));
        assert!(route(&p, &[0; 8], &[0; 12], Some(&[0; 3])).unwrap_err().to_string().contains("bias flag is off"));
    }
}
