//! One pre-norm MoE decoder block in the units' integer arithmetic: the
//! golden model (the specification every device must match bit for bit) and
//! a float64 reference of the same block on the dequantized weights.
//!
//! ```text
//! n1 = rmsnorm(x, g1)                                glue
//! q, k, v = n1·Wq, n1·Wk, n1·Wv (requantized)        GEMM unit ×3
//! o = attention(split(q), split(k), split(v))        attention unit (causal, int8 out)
//! h1 = x ⊕ merge(o)·Wo (requantized)                 GEMM unit, residual glue
//! n2 = rmsnorm(h1, g2)                               glue
//! route = router(n2, Wg)                             MoE unit (top-k, softmax, capacity)
//! y_e = relu(n2[dispatch e]·W1_e)·W2_e               GEMM unit ×2 per expert, gather glue
//! out = h1 ⊕ combine(route, y)                       glue
//! ```
//!
//! `⊕` is int8 saturating addition; every glue step is defined exactly below
//! and in docs/block.md. Activations between steps are int8 with fixed scales
//! ([`Scales`]), so each GEMM's requantizer is derived from real scales the
//! way a quantized PyTorch layer would be.
use crate::attention::{attention, AttentionOutput, AttentionParams, AttentionProblem};
use crate::gemm::{gemm, GemmOutput, GemmProblem};
use crate::moe::{route, CapacityFactor, GateMode, MoeOutput, MoeProblem};
use crate::numerics::Requant;
use crate::HwError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The block's sizes and routing options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockShape {
    /// T: tokens (the attention is causal over them).
    pub tokens: usize,
    /// H = heads · head_dim.
    pub hidden: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// E experts, each an FFN of width F.
    pub experts: usize,
    pub top_k: usize,
    pub ffn: usize,
    pub mode: GateMode,
    pub capacity: Option<CapacityFactor>,
}

impl BlockShape {
    /// The CI-size block of issue 17: T = 32, H = 64, 2 heads of 32, E = 4, k = 2, F = 128.
    pub fn small() -> Self {
        Self {
            tokens: 32,
            hidden: 64,
            heads: 2,
            head_dim: 32,
            experts: 4,
            top_k: 2,
            ffn: 128,
            mode: GateMode::TopkSoftmax,
            capacity: Some(CapacityFactor::from_f64(1.25).expect("1.25 is a valid capacity factor")),
        }
    }

    /// A 13-token variant of [`small`](Self::small) with capacity factor 0.5 and
    /// softmax-then-top-k: it drops choices and routes several tokens to one expert.
    pub fn tight() -> Self {
        Self {
            tokens: 13,
            capacity: Some(CapacityFactor::from_f64(0.5).expect("0.5 is a valid capacity factor")),
            mode: GateMode::SoftmaxTopk,
            ..Self::small()
        }
    }

    /// A block of `heads` heads of `hidden / heads`, with [`small`](Self::small)'s gate
    /// mode and capacity factor, checked.
    pub fn with_dims(
        tokens: usize,
        hidden: usize,
        heads: usize,
        experts: usize,
        top_k: usize,
        ffn: usize,
    ) -> Result<Self, HwError> {
        if heads == 0 || !hidden.is_multiple_of(heads) {
            return Err(HwError::Problem(format!("H = {hidden} must be a multiple of the {heads} heads")));
        }
        let s = Self { tokens, hidden, heads, head_dim: hidden / heads, experts, top_k, ffn, ..Self::small() };
        s.validate()?;
        Ok(s)
    }

    pub fn validate(&self) -> Result<(), HwError> {
        let p = |m: String| Err(HwError::Problem(m));
        if [self.tokens, self.hidden, self.heads, self.head_dim, self.experts, self.top_k, self.ffn].contains(&0) {
            return p(format!("every block size must be ≥ 1 ({self:?})"));
        }
        if self.heads * self.head_dim != self.hidden {
            return p(format!(
                "heads · head_dim = {} · {} must equal hidden = {}",
                self.heads, self.head_dim, self.hidden
            ));
        }
        Ok(())
    }

