//! [`MoeConfig`]: the one description of an MoE router unit, read by the RTL
//! generator, the golden model, the drivers and the reports.
use crate::numerics::{Requant, MAX_REQUANT_SHIFT};
use crate::regmap::RegisterMap;
use crate::unit::{check_extents, check_limit};
use crate::HwError;
use serde::{Deserialize, Serialize};

/// Unit id in the `HWINFO` register's top byte.
pub const UNIT_ID: u32 = 3;
/// Most experts any router unit supports: expert ids are one byte.
pub const E_LIMIT: usize = 256;
/// Sizes of the RTL's packed per-expert buses, in experts: a unit takes the
/// smallest that holds its `e_max` (each size is a separate instantiation).
pub const EXPERT_SLOTS: [usize; 3] = [16, 64, E_LIMIT];
/// Most choices per token any unit supports: one 64-byte route record holds 8.
pub const K_LIMIT: usize = 8;
/// Most tokens per run: T·k and capacity arithmetic stay inside 32 bits.
pub const T_LIMIT: usize = 1 << 24;
/// Bytes of one token's route record (see [`MoeLayout`]).
pub const RECORD_BYTES: usize = 64;
/// Byte offsets inside a route record.
pub const REC_IDS: usize = 0;
pub const REC_WEIGHTS: usize = 8;
pub const REC_SLOTS: usize = 32;

/// FLAGS register bits.
pub use super::regs::flag::{
    BIAS as FLAG_BIAS, CAPACITY as FLAG_CAPACITY, RENORMALIZE as FLAG_RENORMALIZE, TOPK_SOFTMAX as FLAG_TOPK_SOFTMAX,
};

/// Generation-time parameters of a router unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeConfig {
    /// Most experts E a run may use (1..=256): sizes the top-k network, the
    /// softmax, the load counters and the on-chip gate weights.
    pub e_max: usize,
    /// Most choices per token (1..=8).
    pub k_max: usize,
    /// Largest hidden size H: the on-chip gate weights hold `e_max × h_max` bytes.
    pub h_max: usize,
    /// Expert lanes of the gate projection; each multiplies one beat of x by one
    /// beat of an expert's gate row per cycle (`port_bits / 8` int8 MACs).
    pub lanes: usize,
    /// Width of `m_axi_gmem` data in bits (128, 256 or 512: a route record is at least one beat).
    pub port_bits: usize,
    /// Clock used for projected times, in MHz.
    pub clock_mhz: f64,
}

impl Default for MoeConfig {
    /// 64 experts, top-8, H ≤ 4096, 16 lanes × 64 MACs on a 512-bit port.
    fn default() -> Self {
        Self { e_max: 64, k_max: 8, h_max: 4096, lanes: 16, port_bits: 512, clock_mhz: 300.0 }
    }
}

impl MoeConfig {
    /// A small unit for tests: 12 experts (a partial last lane group), 4 lanes, 128-bit port.
    pub fn small() -> Self {
        Self { e_max: 12, k_max: 8, h_max: 64, lanes: 4, port_bits: 128, clock_mhz: 300.0 }
    }

    pub fn port_bytes(&self) -> usize {
        self.port_bits / 8
    }

    /// Lane groups: experts `g·lanes .. (g+1)·lanes` are computed together.
    pub fn groups(&self) -> usize {
        self.e_max.div_ceil(self.lanes)
    }

    /// Expert slots of the RTL's per-expert buses: the smallest of
    /// [`EXPERT_SLOTS`] that holds `e_max`.
    pub fn expert_slots(&self) -> usize {
        EXPERT_SLOTS.into_iter().find(|&s| s >= self.e_max).unwrap_or(E_LIMIT)
    }

    /// Beats of one gate row / token row at `h_max`.
    pub fn row_beats(&self) -> usize {
        self.h_max / self.port_bytes()
    }

    /// Multipliers of the gate projection.
    pub fn macs(&self) -> usize {
        self.lanes * self.port_bytes()
    }

