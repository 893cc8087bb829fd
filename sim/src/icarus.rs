//! Icarus Verilog co-simulation of a unit's exported Verilog.
//!
//! Icarus is an event-driven simulator like Vivado's xsim: it shows what a
//! user's first hardware emulation will do, which Verilator (which evaluates
//! every block at start-up) hides. The unit is compiled with a generated
//! testbench (`tb.sv`: an AXI4 memory with random backpressure on
//! `m_axi_gmem`, an AXI4-Lite master on `s_axi_control`) into one `vvp`
//! process per [`IcarusInstance`], driven over its standard input one command
//! at a time, so the host's register-level driver runs it like a board. The
//! unit's registers start as X; the testbench never initializes them.
use crate::{MemoryConfig, SimError};
use ferrite_hw::vitis::{ports, Dir};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

/// The testbench template; `@NAME@` fields are filled by [`testbench`].
const TB_TEMPLATE: &str = include_str!("tb.sv");

/// Bus address of the first byte of the testbench memory: above 4 GiB, so the
/// high words of every address register are exercised.
pub const BASE: u64 = 0x4_0000_0000;

/// Cycles `ap_rst_n` is held low when an instance starts.
const RESET_CYCLES: u64 = 16;

/// `iverilog -V`'s first line, or `None` when Icarus is not installed.
pub fn iverilog_version() -> Option<String> {
    static VERSION: OnceLock<Option<String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let out = Command::new("iverilog").arg("-V").output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().to_string();
            (out.status.success() || text.starts_with("Icarus")).then_some(text)
        })
        .clone()
}

/// For tests that need Icarus: `true` when it is installed. Without it they
/// skip with a printed reason, except under CI (env `CI` set), where a missing
/// Icarus is a broken install and fails the test instead of passing silently.
pub fn iverilog_or_skip() -> bool {
    if iverilog_version().is_some() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but Icarus Verilog is missing: run scripts/install-deps.sh");
    eprintln!("skipped: Icarus Verilog is not installed (scripts/install-deps.sh installs it)");
    false
}

/// The testbench for module `top` with a `data_bits` memory port and `bytes` of memory.
fn testbench(top: &str, data_bits: usize, bytes: u64) -> String {
    let (mut decls, mut conns) = (String::new(), Vec::new());
    for p in ports(data_bits) {
        let kind = if p.dir == Dir::In { "reg" } else { "wire" };
        let range = if p.bits > 1 { format!("[{}:0] ", p.bits - 1) } else { String::new() };
        let _ = writeln!(decls, "{kind} {range}{};", p.name);
        conns.push(format!("   .{0}({0})", p.name));
    }
    let beat = data_bits / 8;
    TB_TEMPLATE
        .replace("@DW@", &data_bits.to_string())
        .replace("@LOG_SB@", &beat.trailing_zeros().to_string())
        .replace("@BEATS@", &(bytes / beat as u64).to_string())
        .replace("@BASE@", &format!("{BASE:x}"))
        .replace("@DECLS@", &decls)
        .replace("@DUT@", &format!("{top} dut (\n{}\n);", conns.join(",\n")))
}

/// A unit compiled with its testbench by `iverilog -g2012`, cached by content.
#[derive(Debug, Clone)]
pub struct IcarusModel {
    vvp: PathBuf,
    data_bits: usize,
    bytes: u64,
}

impl IcarusModel {
    /// Compiles module `top` of `verilog` (memory port `data_bits` wide) with a
    /// testbench of `bytes` of memory; the result is cached under
    /// `$FERRITE_CACHE`/`$HOME/.cache/ferrite` beside the Verilator builds.
    pub fn build(verilog: &str, top: &str, data_bits: usize, bytes: u64) -> Result<Self, SimError> {
        let beat = data_bits / 8;
        if !data_bits.is_power_of_two() || !(8..=ferrite_hw::vitis::MAX_DATA_BITS).contains(&data_bits) {
            return Err(SimError::Config(format!("data_bits = {data_bits} (a power of two up to 1024)")));
        }
        if bytes == 0 || !bytes.is_multiple_of(beat as u64) {
            return Err(SimError::Config(format!(
                "{bytes} bytes of memory is not a whole number of {beat}-byte beats"
            )));
        }
        let version = iverilog_version().ok_or_else(|| SimError::Config(IVERILOG_MISSING.into()))?;
        let tb = testbench(top, data_bits, bytes);
        let mut h = Sha256::new();
        for part in [verilog, tb.as_str(), version.as_str()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        let hash: String = h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect();
        let dir = cache_dir()?;
        fs::create_dir_all(&dir).map_err(|e| SimError::io(format!("creating {}", dir.display()), e))?;
        let vvp = dir.join(format!("{top}-{hash}.vvp"));
        if !vvp.exists() {
            let work = tempfile_dir(&dir, top)?;
            let (unit, bench, out) = (work.join(format!("{top}.sv")), work.join("ferrite_tb.sv"), work.join("sim.vvp"));
            fs::write(&unit, verilog).map_err(|e| SimError::io("writing the unit", e))?;
            fs::write(&bench, &tb).map_err(|e| SimError::io("writing the testbench", e))?;
            let res = Command::new("iverilog")
                .args(["-g2012", "-s", "ferrite_tb", "-o"])
                .arg(&out)
                .arg(&bench)
                .arg(&unit)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| SimError::io("running iverilog", e))?;
            if !res.status.success() {
                let tail = String::from_utf8_lossy(&res.stderr).lines().take(30).collect::<Vec<_>>().join("\n");
                let log = work.join("iverilog.log");
                let _ = fs::write(&log, &res.stderr);
                return Err(SimError::Build { top: top.to_string(), log, tail });
            }
            fs::rename(&out, &vvp).map_err(|e| SimError::io("moving the vvp file into the cache", e))?;
            let _ = fs::remove_dir_all(&work);
        }
        Ok(Self { vvp, data_bits, bytes })
    }

