//! [`GemmConfig`]: the one description of a GEMM unit that the RTL generator,
//! the golden model, the drivers and the reports all read.
use crate::numerics::{Requant, MAX_REQUANT_SHIFT};
use crate::regmap::RegisterMap;
use crate::unit::{check_extents, check_limit};
use crate::HwError;
use serde::{Deserialize, Serialize};

/// Alignment the drivers give every buffer: bursts never cross a 4 KiB page.
pub const BUFFER_ALIGN: u64 = 4096;

/// Unit id reported in the `HWINFO` register's top byte.
pub const UNIT_ID: u32 = 1;

/// FLAGS register bits.
pub use super::regs::flag::{BIAS as FLAG_BIAS, RELU as FLAG_RELU, REQUANT as FLAG_REQUANT};

/// Generation-time parameters of a GEMM unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmConfig {
    /// Systolic array rows (output rows computed per tile).
    pub rows: usize,
    /// Systolic array columns (output columns per tile); a power of two so a
    /// tile's row of outputs always sits inside one memory beat.
    pub cols: usize,
    /// Width of the `m_axi_gmem` data bus in bits (128, 256, 512 or 1024).
    pub port_bits: usize,
    /// Largest K: depth in bytes of each row of the on-chip A-panel buffer.
    pub k_max: usize,
    /// Largest N when a bias is used: entries of the on-chip bias buffer.
    pub n_max: usize,
    /// Depth of the B-stream FIFO, which bounds outstanding reads; it must cover
    /// the memory latency for the array to stay busy.
    pub read_fifo_depth: usize,
    /// Clock used for projected times, in MHz.
    pub clock_mhz: f64,
}

impl Default for GemmConfig {
    /// The realistic default: 16×16 array, 512-bit memory port, 300 MHz.
    fn default() -> Self {
        Self { rows: 16, cols: 16, port_bits: 512, k_max: 4096, n_max: 4096, read_fifo_depth: 64, clock_mhz: 300.0 }
    }
}

impl GemmConfig {
    /// A small array for tests.
    pub fn small(rows: usize, cols: usize) -> Self {
        Self { rows, cols, port_bits: 128, k_max: 256, n_max: 256, read_fifo_depth: 32, ..Self::default() }
    }

    pub fn port_bytes(&self) -> usize {
        self.port_bits / 8
    }

    /// Multipliers in the array.
    pub fn macs(&self) -> usize {
        self.rows * self.cols
    }

    pub fn validate(&self) -> Result<(), HwError> {
        let bad = |m: String| Err(HwError::Config(m));
        if !(1..=64).contains(&self.rows) {
            return bad(format!("rows = {} (supported: 1..=64)", self.rows));
        }
        if !matches!(self.port_bits, 128 | 256 | 512 | 1024) {
            return bad(format!("port_bits = {} (supported: 128, 256, 512, 1024)", self.port_bits));
        }
        if !self.cols.is_power_of_two() || self.cols * 4 > self.port_bytes() {
            return bad(format!(
                "cols = {} must be a power of two with cols·4 bytes ≤ the {}-byte memory beat (one int32 output row per beat)",
                self.cols,
                self.port_bytes()
            ));
        }
        if self.k_max == 0
            || !self.k_max.is_multiple_of(self.port_bytes())
            || !(self.k_max / self.port_bytes()).is_power_of_two()
        {
            return bad(format!(
                "k_max = {} must be a power-of-two multiple of the {}-byte beat",
                self.k_max,
                self.port_bytes()
            ));
        }
        if self.n_max == 0
            || !(self.n_max * 4).is_multiple_of(self.port_bytes())
            || !(self.n_max * 4 / self.port_bytes()).is_power_of_two()
        {
            return bad(format!(
                "n_max = {}: n_max·4 must be a power-of-two multiple of the {}-byte beat",
                self.n_max,
                self.port_bytes()
            ));
        }
        if !(4..=256).contains(&self.read_fifo_depth) || !self.read_fifo_depth.is_power_of_two() {
            return bad(format!("read_fifo_depth = {} (supported: powers of two in 4..=256)", self.read_fifo_depth));
        }
        if !(self.clock_mhz.is_finite() && self.clock_mhz > 0.0) {
            return bad(format!("clock_mhz = {}", self.clock_mhz));
        }
        Ok(())
    }

    /// Value of the read-only `HWINFO` register: rows, cols, log2(port bits), unit id.
    pub fn hwinfo(&self) -> u32 {
        self.rows as u32 | (self.cols as u32) << 8 | (self.port_bits.trailing_zeros()) << 16 | UNIT_ID << 24
    }

    /// Verilog module / Vitis kernel name, unique per configuration.
    pub fn kernel_name(&self) -> String {
        format!("ferrite_gemm_{}x{}_p{}", self.rows, self.cols, self.port_bits)
    }

    /// The register map: generated here, consumed by the RTL decoder, the JSON
    /// export and every driver.
    pub fn register_map(&self) -> RegisterMap {
        super::regs::TABLE.map(&self.kernel_name(), self.port_bits as u32)
    }
}

/// One GEMM call: shapes and the fused epilogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GemmProblem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub bias: bool,
    pub relu: bool,
    /// Requantize to int8 output; `None` gives int32 output.
    pub requant: Option<Requant>,
}