    pub fn validate(&self) -> Result<(), HwError> {
        let bad = |m: String| Err(HwError::Config(m));
        if !(1..=E_LIMIT).contains(&self.e_max) {
            return bad(format!("e_max = {} (supported: 1..={E_LIMIT})", self.e_max));
        }
        if !(1..=K_LIMIT).contains(&self.k_max) || self.k_max > self.e_max {
            return bad(format!("k_max = {} (supported: 1..={K_LIMIT} and ≤ e_max)", self.k_max));
        }
        if !matches!(self.port_bits, 128 | 256 | 512) {
            return bad(format!("port_bits = {} (supported: 128, 256, 512)", self.port_bits));
        }
        if !(1..=32).contains(&self.lanes) || self.lanes > self.e_max {
            return bad(format!("lanes = {} (supported: 1..=32 and ≤ e_max)", self.lanes));
        }
        let p = self.port_bytes();
        if self.h_max == 0 || !self.h_max.is_multiple_of(p) || !(self.h_max / p).is_power_of_two() {
            return bad(format!("h_max = {} must be a power-of-two multiple of the {p}-byte beat", self.h_max));
        }
        if self.groups() * self.row_beats() > 1 << 16 {
            return bad(format!(
                "e_max/lanes × h_max/beat = {} gate-RAM words per lane (at most 65536)",
                self.groups() * self.row_beats()
            ));
        }
        if !(self.clock_mhz.is_finite() && self.clock_mhz > 0.0) {
            return bad(format!("clock_mhz = {}", self.clock_mhz));
        }
        Ok(())
    }

    /// `HWINFO`: e_max−1 | lanes<<8 | log2(port_bits)<<16 | k_max<<20 | unit id<<24.
    pub fn hwinfo(&self) -> u32 {
        (self.e_max as u32 - 1)
            | (self.lanes as u32) << 8
            | self.port_bits.trailing_zeros() << 16
            | (self.k_max as u32) << 20
            | UNIT_ID << 24
    }

    pub fn kernel_name(&self) -> String {
        format!("ferrite_moe_e{}_k{}_l{}_p{}", self.e_max, self.k_max, self.lanes, self.port_bits)
    }

    /// The register map, shared by the RTL decoder, the JSON export and the drivers.
    pub fn register_map(&self) -> RegisterMap {
        super::regs::TABLE.map(&self.kernel_name(), self.port_bits as u32)
    }
}

/// How the gate distributes a token over the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateMode {
    /// Softmax over all E, then the k largest (Switch, GShard, DeepSeek-style).
    SoftmaxTopk,
    /// The k largest logits, then softmax over those k (Mixtral-style).
    TopkSoftmax,
}

impl std::str::FromStr for GateMode {
    type Err = HwError;
    fn from_str(s: &str) -> Result<Self, HwError> {
        match s {
            "softmax-topk" => Ok(Self::SoftmaxTopk),
            "topk-softmax" => Ok(Self::TopkSoftmax),
            other => Err(HwError::Problem(format!("gate mode {other:?} (expected softmax-topk or topk-softmax)"))),
        }
    }
}

/// Capacity factor as the unit's `CF` register holds it: unsigned Q16.16, so
/// the host and the hardware compute `ceil(cf·T·k/E)` from the same integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityFactor(pub u32);

impl CapacityFactor {
    pub const ONE: Self = Self(1 << 16);

    /// The nearest Q16.16 value; refuses factors that are not positive or do not fit.
    pub fn from_f64(cf: f64) -> Result<Self, HwError> {
        let q = (cf * 65536.0).round();
        if cf.is_nan() || cf <= 0.0 || !q.is_finite() || q < 1.0 || q > u32::MAX as f64 {
            return Err(HwError::Problem(format!("capacity factor {cf} must be > 0 and < 65536 (Q16.16)")));
        }
        Ok(Self(q as u32))
    }

    pub fn to_f64(self) -> f64 {
        self.0 as f64 / 65536.0
    }
}

/// One routing call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoeProblem {
    /// T: tokens.
    pub tokens: usize,
    /// H: hidden size.
    pub hidden: usize,
    /// E: experts.
    pub experts: usize,
    /// k: choices per token.
    pub top_k: usize,
    pub mode: GateMode,
    /// Softmax-top-k only: divide the k weights by their sum (numerically the
    /// same as top-k-softmax, see docs/numerics.md).
    pub renormalize: bool,
    /// Per-expert capacity `ceil(cf·T·k/E)`; `None` = unlimited.
    pub capacity: Option<CapacityFactor>,
    /// Add an int32 bias per expert to the logits.
    pub bias: bool,
    /// int32 logit → log2-domain fixed point with `EXP2_FRAC_BITS` fraction bits:
    /// `t = round(z · mult / 2^shift)` ≈ `z · s_x·s_w · log2(e) · 2^F`, as the
    /// attention unit's [`crate::attention::AttentionParams::score`].
    pub logit: Requant,
}