    /// Starts a simulation with `mem`'s latencies, stall probabilities and
    /// seed, and holds `ap_rst_n` low for 16 cycles.
    pub fn instance(&self, mem: &MemoryConfig) -> Result<IcarusInstance, SimError> {
        let work = tempfile_dir(self.vvp.parent().unwrap_or(Path::new(".")), "run")?;
        let permille = |p: f64| ((p.clamp(0.0, 1.0) * 1000.0).round() as u32).to_string();
        let mut child = Command::new("vvp")
            .args(["-n"])
            .arg(&self.vvp)
            .arg(format!("+seed={}", mem.seed as u32 as i32))
            .arg(format!("+rlat={}", mem.read_latency.max(1)))
            .arg(format!("+wlat={}", mem.write_latency.max(1)))
            .arg(format!("+rstall={}", permille(mem.ready_stall_prob)))
            .arg(format!("+vstall={}", permille(mem.valid_stall_prob)))
            .arg(format!("+image={}", work.join("image.hex").display()))
            .arg(format!("+dump={}", work.join("dump.hex").display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| SimError::io("starting vvp", e))?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(SimError::Config("vvp started without pipes".into()));
        };
        let mut inst = IcarusInstance {
            child,
            stdin: BufWriter::new(stdin),
            stdout: BufReader::new(stdout),
            work,
            data_bits: self.data_bits,
            bytes: self.bytes,
            cycle: 0,
        };
        inst.answer()?;
        inst.reset(RESET_CYCLES)?;
        Ok(inst)
    }

    pub fn data_bits(&self) -> usize {
        self.data_bits
    }

