//! End-to-end tests of the Verilator path on a hand-written copy kernel that
//! has the Vitis port list of `ferrite_hw::vitis::ports(128)`.
use ferrite_hw::regmap::{CTRL, CTRL_AP_DONE, CTRL_AP_IDLE, CTRL_AP_START, GIE, IER};
use ferrite_hw::vitis::{ports, Dir};
use ferrite_sim::{verilator_available, MemoryConfig, SimError, Simulation, VerilatorInstance, VerilatorModel};
use std::sync::OnceLock;
use std::time::Instant;

const VERILOG: &str = include_str!("fixtures/copy_kernel.v");
const TOP: &str = "copy_kernel";
const BITS: usize = 128;
const SRC: u32 = 0x10;
const DST: u32 = 0x18;
const NBYTES: u32 = 0x20;

/// Whether Verilator tests can run: skip with a reason locally, fail on CI.
fn have_verilator() -> bool {
    if verilator_available() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "verilator is not installed but CI is set: run scripts/install-deps.sh or apt-get install verilator"
    );
    eprintln!("skipping: verilator not found (install it with scripts/install-deps.sh)");
    false
}

/// The fixture built once per test binary (from the shared cache when warm).
fn model(trace: bool) -> &'static VerilatorModel {
    static PLAIN: OnceLock<VerilatorModel> = OnceLock::new();
    static TRACED: OnceLock<VerilatorModel> = OnceLock::new();
    let cell = if trace { &TRACED } else { &PLAIN };
    cell.get_or_init(|| VerilatorModel::build(VERILOG, TOP, BITS, trace).expect("fixture builds"))
}

fn sim(cfg: MemoryConfig) -> Simulation<VerilatorInstance> {
    let dut = model(false).instance(None).unwrap();
    let mut sim = Simulation::new(dut, MemoryConfig { data_bits: BITS, ..cfg }).unwrap();
    sim.reset(4).unwrap();
    sim
}

fn write64(sim: &mut Simulation<VerilatorInstance>, offset: u32, value: u64) -> Result<(), SimError> {
    sim.write_reg(offset, value as u32)?;
    sim.write_reg(offset + 4, (value >> 32) as u32)
}

/// Starts a copy and polls ap_done for at most `max_polls` reads, 50 cycles apart.
fn run_copy(
    sim: &mut Simulation<VerilatorInstance>,
    src: u64,
    dst: u64,
    n: u32,
    max_polls: u32,
) -> Result<bool, SimError> {
    write64(sim, SRC, src)?;
    write64(sim, DST, dst)?;
    sim.write_reg(NBYTES, n)?;
    sim.write_reg(CTRL, CTRL_AP_START)?;
    for _ in 0..max_polls {
        if sim.read_reg(CTRL)? & CTRL_AP_DONE != 0 {
            return Ok(true);
        }
        sim.step(50)?;
    }
    Ok(false)
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n).map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(seed * 97) as u8 ^ (i >> 8) as u8).collect()
}

#[test]
fn fixture_has_the_vitis_port_list() {
    let declared: Vec<(String, Dir, usize)> = VERILOG
        .lines()
        .filter_map(|l| {
            let mut words = l.trim().trim_end_matches(',').split_whitespace();
            let dir = match words.next()? {
                "input" => Dir::In,
                "output" => Dir::Out,
                _ => return None,
            };
            let rest: Vec<&str> = words.filter(|w| *w != "wire").collect();
            let (bits, name) = match rest.as_slice() {
                [name] => (1, *name),
                [range, name] => {
                    let msb: usize = range.trim_start_matches('[').split(':').next()?.parse().ok()?;
                    (msb + 1, *name)
                }
                _ => return None,
            };
            Some((name.to_string(), dir, bits))
        })
        .collect();
    let expected: Vec<(String, Dir, usize)> = ports(BITS).into_iter().map(|p| (p.name, p.dir, p.bits)).collect();
    assert_eq!(declared, expected);
}

#[test]
fn second_build_hits_the_cache() {
    if !have_verilator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let first = VerilatorModel::build_in(dir.path(), VERILOG, TOP, BITS, false).unwrap();
    let cold = t.elapsed();
    let t = Instant::now();
    let second = VerilatorModel::build_in(dir.path(), VERILOG, TOP, BITS, false).unwrap();
    let warm = t.elapsed();
    eprintln!("copy_kernel build: cold {cold:?}, cached {warm:?}");
    assert!(!first.cached() && second.cached());
    assert_eq!(first.path(), second.path());
    assert!(warm.as_secs_f64() < 2.0, "cached build took {warm:?}");
}

#[test]
fn build_failure_reports_the_log() {
    if !have_verilator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broken = VERILOG.replace("endmodule", "wire oops = ;\nendmodule");
    match VerilatorModel::build_in(dir.path(), &broken, TOP, BITS, false) {
        Err(SimError::Build { log, tail, .. }) => {
            assert!(log.exists(), "{}", log.display());
            assert!(tail.contains("syntax error"), "{tail}");
        }
        other => panic!("expected a build error, got {other:?}"),
    }
}