    /// Multiply-accumulates of one block (projections, attention pairs, router, experts as routed).
    pub fn macs(&self, kept: usize) -> u64 {
        let (t, h, f) = (self.tokens as u64, self.hidden as u64, self.ffn as u64);
        let pairs = t * (t + 1) / 2;
        4 * t * h * h + 2 * pairs * h + t * h * self.experts as u64 + 2 * kept as u64 * h * f
    }
}

/// Real value of one integer step of each int8 activation, fixed for the block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scales {
    /// The residual stream: x, h1 and the output.
    pub residual: f64,
    /// Q, K and V.
    pub qkv: f64,
    /// The attention output O.
    pub attn: f64,
    /// The experts' hidden activation (after ReLU).
    pub ffn: f64,
}

impl Default for Scales {
    /// Residual values ~N(0, 1) at 16 steps per unit; the rest at 32 steps per unit.
    fn default() -> Self {
        Self { residual: 1.0 / 16.0, qkv: 1.0 / 32.0, attn: 1.0 / 32.0, ffn: 1.0 / 32.0 }
    }
}

/// Normalized activations have 32 steps per unit: `rmsnorm` returns `x / rms(x) · g` in it.
pub const NORM_SCALE: f64 = 1.0 / 32.0;
/// Norm gains are int8 with 64 steps per unit (64 = 1.0).
pub const GAIN_SCALE: f64 = 1.0 / 64.0;

/// An int8 matrix `rows × cols`, row-major, with its real step.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<i8>,
    pub scale: f64,
}

impl Matrix {
    /// Gaussian int8 with σ = 32 steps, for a layer whose real weights are N(0, 1/fan_in).
    fn random(rng: &mut ChaCha8Rng, rows: usize, cols: usize, fan_in: usize) -> Self {
        let data = (0..rows * cols).map(|_| gaussian_i8(rng, 32.0)).collect();
        Self { rows, cols, data, scale: 1.0 / (32.0 * (fan_in as f64).sqrt()) }
    }

    fn real(&self) -> Vec<f64> {
        self.data.iter().map(|&v| v as f64 * self.scale).collect()
    }
}

fn gaussian_i8(rng: &mut ChaCha8Rng, sigma: f64) -> i8 {
    // Box–Muller; one normal per call is plenty for test data.
    let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (z * sigma).round().clamp(-128.0, 127.0) as i8
}

/// A block's weights. Projections are `in × out` (the GEMM unit's B), the gate
/// is `E × H` (the router's WG, nn.Linear layout), expert e's up projection
/// `H × F` and down projection `F × H`.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockWeights {
    pub g1: Vec<i8>,
    pub g2: Vec<i8>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub wo: Matrix,
    pub gate: Matrix,
    pub w1: Vec<Matrix>,
    pub w2: Vec<Matrix>,
}

impl BlockWeights {
    /// Seeded random weights at realistic scales: N(0, 1/fan_in) projections,
    /// norm gains around 1.0.
    pub fn random(s: &BlockShape, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (h, f) = (s.hidden, s.ffn);
        let gain = |rng: &mut ChaCha8Rng| (0..h).map(|_| rng.gen_range(48..=80)).collect::<Vec<i8>>();
        let (g1, g2) = (gain(&mut rng), gain(&mut rng));
        let mut m = |rows, cols, fan_in| Matrix::random(&mut rng, rows, cols, fan_in);
        Self {
            g1,
            g2,
            wq: m(h, h, h),
            wk: m(h, h, h),
            wv: m(h, h, h),
            wo: m(h, h, h),
            gate: m(s.experts, h, h),
            w1: (0..s.experts).map(|_| m(h, f, h)).collect(),
            w2: (0..s.experts).map(|_| m(f, h, f)).collect(),
        }
    }

