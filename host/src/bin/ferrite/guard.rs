//! Checks that run before a unit does, so that bad input is one error line
//! rather than an out-of-memory abort, an hour of silence or a result lost
//! to an unwritable `--out`: host memory against `MemAvailable`, an estimate
//! of cycles and wall time (refused above [`LONG_RUN`] without `--yes`), a
//! progress bar on long runs, and output paths.
use anyhow::{bail, Context, Result};
use ferrite_host::memory;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs estimated to take longer than this need `--yes`.
pub(super) const LONG_RUN: Duration = Duration::from_secs(600);

/// Runs estimated to take longer than this print their estimate and get a progress bar.
const SHOW_ESTIMATE: Duration = Duration::from_secs(5);

/// Simulated cycles per second of the Verilator build of a unit, measured:
/// the 16×16 GEMM unit ran 67,407 cycles in 1.65 s on a shared 2-core host
/// (docs/simulators.md; the default MoE router is about 8× slower).
pub(super) const VERILATOR_CYCLES_PER_S: f64 = 4.0e4;
/// The same for rust-hdl's own simulator, assumed a hundred times slower (not measured).
pub(super) const RUST_HDL_CYCLES_PER_S: f64 = 150.0;
/// Multiply-accumulates per second of the golden models (scalar integer code).
pub(super) const GOLDEN_MACS_PER_S: f64 = 2e8;

/// Refuse a run whose host memory exceeds `MemAvailable`; `what` names it.
pub(super) fn check_memory(need: u64, what: &str) -> Result<()> {
    if let Err(ferrite_host::DeviceError::OutOfMemory { available, .. }) = memory::check_host(need) {
        bail!(
            "{what} needs about {} of host memory, {} is available (MemAvailable in /proc/meminfo): use a smaller problem",
            memory::human(need),
            memory::human(available)
        );
    }
    Ok(())
}

/// How long a run is expected to take, before it starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Estimate {
    /// Cycles the unit needs, for a simulation: a lower bound (every
    /// multiplier busy every cycle).
    pub cycles: Option<u64>,
    pub wall: Duration,
}

impl Estimate {
    /// No estimate: a device fast enough not to need one.
    pub const NONE: Self = Self { cycles: None, wall: Duration::ZERO };

    /// A simulation of at least `cycles` at `rate` cycles per second.
    pub fn sim(cycles: u64, rate: f64) -> Self {
        Self { cycles: Some(cycles), wall: Duration::from_secs_f64(cycles as f64 / rate) }
    }

    /// A golden-model run of `macs` multiply-accumulates.
    pub fn golden(macs: u64) -> Self {
        Self { cycles: None, wall: Duration::from_secs_f64(macs as f64 / GOLDEN_MACS_PER_S) }
    }

    fn describe(&self) -> String {
        let wall = human_duration(self.wall);
        match self.cycles {
            Some(c) => format!("at least {c} cycles, about {wall} of simulation"),
            None => format!("about {wall}"),
        }
    }

    /// Print the estimate (always for a simulation, for other devices when it
    /// is long), and refuse a run longer than [`LONG_RUN`] unless `yes`.
    pub fn confirm(&self, yes: bool) -> Result<()> {
        if self.cycles.is_some() || self.wall > SHOW_ESTIMATE {
            eprintln!("estimate     {}", self.describe());
        }
        if self.wall > LONG_RUN && !yes {
            bail!(
                "this run would take {} (more than {}): pass --yes to start it anyway, or use a smaller problem",
                self.describe(),
                human_duration(LONG_RUN)
            );
        }
        Ok(())
    }

    /// Run `f` with a spinner, or for a long run a progress bar: of cycles
    /// simulated against the estimate when `counters` (the simulators'
    /// [`Device::cycles_done`](ferrite_host::Device::cycles_done), summed)
    /// report them as they go, else of elapsed against estimated time.
    pub fn progress<T>(&self, counters: &[Arc<AtomicU64>], msg: String, f: impl FnOnce() -> T) -> T {
        if self.wall <= SHOW_ESTIMATE {
            let bar = super::spinner(msg);
            let out = f();
            bar.finish_and_clear();
            return out;
        }
        let simulated = || counters.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>();
        let (bar, position): (ProgressBar, Box<dyn Fn() -> (u64, u64) + Sync>) = match self.cycles {
            Some(expected) if !counters.is_empty() => {
                let bar = ProgressBar::new(expected).with_message(msg);
                let style = "{msg} [{elapsed}, ~{eta} left] {human_pos}/{human_len} cycles {wide_bar}";
                if let Ok(style) = ProgressStyle::with_template(style) {
                    bar.set_style(style);
                }
                let start = simulated();
                (bar, Box::new(move || cycle_bar(simulated().saturating_sub(start), expected)))
            }
            _ => {
                let total_ms = self.wall.as_millis().max(1) as u64;
                let bar = ProgressBar::new(total_ms).with_message(msg);
                let template =
                    format!("{{msg}} [{{elapsed}} of ~{}] {{wide_bar}} {{percent}}%", human_duration(self.wall));
                if let Ok(style) = ProgressStyle::with_template(&template) {
                    bar.set_style(style);
                }
                let start = Instant::now();
                (bar, Box::new(move || cycle_bar(start.elapsed().as_millis() as u64, total_ms)))
            }
        };
        let done = AtomicBool::new(false);
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let (pos, len) = position();
                    bar.set_length(len);
                    bar.set_position(pos);
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
            let out = f();
            done.store(true, Ordering::Relaxed);
            out
        });
        bar.finish_and_clear();
        out
    }
}

/// Position and length of a progress bar at `done` of an `expected` amount
/// that is only an estimate (a lower bound for cycles): past it the bar's
/// length grows ahead of the position, so a run that is still going never
/// shows as finished.
fn cycle_bar(done: u64, expected: u64) -> (u64, u64) {
    let expected = expected.max(1);
    if done < expected {
        (done, expected)
    } else {
        (done, done + done / 8 + 1)
    }
}

/// `1.5 s`, `12 min`, `3.2 h`, `41 days`.
pub(super) fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    match s {
        s if s < 60.0 => format!("{s:.1} s"),
        s if s < 3600.0 => format!("{:.0} min", s / 60.0),
        s if s < 86400.0 => format!("{:.1} h", s / 3600.0),
        s if s < 86400.0 * 365.0 => format!("{:.0} days", s / 86400.0),
        s => format!("{:.0} years", s / (86400.0 * 365.0)),
    }
}

/// Check before the run that `--out FILE` can be written: not a directory, in
/// an existing directory, writable. A file this creates is removed again.
pub(super) fn check_out_file(path: &Path) -> Result<()> {
    if path.is_dir() {
        bail!("--out {} is a directory: give a file name such as {}", path.display(), path.join("out.npy").display());
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("--out {} cannot be written", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Check before the run that `--out DIR` is (or can be made) a writable directory.
pub(super) fn check_out_dir(dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("--out {} is a file: give a directory for the result .npy files", dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("--out {}: cannot create the directory", dir.display()))?;
    tempfile::tempfile_in(dir).with_context(|| format!("--out {} cannot be written", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_follows_the_count_and_never_ends_while_running() {
        assert_eq!(cycle_bar(0, 1000), (0, 1000));
        assert_eq!(cycle_bar(400, 1000), (400, 1000));
        assert_eq!(cycle_bar(0, 0), (0, 1));
        for done in [1000, 1001, 5000, u64::MAX / 2] {
            let (pos, len) = cycle_bar(done, 1000);
            assert_eq!(pos, done);
            assert!(len > pos, "{done}: at {pos} of {len}");
        }
    }
}
