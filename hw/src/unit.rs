//! [`Unit`]: what every unit's config tells the rest of Ferrite, so host code
//! that needs a name, a register map, Verilog or a resource knob asks the
//! trait instead of matching over the units.
//!
//! A unit implements it on its config type next to its `config`, `model` and
//! `rtl` modules; the host's `UnitConfig` enum holds one variant per unit
//! (the manifest's serde tag) and hands out `&dyn Unit`.
use crate::attention::AttentionConfig;
use crate::gemm::GemmConfig;
use crate::moe::MoeConfig;
use crate::regmap::RegisterMap;
use crate::vitis::PinLevel;
use crate::HwError;

/// A unit's generation-time configuration.
pub trait Unit: Send + Sync {
    /// Short name: the manifest's `unit` tag and the CLI's unit argument.
    fn name(&self) -> &'static str;
    /// Verilog module / Vitis kernel name, unique per configuration.
    fn kernel_name(&self) -> String;
    fn validate(&self) -> Result<(), HwError>;
    /// The register map every driver, manifest and `kernel.xml` reads.
    fn register_map(&self) -> RegisterMap;
    /// The value the unit's read-only HWINFO register reports.
    fn hwinfo(&self) -> u32;
    /// Clock of projected figures, in MHz.
    fn clock_mhz(&self) -> f64;
    /// Multipliers in the unit, for utilization.
    fn multipliers(&self) -> u64;
    /// Width of the AXI4 memory port in bits.
    fn port_bits(&self) -> usize;
    /// The parameter that resources scale with (`rows` of the GEMM array,
    /// `lanes` of attention and MoE) and its value.
    fn scaling_knob(&self) -> (&'static str, usize);
    /// The size in words, for reports: `16×16`, `8 lanes`.
    fn size_label(&self) -> String;
    /// Generates the Verilog on the calling thread; [`verilog`] runs it on a
    /// stack large enough for every unit.
    fn generate_verilog(&self) -> Result<String, HwError>;
    /// The same design in rust-hdl's own (slow) simulator.
    fn hdl_model(&self) -> Result<Box<dyn PinLevel>, HwError>;
    /// The golden model at the register level: one launch with `args` (every
    /// argument register by name, buffers as device addresses) on `mem`;
    /// returns the STATUS word the unit would report. This is what lets a unit
    /// run on the CPU through the host's generic register-level launch with no
    /// host code of its own. Units with a typed host path may leave it out.
    fn run_registers(&self, _args: &RegisterValues, _mem: &mut dyn Memory) -> Result<u32, HwError> {
        Err(HwError::Problem(format!("{} has no register-level golden model", self.name())))
    }
}

/// A GEMM or attention output, row-major: int32 (attention: Q16 fixed point
/// in V's units), or int8 when requantized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    I32(Vec<i32>),
    I8(Vec<i8>),
}