    /// Checks every tensor against `s`, naming the first that does not fit.
    pub fn check(&self, s: &BlockShape) -> Result<(), HwError> {
        let (h, f, e) = (s.hidden, s.ffn, s.experts);
        let want = |name: &str, m: &Matrix, rows, cols| {
            if (m.rows, m.cols, m.data.len()) != (rows, cols, rows * cols) {
                return Err(HwError::Problem(format!(
                    "{name} is {}×{} with {} values, the block needs {rows}×{cols}",
                    m.rows,
                    m.cols,
                    m.data.len()
                )));
            }
            if !(m.scale.is_finite() && m.scale > 0.0) {
                return Err(HwError::Problem(format!("{name} has scale {}, not a positive number", m.scale)));
            }
            Ok(())
        };
        for (name, g) in [("g1", &self.g1), ("g2", &self.g2)] {
            if g.len() != h {
                return Err(HwError::Problem(format!("{name} has {} gains, the block needs H = {h}", g.len())));
            }
        }
        for (name, m) in [("wq", &self.wq), ("wk", &self.wk), ("wv", &self.wv), ("wo", &self.wo)] {
            want(name, m, h, h)?;
        }
        want("gate", &self.gate, e, h)?;
        if self.w1.len() != e || self.w2.len() != e {
            return Err(HwError::Problem(format!(
                "{} up and {} down projections for E = {e} experts",
                self.w1.len(),
                self.w2.len()
            )));
        }
        for (i, (w1, w2)) in self.w1.iter().zip(&self.w2).enumerate() {
            want(&format!("w1[{i}]"), w1, h, f)?;
            want(&format!("w2[{i}]"), w2, f, h)?;
        }
        Ok(())
    }
}

/// `n / m` rounded half away from zero, `m > 0`.
fn round_div(n: i64, m: i64) -> i64 {
    let q = (2 * n.unsigned_abs() + m as u64) / (2 * m as u64);
    if n < 0 {
        -(q as i64)
    } else {
        q as i64
    }
}

fn sat8(v: i64) -> i8 {
    v.clamp(i8::MIN as i64, i8::MAX as i64) as i8
}

/// floor(√v), exactly.
fn isqrt(v: u64) -> u64 {
    let (v, mut r) = (v as u128, (v as f64).sqrt() as u128);
    while r * r > v {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= v {
        r += 1;
    }
    r as u64
}

/// Integer RMSNorm of each row of `x` (`rows × g.len()`): `r = max(1, ⌊√⌊Σx²/H⌋⌋)`,
/// `y = sat8(round(x·g / 2r))`, i.e. `x / rms · g` at [`NORM_SCALE`] with gains at [`GAIN_SCALE`].
pub fn rmsnorm(x: &[i8], g: &[i8]) -> Vec<i8> {
    let h = g.len();
    x.chunks(h)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| (v as i64) * (v as i64)).sum::<i64>() / h as i64;
            let r = isqrt(ms as u64).max(1) as i64;
            row.iter().zip(g).map(move |(&v, &gi)| sat8(round_div(v as i64 * gi as i64, 2 * r))).collect::<Vec<_>>()
        })
        .collect()
}

/// `[T][heads·d]` → `[heads][T][d]`, the attention unit's head-major layout.
pub fn split_heads(x: &[i8], tokens: usize, heads: usize, d: usize) -> Vec<i8> {
    (0..heads).flat_map(|hd| (0..tokens).flat_map(move |t| x[t * heads * d + hd * d..][..d].to_vec())).collect()
}

/// `[heads][T][d]` → `[T][heads·d]`.
pub fn merge_heads(x: &[i8], tokens: usize, heads: usize, d: usize) -> Vec<i8> {
    (0..tokens).flat_map(|t| (0..heads).flat_map(move |hd| x[(hd * tokens + t) * d..][..d].to_vec())).collect()
}

/// Element-wise int8 saturating addition (the residual connections).
pub fn residual(a: &[i8], b: &[i8]) -> Vec<i8> {
    a.iter().zip(b).map(|(&x, &y)| sat8(x as i64 + y as i64)).collect()
}

/// The rows of `x` (`? × h`) listed in `tokens`, in that order (an expert's dispatch row).
pub fn gather(x: &[i8], h: usize, tokens: &[u32]) -> Vec<i8> {
    tokens.iter().flat_map(|&t| x[t as usize * h..][..h].to_vec()).collect()
}

