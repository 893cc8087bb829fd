//! Board images: everything `ferrite bitstream build` generates, checks and
//! (where the vendor tools are installed) builds.
//!
//! A build directory holds the unit's Verilog, register map and configuration;
//! for Alveo cards `kernel.xml`, `package_xo.tcl`, `link.cfg` and `timing.tcl`; for PYNQ
//! boards `overlay.tcl` and the UIO device-tree overlay `overlay.dtso` (with
//! `overlay.dtbo` when `dtc` is installed); a `build.sh` with the exact vendor
//! commands; and a [`Manifest`] with checksums of all of it. When the vendor
//! tools run, the recipes record the achieved post-route clock and WNS in
//! `timing.json`, which the manifest carries so deploy and compare can say
//! the clock was met (or not) instead of assuming it.
//!
//! Exit policy (see [`BuildReport::success`]): the build fails when something
//! generated is invalid (a check fails) or a vendor tool ran and failed. A
//! vendor tool that is not installed is not a failure: the report names the
//! tool and the command it would have run, and the directory can be copied to
//! a machine that has it (`sh build.sh`).
pub use ferrite_runtime::{bitfile, board};
pub mod dts;
pub mod kernel_xml;
pub mod tcl;

use crate::manifest::{Manifest, OverlayInfo, RoutedTiming, UnitConfig};
use board::{Board, Flow};
use ferrite_hw::regmap::RegisterMap;
use ferrite_hw::vitis;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tcl::TclCheck;

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    pub unit: UnitConfig,
    pub board: Board,
    pub clock_mhz: f64,
    pub out: PathBuf,
    /// Run `vivado`/`v++` when they are on PATH (off in tests, which must not
    /// start a multi-hour implementation on a machine that has them).
    pub run_vendor_tools: bool,
}

/// Result of one check of a generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass(String),
    Fail(String),
    /// The checker itself is not installed.
    Skipped(String),
}

/// One vendor-tool step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutcome {
    Ran,
    /// Ran and failed; the log is next to the outputs.
    Failed(String),
    /// Not on PATH.
    Missing,
    /// Not attempted because an earlier step did not produce its input.
    NotRun(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolStep {
    pub tool: &'static str,
    /// The command line, run in the build directory.
    pub command: String,
    pub outcome: ToolOutcome,
}

/// What a build did.
#[derive(Debug, Clone)]
pub struct BuildReport {
    pub out: PathBuf,
    pub files: Vec<String>,
    pub checks: Vec<(String, Outcome)>,
    pub tools: Vec<ToolStep>,
    pub manifest: PathBuf,
    pub image: Option<String>,
}

impl BuildReport {
    /// Every check passed or was skipped, and no vendor tool that ran failed.
    pub fn success(&self) -> bool {
        self.checks.iter().all(|(_, o)| !matches!(o, Outcome::Fail(_)))
            && self.tools.iter().all(|t| !matches!(t.outcome, ToolOutcome::Failed(_)))
    }
}

impl fmt::Display for BuildReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "generated in {}:", self.out.display())?;
        for file in &self.files {
            writeln!(f, "  {file}")?;
        }
        writeln!(f, "checks:")?;
        for (name, o) in &self.checks {
            match o {
                Outcome::Pass(d) => writeln!(f, "  ok       {name}: {d}")?,
                Outcome::Fail(d) => writeln!(f, "  FAILED   {name}: {d}")?,
                Outcome::Skipped(d) => writeln!(f, "  skipped  {name}: {d}")?,
            }
        }
        writeln!(f, "vendor tools:")?;
        for t in &self.tools {
            match &t.outcome {
                ToolOutcome::Ran => writeln!(f, "  ran      {}", t.command)?,
                ToolOutcome::Failed(why) => writeln!(f, "  FAILED   {}: {why}", t.command)?,
                ToolOutcome::Missing => {
                    writeln!(f, "  missing  `{}` is not on PATH; would have run: {}", t.tool, t.command)?
                }
                ToolOutcome::NotRun(why) => writeln!(f, "  not run  {} ({why})", t.command)?,
            }
        }
        match &self.image {
            Some(img) => writeln!(f, "image:    {img}")?,
            None => writeln!(
                f,
                "image:    none (vendor tools did not produce one; run `sh build.sh` where they are installed)"
            )?,
        }
        write!(f, "manifest: {}", self.manifest.display())
    }
}

