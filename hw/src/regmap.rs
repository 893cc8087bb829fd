//! Machine-readable register maps.
//!
//! Every unit exposes the Vitis `ap_ctrl_hs` block at 0x00–0x0C followed by its
//! arguments from 0x10. The same [`RegisterMap`] value drives the RTL's address
//! decoder, the JSON written next to the Verilog, the host drivers (sim, XRT,
//! PYNQ) and the `kernel.xml` packaging recipe, so they cannot disagree.
use serde::{Deserialize, Serialize};

/// Control register: bit 0 ap_start, 1 ap_done (clear on read), 2 ap_idle,
/// 3 ap_ready, 7 auto_restart.
pub const CTRL: u32 = 0x00;
/// Global interrupt enable (bit 0).
pub const GIE: u32 = 0x04;
/// Interrupt enable register (bit 0 ap_done, bit 1 ap_ready).
pub const IER: u32 = 0x08;
/// Interrupt status register (toggle on write, like Vitis HLS kernels).
pub const ISR: u32 = 0x0C;

pub const CTRL_AP_START: u32 = 1 << 0;
pub const CTRL_AP_DONE: u32 = 1 << 1;
pub const CTRL_AP_IDLE: u32 = 1 << 2;
pub const CTRL_AP_READY: u32 = 1 << 3;
pub const CTRL_AUTO_RESTART: u32 = 1 << 7;

/// Width of the AXI4-Lite control address bus (4 KiB window).
pub const CTRL_ADDR_BITS: usize = 12;

/// How the host may access a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    ReadWrite,
    ReadOnly,
}

/// What a kernel argument is, as `kernel.xml` and XRT need to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgKind {
    /// A 64-bit device address of a buffer read or written through `m_axi_gmem`.
    Buffer,
    /// A 32-bit scalar.
    Scalar,
    /// A read-only status/performance register (not a kernel argument).
    Status,
}

/// One 32-bit register, or a 64-bit one split over two consecutive words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Register {
    pub name: String,
    pub offset: u32,
    /// 32 or 64.
    pub bits: u32,
    pub access: Access,
    pub kind: ArgKind,
    pub description: String,
}

/// A unit's full register map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterMap {
    /// Verilog module name (also the Vitis kernel name).
    pub kernel: String,
    /// Name of the AXI4 master interface that every buffer argument uses.
    pub memory_interface: String,
    /// Width of `m_axi_gmem` data in bits.
    pub memory_data_bits: u32,
    pub control_addr_bits: u32,
    pub registers: Vec<Register>,
}

impl RegisterMap {
    /// Start a map with the standard `ap_ctrl_hs` block.
    pub fn new(kernel: &str, memory_data_bits: u32) -> Self {
        let ctrl = |name: &str, offset, description: &str| Register {
            name: name.into(),
            offset,
            bits: 32,
            access: Access::ReadWrite,
            kind: ArgKind::Status,
            description: description.into(),
        };
        Self {
            kernel: kernel.into(),
            memory_interface: "m_axi_gmem".into(),
            memory_data_bits,
            control_addr_bits: CTRL_ADDR_BITS as u32,
            registers: vec![
                ctrl(
                    "CTRL",
                    CTRL,
                    "bit0 ap_start, bit1 ap_done (clear on read), bit2 ap_idle, bit3 ap_ready, bit7 auto_restart",
                ),
                ctrl("GIE", GIE, "global interrupt enable"),
                ctrl("IER", IER, "bit0 ap_done interrupt enable, bit1 ap_ready interrupt enable"),
                ctrl("ISR", ISR, "bit0 ap_done, bit1 ap_ready interrupt status; write 1 toggles"),
            ],
        }
    }

    /// Append a register at the next free 32-bit word.
    pub fn push(&mut self, name: &str, bits: u32, access: Access, kind: ArgKind, description: &str) -> &mut Self {
        let offset = self.registers.last().map_or(0x10, |r| r.offset + r.bits / 8);
        self.registers.push(Register {
            name: name.into(),
            offset,
            bits,
            access,
            kind,
            description: description.into(),
        });
        self
    }

    pub fn get(&self, name: &str) -> Option<&Register> {
        self.registers.iter().find(|r| r.name == name)
    }

    /// Offset of a register known to exist (register names are fixed by each unit's RTL).
    pub fn offset(&self, name: &str) -> u32 {
        self.get(name).unwrap_or_else(|| panic!("register {name} not in the {} map", self.kernel)).offset
    }

    /// The kernel arguments (buffers and scalars) in register order.
    pub fn arguments(&self) -> impl Iterator<Item = &Register> {
        self.registers.iter().filter(|r| r.kind != ArgKind::Status)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("register map serializes")
    }

    /// Parse and check a map: offsets word-aligned, ascending, non-overlapping, inside the window.
    pub fn from_json(text: &str) -> Result<Self, crate::HwError> {
        let map: Self =
            serde_json::from_str(text).map_err(|e| crate::HwError::Config(format!("register map JSON: {e}")))?;
        map.check()?;
        Ok(map)
    }

    pub fn check(&self) -> Result<(), crate::HwError> {
        let mut next = 0;
        for r in &self.registers {
            if r.offset % 4 != 0 || r.offset < next || !(r.bits == 32 || r.bits == 64) {
                return Err(crate::HwError::Config(format!(
                    "register {} at {:#x} ({} bits) is misplaced",
                    r.name, r.offset, r.bits
                )));
            }
            next = r.offset + r.bits / 8;
        }
        if next > 1 << self.control_addr_bits {
            return Err(crate::HwError::Config("register map exceeds the control window".into()));
        }
        Ok(())
    }
}
