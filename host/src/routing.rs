//! What a training or serving stack wants from a router beyond its outputs:
//! the Switch-Transformer auxiliary losses, a per-expert load picture, and
//! expert-choice routing as the alternative policy (CPU only).
//!
//! The unit writes per-token choices and per-expert loads, not the full
//! probability table, so the losses recompute the exact int32 logits on the
//! host (the same integers the unit computes) and evaluate them in float64.
use ferrite_hw::moe::model::{check_operands, logits, softmax_q16};
use ferrite_hw::moe::{MoeOutput, MoeProblem};
use ferrite_hw::numerics::EXP2_FRAC_BITS;
use ferrite_hw::HwError;

/// Real value of one LSB of generated tokens and gate weights, for demos,
/// comparisons and benches: uniform int8 tokens span [-4, 4) and uniform int8
/// weights span nn.Linear's initial range ±1/√H, so the logits have σ ≈ 0.77
/// nats whatever H is — a router early in training, with few float near-ties.
pub fn generated_scales(hidden: usize) -> (f64, f64) {
    (1.0 / 32.0, 1.0 / (128.0 * (hidden.max(1) as f64).sqrt()))
}

/// Auxiliary router losses of one batch, as the papers define them.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterLosses {
    /// Switch Transformer (Fedus et al. 2021) load-balancing loss `E · Σ f_i · P_i`
    /// (before its α): 1.0 when perfectly balanced, E when every token picks one expert.
    pub load_balancing: f64,
    /// ST-MoE (Zoph et al. 2022) router z-loss: mean over tokens of `logsumexp(z)²`, z in nats.
    pub z_loss: f64,
    /// f_i: fraction of the T·k choices routed to expert i (kept or dropped).
    pub fraction: Vec<f64>,
    /// P_i: mean over tokens of the float64 softmax probability of expert i.
    pub mean_prob: Vec<f64>,
}

/// Real value (nats) of one LSB of an int32 logit: the unit's log2-domain
/// scale `M / 2^S / 2^F`, times ln 2.
pub fn logit_scale(p: &MoeProblem) -> f64 {
    p.logit.multiplier as f64 / 2f64.powi(p.logit.shift as i32) / (1u32 << EXP2_FRAC_BITS) as f64
        * std::f64::consts::LN_2
}

/// The losses of `out`, the router's result for `x`, `w` and `bias`.
pub fn losses(
    p: &MoeProblem,
    out: &MoeOutput,
    x: &[i8],
    w: &[i8],
    bias: Option<&[i32]>,
) -> Result<RouterLosses, HwError> {
    check_operands(p, x.len(), w.len(), bias)?;
    if out.load.len() != p.experts {
        return Err(HwError::Problem(format!("{} loads for {} experts", out.load.len(), p.experts)));
    }
    let scale = logit_scale(p);
    let (mut mean_prob, mut z_loss) = (vec![0.0; p.experts], 0.0);
    for t in 0..p.tokens {
        let z: Vec<f64> = logits(p, x, w, bias, t).iter().map(|&v| v as f64 * scale).collect();
        let zmax = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|v| (v - zmax).exp()).collect();
        let sum: f64 = e.iter().sum();
        z_loss += (zmax + sum.ln()).powi(2);
        for (m, v) in mean_prob.iter_mut().zip(&e) {
            *m += v / sum;
        }
    }
    let tokens = p.tokens as f64;
    mean_prob.iter_mut().for_each(|m| *m /= tokens);
    let choices = tokens * p.top_k as f64;
    let fraction: Vec<f64> = out.load.iter().map(|&n| n as f64 / choices).collect();
    let load_balancing = p.experts as f64 * fraction.iter().zip(&mean_prob).map(|(f, m)| f * m).sum::<f64>();
    Ok(RouterLosses { load_balancing, z_loss: z_loss / tokens, fraction, mean_prob })
}