/// Is `tool` an executable file in a PATH directory?
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(tool);
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                f.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            }
            #[cfg(not(unix))]
            {
                f.is_file()
            }
        })
    })
}

/// The vendor commands of a build, in order: (tool, arguments, the file it must produce).
fn vendor_steps(board: Board, kernel: &str) -> Vec<(&'static str, Vec<String>, String)> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    match board.spec().flow {
        Flow::Alveo { .. } => vec![
            ("vivado", s(&["-mode", "batch", "-notrace", "-source", "package_xo.tcl"]), format!("{kernel}.xo")),
            (
                "v++",
                s(&[
                    "--link",
                    "--target",
                    "hw",
                    "--config",
                    "link.cfg",
                    "--output",
                    &format!("{kernel}.xclbin"),
                    &format!("{kernel}.xo"),
                ]),
                format!("{kernel}.xclbin"),
            ),
            ("vivado", s(&["-mode", "batch", "-notrace", "-source", "timing.tcl"]), tcl::TIMING_FILE.into()),
        ],
        Flow::Pynq { .. } => {
            vec![("vivado", s(&["-mode", "batch", "-notrace", "-source", "overlay.tcl"]), "overlay.bit".into())]
        }
    }
}

fn write(dir: &Path, name: &str, text: &str, files: &mut Vec<String>) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    files.push(name.to_string());
    Ok(())
}

/// The Verilog declares module `kernel` with every port of the Vitis port list.
fn check_verilog(verilog: &str, map: &RegisterMap) -> Outcome {
    if !verilog.contains(&format!("module {}(", map.kernel)) {
        return Outcome::Fail(format!("no `module {}(` in the Verilog", map.kernel));
    }
    let ports = vitis::ports(map.memory_data_bits as usize);
    let missing: Vec<_> = ports.iter().filter(|p| !verilog.contains(&p.name)).map(|p| p.name.as_str()).collect();
    if missing.is_empty() {
        Outcome::Pass(format!("module {} with all {} Vitis ports", map.kernel, ports.len()))
    } else {
        Outcome::Fail(format!("ports missing from the Verilog: {}", missing.join(", ")))
    }
}