/// For each token, `sat8(round(Σ_i w_i · y_{e_i}[slot_i] / 2^16))` over its kept
/// choices (`w` Q0.16 from the router, `y[e]` expert e's output rows in slot order).
pub fn combine(route: &MoeOutput, y: &[Vec<i8>], tokens: usize, k: usize, h: usize) -> Vec<i8> {
    let mut out = vec![0i8; tokens * h];
    for t in 0..tokens {
        for j in 0..h {
            let mut acc = 0i64;
            for i in 0..k {
                let slot = route.slots[t * k + i];
                if slot >= 0 {
                    let e = route.experts[t * k + i] as usize;
                    acc += route.weights[t * k + i] as i64 * y[e][slot as usize * h + j] as i64;
                }
            }
            out[t * h + j] = sat8(crate::numerics::round_shift(acc, 16));
        }
    }
    out
}

/// The problems the block hands to the units, derived from the shape, weights and scales.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockPlan {
    pub q: GemmProblem,
    pub k: GemmProblem,
    pub v: GemmProblem,
    pub attention: AttentionProblem,
    pub o: GemmProblem,
    pub router: MoeProblem,
    /// Expert e's up projection on `rows` tokens (ReLU, requantized to int8).
    pub up: Requant,
    /// Expert e's down projection, requantized into the residual scale.
    pub down: Requant,
}

fn requant(scale: f64, what: &str) -> Result<Requant, HwError> {
    Requant::from_scale(scale).ok_or_else(|| HwError::Problem(format!("{what} scale {scale:e} not representable")))
}

impl BlockPlan {
    pub fn new(s: &BlockShape, w: &BlockWeights, sc: &Scales) -> Result<Self, HwError> {
        s.validate()?;
        w.check(s)?;
        let (t, h) = (s.tokens, s.hidden);
        let proj = |m: &Matrix, out: f64, what: &str| -> Result<GemmProblem, HwError> {
            Ok(GemmProblem { requant: Some(requant(NORM_SCALE * m.scale / out, what)?), ..GemmProblem::new(t, h, h) })
        };
        let attention = AttentionProblem {
            batch: 1,
            heads: s.heads,
            seq_q: t,
            seq_kv: t,
            dim: s.head_dim,
            causal: true,
            kv_len: None,
            params: AttentionParams::from_scales(s.head_dim, sc.qkv, sc.qkv, sc.qkv, Some(sc.attn))?,
        };
        let o = GemmProblem {
            requant: Some(requant(sc.attn * w.wo.scale / sc.residual, "output projection")?),
            ..GemmProblem::new(t, h, h)
        };
        let router = MoeProblem {
            capacity: s.capacity,
            ..MoeProblem::new(t, h, s.experts, s.top_k, s.mode, NORM_SCALE, w.gate.scale)?
        };
        // One requantizer per projection kind: every expert's weights share a scale.
        let (s1, s2) = (w.w1[0].scale, w.w2[0].scale);
        if w.w1.iter().any(|m| m.scale != s1) || w.w2.iter().any(|m| m.scale != s2) {
            return Err(HwError::Problem("every expert's w1 (and every w2) must share one scale".into()));
        }
        Ok(Self {
            q: proj(&w.wq, sc.qkv, "Q projection")?,
            k: proj(&w.wk, sc.qkv, "K projection")?,
            v: proj(&w.wv, sc.qkv, "V projection")?,
            attention,
            o,
            router,
            up: requant(NORM_SCALE * s1 / sc.ffn, "expert up projection")?,
            down: requant(sc.ffn * s2 / sc.residual, "expert down projection")?,
        })
    }

    /// Expert up projection on `rows` gathered tokens.
    pub fn up_problem(&self, rows: usize, s: &BlockShape) -> GemmProblem {
        GemmProblem { relu: true, requant: Some(self.up), ..GemmProblem::new(rows, s.ffn, s.hidden) }
    }

    /// Expert down projection on `rows` tokens.
    pub fn down_problem(&self, rows: usize, s: &BlockShape) -> GemmProblem {
        GemmProblem { requant: Some(self.down), ..GemmProblem::new(rows, s.hidden, s.ffn) }
    }
}

/// What the golden block computes, with the intermediate results a device is checked against.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockOutput {
    /// T×H int8 at `Scales::residual`.
    pub out: Vec<i8>,
    pub h1: Vec<i8>,
    pub route: MoeOutput,
}

