//! FPGA resource estimates: `yosys synth_xilinx` on a unit's exported
//! Verilog, cell counts from `stat`, compared with each board's capacity, and
//! the largest GEMM array each board fits, extrapolated from measured configs.
//!
//! yosys is not Vivado: its counts are an estimate (no cross-boundary
//! optimization, its own RAM and DSP inference), good for scaling trends and
//! for "does it fit" with headroom, not for sign-off. Synthesis of small
//! configurations takes about a minute on two cores, so results are cached by
//! the sha256 of everything that determines them (Verilog, family, yosys
//! version, script) under `$FERRITE_CACHE` or `~/.cache/ferrite`.
use crate::bitstream::board::{Board, Capacity};
use crate::manifest::sha256_hex;
use anyhow::{bail, Context, Result};
use ferrite_hw::gemm::{rtl, GemmConfig};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::Command;
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

/// Parse the cell list of yosys `stat` (lines `  CELL  COUNT` after `Number of cells`).
pub fn parse_stat(text: &str) -> Result<Counts> {
    let mut c = Counts::default();
    let mut in_cells = false;
    let mut seen = false;
    for line in text.lines() {
        if line.contains("Number of cells") {
            in_cells = true;
            seen = true;
            continue;
        }
        if !in_cells {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(cell), Some(n), None) = (parts.next(), parts.next(), parts.next()) else {
            if line.trim().is_empty() {
                in_cells = false;
            }
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match cell {
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
    if !seen {
        bail!("no `Number of cells` in the yosys stat output");
    }
    Ok(c)
}

/// A synthesized configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub config: GemmConfig,
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

fn yosys_version() -> Result<String> {
    let out = Command::new("yosys").arg("-V").output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow::anyhow!("yosys not found: install it (`apt-get install yosys`, or scripts/install-deps.sh)")
        }
        _ => anyhow::anyhow!("running yosys -V: {e}"),
    })?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Synthesize `cfg` for `family` (`xc7`, `xcup`) with yosys, or read the cached result.
pub fn synthesize(cfg: &GemmConfig, family: &str) -> Result<Measured> {
    cfg.validate()?;
    let kernel = cfg.kernel_name();
    let verilog = rtl::verilog(cfg)?;
    let version = yosys_version()?;
    let script = format!("read_verilog {kernel}.v; synth_xilinx -flatten -noiopad -top {kernel} -family {family}; tee -q -o stat.txt stat");
    let key = sha256_hex(format!("{version}\n{script}\n{verilog}").as_bytes());
    let dir = cache_root()?.join("resources");
    let cached = dir.join(format!("{key}.json"));
    if let Ok(text) = std::fs::read_to_string(&cached) {
        if let Ok(mut m) = serde_json::from_str::<Measured>(&text) {
            m.cached = true;
            return Ok(m);
        }
    }
    let work = tempfile::tempdir().context("creating a work directory for yosys")?;
    std::fs::write(work.path().join(format!("{kernel}.v")), &verilog)?;
    let start = Instant::now();
    let out =
        Command::new("yosys").args(["-q", "-p", &script]).current_dir(work.path()).output().context("running yosys")?;
    let seconds = start.elapsed().as_secs_f64();
    if !out.status.success() {
        let log = String::from_utf8_lossy(&out.stderr);
        bail!(
            "yosys failed on {kernel} ({}): {}",
            out.status,
            log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        );
    }
    let stat = std::fs::read_to_string(work.path().join("stat.txt")).context("reading yosys stat output")?;
    let m = Measured {
        config: cfg.clone(),
        family: family.to_string(),
        counts: parse_stat(&stat)?,
        seconds,
        cached: false,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(&cached, serde_json::to_string_pretty(&m)?)
        .with_context(|| format!("writing {}", cached.display()))?;
    Ok(m)
}

/// Per-resource linear model `fixed + per_pe · rows · cols`, fitted to two
/// measured configs that differ in rows only (same port, buffers, FIFO).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    pub fixed: [f64; 5],
    pub per_pe: [f64; 5],
}

fn vector(c: &Counts) -> [f64; 5] {
    [c.lut as f64, c.ff as f64, c.dsp as f64, c.bram36, c.uram as f64]
}

impl Model {
    pub fn fit(a: &Measured, b: &Measured) -> Result<Self> {
        let (pa, pb) = (a.config.macs() as f64, b.config.macs() as f64);
        if pa == pb {
            bail!("two configurations with the same array size cannot be extrapolated from");
        }
        let (va, vb) = (vector(&a.counts), vector(&b.counts));
        let mut m = Model { fixed: [0.0; 5], per_pe: [0.0; 5] };
        for i in 0..5 {
            // A resource that does not grow with the array is fixed cost (never negative slope).
            m.per_pe[i] = ((vb[i] - va[i]) / (pb - pa)).max(0.0);
            m.fixed[i] = (va[i] - m.per_pe[i] * pa).max(0.0);
        }
        Ok(m)
    }

    pub fn predict(&self, pes: usize) -> [f64; 5] {
        std::array::from_fn(|i| self.fixed[i] + self.per_pe[i] * pes as f64)
    }
}

/// The largest array a board fits at [`FIT_FRACTION`], by the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    pub board: Board,
    /// `None` when not even a 1×1 array fits.
    pub rows: Option<usize>,
    pub cols: usize,
    /// The resource that stops a larger array, or "unit limit" when rows reach 64.
    pub limit: String,
    /// Predicted LUT, FF, DSP, BRAM36, URAM of the fitted array.
    pub predicted: [f64; 5],
}

