//! [`AttentionConfig`]: the one description of an attention unit, read by the
//! RTL generator, the golden model, the drivers and the reports.
use crate::numerics::{Requant, EXP2_FRAC_BITS, MAX_REQUANT_SHIFT};
use crate::HwError;
use serde::{Deserialize, Serialize};

/// Beats of each K and V read burst; the K/V FIFOs hold at least one.
pub const KV_BURST_BEATS: usize = 8;

/// Unit id in the `HWINFO` register's top byte.
pub const UNIT_ID: u32 = 2;

/// Generation-time parameters of an attention unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionConfig {
    /// Head dimension d the unit is built for (64 or 128; 16 and 32 for tests).
    pub head_dim: usize,
    /// Query lanes: queries processed in parallel, each K/V row broadcast to all.
    pub lanes: usize,
    /// Multipliers per lane per cycle for each of Q·Kᵀ and P·V (divides `head_dim`).
    /// `head_dim / dot_par` cycles per key; the default matches the memory port.
    pub dot_par: usize,
    /// Width of `m_axi_gmem` data in bits.
    pub port_bits: usize,
    /// Depth of the K/V stream FIFO (outstanding beats; at least [`KV_BURST_BEATS`]).
    pub read_fifo_depth: usize,
    pub clock_mhz: f64,
}

impl Default for AttentionConfig {
    /// d = 64, 8 lanes, 1024-bit port: one key (64 B of K + 64 B of V) per beat.
    fn default() -> Self {
        Self { head_dim: 64, lanes: 8, dot_par: 64, port_bits: 1024, read_fifo_depth: 64, clock_mhz: 300.0 }
    }
}

impl AttentionConfig {
    pub fn validate(&self) -> Result<(), HwError> {
        let bad = |m: String| Err(HwError::Config(m));
        if !matches!(self.head_dim, 16 | 32 | 64 | 128) {
            return bad(format!("head_dim = {} (supported: 16, 32, 64, 128)", self.head_dim));
        }
        if !(1..=32).contains(&self.lanes) {
            return bad(format!("lanes = {} (supported: 1..=32)", self.lanes));
        }
        if self.dot_par == 0 || !self.head_dim.is_multiple_of(self.dot_par) {
            return bad(format!("dot_par = {} must divide head_dim = {}", self.dot_par, self.head_dim));
        }
        if !matches!(self.port_bits, 128 | 256 | 512 | 1024) {
            return bad(format!("port_bits = {} (supported: 128, 256, 512, 1024)", self.port_bits));
        }
        if !(KV_BURST_BEATS..=256).contains(&self.read_fifo_depth) || !self.read_fifo_depth.is_power_of_two() {
            return bad(format!(
                "read_fifo_depth = {} (supported: powers of two from {KV_BURST_BEATS}, one K/V burst, to 256)",
                self.read_fifo_depth
            ));
        }
        if self.port_bits / 8 < self.head_dim {
            return bad(format!(
                "a {}-byte memory beat cannot hold one {}-byte K/V row: use port_bits ≥ {}",
                self.port_bits / 8,
                self.head_dim,
                8 * self.head_dim
            ));
        }
        if self.dot_par != self.head_dim {
            return bad(format!(
                "dot_par = {}: this version computes a whole row per cycle (dot_par = head_dim = {})",
                self.dot_par, self.head_dim
            ));
        }
        Ok(())
    }

    pub fn port_bytes(&self) -> usize {
        self.port_bits / 8
    }

    /// Register map, shared by the RTL decoder, the JSON export and the drivers.
    pub fn register_map(&self) -> crate::regmap::RegisterMap {
        super::regs::TABLE.map(&self.kernel_name(), self.port_bits as u32)
    }

    pub fn hwinfo(&self) -> u32 {
        self.head_dim as u32 | (self.lanes as u32) << 8 | self.port_bits.trailing_zeros() << 16 | UNIT_ID << 24
    }

    pub fn kernel_name(&self) -> String {
        format!("ferrite_attention_d{}_l{}_p{}", self.head_dim, self.lanes, self.port_bits)
    }

    /// Score and P·V multipliers in the unit.
    pub fn multipliers(&self) -> usize {
        2 * self.lanes * self.dot_par
    }
}

/// Integer parameters of a run, derived from the tensors' float scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionParams {
    /// int32 score → log2-domain fixed point with `EXP2_FRAC_BITS` fraction bits:
    /// `t = round(s · mult / 2^shift)` ≈ `s · sq·sk/√d · log2(e) · 2^F`.
    pub score: Requant,
    /// Output requantization of the Q16 average to int8; `None` returns Q16 fixed point.
    pub out: Option<Requant>,
}

impl AttentionParams {
    /// From per-tensor scales (`x_real = x_int8 · scale`); `out_scale` selects int8 output.
    pub fn from_scales(d: usize, q: f64, k: f64, v: f64, out_scale: Option<f64>) -> Result<Self, HwError> {
        let t = q * k / (d as f64).sqrt() * std::f64::consts::LOG2_E * (1u32 << EXP2_FRAC_BITS) as f64;
        let score =
            Requant::from_scale(t).ok_or_else(|| HwError::Problem(format!("score scale {t} not representable")))?;
        let out = match out_scale {
            None => None,
            // Q16 average (in V units) · v / out_scale.
            Some(o) => Some(
                Requant::from_scale(v / o / 65536.0)
                    .ok_or_else(|| HwError::Problem(format!("output scale {o} not representable")))?,
            ),
        };
        Ok(Self { score, out })
    }
}

