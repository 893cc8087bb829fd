//! The clock a projected FPGA figure is computed at, and where it comes from.
//!
//! Simulated cycles become seconds only at a clock. A clock is either
//! *measured* (a post-route Fmax, with the flow and the part that gave it) or
//! *assumed* (a user's `--clock-mhz`, a board's nominal kernel clock, a
//! unit's default), and every projected figure prints which.
use crate::manifest::{Manifest, UnitConfig};
use crate::timing;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Clock {
    pub mhz: f64,
    /// Post-route (true) or assumed (false).
    pub measured: bool,
    /// `measured post-route, nextpnr-ecp5 0.11.1 LFE5U-85F-6 CABGA381`, or
    /// `assumed (--clock-mhz), not timing-checked`.
    pub source: String,
}

impl Clock {
    /// A clock nobody has checked; `why` says whose it is.
    pub fn assumed(mhz: f64, why: &str) -> Self {
        Self { mhz, measured: false, source: format!("assumed ({why}), not timing-checked") }
    }

    /// A post-route Fmax; `source` names the flow and the part.
    pub fn measured(mhz: f64, source: String) -> Self {
        Self { mhz, measured: true, source }
    }

    /// `measured` or `assumed`, for a table cell.
    pub fn kind(&self) -> &'static str {
        if self.measured {
            "measured"
        } else {
            "assumed"
        }
    }

    /// The clock a built image runs at: measured when its build recorded the
    /// post-route timing (the target when met, else what the worst path
    /// allows), else the clock it was built for, assumed.
    pub fn of_image(m: &Manifest) -> Self {
        match &m.timing {
            Some(t) => Self::measured(
                t.clock_mhz(),
                format!(
                    "measured post-route, {} {}: WNS {:+.3} ns at {} MHz",
                    t.tool,
                    t.part,
                    t.wns_ns,
                    round_mhz(t.target_mhz)
                ),
            ),
            None => Self::assumed(m.clock_mhz, "the image's kernel clock; its build recorded no post-route timing"),
        }
    }

    /// The clock of projections for `unit`: the user's `--clock-mhz` if
    /// given, else the post-route Fmax the timing cache holds for exactly
    /// this Verilog, else `nominal` (MHz, and whose clock it is).
    pub fn for_unit(unit: &UnitConfig, user: Option<f64>, nominal: (f64, &str)) -> Result<Self> {
        if let Some(mhz) = user {
            return Ok(Self::assumed(mhz, "--clock-mhz"));
        }
        Ok(match timing::measured_for(unit)? {
            Some(t) => Self::measured(t.post_route.fmax_mhz, t.source()),
            None => Self::assumed(nominal.0, nominal.1),
        })
    }
}

impl Clock {
    /// The clock of units that share one clock domain (the block's): the
    /// slowest, measured only when every unit's clock is.
    pub fn slowest(units: &[(&str, Clock)]) -> Clock {
        match units {
            [] => Self::assumed(0.0, "no units"),
            [(_, one)] => one.clone(),
            _ => {
                let mhz = units.iter().map(|(_, c)| c.mhz).fold(f64::INFINITY, f64::min);
                let each: Vec<String> =
                    units.iter().map(|(u, c)| format!("{u} {} MHz {}", round_mhz(c.mhz), c.kind())).collect();
                let why = format!("the slowest of one clock domain: {}", each.join(", "));
                if units.iter().all(|(_, c)| c.measured) {
                    Self::measured(mhz, format!("measured post-route, {why}"))
                } else {
                    Self::assumed(mhz, &why)
                }
            }
        }
    }
}

impl fmt::Display for Clock {
    /// `37.2 MHz (measured post-route, nextpnr-ecp5 ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} MHz ({})", round_mhz(self.mhz), self.source)
    }
}

/// MHz to one decimal, without a trailing `.0` (300, 37.2).
pub fn round_mhz(mhz: f64) -> String {
    let r = (mhz * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_says_where_it_comes_from() {
        let a = Clock::assumed(300.0, "unit default");
        assert_eq!(a.to_string(), "300 MHz (assumed (unit default), not timing-checked)");
        assert_eq!(a.kind(), "assumed");
        let m = Clock::measured(37.24, "measured post-route, nextpnr-ecp5 0.11 LFE5U-85F-6 CABGA381".into());
        assert_eq!(m.to_string(), "37.2 MHz (measured post-route, nextpnr-ecp5 0.11 LFE5U-85F-6 CABGA381)");
        assert!(m.measured);
        let both = Clock::slowest(&[("gemm", m.clone()), ("attention", a.clone())]);
        assert_eq!((both.mhz, both.measured), (37.24, false));
        assert_eq!(
            both.source,
            "assumed (the slowest of one clock domain: gemm 37.2 MHz measured, attention 300 MHz assumed), not timing-checked"
        );
        let measured = Clock::slowest(&[("gemm", m.clone()), ("moe", Clock::measured(20.0, "x".into()))]);
        assert!(measured.measured && measured.mhz == 20.0 && measured.source.starts_with("measured"), "{measured:?}");
    }
}