/// Largest rows×cols with `cols` as wide as the port allows (cols·4 bytes per
/// beat) and rows ≤ 64, the unit's own limits.
pub fn largest_fit(model: &Model, board: Board, port_bits: usize) -> Fit {
    let cap = board.spec().capacity;
    let caps = [cap.lut, cap.ff, cap.dsp, cap.bram36, cap.uram].map(|c| c as f64 * FIT_FRACTION);
    let names = ["LUT", "FF", "DSP", "BRAM36", "URAM"];
    let cols = (port_bits / 32).max(1);
    let over = |rows: usize| {
        let p = model.predict(rows * cols);
        (0..5).find(|&i| p[i] > caps[i] && p[i] > 0.0)
    };
    let mut best = None;
    let mut limit = "unit limit (64 rows)".to_string();
    for rows in 1..=64 {
        match over(rows) {
            None => best = Some(rows),
            Some(i) => {
                limit = names[i].to_string();
                break;
            }
        }
    }
    Fit { board, rows: best, cols, limit, predicted: model.predict(best.unwrap_or(0) * cols) }
}

/// The configuration measured next to `cfg` for the extrapolation: half the rows (or 2 rows from 1).
pub fn companion(cfg: &GemmConfig) -> GemmConfig {
    GemmConfig { rows: if cfg.rows > 1 { cfg.rows / 2 } else { 2 }, ..cfg.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "
   Number of wires:              10000
   Number of cells:              10655
     BUFG                            1
     CARRY4                        573
     DSP48E2                        16
     FDRE                         2993
     FDSE                           15
     LUT2                         1819
     LUT6                         1341
     MUXF7                         519
     RAM32M16                       35
     RAM64M8                        38
     RAMB18E2                        3
     RAMB36E2                        2
     SRL16E                         26
     URAM288                         1

   Estimated number of LCs:       4000
";

    #[test]
    fn stat_cells_are_counted_by_kind() {
        let c = parse_stat(STAT).unwrap();
        assert_eq!(c.ff, 3008);
        assert_eq!(c.dsp, 16);
        assert_eq!(c.lutram, 35 * 8 + 38 * 8 + 26);
        assert_eq!(c.lut, 1819 + 1341 + c.lutram);
        assert_eq!(c.bram36, 3.5);
        assert_eq!(c.uram, 1);
        assert!(parse_stat("nothing").is_err());
    }

    #[test]
    fn extrapolation_stops_at_the_binding_resource() {
        let m = |rows, dsp| Measured {
            config: GemmConfig { rows, ..GemmConfig::small(1, 4) },
            family: "xcup".into(),
            counts: Counts { lut: 1000, ff: 1000, dsp, ..Counts::default() },
            seconds: 0.0,
            cached: false,
        };
        // 1 DSP per PE plus 10 fixed; the PYNQ-Z2 has 220 DSPs, 176 usable at 80 %: (176 - 10) / 4 = 41 rows of 4.
        let model = Model::fit(&m(1, 14), &m(2, 18)).unwrap();
        let fit = largest_fit(&model, Board::PynqZ2, 128);
        assert_eq!((fit.rows, fit.cols, fit.limit.as_str()), (Some(41), 4, "DSP"));
        assert_eq!(largest_fit(&model, Board::U250, 128).limit, "unit limit (64 rows)");
    }
}
