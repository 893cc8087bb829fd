//! The register-level launch sequence of a Ferrite unit, as a board driver runs it.
//!
//! Written once against [`ControlPort`] so the simulator backend and the XRT
//! backend (where the port is `xrtKernelReadRegister`/`WriteRegister`) execute
//! the same steps against the same [`RegisterMap`]: identify, program
//! arguments by name, start, poll for `ap_done`, read the cycle counter.
use crate::device::{AttentionArgs, Buffer, DeviceError, GemmArgs, MoeArgs, RegValue, RegisterArgs};
use ferrite_hw::attention::AttentionConfig;
use ferrite_hw::gemm::GemmConfig;
use ferrite_hw::moe::MoeConfig;
use ferrite_hw::numerics::Requant;
use ferrite_hw::regmap::{ArgKind, Register, RegisterMap, CTRL, CTRL_AP_DONE, CTRL_AP_IDLE, CTRL_AP_START};
use ferrite_hw::unit::Unit;

/// A unit's AXI4-Lite control window, and a way to let time pass.
///
/// Time defaults to the wall clock in microseconds, what a board's port
/// (XRT, PYNQ) wants; a simulator overrides it with clock cycles.
pub trait ControlPort {
    fn read32(&mut self, offset: u32) -> Result<u32, DeviceError>;
    fn write32(&mut self, offset: u32, value: u32) -> Result<(), DeviceError>;
    /// Let `ticks` ticks pass: a simulator steps clock cycles, hardware sleeps.
    fn wait(&mut self, ticks: u64) -> Result<(), DeviceError> {
        std::thread::sleep(std::time::Duration::from_micros(ticks));
        Ok(())
    }
    /// Ticks since an arbitrary origin (the simulator's cycle counter, or a monotonic clock).
    fn now(&self) -> u64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_micros() as u64
    }
    /// What a tick is, for messages ("cycles", "µs").
    fn tick_name(&self) -> &'static str {
        "µs"
    }
}

/// How long to wait for `ap_done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll {
    /// Ticks between two reads of CTRL.
    pub interval: u64,
    /// Ticks after ap_start with no ap_done before giving up.
    pub limit: u64,
}

/// What to launch: the HWINFO value the configuration implies, and a value for
/// every argument register of the map, by its name in the unit's register table
/// (`ferrite_hw::<unit>::regs`; `&'static str` for the typed launches, `String`
/// for register-level ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchArgs<N = &'static str> {
    pub hwinfo: u32,
    pub values: Vec<(N, u64)>,
}

/// Run one launch; returns the unit's CYCLES register (its own count from
/// ap_start to ap_done, independent of the polling granularity).
pub fn launch<N: AsRef<str>>(
    port: &mut dyn ControlPort,
    map: &RegisterMap,
    args: &LaunchArgs<N>,
    poll: Poll,
) -> Result<u64, DeviceError> {
    let status = |name: &str| {
        map.get(name).ok_or_else(|| DeviceError::Argument(format!("register {name} is not in the {} map", map.kernel)))
    };
    let (hwinfo_reg, cycles_reg) = (status("HWINFO")?, status("CYCLES")?);

    let found = port.read32(hwinfo_reg.offset)?;
    if found != args.hwinfo {
        return Err(DeviceError::HwInfoMismatch { expected: args.hwinfo, found });
    }
    let ctrl = port.read32(CTRL)?;
    if ctrl & CTRL_AP_IDLE == 0 {
        return Err(DeviceError::Busy { ctrl });
    }

    for (name, _) in &args.values {
        let name = name.as_ref();
        if map.arguments().all(|r| r.name != name) {
            return Err(DeviceError::Argument(format!("{name} is not an argument of {}", map.kernel)));
        }
    }
    for reg in map.arguments() {
        let value = args
            .values
            .iter()
            .find(|(name, _)| name.as_ref() == reg.name)
            .map(|&(_, v)| v)
            .ok_or_else(|| DeviceError::Argument(format!("no value given for {}", reg.name)))?;
        write_arg(port, reg, value)?;
    }

    port.write32(CTRL, CTRL_AP_START)?;
    let start = port.now();
    // CTRL's ap_done clears on read, so the read that sees it is the only one.
    while port.read32(CTRL)? & CTRL_AP_DONE == 0 {
        let elapsed = port.now().saturating_sub(start);
        if elapsed >= poll.limit {
            return Err(DeviceError::Timeout { elapsed, limit: poll.limit, unit: port.tick_name() });
        }
        port.wait(poll.interval)?;
    }
    // Units that can refuse a run or see an AXI error response report it in STATUS bit 0.
    if let Some(reg) = map.get("STATUS") {
        let status = port.read32(reg.offset)?;
        if status & 1 != 0 {
            return Err(DeviceError::Fault { status });
        }
    }
    read64(port, cycles_reg)
}

fn write_arg(port: &mut dyn ControlPort, reg: &Register, value: u64) -> Result<(), DeviceError> {
    match reg.bits {
        32 => {
            let v = u32::try_from(value).map_err(|_| {
                DeviceError::Argument(format!("{} = {value} does not fit its 32-bit register", reg.name))
            })?;
            port.write32(reg.offset, v)
        }
        // Buffer addresses: low word first, as XRT and the Vitis HLS drivers write them.
        _ => {
            port.write32(reg.offset, value as u32)?;
            port.write32(reg.offset + 4, (value >> 32) as u32)
        }
    }
}

