//! Regression tracking: a report saved as a versioned baseline, and a new
//! report classified against it row by row.
//!
//! A row is keyed by `workload/size/device`. Slowdown is the larger of the
//! latency increase and the throughput drop, in percent of the baseline,
//! graded by [`Thresholds`]. Whatever breaks correctness is severe whatever
//! the thresholds: lost bit-exactness, a larger error against float64, fewer
//! tokens agreeing with the float router, a row that disappeared, or a figure
//! whose provenance changed (a measured latency is not comparable with a
//! projected one).
use super::report::{Accuracy, DeviceId, Figure, HostInfo, Report, Workload};
use anyhow::{bail, ensure, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Marks a file as a compare baseline, so a report or any other JSON is refused.
pub const BASELINE_FORMAT: &str = "ferrite-compare-baseline";
/// Version of the baseline layout; a file of another version is refused.
pub const BASELINE_VERSION: u32 = 1;

/// What a baseline keeps of a report: enough to classify a later run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub format: String,
    pub version: u32,
    pub created_unix: u64,
    pub ferrite_version: String,
    pub host: HostInfo,
    /// The inputs' seed: a run with another seed has other inputs and is refused.
    pub seed: u64,
    pub entries: Vec<Entry>,
}

/// One device on one problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `workload/size/device`.
    pub key: String,
    pub workload: Workload,
    pub size: String,
    pub device: DeviceId,
    pub name: String,
    pub latency_s: Figure,
    pub ops_per_s: Figure,
    pub bit_exact: bool,
    pub accuracy: Accuracy,
}

fn key(workload: Workload, size: &str, device: DeviceId) -> String {
    format!("{}/{size}/{}", workload.id(), device.id())
}

impl Baseline {
    pub fn from_report(r: &Report) -> Self {
        let entries = r
            .cases
            .iter()
            .flat_map(|c| {
                c.rows.iter().map(|row| Entry {
                    key: key(c.workload, &c.size, row.device),
                    workload: c.workload,
                    size: c.size.clone(),
                    device: row.device,
                    name: row.name.clone(),
                    latency_s: row.latency_s,
                    ops_per_s: row.ops_per_s,
                    bit_exact: row.bit_exact,
                    accuracy: row.accuracy.clone(),
                })
            })
            .collect();
        Self {
            format: BASELINE_FORMAT.into(),
            version: BASELINE_VERSION,
            created_unix: r.created_unix,
            ferrite_version: r.ferrite_version.clone(),
            host: r.host.clone(),
            seed: r.seed,
            entries,
        }
    }

    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).context("serializing the baseline")
    }

    pub fn from_json(text: &str) -> Result<Self> {
        let b: Self = serde_json::from_str(text).context("parsing a compare baseline")?;
        ensure!(b.format == BASELINE_FORMAT, "not a compare baseline (format {:?})", b.format);
        ensure!(
            b.version == BASELINE_VERSION,
            "baseline version {} is not the supported version {BASELINE_VERSION}: record a new one with --save-baseline",
            b.version
        );
        Ok(b)
    }
}

/// Slowdown thresholds in percent: at or above `minor` a row is minor, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub minor: f64,
    pub moderate: f64,
    pub severe: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self { minor: 5.0, moderate: 15.0, severe: 30.0 }
    }
}

impl FromStr for Thresholds {
    type Err = anyhow::Error;

    /// `minor=5,moderate=15,severe=30`; any subset, the rest keep their defaults.
    fn from_str(s: &str) -> Result<Self> {
        let mut t = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) =
                part.split_once('=').with_context(|| format!("`{part}`: expected NAME=PERCENT, e.g. minor=5"))?;
            let v: f64 = value.trim().parse().with_context(|| format!("`{part}`: {value:?} is not a number"))?;
            ensure!(v.is_finite() && v >= 0.0, "`{part}`: a threshold is a percentage ≥ 0");
            match name.trim() {
                "minor" => t.minor = v,
                "moderate" => t.moderate = v,
                "severe" => t.severe = v,
                other => bail!("unknown threshold `{other}` (minor, moderate, severe)"),
            }
        }
        ensure!(
            t.minor <= t.moderate && t.moderate <= t.severe,
            "thresholds must grow: minor {} ≤ moderate {} ≤ severe {}",
            t.minor,
            t.moderate,
            t.severe
        );
        Ok(t)
    }
}

/// How bad a row is against its baseline; ordered from harmless to severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    /// In this run but not in the baseline: nothing to compare with.
    New,
    /// Slower by less than the minor threshold (or faster).
    Ok,
    Minor,
    Moderate,
    Severe,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::New => "new",
            Self::Ok => "ok",
            Self::Minor => "minor",
            Self::Moderate => "moderate",
            Self::Severe => "SEVERE",
        })
    }
}

/// The classification of one row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub key: String,
    pub severity: Severity,
    /// Larger of latency increase and throughput drop, percent (negative: faster).
    pub slowdown_pct: Option<f64>,
    /// Why, in words.
    pub reason: String,
}