impl MoeProblem {
    /// A problem with the logit scale of int8 inputs of scales `sx`, `sw`.
    pub fn new(
        tokens: usize,
        hidden: usize,
        experts: usize,
        top_k: usize,
        mode: GateMode,
        sx: f64,
        sw: f64,
    ) -> Result<Self, HwError> {
        let t = sx * sw * std::f64::consts::LOG2_E * (1u32 << crate::numerics::EXP2_FRAC_BITS) as f64;
        let logit =
            Requant::from_scale(t).ok_or_else(|| HwError::Problem(format!("logit scale {t} not representable")))?;
        Ok(Self { tokens, hidden, experts, top_k, mode, renormalize: false, capacity: None, bias: false, logit })
    }

    /// Checks that hold for every backend.
    pub fn validate(&self) -> Result<(), HwError> {
        let p = |m: String| Err(HwError::Problem(m));
        if self.tokens == 0 || self.hidden == 0 || self.experts == 0 {
            return p(format!(
                "tokens, hidden and experts must be ≥ 1 (got T={}, H={}, E={})",
                self.tokens, self.hidden, self.experts
            ));
        }
        if self.tokens > T_LIMIT {
            return p(format!("T = {} exceeds {T_LIMIT} tokens per run", self.tokens));
        }
        if self.experts > E_LIMIT {
            return p(format!("E = {} exceeds {E_LIMIT} experts (expert ids are one byte)", self.experts));
        }
        if self.top_k == 0 {
            return p("top-k must be ≥ 1 (k = 0)".into());
        }
        if self.top_k > self.experts {
            return p(format!("top-k = {} exceeds the {} experts", self.top_k, self.experts));
        }
        if self.top_k > K_LIMIT {
            return p(format!("top-k = {} exceeds {K_LIMIT}", self.top_k));
        }
        if self.capacity == Some(CapacityFactor(0)) {
            return p("capacity factor must be > 0 (use no capacity for unlimited)".into());
        }
        let rq = self.logit;
        if rq.multiplier <= 0 || rq.shift > MAX_REQUANT_SHIFT {
            return p(format!("logit multiplier must be > 0 with shift ≤ {MAX_REQUANT_SHIFT} (got {rq:?})"));
        }
        // |z| ≤ 2^31, so |t| < 2^38 keeps t and t − t_max inside the unit's 40-bit registers.
        if (rq.multiplier as f64) * 2f64.powi(31) / 2f64.powi(rq.shift as i32) >= 2f64.powi(38) {
            return p(format!(
                "logit multiplier too large: mult/2^shift = {:.3e} ≥ 2^7",
                rq.multiplier as f64 / 2f64.powi(rq.shift as i32)
            ));
        }
        Ok(())
    }

    /// Checks against what a unit built with `cfg` runs.
    pub fn validate_for(&self, cfg: &MoeConfig) -> Result<(), HwError> {
        self.validate()?;
        check_limit(self.experts, cfg.e_max, || (format!("E = {}", self.experts), format!("e_max = {}", cfg.e_max)))?;
        check_limit(self.top_k, cfg.k_max, || (format!("top-k = {}", self.top_k), format!("k_max = {}", cfg.k_max)))?;
        check_limit(self.hidden, cfg.h_max, || {
            (format!("H = {}", self.hidden), format!("h_max = {} (on-chip gate weights)", cfg.h_max))
        })?;
        let l = MoeLayout::new(cfg, self);
        check_extents(&[("X", l.x_bytes), ("DISPATCH", l.dispatch_bytes), ("ROUTE", l.route_bytes)])?;
        Ok(())
    }

    /// FLAGS register value.
    pub fn flags(&self) -> u32 {
        (if self.bias { FLAG_BIAS } else { 0 })
            | (if self.mode == GateMode::TopkSoftmax { FLAG_TOPK_SOFTMAX } else { 0 })
            | (if self.renormalize { FLAG_RENORMALIZE } else { 0 })
            | (if self.capacity.is_some() { FLAG_CAPACITY } else { 0 })
    }

    /// Per-expert capacity: `min(ceil(cf·T·k / E), T)` exactly (T when unlimited:
    /// an expert can take each token at most once).
    pub fn capacity_slots(&self) -> usize {
        match self.capacity {
            None => self.tokens,
            Some(cf) => {
                let num = cf.0 as u128 * (self.tokens * self.top_k) as u128;
                let den = (self.experts as u128) << 16;
                (num.div_ceil(den).min(self.tokens as u128)) as usize
            }
        }
    }

    /// Multiply-accumulates of the gate projection (utilization numerator).
    pub fn macs(&self) -> u64 {
        (self.tokens * self.hidden * self.experts) as u64
    }
}

/// How a driver lays a problem out in device memory: pitches rounded up to the
/// beat, 4 KiB-aligned buffers (as [`crate::gemm::GemmLayout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeLayout {
    pub ldx: u64,
    pub ldw: u64,
    pub dpitch: u64,
    pub x_bytes: u64,
    pub w_bytes: u64,
    pub bias_bytes: u64,
    pub route_bytes: u64,
    pub dispatch_bytes: u64,
    pub stats_bytes: u64,
}