/// Generate, check, run the vendor tools that are installed, write the manifest.
/// `Err` only for I/O and generation errors; check and tool failures are in the report.
pub fn build(req: &BuildRequest) -> anyhow::Result<BuildReport> {
    req.unit.validate()?;
    anyhow::ensure!(req.clock_mhz.is_finite() && req.clock_mhz > 0.0, "clock {} MHz", req.clock_mhz);
    let spec = req.board.spec();
    let map = req.unit.register_map();
    let kernel = map.kernel.clone();
    let out = &req.out;
    std::fs::create_dir_all(out).map_err(|e| anyhow::anyhow!("creating {}: {e}", out.display()))?;
    let mut files = Vec::new();
    let mut checks = Vec::new();
    // Only this build's vendor run may speak for the image's timing.
    let timing_path = out.join(tcl::TIMING_FILE);
    if timing_path.exists() {
        std::fs::remove_file(&timing_path).map_err(|e| anyhow::anyhow!("removing {}: {e}", timing_path.display()))?;
    }

    let verilog = req.unit.verilog()?;
    write(out, &format!("{kernel}.{}", ferrite_hw::portable::EXTENSION), &verilog, &mut files)?;
    let map_json = map.to_json();
    write(out, &format!("{kernel}.regmap.json"), &map_json, &mut files)?;
    write(out, &format!("{kernel}.config.json"), &serde_json::to_string_pretty(&req.unit)?, &mut files)?;
    checks.push(("Verilog ports".to_string(), check_verilog(&verilog, &map)));
    checks.push((
        "register map".to_string(),
        match RegisterMap::from_json(&map_json) {
            Ok(m) if m == map => Outcome::Pass(format!(
                "{} registers, offsets aligned and disjoint, JSON round-trips",
                m.registers.len()
            )),
            Ok(_) => Outcome::Fail("the JSON reads back as a different map".into()),
            Err(e) => Outcome::Fail(e.to_string()),
        },
    ));

    let mut tcl_files = Vec::new();
    let overlay = match spec.flow {
        Flow::Alveo { .. } => {
            let xml = kernel_xml::generate(&map);
            write(out, "kernel.xml", &xml, &mut files)?;
            checks.push((
                "kernel.xml".to_string(),
                match kernel_xml::check(&xml, &map) {
                    Ok(()) => Outcome::Pass(format!(
                        "well-formed, {} arguments match the register map",
                        map.arguments().count()
                    )),
                    Err(e) => Outcome::Fail(e),
                },
            ));
            write(out, "package_xo.tcl", &tcl::package_xo(&map, spec.part), &mut files)?;
            tcl_files.push("package_xo.tcl");
            let link = tcl::link_config(&map, &spec, req.clock_mhz)
                .ok_or_else(|| anyhow::anyhow!("no link config for {}", req.board))?;
            write(out, "link.cfg", &link, &mut files)?;
            write(out, "timing.tcl", &tcl::alveo_timing(req.clock_mhz), &mut files)?;
            tcl_files.push("timing.tcl");
            None
        }
        Flow::Pynq { control_base, .. } => {
            let script = tcl::pynq_overlay(&map, &spec, req.clock_mhz)
                .ok_or_else(|| anyhow::anyhow!("no overlay script for {}", req.board))?;
            write(out, "overlay.tcl", &script, &mut files)?;
            tcl_files.push("overlay.tcl");
            let dtso = dts::uio_overlay(&map, &spec)
                .ok_or_else(|| anyhow::anyhow!("no device-tree overlay for {}", req.board))?;
            write(out, "overlay.dtso", &dtso, &mut files)?;
            let dtbo = match dts::compile(&out.join("overlay.dtso"), &out.join("overlay.dtbo")) {
                dts::DtcOutcome::Compiled => {
                    checks.push(("overlay.dtso".into(), Outcome::Pass("compiled to overlay.dtbo (dtc -@)".into())));
                    files.push("overlay.dtbo".into());
                    Some("overlay.dtbo".to_string())
                }
                dts::DtcOutcome::NoDtc => {
                    checks.push((
                        "overlay.dtso".into(),
                        Outcome::Skipped(
                            "dtc not on PATH (Debian: device-tree-compiler); no overlay.dtbo, so deploy \
                             expects the UIO node to exist already"
                                .into(),
                        ),
                    ));
                    None
                }
                dts::DtcOutcome::Failed(e) => {
                    checks.push(("overlay.dtso".into(), Outcome::Fail(e)));
                    None
                }
            };
            Some(OverlayInfo {
                cell: tcl::PYNQ_CELL.into(),
                control_base,
                control_range: 1 << map.control_addr_bits,
                hwh: "overlay.hwh".into(),
                dtbo,
            })
        }
    };
    for name in tcl_files {
        let text = std::fs::read_to_string(out.join(name))?;
        let missing: Vec<_> =
            map.registers.iter().filter(|r| !text.contains(&r.name)).map(|r| r.name.as_str()).collect();
        let consistency = match (name, missing.is_empty()) {
            ("package_xo.tcl", false) => Some(Outcome::Fail(format!("registers missing: {}", missing.join(", ")))),
            ("package_xo.tcl", true) => Some(Outcome::Pass(format!("all {} registers declared", map.registers.len()))),
            _ => None,
        };
        if let Some(c) = consistency {
            checks.push((format!("{name} register map"), c));
        }
        checks.push((
            format!("{name} syntax"),
            match tcl::check_syntax(&out.join(name)) {
                TclCheck::Ok => Outcome::Pass("complete commands (tclsh info complete)".into()),
                TclCheck::NoTclsh => Outcome::Skipped("tclsh not on PATH".into()),
                TclCheck::Invalid(e) => Outcome::Fail(e),
            },
        ));
    }

    let steps = vendor_steps(req.board, &kernel);
    let mut script = format!("#!/bin/sh\n# Vendor steps of this build, for a machine with Vivado/Vitis set up ({}).\nset -e\ncd \"$(dirname \"$0\")\"\n", spec.name);
    for (tool, args, _) in &steps {
        script += &format!("{tool} {}\n", args.join(" "));
    }
    write(out, "build.sh", &script, &mut files)?;

    let mut tools = Vec::new();
    let mut blocked: Option<String> = None;
    let mut image = None;
    for (tool, args, product) in steps {
        let command = format!("{tool} {}", args.join(" "));
        let outcome = if let Some(why) = &blocked {
            ToolOutcome::NotRun(why.clone())
        } else if !req.run_vendor_tools {
            ToolOutcome::NotRun("vendor tools disabled for this build".into())
        } else if !on_path(tool) {
            ToolOutcome::Missing
        } else {
            run_tool(out, tool, &args, &product)
        };
        if outcome == ToolOutcome::Ran && !files.contains(&product) {
            files.push(product.clone());
            if product.ends_with(".xclbin") || product.ends_with(".bit") {
                image = Some(product);
            }
        } else if blocked.is_none() {
            blocked = Some(format!("needs {product} from `{tool}`"));
        }
        tools.push(ToolStep { tool, command, outcome });
    }
    if let (Some(o), Some(_)) = (&overlay, &image) {
        files.push(o.hwh.clone());
    }
    let timing = match (&image, timing_path.is_file()) {
        (Some(_), true) => {
            let text = std::fs::read_to_string(&timing_path)?;
            let t: RoutedTiming = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: not the timing the recipe writes: {e}", timing_path.display()))?;
            if !files.iter().any(|f| f == tcl::TIMING_FILE) {
                files.push(tcl::TIMING_FILE.into());
            }
            Some(t)
        }
        _ => None,
    };
    let mut manifest = Manifest::new(req.unit.clone(), req.board, req.clock_mhz, image.clone(), overlay, out, &files)?;
    manifest.timing = timing;
    let manifest_path = manifest.write(out)?;
    Ok(BuildReport { out: out.clone(), files, checks, tools, manifest: manifest_path, image })
}

/// Run one vendor tool in the build directory with its output in `<tool>.log`.
fn run_tool(dir: &Path, tool: &str, args: &[String], product: &str) -> ToolOutcome {
    let log_path = dir.join(format!("{}.log", tool.replace('+', "p")));
    let log = match std::fs::File::create(&log_path) {
        Ok(f) => f,
        Err(e) => return ToolOutcome::Failed(format!("creating {}: {e}", log_path.display())),
    };
    let err = match log.try_clone() {
        Ok(f) => f,
        Err(e) => return ToolOutcome::Failed(format!("{}: {e}", log_path.display())),
    };
    match Command::new(tool).args(args).current_dir(dir).stdout(log).stderr(err).status() {
        Ok(s) if s.success() && dir.join(product).is_file() => ToolOutcome::Ran,
        Ok(s) if s.success() => {
            ToolOutcome::Failed(format!("exited 0 without writing {product}; log: {}", log_path.display()))
        }
        Ok(s) => ToolOutcome::Failed(format!("{s}; log: {}", log_path.display())),
        Err(e) => ToolOutcome::Failed(format!("starting {tool}: {e}")),
    }
}