/// Classify every row of `current` (and every baseline row it lacks).
pub fn classify(baseline: &Baseline, current: &Report, t: &Thresholds) -> Result<Vec<Verdict>> {
    ensure!(
        baseline.seed == current.seed,
        "the baseline was recorded with seed {} and this run uses seed {}: the inputs differ, so nothing is comparable",
        baseline.seed,
        current.seed
    );
    let now = Baseline::from_report(current);
    let mut out = Vec::new();
    for base in &baseline.entries {
        out.push(match now.entries.iter().find(|e| e.key == base.key) {
            Some(cur) => classify_entry(base, cur, t),
            None => Verdict {
                key: base.key.clone(),
                severity: Severity::Severe,
                slowdown_pct: None,
                reason: "in the baseline but not in this run (device skipped, or size changed)".into(),
            },
        });
    }
    for cur in now.entries.iter().filter(|e| !baseline.entries.iter().any(|b| b.key == e.key)) {
        out.push(Verdict {
            key: cur.key.clone(),
            severity: Severity::New,
            slowdown_pct: None,
            reason: "not in the baseline".into(),
        });
    }
    Ok(out)
}

/// `a` worse than `b` beyond floating-point noise.
fn worse(a: f64, b: f64) -> bool {
    a > b * (1.0 + 1e-9) + 1e-15
}

fn classify_entry(base: &Entry, cur: &Entry, t: &Thresholds) -> Verdict {
    let verdict =
        |severity, slowdown_pct, reason: String| Verdict { key: cur.key.clone(), severity, slowdown_pct, reason };
    for (what, b, c) in [("latency", base.latency_s, cur.latency_s), ("throughput", base.ops_per_s, cur.ops_per_s)] {
        if b.label != c.label {
            return verdict(
                Severity::Severe,
                None,
                format!("{what} was {} in the baseline and is {} now: not comparable", b.label.word(), c.label.word()),
            );
        }
    }
    if base.bit_exact && !cur.bit_exact {
        return verdict(Severity::Severe, None, "lost bit-exactness with the golden model".into());
    }
    let (ba, ca) = (&base.accuracy, &cur.accuracy);
    if worse(ca.max_abs, ba.max_abs) || worse(ca.rel_fro, ba.rel_fro) {
        return verdict(
            Severity::Severe,
            None,
            format!(
                "error vs float64 grew: max {:.3e} → {:.3e} {}, rel. Frobenius {:.3e} → {:.3e}",
                ba.max_abs, ca.max_abs, ca.unit, ba.rel_fro, ca.rel_fro
            ),
        );
    }
    if let (Some(b), Some(c)) = (ba.expert_agreement, ca.expert_agreement) {
        if c < b {
            return verdict(
                Severity::Severe,
                None,
                format!(
                    "expert-set agreement with the float router fell from {:.2} % to {:.2} %",
                    100.0 * b,
                    100.0 * c
                ),
            );
        }
    }
    let latency_up = 100.0 * (cur.latency_s.value / base.latency_s.value - 1.0);
    let throughput_down = 100.0 * (1.0 - cur.ops_per_s.value / base.ops_per_s.value);
    let slowdown = latency_up.max(throughput_down);
    if !slowdown.is_finite() {
        return verdict(Severity::Severe, None, "a latency or throughput is zero or not a number".into());
    }
    let severity = if slowdown >= t.severe {
        Severity::Severe
    } else if slowdown >= t.moderate {
        Severity::Moderate
    } else if slowdown >= t.minor {
        Severity::Minor
    } else {
        Severity::Ok
    };
    verdict(
        severity,
        Some(slowdown),
        format!("latency {:+.1} %, throughput {:+.1} % ({})", latency_up, -throughput_down, cur.latency_s.label.word()),
    )
}

/// The verdicts as a terminal table.
pub fn verdict_table(verdicts: &[Verdict]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(["row", "class", "slowdown", "why"]);
    for v in verdicts {
        table.add_row([
            v.key.clone(),
            v.severity.to_string(),
            v.slowdown_pct.map_or_else(|| "—".into(), |s| format!("{s:+.1} %")),
            v.reason.clone(),
        ]);
    }
    table.to_string()
}

/// The worst severity among `verdicts` (`New` when there are none).
pub fn worst(verdicts: &[Verdict]) -> Severity {
    verdicts.iter().map(|v| v.severity).max().unwrap_or(Severity::New)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_refuse_nonsense() {
        let t: Thresholds = "minor=2, severe=50".parse().unwrap();
        assert_eq!(t, Thresholds { minor: 2.0, moderate: 15.0, severe: 50.0 });
        for bad in ["minor", "minor=x", "minor=-1", "tiny=3", "minor=20,moderate=10"] {
            assert!(bad.parse::<Thresholds>().is_err(), "{bad}");
        }
    }
}