/// Per-expert load as text: a sparkline of every expert (64 per line), then
/// one bar per expert when there are few enough to read, with capacity and drops.
pub fn load_histogram(load: &[u32], capacity: u32) -> String {
    const TICKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    const BAR: usize = 40;
    let max = load.iter().copied().max().unwrap_or(0).max(1);
    let mut s = String::new();
    for (row, chunk) in load.chunks(64).enumerate() {
        let line: String = chunk.iter().map(|&n| TICKS[(n as usize * 7).div_ceil(max as usize).min(7)]).collect();
        s += &format!("e{:<4} {line}\n", row * 64);
    }
    let total: u64 = load.iter().map(|&n| n as u64).sum();
    let mean = total as f64 / load.len().max(1) as f64;
    let min = load.iter().copied().min().unwrap_or(0);
    s += &format!(
        "load   min {min}, mean {mean:.1}, max {max} (max/mean {:.2}), capacity {capacity}\n",
        max as f64 / mean.max(f64::MIN_POSITIVE)
    );
    if load.len() <= 32 {
        let width = (load.len() - 1).max(1).to_string().len();
        for (e, &n) in load.iter().enumerate() {
            let len = (n as usize * BAR).div_ceil(max as usize);
            let dropped = n.saturating_sub(capacity);
            let note = if dropped > 0 { format!("  ({dropped} dropped)") } else { String::new() };
            s += &format!("e{e:<width$} {:<BAR$} {n}{note}\n", "█".repeat(len));
        }
    }
    s
}

/// Expert-choice routing (Zhou et al. 2022): each expert takes its `capacity`
/// highest-scoring tokens, so loads are balanced by construction and a token
/// may get any number of experts, including none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertChoice {
    /// Tokens per expert.
    pub capacity: u32,
    /// Per expert, its tokens by descending score (ties: lower token index first).
    pub tokens: Vec<Vec<u32>>,
    /// Per expert, the Q0.16 scores of those tokens: the gate weights.
    pub weights: Vec<Vec<u16>>,
    /// Per token, how many experts took it.
    pub experts_per_token: Vec<u32>,
}

impl ExpertChoice {
    /// Tokens no expert took (they pass through the layer's residual only).
    pub fn unrouted(&self) -> usize {
        self.experts_per_token.iter().filter(|&&n| n == 0).count()
    }
}