    /// Bytes of memory behind `m_axi_gmem`, from [`BASE`].
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

const IVERILOG_MISSING: &str =
    "Icarus Verilog was not found on PATH; install it with `scripts/install-deps.sh` or `apt-get install iverilog`";

/// `$FERRITE_CACHE/icarus`, else `$HOME/.cache/ferrite/icarus`.
fn cache_dir() -> Result<PathBuf, SimError> {
    if let Some(dir) = std::env::var_os("FERRITE_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("icarus"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".cache/ferrite/icarus")),
        None => Err(SimError::Config("neither FERRITE_CACHE nor HOME is set: no place for the build cache".into())),
    }
}

/// A fresh scratch directory under `parent`.
fn tempfile_dir(parent: &Path, stem: &str) -> Result<PathBuf, SimError> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = parent.join(format!("{stem}-{}-{n}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| SimError::io(format!("creating {}", dir.display()), e))?;
    Ok(dir)
}

/// One running `vvp` simulation of an [`IcarusModel`].
pub struct IcarusInstance {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    work: PathBuf,
    data_bits: usize,
    bytes: u64,
    cycle: u64,
}

impl IcarusInstance {
    /// Sends one command and returns the fields of its answer line. Testbench
    /// `ERROR` lines (protocol violations, X on handshakes, timeouts) become
    /// [`SimError::Protocol`].
    fn command(&mut self, op: u32, a: u64, b: u64) -> Result<Vec<String>, SimError> {
        writeln!(self.stdin, "{op} {a:x} {b:x}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| SimError::io("writing to vvp", e))?;
        self.answer()
    }

    fn answer(&mut self) -> Result<Vec<String>, SimError> {
        let mut errors = Vec::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).map_err(|e| SimError::io("reading from vvp", e))?;
            if n == 0 {
                errors.push("vvp exited".to_string());
                return Err(SimError::Protocol(errors.join("; ")));
            }
            let line = line.trim();
            if let Some(e) = line.strip_prefix("ERROR ") {
                errors.push(e.to_string());
            } else if matches!(line.split(' ').next(), Some("ok" | "r" | "c" | "ready")) {
                if !errors.is_empty() {
                    return Err(SimError::Protocol(errors.join("; ")));
                }
                let fields: Vec<String> = line.split(' ').map(str::to_string).collect();
                // "ok CYCLE ERRORS" / "r VALUE CYCLE ERRORS"
                if let Some(c) = fields.iter().rev().nth(1).and_then(|c| c.parse().ok()) {
                    self.cycle = c;
                }
                return Ok(fields);
            }
            // Anything else (Icarus warnings) is passed on for the log.
            else if !line.is_empty() {
                eprintln!("vvp: {line}");
            }
        }
    }

    /// Writes a 32-bit control register.
    pub fn write_reg(&mut self, offset: u32, value: u32) -> Result<(), SimError> {
        self.command(1, offset as u64, value as u64).map(drop)
    }

    /// Reads a 32-bit control register; an X or Z bit is a protocol error.
    pub fn read_reg(&mut self, offset: u32) -> Result<u32, SimError> {
        let fields = self.command(2, offset as u64, 0)?;
        let text = fields.get(1).map(String::as_str).unwrap_or_default();
        u32::from_str_radix(text, 16)
            .map_err(|_| SimError::Protocol(format!("s_axi_control read at {offset:#x} returned {text} (X or Z bits)")))
    }

    /// Runs `cycles` clock cycles.
    pub fn step(&mut self, cycles: u64) -> Result<(), SimError> {
        self.command(3, cycles, 0).map(drop)
    }

    /// Holds `ap_rst_n` low for `cycles` cycles; the memory drops in-flight bursts.
    pub fn reset(&mut self, cycles: u64) -> Result<(), SimError> {
        self.command(4, cycles.max(1), 0).map(drop)
    }

    /// Cycles since the simulation started.
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    /// Replaces the first `image.len()` bytes of memory (a whole number of beats).
    pub fn load(&mut self, image: &[u8]) -> Result<(), SimError> {
        let beat = self.data_bits / 8;
        if !image.len().is_multiple_of(beat) || image.len() as u64 > self.bytes || image.is_empty() {
            return Err(SimError::Config(format!(
                "an image of {} bytes is not 1..={} whole beats",
                image.len(),
                self.bytes
            )));
        }
        let mut text = String::with_capacity(image.len() * 2 + image.len() / beat);
        for chunk in image.chunks_exact(beat) {
            for b in chunk.iter().rev() {
                let _ = write!(text, "{b:02x}");
            }
            text.push('\n');
        }
        let path = self.work.join("image.hex");
        fs::write(&path, text).map_err(|e| SimError::io(format!("writing {}", path.display()), e))?;
        self.command(5, 0, (image.len() / beat) as u64).map(drop)
    }

    /// The first `len` bytes of memory (a whole number of beats); a byte with
    /// an X or Z bit (the unit wrote an undefined value) is an error.
    pub fn dump(&mut self, len: usize) -> Result<Vec<u8>, SimError> {
        let beat = self.data_bits / 8;
        if !len.is_multiple_of(beat) || len as u64 > self.bytes || len == 0 {
            return Err(SimError::Config(format!("a dump of {len} bytes is not 1..={} whole beats", self.bytes)));
        }
        self.command(6, 0, (len / beat) as u64)?;
        let path = self.work.join("dump.hex");
        let text = fs::read_to_string(&path).map_err(|e| SimError::io(format!("reading {}", path.display()), e))?;
        let mut out = Vec::with_capacity(len);
        for (i, line) in text.lines().filter(|l| !l.starts_with("//") && !l.is_empty()).enumerate() {
            // Most significant byte first; byte `j` of the beat is at 2·(beat − 1 − j).
            let bytes: Option<Vec<u8>> = (0..beat)
                .map(|j| line.get(2 * (beat - 1 - j)..2 * (beat - j)).and_then(|h| u8::from_str_radix(h, 16).ok()))
                .collect();
            let bytes = bytes.filter(|_| line.len() == 2 * beat).ok_or_else(|| {
                SimError::Memory(format!("beat {i} at {:#x} holds X or Z bits: {line}", BASE + (i * beat) as u64))
            })?;
            out.extend(bytes);
        }
        if out.len() != len {
            return Err(SimError::Memory(format!("the dump has {} bytes, {len} were asked for", out.len())));
        }
        Ok(out)
    }

    /// Write and read beats on `m_axi_gmem` since the simulation started.
    pub fn beats(&mut self) -> Result<(u64, u64), SimError> {
        let f = self.command(7, 0, 0)?;
        let num = |i: usize| f.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok((num(1), num(2)))
    }
}

impl Drop for IcarusInstance {
    fn drop(&mut self) {
        let _ = self.stdin.write_all(b"0 0 0\n").and_then(|()| self.stdin.flush());
        if self.child.try_wait().ok().flatten().is_none() {
            // Give vvp a moment to finish on its own, then stop it.
            std::thread::sleep(std::time::Duration::from_millis(20));
            if self.child.try_wait().ok().flatten().is_none() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testbench_connects_every_port() {
        let tb = testbench("unit", 256, 1 << 16);
        for p in ports(256) {
            assert!(tb.contains(&format!(".{0}({0})", p.name)), "{}", p.name);
        }
        assert!(tb.contains("localparam BEATS = 2048;") && tb.contains("localparam LOG_SB = 5;"));
        for field in ["@DW@", "@LOG_SB@", "@BEATS@", "@BASE@", "@DECLS@", "@DUT@"] {
            assert!(!tb.contains(field), "{field} left in the testbench");
        }
    }
}