impl MoeLayout {
    pub fn new(cfg: &MoeConfig, p: &MoeProblem) -> Self {
        Self::with_beat(p, cfg.port_bytes() as u64)
    }

    /// Pitches rounded up to `beat` bytes (1 for dense host memory).
    pub fn with_beat(p: &MoeProblem, beat: u64) -> Self {
        let pitch = |bytes: u64| bytes.div_ceil(beat).max(1) * beat;
        let (ldx, ldw, dpitch) = (pitch(p.hidden as u64), pitch(p.hidden as u64), pitch(4 * p.capacity_slots() as u64));
        Self {
            ldx,
            ldw,
            dpitch,
            x_bytes: ldx * p.tokens as u64,
            w_bytes: ldw * p.experts as u64,
            bias_bytes: pitch(4 * p.experts as u64),
            route_bytes: (RECORD_BYTES * p.tokens) as u64,
            dispatch_bytes: dpitch * p.experts as u64,
            stats_bytes: pitch(4 * (p.experts as u64 + 2)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem() -> MoeProblem {
        MoeProblem::new(16, 32, 8, 2, GateMode::SoftmaxTopk, 1.0 / 64.0, 1.0 / 64.0).unwrap()
    }

    #[test]
    fn expert_slots_are_the_smallest_bus_that_holds_e_max() {
        let slots = |e_max| MoeConfig { e_max, ..MoeConfig::default() }.expert_slots();
        let got: Vec<usize> = [1, 4, 16, 17, 64, 65, 255, 256].into_iter().map(slots).collect();
        assert_eq!(got, [16, 16, 16, 64, 64, 256, 256, 256]);
    }

    #[test]
    fn configs() {
        MoeConfig::default().validate().unwrap();
        MoeConfig::small().validate().unwrap();
        for bad in [
            MoeConfig { e_max: 257, ..MoeConfig::small() },
            MoeConfig { k_max: 9, ..MoeConfig::small() },
            MoeConfig { port_bits: 1024, ..MoeConfig::small() },
            MoeConfig { h_max: 48, ..MoeConfig::small() },
            MoeConfig { lanes: 13, ..MoeConfig::small() },
        ] {
            assert!(matches!(bad.validate(), Err(HwError::Config(_))), "{bad:?}");
        }
    }

    #[test]
    fn register_map_is_consistent() {
        let map = MoeConfig::default().register_map();
        map.check().unwrap();
        assert_eq!(map.offset("X"), 0x10);
        assert_eq!(map.offset("T"), 0x40);
        assert_eq!(map.offset("CYCLES"), 0x6C);
        assert_eq!(RegisterMap::from_json(&map.to_json()).unwrap(), map);
    }

    #[test]
    fn bad_problems_have_clear_errors() {
        let cfg = MoeConfig::small();
        let msg = |p: MoeProblem| p.validate_for(&cfg).unwrap_err().to_string();
        assert!(msg(MoeProblem { top_k: 0, ..problem() }).contains("k = 0"));
        assert!(msg(MoeProblem { top_k: 9, experts: 8, ..problem() }).contains("exceeds the 8 experts"));
        assert!(msg(MoeProblem { experts: 13, ..problem() }).contains("e_max = 12"));
        assert!(msg(MoeProblem { hidden: 65, ..problem() }).contains("h_max"));
        assert!(msg(MoeProblem { capacity: Some(CapacityFactor(0)), ..problem() }).contains("capacity factor"));
        assert!(CapacityFactor::from_f64(0.0).is_err());
        assert!(CapacityFactor::from_f64(-1.0).is_err());
        assert!(CapacityFactor::from_f64(f64::NAN).is_err());
    }

    #[test]
    fn capacity_is_exact() {
        let p = |t, k, e, cf: f64| MoeProblem {
            tokens: t,
            top_k: k,
            experts: e,
            capacity: Some(CapacityFactor::from_f64(cf).unwrap()),
            ..problem()
        };
        assert_eq!(p(16, 2, 8, 1.0).capacity_slots(), 4);
        assert_eq!(p(16, 2, 8, 1.25).capacity_slots(), 5);
        assert_eq!(p(10, 1, 3, 1.0).capacity_slots(), 4); // ceil(10/3)
        assert_eq!(p(10, 2, 2, 8.0).capacity_slots(), 10); // bounded by T
        assert_eq!(MoeProblem { capacity: None, ..problem() }.capacity_slots(), 16);
    }
}