/// One attention call over `batch · heads` independent (Q, K, V) triples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionProblem {
    pub batch: usize,
    pub heads: usize,
    /// Query rows per head.
    pub seq_q: usize,
    /// Key/value rows per head (as stored).
    pub seq_kv: usize,
    pub dim: usize,
    /// Key j is masked for query i when j > i (queries aligned to the first keys).
    pub causal: bool,
    /// Valid keys per batch entry (padded batches); `None` = all `seq_kv`.
    pub kv_len: Option<Vec<usize>>,
    pub params: AttentionParams,
}

impl AttentionProblem {
    pub fn validate(&self) -> Result<(), HwError> {
        let p = |m: String| Err(HwError::Problem(m));
        if self.batch == 0 || self.heads == 0 || self.seq_q == 0 || self.seq_kv == 0 || self.dim == 0 {
            return p(format!(
                "batch, heads, seq and dim must be ≥ 1 (got batch={}, heads={}, seq_q={}, seq_kv={}, dim={})",
                self.batch, self.heads, self.seq_q, self.seq_kv, self.dim
            ));
        }
        if let Some(kv) = &self.kv_len {
            if kv.len() != self.batch {
                return p(format!("kv_len has {} entries for batch = {}", kv.len(), self.batch));
            }
            if let Some(bad) = kv.iter().find(|&&l| l == 0 || l > self.seq_kv) {
                return p(format!("kv_len entry {bad} outside 1..={}", self.seq_kv));
            }
        }
        for rq in [Some(self.params.score), self.params.out].into_iter().flatten() {
            if rq.shift > MAX_REQUANT_SHIFT || rq.multiplier <= 0 {
                return p(format!("bad fixed-point parameter {rq:?}"));
            }
        }
        Ok(())
    }

    /// Checks against what a unit built with `cfg` runs.
    pub fn validate_for(&self, cfg: &AttentionConfig) -> Result<(), HwError> {
        self.validate()?;
        if self.dim != cfg.head_dim {
            return Err(HwError::Problem(format!(
                "dim = {} but this unit is built for head_dim = {}",
                self.dim, cfg.head_dim
            )));
        }
        self.check_score_range()
    }

    /// t must stay inside the unit's 40-bit log2-domain register: |t| < 2^38
    /// for every score (|s| ≤ d·2^14). The CUDA twin relies on it too.
    pub fn check_score_range(&self) -> Result<(), HwError> {
        let t_max = (self.dim as f64) * 16384.0 * self.params.score.multiplier as f64
            / 2f64.powi(self.params.score.shift as i32);
        if t_max >= 2f64.powi(38) {
            return Err(HwError::Problem(format!("score multiplier too large: |t| could reach {t_max:.3e} ≥ 2^38")));
        }
        Ok(())
    }

    /// FLAGS register value.
    pub fn flags(&self) -> u32 {
        use super::regs::flag::{CAUSAL, INT8, KVLEN};
        (if self.causal { CAUSAL } else { 0 })
            | (if self.kv_len.is_some() { KVLEN } else { 0 })
            | (if self.params.out.is_some() { INT8 } else { 0 })
    }

    pub fn heads_total(&self) -> usize {
        self.batch * self.heads
    }

    /// Valid keys for batch entry `b`.
    pub fn keys(&self, b: usize) -> usize {
        self.kv_len.as_ref().map_or(self.seq_kv, |kv| kv[b])
    }

    /// Useful multiply-accumulates (Q·Kᵀ and P·V over unmasked pairs).
    pub fn macs(&self) -> u64 {
        let mut pairs = 0u64;
        for b in 0..self.batch {
            let keys = self.keys(b);
            for i in 0..self.seq_q {
                pairs += if self.causal { keys.min(i + 1) } else { keys } as u64;
            }
        }
        2 * pairs * self.heads as u64 * self.dim as u64
    }
}

/// How a driver lays an attention problem out in device memory: each head's
/// rows contiguous (`[seq][d]`), heads `*_stride` bytes apart, strides rounded
/// up to `align` bytes (the memory beat for the unit, 1 for a dense host layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionLayout {
    pub q_stride: u64,
    pub kv_stride: u64,
    pub o_stride: u64,
    pub q_bytes: u64,
    pub kv_bytes: u64,
    pub o_bytes: u64,
    /// Bytes of the int32 key-length buffer (one entry per batch entry).
    pub kv_len_bytes: u64,
}

impl AttentionLayout {
    pub fn new(p: &AttentionProblem, align: u64) -> Self {
        let pitch = |bytes: u64| bytes.div_ceil(align) * align;
        let elem = if p.params.out.is_some() { 1 } else { 4 };
        let (q, kv, o) =
            (pitch((p.seq_q * p.dim) as u64), pitch((p.seq_kv * p.dim) as u64), pitch((p.seq_q * p.dim * elem) as u64));
        let heads = p.heads_total() as u64;
        Self {
            q_stride: q,
            kv_stride: kv,
            o_stride: o,
            q_bytes: q * heads,
            kv_bytes: kv * heads,
            o_bytes: o * heads,
            kv_len_bytes: pitch(4 * p.batch as u64),
        }
    }

    /// Bytes per output element: 4 (Q16) or 1 (int8).
    pub fn out_elem_bytes(p: &AttentionProblem) -> usize {
        if p.params.out.is_some() {
            1
        } else {
            4
        }
    }
}