#[test]
fn registers_round_trip() {
    if !have_verilator() {
        return;
    }
    let mut sim = sim(MemoryConfig::default());
    write64(&mut sim, SRC, 0x1234_5678_9abc_def0).unwrap();
    write64(&mut sim, DST, 0x0fed_cba9_8765_4320).unwrap();
    sim.write_reg(NBYTES, 4096).unwrap();
    assert_eq!(sim.read_reg(SRC).unwrap(), 0x9abc_def0);
    assert_eq!(sim.read_reg(SRC + 4).unwrap(), 0x1234_5678);
    assert_eq!(sim.read_reg(DST).unwrap(), 0x8765_4320);
    assert_eq!(sim.read_reg(DST + 4).unwrap(), 0x0fed_cba9);
    assert_eq!(sim.read_reg(NBYTES).unwrap(), 4096);
    assert_eq!(sim.read_reg(CTRL).unwrap(), CTRL_AP_IDLE);
    assert!(matches!(sim.read_reg(0x1001), Err(SimError::Config(_))));
}

#[test]
fn copies_under_latency_and_backpressure() {
    if !have_verilator() {
        return;
    }
    let n = 3 * 4096 + 7 * 16;
    for seed in 0..4u64 {
        let cfg = MemoryConfig {
            read_latency: [1, 20, 57, 5][seed as usize],
            write_latency: [1, 10, 3, 40][seed as usize],
            max_outstanding_reads: 1 + seed as usize,
            ready_stall_prob: [0.0, 0.3, 0.5, 0.7][seed as usize],
            valid_stall_prob: [0.0, 0.3, 0.6, 0.2][seed as usize],
            seed,
            ..MemoryConfig::default()
        };
        let mut sim = sim(cfg);
        sim.write_reg(GIE, 1).unwrap();
        sim.write_reg(IER, 1).unwrap();
        let src = sim.mem_mut().alloc(n as u64).unwrap();
        // Start the destination mid-page so chunks split at both buffers' pages.
        let dst = sim.mem_mut().alloc(n as u64 + 2048).unwrap() + 2048;
        let data = pattern(n, seed);
        sim.mem_mut().write(src, &data).unwrap();
        sim.mem_mut().fill(dst, n, 0xA5).unwrap();
        assert!(!sim.interrupt());
        let t = Instant::now();
        assert!(run_copy(&mut sim, src, dst, n as u32, 10_000).unwrap(), "seed {seed}: no ap_done");
        let rate = sim.cycle() as f64 / t.elapsed().as_secs_f64();
        eprintln!("seed {seed}: {} cycles, {rate:.0} cycles/s", sim.cycle());
        assert!(sim.interrupt());
        assert_eq!(sim.mem().read(dst, n).unwrap(), data, "seed {seed}");
        let stats = sim.stats();
        assert_eq!((stats.read_beats, stats.write_beats), (n as u64 / 16, n as u64 / 16));
        assert_eq!(sim.read_reg(CTRL).unwrap(), CTRL_AP_IDLE, "ap_done clears on read");
    }
}

#[test]
fn protocol_violations_are_reported() {
    if !have_verilator() {
        return;
    }
    let mut sim = sim(MemoryConfig::default());
    let buf = sim.mem_mut().alloc(4096).unwrap();
    // Misaligned source address.
    let err = run_copy(&mut sim, buf + 4, buf, 64, 100).unwrap_err();
    assert!(matches!(&err, SimError::Protocol(m) if m.contains("not aligned")), "{err}");
    // Sticky: the next call reports it again.
    assert!(matches!(sim.step(1), Err(SimError::Protocol(_))));

    let mut sim = self::sim(MemoryConfig::default());
    let buf = sim.mem_mut().alloc(4096).unwrap();
    // Reading past the only buffer.
    let err = run_copy(&mut sim, buf + 4096, buf, 64, 100).unwrap_err();
    assert!(matches!(&err, SimError::Protocol(m) if m.contains("outside every allocated buffer")), "{err}");
}

#[test]
fn hung_memory_never_completes() {
    if !have_verilator() {
        return;
    }
    let mut sim = sim(MemoryConfig { hang: true, ..MemoryConfig::default() });
    let src = sim.mem_mut().alloc(4096).unwrap();
    let dst = sim.mem_mut().alloc(4096).unwrap();
    assert!(!run_copy(&mut sim, src, dst, 4096, 40).unwrap());
    assert_eq!(sim.read_reg(CTRL).unwrap() & (CTRL_AP_DONE | CTRL_AP_IDLE), 0);
    assert_eq!(sim.stats().read_bursts, 0);
}

#[test]
fn waveform_is_written_when_tracing() {
    if !have_verilator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let vcd = dir.path().join("waves/copy.vcd");
    assert!(matches!(model(false).instance(Some(&vcd)), Err(SimError::Config(_))));
    let dut = model(true).instance(Some(&vcd)).unwrap();
    let mut sim = Simulation::new(dut, MemoryConfig { data_bits: BITS, ..MemoryConfig::default() }).unwrap();
    sim.reset(2).unwrap();
    let src = sim.mem_mut().alloc(256).unwrap();
    let dst = sim.mem_mut().alloc(256).unwrap();
    assert!(run_copy(&mut sim, src, dst, 256, 100).unwrap());
    drop(sim);
    let text = std::fs::read_to_string(&vcd).unwrap();
    assert!(text.contains("$enddefinitions") && text.contains("ap_clk"), "{}", &text[..text.len().min(500)]);
    assert!(text.matches("\n#").count() > 20, "too few time steps");
}