/// Expert-choice routing with the unit's arithmetic: token scores are the
/// fixed-point softmax over all E ([`softmax_q16`]); capacity is
/// `ceil(cf·T·k/E)` as for token choice, with cf = 1 when the problem has no
/// capacity factor (k is then the average experts per token).
pub fn expert_choice(p: &MoeProblem, x: &[i8], w: &[i8], bias: Option<&[i32]>) -> Result<ExpertChoice, HwError> {
    p.validate()?;
    check_operands(p, x.len(), w.len(), bias)?;
    let capacity = match p.capacity {
        Some(_) => p.capacity_slots(),
        None => (p.tokens * p.top_k).div_ceil(p.experts).min(p.tokens),
    };
    let scores: Vec<Vec<u16>> = (0..p.tokens).map(|t| softmax_q16(p, &logits(p, x, w, bias, t))).collect();
    let mut ec = ExpertChoice {
        capacity: capacity as u32,
        tokens: Vec::with_capacity(p.experts),
        weights: Vec::with_capacity(p.experts),
        experts_per_token: vec![0; p.tokens],
    };
    // Per expert, every token's score.
    let columns: Vec<Vec<u16>> = (0..p.experts).map(|e| scores.iter().map(|s| s[e]).collect()).collect();
    for column in &columns {
        let mut order: Vec<u32> = (0..p.tokens as u32).collect();
        // Stable: equal scores keep ascending token order.
        order.sort_by_key(|&t| std::cmp::Reverse(column[t as usize]));
        order.truncate(capacity);
        for &t in &order {
            ec.experts_per_token[t as usize] += 1;
        }
        ec.weights.push(order.iter().map(|&t| column[t as usize]).collect());
        ec.tokens.push(order);
    }
    Ok(ec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_hw::moe::{route, CapacityFactor, GateMode};
    use rand::{Rng, SeedableRng};

    fn setup(t: usize, h: usize, e: usize, k: usize, seed: u64) -> (MoeProblem, Vec<i8>, Vec<i8>) {
        let p = MoeProblem::new(t, h, e, k, GateMode::SoftmaxTopk, 1.0 / 32.0, 1.0 / 64.0).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let x = (0..t * h).map(|_| rng.gen()).collect();
        let w = (0..e * h).map(|_| rng.gen_range(-40..=40)).collect();
        (p, x, w)
    }

    #[test]
    fn balanced_router_has_unit_loss() {
        // All-zero weights: every probability is 1/E, every token ties and takes experts 0..k.
        let (p, x, _) = setup(16, 8, 4, 2, 1);
        let w = vec![0i8; 4 * 8];
        let out = route(&p, &x, &w, None).unwrap();
        let l = losses(&p, &out, &x, &w, None).unwrap();
        assert!(l.mean_prob.iter().all(|&m| (m - 0.25).abs() < 1e-12));
        // f = (1/2, 1/2, 0, 0): E·Σ f·P = 4 · (1/2·1/4 · 2) = 1.
        assert!((l.load_balancing - 1.0).abs() < 1e-12, "{}", l.load_balancing);
        // logsumexp of four zeros is ln 4.
        assert!((l.z_loss - 4f64.ln().powi(2)).abs() < 1e-12);
    }

    #[test]
    fn collapsed_router_has_loss_e() {
        // One expert's bias dominates: all tokens go there with probability ≈ 1.
        let (mut p, x, w) = setup(32, 16, 8, 1, 2);
        p.bias = true;
        let mut bias = vec![0i32; 8];
        bias[3] = 1 << 20;
        let out = route(&p, &x, &w, Some(&bias)).unwrap();
        assert_eq!(out.load[3], 32);
        let l = losses(&p, &out, &x, &w, Some(&bias)).unwrap();
        assert!((l.load_balancing - 8.0).abs() < 1e-6, "{}", l.load_balancing);
        assert!(l.z_loss > 1e3, "a huge logit gives a huge z-loss: {}", l.z_loss);
        let sum: f64 = l.fraction.iter().sum();
        assert!((sum - 1.0).abs() < 1e-12);
    }

    #[test]
    fn expert_choice_fills_every_expert_to_capacity() {
        let (p, x, w) = setup(40, 32, 6, 2, 3);
        let ec = expert_choice(&p, &x, &w, None).unwrap();
        assert_eq!(ec.capacity, (40 * 2_u32).div_ceil(6));
        for (e, (toks, ws)) in ec.tokens.iter().zip(&ec.weights).enumerate() {
            assert_eq!(toks.len(), ec.capacity as usize);
            assert!(ws.windows(2).all(|w| w[0] >= w[1]), "expert {e} not in score order");
            // Every token left out scores no higher than the last one taken.
            let last = *ws.last().unwrap();
            for t in 0..40u32 {
                if !toks.contains(&t) {
                    let s = softmax_q16(&p, &logits(&p, &x, &w, None, t as usize))[e];
                    assert!(s <= last, "expert {e} skipped token {t} scoring {s} > {last}");
                }
            }
        }
        let assigned: u32 = ec.experts_per_token.iter().sum();
        assert_eq!(assigned, 6 * ec.capacity);
        // Capacity factor given: the same capacity formula as token choice.
        let p2 = MoeProblem { capacity: Some(CapacityFactor::from_f64(0.5).unwrap()), ..p };
        assert_eq!(expert_choice(&p2, &x, &w, None).unwrap().capacity, p2.capacity_slots() as u32);
    }

    #[test]
    fn expert_choice_ties_take_lower_tokens() {
        let (p, x, _) = setup(10, 4, 2, 1, 4);
        let ec = expert_choice(&p, &x, &[0; 8], None).unwrap();
        assert_eq!(ec.tokens, vec![vec![0, 1, 2, 3, 4], vec![0, 1, 2, 3, 4]]);
        assert_eq!(ec.unrouted(), 5);
    }

    #[test]
    fn softmax_matches_route_weights() {
        let (p, x, w) = setup(8, 16, 5, 5, 5);
        let out = route(&p, &x, &w, None).unwrap();
        for t in 0..8 {
            let probs = softmax_q16(&p, &logits(&p, &x, &w, None, t));
            for i in 0..5 {
                assert_eq!(probs[out.experts[t * 5 + i] as usize], out.weights[t * 5 + i]);
            }
        }
    }

    #[test]
    fn histogram_shows_drops() {
        let h = load_histogram(&[10, 0, 5, 12], 10);
        assert!(h.contains("(2 dropped)"), "{h}");
        assert!(h.contains("max 12"), "{h}");
        assert_eq!(h.lines().filter(|l| l.starts_with('e')).count(), 5, "{h}");
        let wide = load_histogram(&vec![3; 200], 3);
        assert_eq!(wide.lines().count(), 5, "{wide}");
    }
}