fn read64(port: &mut dyn ControlPort, reg: &Register) -> Result<u64, DeviceError> {
    let lo = port.read32(reg.offset)? as u64;
    if reg.bits == 32 {
        return Ok(lo);
    }
    Ok(lo | (port.read32(reg.offset + 4)? as u64) << 32)
}

/// Register values of a register-level launch on `unit`: every name an
/// argument of its map, buffers exactly where the map has buffers.
pub fn register_args(
    unit: &dyn Unit,
    r: &RegisterArgs,
    address: &dyn Fn(Buffer) -> Result<u64, DeviceError>,
) -> Result<LaunchArgs<String>, DeviceError> {
    let map = unit.register_map();
    let mut values = Vec::with_capacity(r.values.len());
    for (name, value) in &r.values {
        let reg = map
            .arguments()
            .find(|reg| reg.name == *name)
            .ok_or_else(|| DeviceError::Argument(format!("{name} is not an argument of {}", map.kernel)))?;
        let value = match (reg.kind, value) {
            (ArgKind::Buffer, RegValue::Buffer(b)) => address(*b)?,
            (ArgKind::Scalar, RegValue::Scalar(v)) => *v,
            (kind, v) => {
                return Err(DeviceError::Argument(format!("{name} is a {kind:?} register, given {v:?}")));
            }
        };
        values.push((name.clone(), value));
    }
    Ok(LaunchArgs { hwinfo: unit.hwinfo(), values })
}

/// Register values of a GEMM launch; `address` gives each buffer's device address.
pub fn gemm_args(
    cfg: &GemmConfig,
    g: &GemmArgs,
    address: &dyn Fn(Buffer) -> Result<u64, DeviceError>,
) -> Result<LaunchArgs, DeviceError> {
    use ferrite_hw::gemm::regs as r;
    let p = &g.problem;
    let (qmult, qshift) = p.requant.map_or((0, 0), |rq| (rq.multiplier as u32, rq.shift));
    Ok(LaunchArgs {
        hwinfo: cfg.hwinfo(),
        values: vec![
            (r::A, address(g.a)?),
            (r::B, address(g.b)?),
            // The unit reads BIAS only when FLAGS.bias is set.
            (r::BIAS, g.bias.map(address).transpose()?.unwrap_or(0)),
            (r::C, address(g.c)?),
            (r::M, p.m as u64),
            (r::N, p.n as u64),
            (r::K, p.k as u64),
            (r::LDA, g.layout.lda),
            (r::LDB, g.layout.ldb),
            (r::LDC, g.layout.ldc),
            (r::FLAGS, p.flags() as u64),
            (r::QMULT, qmult as u64),
            (r::QSHIFT, qshift as u64),
        ],
    })
}

/// Register values of one attention launch, by register name.
pub fn attention_args(
    cfg: &AttentionConfig,
    a: &AttentionArgs,
    address: &dyn Fn(Buffer) -> Result<u64, DeviceError>,
) -> Result<LaunchArgs, DeviceError> {
    use ferrite_hw::attention::regs as r;
    let p = &a.problem;
    let out = p.params.out.unwrap_or(Requant { multiplier: 0, shift: 0 });
    Ok(LaunchArgs {
        hwinfo: cfg.hwinfo(),
        values: vec![
            (r::Q, address(a.q)?),
            (r::K, address(a.k)?),
            (r::V, address(a.v)?),
            (r::O, address(a.o)?),
            // Never read unless FLAGS.kvlen is set.
            (r::KVLEN, a.kv_len.map_or(Ok(0), address)?),
            (r::HEADS, p.heads_total() as u64),
            (r::HPB, p.heads as u64),
            (r::SEQ_Q, p.seq_q as u64),
            (r::SEQ_KV, p.seq_kv as u64),
            (r::Q_STRIDE, a.layout.q_stride),
            (r::KV_STRIDE, a.layout.kv_stride),
            (r::O_STRIDE, a.layout.o_stride),
            (r::FLAGS, p.flags() as u64),
            (r::SMULT, p.params.score.multiplier as u32 as u64),
            (r::SSHIFT, p.params.score.shift as u64),
            (r::OMULT, out.multiplier as u32 as u64),
            (r::OSHIFT, out.shift as u64),
        ],
    })
}

/// Register values of one MoE router launch, by register name.
pub fn moe_args(
    cfg: &MoeConfig,
    m: &MoeArgs,
    address: &dyn Fn(Buffer) -> Result<u64, DeviceError>,
) -> Result<LaunchArgs, DeviceError> {
    use ferrite_hw::moe::regs as r;
    let p = &m.problem;
    Ok(LaunchArgs {
        hwinfo: cfg.hwinfo(),
        values: vec![
            (r::X, address(m.x)?),
            (r::WG, address(m.w)?),
            // Never read unless FLAGS.bias is set.
            (r::BIAS, m.bias.map_or(Ok(0), address)?),
            (r::ROUTE, address(m.route)?),
            (r::DISPATCH, address(m.dispatch)?),
            (r::STATS, address(m.stats)?),
            (r::T, p.tokens as u64),
            (r::H, p.hidden as u64),
            (r::E, p.experts as u64),
            (r::K, p.top_k as u64),
            (r::LDX, m.layout.ldx),
            (r::LDW, m.layout.ldw),
            (r::DPITCH, m.layout.dpitch),
            (r::FLAGS, p.flags() as u64),
            (r::CF, p.capacity.map_or(0, |c| c.0) as u64),
            (r::SMULT, p.logit.multiplier as u32 as u64),
            (r::SSHIFT, p.logit.shift as u64),
        ],
    })
}
