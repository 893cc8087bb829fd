//! The register-level launch sequence against a fake unit.
use ferrite_host::device::{Buffer, GemmArgs};
use ferrite_host::driver::{self, ControlPort, LaunchArgs, Poll};
use ferrite_host::DeviceError;
use ferrite_hw::gemm::{GemmConfig, GemmLayout, GemmProblem};
use ferrite_hw::numerics::Requant;
use ferrite_hw::regmap::{CTRL, CTRL_AP_DONE, CTRL_AP_IDLE, CTRL_AP_START};
use std::collections::BTreeMap;

/// A unit that finishes `done_after` ticks after ap_start (never if `None`).
struct FakeUnit {
    regs: BTreeMap<u32, u32>,
    now: u64,
    started: Option<u64>,
    done_after: Option<u64>,
}

impl FakeUnit {
    fn new(cfg: &GemmConfig, done_after: Option<u64>) -> Self {
        let map = cfg.register_map();
        let mut regs = BTreeMap::new();
        regs.insert(map.get("HWINFO").unwrap().offset, cfg.hwinfo());
        regs.insert(CTRL, CTRL_AP_IDLE);
        Self { regs, now: 0, started: None, done_after }
    }
}

impl ControlPort for FakeUnit {
    fn read32(&mut self, offset: u32) -> Result<u32, DeviceError> {
        self.now += 1;
        if offset == CTRL {
            if let (Some(t0), Some(d)) = (self.started, self.done_after) {
                if self.now >= t0 + d {
                    self.started = None;
                    return Ok(CTRL_AP_DONE | CTRL_AP_IDLE);
                }
            }
            return Ok(if self.started.is_some() { 0 } else { CTRL_AP_IDLE });
        }
        Ok(self.regs.get(&offset).copied().unwrap_or(0))
    }

    fn write32(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
        self.now += 1;
        if offset == CTRL && value & CTRL_AP_START != 0 {
            self.started = Some(self.now);
        }
        self.regs.insert(offset, value);
        Ok(())
    }

    fn wait(&mut self, ticks: u64) -> Result<(), DeviceError> {
        self.now += ticks;
        Ok(())
    }

    fn now(&self) -> u64 {
        self.now
    }

    fn tick_name(&self) -> &'static str {
        "cycles"
    }
}

fn gemm_launch(cfg: &GemmConfig) -> LaunchArgs {
    let problem =
        GemmProblem { bias: true, requant: Some(Requant { multiplier: -5, shift: 7 }), ..GemmProblem::new(5, 6, 7) };
    let layout = GemmLayout::new(cfg, &problem);
    let buf = |id| Buffer::new(id, 1 << 20);
    let args =
        GemmArgs { problem, layout, a: buf(0x1_2345_6000), b: buf(0x2000), bias: Some(buf(0x3000)), c: buf(0x4000) };
    driver::gemm_args(cfg, &args, &|b| Ok(b.id())).unwrap()
}

/// The unit's map without STATUS, which only [`status_fault_is_reported`] exercises.
fn map(cfg: &GemmConfig) -> ferrite_hw::regmap::RegisterMap {
    let mut map = cfg.register_map();
    map.registers.retain(|r| r.name != "STATUS");
    map
}

#[test]
fn programs_arguments_by_name_and_reads_cycles() {
    let cfg = GemmConfig::small(4, 4);
    let map = map(&cfg);
    let mut unit = FakeUnit::new(&cfg, Some(500));
    let cycles = map.get("CYCLES").unwrap().offset;
    unit.regs.insert(cycles, 1234);
    unit.regs.insert(cycles + 4, 1);
    let cycles = driver::launch(&mut unit, &map, &gemm_launch(&cfg), Poll { interval: 10, limit: 10_000 }).unwrap();
    assert_eq!(cycles, (1 << 32) | 1234);
    let reg = |name: &str| unit.regs[&map.get(name).unwrap().offset];
    assert_eq!((reg("A"), unit.regs[&(map.get("A").unwrap().offset + 4)]), (0x2345_6000, 1));
    assert_eq!((reg("M"), reg("N"), reg("K")), (5, 6, 7));
    assert_eq!((reg("LDA"), reg("LDB"), reg("LDC")), (16, 16, 16));
    assert_eq!(reg("FLAGS"), 0b101);
    assert_eq!(reg("QMULT") as i32, -5);
    assert_eq!(reg("QSHIFT"), 7);
}

#[test]
fn never_done_times_out_with_elapsed_cycles() {
    let cfg = GemmConfig::small(4, 4);
    let map = map(&cfg);
    let mut unit = FakeUnit::new(&cfg, None);
    let err = driver::launch(&mut unit, &map, &gemm_launch(&cfg), Poll { interval: 100, limit: 5_000 }).unwrap_err();
    match err {
        DeviceError::Timeout { elapsed, limit, unit } => {
            assert!((5_000..5_200).contains(&elapsed), "elapsed {elapsed}");
            assert_eq!((limit, unit), (5_000, "cycles"));
        }
        e => panic!("expected a timeout, got {e}"),
    }
}

#[test]
fn wrong_hwinfo_busy_unit_and_missing_arguments_are_refused() {
    let cfg = GemmConfig::small(4, 4);
    let map = map(&cfg);
    let poll = Poll { interval: 1, limit: 100 };
    let mut unit = FakeUnit::new(&GemmConfig::small(2, 2), Some(1));
    let err = driver::launch(&mut unit, &map, &gemm_launch(&cfg), poll).unwrap_err();
    assert!(matches!(err, DeviceError::HwInfoMismatch { .. }), "{err}");

    let mut unit = FakeUnit::new(&cfg, Some(1));
    unit.started = Some(0);
    unit.done_after = None;
    let err = driver::launch(&mut unit, &map, &gemm_launch(&cfg), poll).unwrap_err();
    assert!(matches!(err, DeviceError::Busy { .. }), "{err}");

    let mut unit = FakeUnit::new(&cfg, Some(1));
    let mut args = gemm_launch(&cfg);
    args.values.retain(|(name, _)| *name != "QSHIFT");
    let err = driver::launch(&mut unit, &map, &args, poll).unwrap_err();
    assert!(err.to_string().contains("no value given for QSHIFT"), "{err}");
    args.values.push(("QSHIFT", 1 << 32));
    let err = driver::launch(&mut unit, &map, &args, poll).unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
    args.values.push(("BOGUS", 0));
    let err = driver::launch(&mut unit, &map, &args, poll).unwrap_err();
    assert!(err.to_string().contains("BOGUS is not an argument"), "{err}");
}

#[test]
fn status_fault_is_reported() {
    let cfg = GemmConfig::small(4, 4);
    let mut map = map(&cfg);
    map.push("STATUS", 32, ferrite_hw::regmap::Access::ReadOnly, ferrite_hw::regmap::ArgKind::Status, "fault");
    let status = map.get("STATUS").unwrap().offset;
    let mut unit = FakeUnit::new(&cfg, Some(3));
    unit.regs.insert(status, 1);
    let err = driver::launch(&mut unit, &map, &gemm_launch(&cfg), Poll { interval: 1, limit: 100 }).unwrap_err();
    assert!(matches!(err, DeviceError::Fault { status: 1 }), "{err}");
}