fn int8(out: GemmOutput) -> Vec<i8> {
    match out {
        GemmOutput::I8(v) => v,
        GemmOutput::I32(_) => unreachable!("every block GEMM requantizes to int8"),
    }
}

/// The block in the units' integer arithmetic: the specification.
pub fn block(s: &BlockShape, w: &BlockWeights, sc: &Scales, x: &[i8]) -> Result<BlockOutput, HwError> {
    let plan = BlockPlan::new(s, w, sc)?;
    let (t, h, nh, d) = (s.tokens, s.hidden, s.heads, s.head_dim);
    if x.len() != t * h {
        return Err(HwError::Problem(format!("x has {} values, the block needs T·H = {}", x.len(), t * h)));
    }
    let n1 = rmsnorm(x, &w.g1);
    let q = int8(gemm(&plan.q, &n1, &w.wq.data, None)?);
    let k = int8(gemm(&plan.k, &n1, &w.wk.data, None)?);
    let v = int8(gemm(&plan.v, &n1, &w.wv.data, None)?);
    let (qh, kh, vh) = (split_heads(&q, t, nh, d), split_heads(&k, t, nh, d), split_heads(&v, t, nh, d));
    let AttentionOutput::I8(o) = attention(&plan.attention, &qh, &kh, &vh)? else {
        unreachable!("the block's attention has int8 output")
    };
    let a = int8(gemm(&plan.o, &merge_heads(&o, t, nh, d), &w.wo.data, None)?);
    let h1 = residual(x, &a);
    let n2 = rmsnorm(&h1, &w.g2);
    let route = route(&plan.router, &n2, &w.gate.data, None)?;
    let y: Vec<Vec<i8>> = route
        .dispatch
        .iter()
        .enumerate()
        .map(|(e, tokens)| {
            if tokens.is_empty() {
                return Ok(Vec::new());
            }
            let xe = gather(&n2, h, tokens);
            let u = int8(gemm(&plan.up_problem(tokens.len(), s), &xe, &w.w1[e].data, None)?);
            Ok(int8(gemm(&plan.down_problem(tokens.len(), s), &u, &w.w2[e].data, None)?))
        })
        .collect::<Result<_, HwError>>()?;
    let out = residual(&h1, &combine(&route, &y, t, s.top_k, h));
    Ok(BlockOutput { out, h1, route })
}