impl Output {
    pub fn len(&self) -> usize {
        match self {
            Self::I32(v) => v.len(),
            Self::I8(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` widened to i32.
    pub fn get(&self, i: usize) -> i32 {
        match self {
            Self::I32(v) => v[i],
            Self::I8(v) => v[i] as i32,
        }
    }

    /// Index and both values of the first element where `self` and `other` differ.
    pub fn first_mismatch(&self, other: &Output) -> Option<(usize, i32, i32)> {
        if std::mem::discriminant(self) != std::mem::discriminant(other) || self.len() != other.len() {
            return Some((0, self.len() as i32, other.len() as i32));
        }
        (0..self.len()).find(|&i| self.get(i) != other.get(i)).map(|i| (i, self.get(i), other.get(i)))
    }
}

/// An operand's length against its shape (`dims`, e.g. `M×K = 4×8`): the
/// one-line error every unit's operand check gives.
pub fn check_len(name: &str, got: usize, want: usize, dims: impl FnOnce() -> String) -> Result<(), HwError> {
    if got == want {
        Ok(())
    } else {
        Err(HwError::Problem(format!("{name} has {got} elements, expected {want} ({})", dims())))
    }
}

/// An optional int32 bias of `n` entries against the problem's bias flag.
pub fn check_bias(flag: bool, bias: Option<&[i32]>, n: usize, dims: impl FnOnce() -> String) -> Result<(), HwError> {
    match (flag, bias) {
        (true, Some(b)) => check_len("bias", b.len(), n, dims),
        (true, None) => Err(HwError::Problem("bias enabled but no bias given".into())),
        (false, Some(_)) => Err(HwError::Problem("bias given but the bias flag is off".into())),
        (false, None) => Ok(()),
    }
}

/// A problem size against the unit's built-in limit: `what` (e.g. `K = 300`)
/// over `limit` (e.g. `k_max = 256 (A-panel buffer)`).
pub fn check_limit(value: usize, max: usize, what: impl FnOnce() -> (String, String)) -> Result<(), HwError> {
    if value <= max {
        return Ok(());
    }
    let (what, limit) = what();
    Err(HwError::Problem(format!("{what} exceeds this unit's {limit}")))
}

/// Each buffer's extent against the unit's 32-bit pitch/offset registers.
pub fn check_extents(buffers: &[(&str, u64)]) -> Result<(), HwError> {
    match buffers.iter().find(|(_, bytes)| *bytes > u32::MAX as u64) {
        Some((name, bytes)) => {
            Err(HwError::Problem(format!("{name} needs {bytes} bytes, over the unit's 32-bit pitch/offset range")))
        }
        None => Ok(()),
    }
}

/// Device memory as a register-level golden model sees it: byte addresses,
/// as the unit's AXI4 master issues them.
pub trait Memory {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), HwError>;
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), HwError>;
}

/// Argument register values by name, as the host programmed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterValues(pub Vec<(String, u64)>);

impl RegisterValues {
    /// The value of argument `name`; a missing one is a host bug the model reports.
    pub fn get(&self, name: &str) -> Result<u64, HwError> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
            .ok_or_else(|| HwError::Problem(format!("no value for argument register {name}")))
    }
}

/// Stack of the Verilog generator thread: rust-hdl recurses deeply on the
/// larger units (the MoE router overflows the default 8 MiB).
const GENERATOR_STACK: usize = 1 << 30;

/// The unit's Verilog, generated on a thread with a 1 GiB stack.
pub fn verilog(unit: &dyn Unit) -> Result<String, HwError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(GENERATOR_STACK)
            .spawn_scoped(scope, || unit.generate_verilog())
            .map_err(|e| HwError::Config(format!("starting the Verilog generator thread: {e}")))?
            .join()
            .map_err(|_| HwError::Config(format!("the Verilog generator of {} panicked", unit.kernel_name())))?
    })
}

/// `Unit` for a config type whose inherent methods carry the same names.
macro_rules! unit_from_inherent {
    ($cfg:ty, $name:literal, $rtl:path, |$c:ident| multipliers: $mult:expr, knob: $knob:expr, size: $size:expr $(, registers: $registers:path)?) => {
        impl Unit for $cfg {
            fn name(&self) -> &'static str {
                $name
            }
            fn kernel_name(&self) -> String {
                <$cfg>::kernel_name(self)
            }
            fn validate(&self) -> Result<(), HwError> {
                <$cfg>::validate(self)
            }
            fn register_map(&self) -> RegisterMap {
                <$cfg>::register_map(self)
            }
            fn hwinfo(&self) -> u32 {
                <$cfg>::hwinfo(self)
            }
            fn clock_mhz(&self) -> f64 {
                self.clock_mhz
            }
            fn multipliers(&self) -> u64 {
                let $c = self;
                $mult as u64
            }
            fn port_bits(&self) -> usize {
                self.port_bits
            }
            fn scaling_knob(&self) -> (&'static str, usize) {
                let $c = self;
                $knob
            }
            fn size_label(&self) -> String {
                let $c = self;
                $size
            }
            fn generate_verilog(&self) -> Result<String, HwError> {
                use $rtl as rtl;
                rtl::verilog(self)
            }
            fn hdl_model(&self) -> Result<Box<dyn PinLevel>, HwError> {
                use $rtl as rtl;
                rtl::hdl_model(self)
            }
            $(
                fn run_registers(&self, args: &RegisterValues, mem: &mut dyn Memory) -> Result<u32, HwError> {
                    $registers(self, args, mem)
                }
            )?
        }
    };
}

unit_from_inherent!(GemmConfig, "gemm", crate::gemm::rtl, |c| multipliers: c.macs(), knob: ("rows", c.rows), size: format!("{}×{}", c.rows, c.cols), registers: crate::gemm::model::gemm_registers);
unit_from_inherent!(AttentionConfig, "attention", crate::attention::rtl, |c| multipliers: c.multipliers(), knob: ("lanes", c.lanes), size: format!("{} lanes", c.lanes));
unit_from_inherent!(MoeConfig, "moe", crate::moe::rtl, |c| multipliers: c.macs(), knob: ("lanes", c.lanes), size: format!("{} lanes", c.lanes));

#[cfg(test)]
mod tests {
    use super::*;

    fn units() -> Vec<Box<dyn Unit>> {
        let attention = AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, ..Default::default() };
        vec![Box::new(GemmConfig::small(2, 2)), Box::new(attention), Box::new(MoeConfig::small())]
    }

    #[test]
    fn names_and_kernels_are_distinct_and_maps_name_the_kernel() {
        let units = units();
        let mut names: Vec<_> = units.iter().map(|u| u.name()).collect();
        names.dedup();
        assert_eq!(names, ["gemm", "attention", "moe"]);
        for u in &units {
            u.validate().unwrap();
            assert_eq!(u.register_map().kernel, u.kernel_name());
            assert_eq!(u.register_map().memory_data_bits as usize, u.port_bits());
            assert!(u.multipliers() > 0);
        }
        let mut ids: Vec<_> = units.iter().map(|u| u.hwinfo() >> 24).collect();
        ids.dedup();
        assert_eq!(ids.len(), units.len(), "each unit has its own id in HWINFO's top byte");
    }

    #[test]
    fn verilog_runs_on_the_large_stack_and_names_the_kernel() {
        let gemm = GemmConfig::small(2, 2);
        let text = verilog(&gemm).unwrap();
        assert!(text.contains(&format!("module {}(", gemm.kernel_name())));
        let bad = GemmConfig { rows: 0, ..gemm };
        assert!(matches!(verilog(&bad), Err(HwError::Config(_))));
    }
}