impl GemmProblem {
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Self { m, n, k, bias: false, relu: false, requant: None }
    }

    /// Shape checks that hold for every backend.
    pub fn validate(&self) -> Result<(), HwError> {
        if self.m == 0 || self.n == 0 || self.k == 0 {
            return Err(HwError::Problem(format!(
                "M, N, K must be ≥ 1 (got M={}, N={}, K={})",
                self.m, self.n, self.k
            )));
        }
        if let Some(rq) = self.requant {
            if rq.shift > MAX_REQUANT_SHIFT {
                return Err(HwError::Problem(format!("requant shift {} > {MAX_REQUANT_SHIFT}", rq.shift)));
            }
        }
        Ok(())
    }

    /// Checks against what a unit built with `cfg` can run.
    pub fn validate_for(&self, cfg: &GemmConfig) -> Result<(), HwError> {
        self.validate()?;
        check_limit(self.k, cfg.k_max, || {
            (format!("K = {}", self.k), format!("k_max = {} (A-panel buffer)", cfg.k_max))
        })?;
        if self.bias {
            check_limit(self.n, cfg.n_max, || {
                (format!("N = {}", self.n), format!("n_max = {} (bias buffer)", cfg.n_max))
            })?;
        }
        let layout = GemmLayout::new(cfg, self);
        check_extents(&[("A", layout.a_bytes), ("B", layout.b_bytes), ("C", layout.c_bytes)])?;
        Ok(())
    }

    pub fn flags(&self) -> u32 {
        (if self.bias { FLAG_BIAS } else { 0 })
            | (if self.relu { FLAG_RELU } else { 0 })
            | (if self.requant.is_some() { FLAG_REQUANT } else { 0 })
    }

    /// Bytes per output element.
    pub fn out_elem_bytes(&self) -> usize {
        if self.requant.is_some() {
            1
        } else {
            4
        }
    }

    /// Multiply-accumulates the problem needs (the numerator of utilization).
    pub fn macs(&self) -> u64 {
        (self.m * self.n * self.k) as u64
    }
}

/// How a driver lays a problem out in device memory: row pitches rounded up to
/// the memory beat (like `cudaMallocPitch`), buffers 4 KiB-aligned. Tiling stays
/// in the unit; the pitch only keeps every row start beat-aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmLayout {
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    pub a_bytes: u64,
    pub b_bytes: u64,
    pub bias_bytes: u64,
    pub c_bytes: u64,
}

impl GemmLayout {
    pub fn new(cfg: &GemmConfig, p: &GemmProblem) -> Self {
        Self::with_beat(p, cfg.port_bytes() as u64)
    }

    /// Pitches rounded up to `beat` bytes (1 for dense host memory).
    pub fn with_beat(p: &GemmProblem, beat: u64) -> Self {
        let pitch = |bytes: u64| bytes.div_ceil(beat) * beat;
        let (lda, ldb, ldc) = (pitch(p.k as u64), pitch(p.n as u64), pitch((p.n * p.out_elem_bytes()) as u64));
        Self {
            lda,
            ldb,
            ldc,
            a_bytes: lda * p.m as u64,
            b_bytes: ldb * p.k as u64,
            bias_bytes: pitch(4 * p.n as u64),
            c_bytes: ldc * p.m as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_small_configs_are_valid() {
        GemmConfig::default().validate().unwrap();
        GemmConfig::small(4, 4).validate().unwrap();
        GemmConfig::small(3, 2).validate().unwrap();
    }

    #[test]
    fn bad_configs_are_refused() {
        for cfg in [
            GemmConfig { cols: 3, ..GemmConfig::small(4, 4) },
            GemmConfig { cols: 8, ..GemmConfig::small(4, 4) }, // 32 bytes > 16-byte beat
            GemmConfig { port_bits: 96, ..GemmConfig::small(4, 4) },
            GemmConfig { rows: 0, ..GemmConfig::small(4, 4) },
            GemmConfig { k_max: 100, ..GemmConfig::small(4, 4) },
        ] {
            assert!(matches!(cfg.validate(), Err(HwError::Config(_))), "{cfg:?}");
        }
    }

    #[test]
    fn register_map_matches_vitis_layout() {
        let map = GemmConfig::default().register_map();
        map.check().unwrap();
        assert_eq!(map.offset("A"), 0x10);
        assert_eq!(map.offset("B"), 0x18);
        assert_eq!(map.offset("C"), 0x28);
        assert_eq!(map.offset("M"), 0x30);
        assert_eq!(map.offset("HWINFO"), 0x5C);
        let round = RegisterMap::from_json(&map.to_json()).unwrap();
        assert_eq!(round, map);
    }

    #[test]
    fn problem_limits() {
        let cfg = GemmConfig::small(4, 4);
        assert!(GemmProblem::new(0, 1, 1).validate().is_err());
        assert!(GemmProblem::new(1, 1, cfg.k_max + 1).validate_for(&cfg).is_err());
        assert!(GemmProblem { bias: true, ..GemmProblem::new(1, cfg.n_max + 1, 1) }.validate_for(&cfg).is_err());
        assert!(GemmProblem::new(1, cfg.n_max + 1, 1).validate_for(&cfg).is_ok());
    }
}