/// The same block in float64 on the dequantized inputs and weights: real
/// RMSNorm, softmax attention, the router's softmax and top-k with the same
/// capacity rule (tokens in order, choices in rank order), no rounding.
pub fn block_f64(s: &BlockShape, w: &BlockWeights, sc: &Scales, x: &[i8]) -> FloatBlock {
    let (t, h, nh, d, e, k, f) = (s.tokens, s.hidden, s.heads, s.head_dim, s.experts, s.top_k, s.ffn);
    let xr: Vec<f64> = x.iter().map(|&v| v as f64 * sc.residual).collect();
    let norm = |x: &[f64], g: &[i8]| -> Vec<f64> {
        x.chunks(h)
            .flat_map(|row| {
                let rms = (row.iter().map(|v| v * v).sum::<f64>() / h as f64).sqrt().max(f64::MIN_POSITIVE);
                row.iter().zip(g).map(move |(v, &gi)| v / rms * gi as f64 * GAIN_SCALE).collect::<Vec<_>>()
            })
            .collect()
    };
    let matmul = |a: &[f64], rows: usize, b: &[f64], inner: usize, cols: usize| -> Vec<f64> {
        let mut c = vec![0.0; rows * cols];
        for i in 0..rows {
            for p in 0..inner {
                let av = a[i * inner + p];
                for j in 0..cols {
                    c[i * cols + j] += av * b[p * cols + j];
                }
            }
        }
        c
    };
    let n1 = norm(&xr, &w.g1);
    let (q, kk, v) =
        (matmul(&n1, t, &w.wq.real(), h, h), matmul(&n1, t, &w.wk.real(), h, h), matmul(&n1, t, &w.wv.real(), h, h));
    let mut o = vec![0.0; t * h];
    for hd in 0..nh {
        for i in 0..t {
            let scores: Vec<f64> = (0..=i)
                .map(|j| {
                    (0..d).map(|x| q[i * h + hd * d + x] * kk[j * h + hd * d + x]).sum::<f64>() / (d as f64).sqrt()
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let l: f64 = p.iter().sum();
            for x in 0..d {
                o[i * h + hd * d + x] = (0..=i).map(|j| p[j] * v[j * h + hd * d + x]).sum::<f64>() / l;
            }
        }
    }
    let a = matmul(&o, t, &w.wo.real(), h, h);
    let h1: Vec<f64> = xr.iter().zip(&a).map(|(x, y)| x + y).collect();
    let n2 = norm(&h1, &w.g2);
    let gate = w.gate.real();
    let cap =
        MoeProblem { capacity: s.capacity, ..MoeProblem::new(t, h, e, k, s.mode, 1.0, 1.0).expect("unit scales") }
            .capacity_slots();
    let mut load = vec![0usize; e];
    let mut out = h1.clone();
    let mut sets = Vec::with_capacity(t);
    for tok in 0..t {
        let row = &n2[tok * h..(tok + 1) * h];
        let logits: Vec<f64> = (0..e).map(|x| (0..h).map(|j| row[j] * gate[x * h + j]).sum()).collect();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let chosen = &order[..k];
        let soft = |over: &[usize]| -> Vec<f64> {
            let m = over.iter().map(|&x| logits[x]).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = over.iter().map(|&x| (logits[x] - m).exp()).sum();
            over.iter().map(|&x| (logits[x] - m).exp() / z).collect()
        };
        let weights: Vec<f64> = match s.mode {
            GateMode::TopkSoftmax => soft(chosen),
            GateMode::SoftmaxTopk => soft(&order)[..k].to_vec(),
        };
        let mut set = chosen.to_vec();
        set.sort_unstable();
        sets.push(set);
        for (&ex, &wt) in chosen.iter().zip(&weights) {
            if load[ex] < cap {
                let u: Vec<f64> = matmul(row, 1, &w.w1[ex].real(), h, f).into_iter().map(|v| v.max(0.0)).collect();
                let y = matmul(&u, 1, &w.w2[ex].real(), f, h);
                for j in 0..h {
                    out[tok * h + j] += wt * y[j];
                }
            }
            load[ex] += 1;
        }
    }
    FloatBlock { out, h1, experts: sets }
}

/// The float64 block's results, in real values.
#[derive(Debug, Clone, PartialEq)]
pub struct FloatBlock {
    pub out: Vec<f64>,
    /// After the attention's residual connection.
    pub h1: Vec<f64>,
    /// Each token's expert set, sorted.
    pub experts: Vec<Vec<usize>>,
}

/// Relative Frobenius error of the integer block's output against the float one.
pub fn relative_error(int_out: &[i8], scale: f64, real: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (&a, &b) in int_out.iter().zip(real) {
        num += (a as f64 * scale - b).powi(2);
        den += b * b;
    }
    (num / den).sqrt()
}

/// Fraction of tokens whose integer router chose the same expert set as the float one.
pub fn expert_agreement(route: &MoeOutput, k: usize, float_sets: &[Vec<usize>]) -> f64 {
    let same = float_sets
        .iter()
        .enumerate()
        .filter(|(t, set)| {
            let mut ids: Vec<usize> = route.experts[t * k..(t + 1) * k].iter().map(|&e| e as usize).collect();
            ids.sort_unstable();
            &ids == *set
        })
        .count();
    same as f64 / float_sets.len().max(1) as f64
}

/// Seeded int8 input tokens for a block: residual values ~N(0, 1) at `Scales::residual` = 1/16.
pub fn random_input(s: &BlockShape, seed: u64) -> Vec<i8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..s.tokens * s.hidden).map(|_| gaussian_i8(&mut rng, 16.0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glue_steps_are_exact() {
        assert_eq!(isqrt(0), 0);
        assert_eq!(isqrt(15), 3);
        assert_eq!(isqrt(16), 4);
        assert_eq!(isqrt(u64::from(u32::MAX) * u64::from(u32::MAX)), u64::from(u32::MAX));
        assert_eq!((round_div(5, 2), round_div(-5, 2), round_div(7, 3), round_div(-7, 3)), (3, -3, 2, -2));
        // Row [3, -4]: Σx²/H = 12, r = 3; gains 64 (1.0): round(3·64/6) = 32, round(-4·64/6) = -43.
        assert_eq!(rmsnorm(&[3, -4], &[64, 64]), [32, -43]);
        // An all-zero row stays zero (r = 1), saturation at both ends.
        assert_eq!(rmsnorm(&[0, 0], &[64, 64]), [0, 0]);
        // [127, 0, 0, 0]: r = ⌊√⌊16129/4⌋⌋ = 63, 127·127/126 = 128.0 saturates; −128.0 does not.
        assert_eq!(rmsnorm(&[127, 0, 0, 0], &[127; 4]), [127, 0, 0, 0]);
        assert_eq!(rmsnorm(&[-127, 0, 0, 0], &[127; 4]), [-128, 0, 0, 0]);
        assert_eq!(residual(&[100, -100, 5], &[100, -100, -6]), [127, -128, -1]);
        let x: Vec<i8> = (0..12).collect();
        let split = split_heads(&x, 3, 2, 2);
        assert_eq!(split, [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]);
        assert_eq!(merge_heads(&split, 3, 2, 2), x);
        assert_eq!(gather(&x, 4, &[2, 0]), [8, 9, 10, 11, 0, 1, 2, 3]);
    }

    #[test]
    fn combine_weights_kept_choices_and_skips_dropped_ones() {
        let route = MoeOutput {
            experts: vec![1, 0],
            weights: vec![49152, 16384],
            slots: vec![0, -1],
            load: vec![1, 1],
            dropped: 1,
            capacity: 1,
            dispatch: vec![vec![], vec![0]],
        };
        let y = vec![vec![], vec![100, -100]];
        // 0.75 · ±100, the dropped choice adds nothing.
        assert_eq!(combine(&route, &y, 1, 2, 2), [75, -75]);
    }

    #[test]
    fn bad_shapes_and_weights_are_one_line_errors() {
        let s = BlockShape::small();
        let bad = BlockShape { heads: 3, ..s };
        assert!(bad.validate().unwrap_err().to_string().contains("heads · head_dim = 3 · 32 must equal hidden = 64"));
        let mut w = BlockWeights::random(&s, 1);
        w.w2.pop();
        assert!(w.check(&s).unwrap_err().to_string().contains("4 up and 3 down projections"));
        let w = BlockWeights::random(&s, 1);
        let err = block(&s, &w, &Scales::default(), &[0; 5]).unwrap_err().to_string();
        assert!(err.contains("x has 5 values, the block needs T·H = 2048"), "{err}");
    }

    /// The integer block tracks float64: error and router agreement at the CI size, with and
    /// without capacity drops (printed: `cargo test -p ferrite-hw --release block -- --nocapture`).
    #[test]
    fn integer_block_tracks_float64() {
        // Drops add error where the two routers disagree on which choices overflow.
        for (capacity, max_err) in [(None, 0.10), (Some(1.0), 0.15)] {
            let s =
                BlockShape { capacity: capacity.map(|c| CapacityFactor::from_f64(c).unwrap()), ..BlockShape::small() };
            let (w, x) = (BlockWeights::random(&s, 7), random_input(&s, 8));
            let sc = Scales::default();
            let got = block(&s, &w, &sc, &x).unwrap();
            let real = block_f64(&s, &w, &sc, &x);
            let err = relative_error(&got.out, sc.residual, &real.out);
            let err_h1 = relative_error(&got.h1, sc.residual, &real.h1);
            let agree = expert_agreement(&got.route, s.top_k, &real.experts);
            println!(
                "block {s:?}: relative error {:.2} % (after attention {:.2} %), expert sets agree on {:.1} % of tokens, {} dropped",
                100.0 * err,
                100.0 * err_h1,
                100.0 * agree,
                got.route.dropped
            );
            assert!(err < max_err, "relative error {err}");
            assert!(agree > 0.8, "expert agreement {agree}");
            if capacity.is_some() {
                assert!(got.route.dropped > 0, "this case is meant to drop choices");
            }
        }
    }
}
