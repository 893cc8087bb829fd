//! The boards Ferrite builds images for: platform names, parts, memory banks,
//! PS ports and device capacities, in one table.
use serde::{Deserialize, Serialize};
use std::fmt;

/// A supported board or card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Board {
    U55c,
    U250,
    U280,
    PynqZ2,
    Zcu104,
}

/// Resources of one FPGA, whole device (see [`BoardSpec::capacity_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    pub lut: u64,
    pub ff: u64,
    pub dsp: u64,
    /// 36 Kb block RAMs (a RAMB18 counts one half).
    pub bram36: u64,
    /// 288 Kb UltraRAMs.
    pub uram: u64,
}

/// How a board runs a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Alveo data-center card: a Vitis RTL kernel linked by `v++` into an
    /// xclbin on a shell platform, run through XRT.
    Alveo {
        platform: &'static str,
        /// The `sp=` bank the kernel's single `m_axi_gmem` port connects to.
        /// One port reaches one bank group, so every buffer lives there.
        memory: &'static str,
    },
    /// Zynq board running PYNQ: a Vivado block design with the processing
    /// system, the unit's control slave on a general-purpose master port and
    /// its memory master on a high-performance slave port.
    Pynq {
        board_part: &'static str,
        ps: Ps,
        /// Physical address of the unit's 4 KiB control window.
        control_base: u64,
    },
}

/// The Zynq processing system of a PYNQ board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ps {
    /// Zynq-7000: `processing_system7`, M_AXI_GP0 and S_AXI_HP0 (64-bit AXI3).
    Zynq7,
    /// Zynq UltraScale+ MPSoC: `zynq_ultra_ps_e`, M_AXI_HPM0_FPD and S_AXI_HP0_FPD (128-bit).
    ZynqMp,
}

/// Everything the generators and the resource report need about a board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoardSpec {
    pub board: Board,
    pub name: &'static str,
    pub part: &'static str,
    /// `synth_xilinx -family` for yosys resource estimates.
    pub yosys_family: &'static str,
    pub flow: Flow,
    /// Kernel clock used when the user gives none, in MHz.
    pub default_clock_mhz: f64,
    pub capacity: Capacity,
    pub capacity_source: &'static str,
}

impl Board {
    pub const ALL: [Board; 5] = [Board::U55c, Board::U250, Board::U280, Board::PynqZ2, Board::Zcu104];

    pub fn spec(self) -> BoardSpec {
        match self {
            Board::U55c => BoardSpec {
                board: self,
                name: "Alveo U55C",
                part: "xcu55c-fsvh2892-2L-e",
                yosys_family: "xcup",
                flow: Flow::Alveo { platform: "xilinx_u55c_gen3x16_xdma_3_202210_1", memory: "HBM[0:31]" },
                default_clock_mhz: 300.0,
                capacity: Capacity { lut: 1_303_680, ff: 2_607_360, dsp: 9_024, bram36: 2_016, uram: 960 },
                capacity_source: "AMD DS978 (Alveo U55C data sheet), XCU55C device totals",
            },
            Board::U250 => BoardSpec {
                board: self,
                name: "Alveo U250",
                part: "xcu250-figd2104-2L-e",
                yosys_family: "xcup",
                flow: Flow::Alveo { platform: "xilinx_u250_gen3x16_xdma_4_1_202210_1", memory: "DDR[0]" },
                default_clock_mhz: 300.0,
                capacity: Capacity { lut: 1_728_000, ff: 3_456_000, dsp: 12_288, bram36: 2_688, uram: 1_280 },
                capacity_source: "AMD DS962 (Alveo U200/U250 data sheet), XCU250 device totals",
            },
            Board::U280 => BoardSpec {
                board: self,
                name: "Alveo U280",
                part: "xcu280-fsvh2892-2L-e",
                yosys_family: "xcup",
                flow: Flow::Alveo { platform: "xilinx_u280_gen3x16_xdma_1_202211_1", memory: "HBM[0:31]" },
                default_clock_mhz: 300.0,
                capacity: Capacity { lut: 1_303_680, ff: 2_607_360, dsp: 9_024, bram36: 2_016, uram: 960 },
                capacity_source: "AMD DS963 (Alveo U280 data sheet), XCU280 device totals",
            },
            Board::PynqZ2 => BoardSpec {
                board: self,
                name: "PYNQ-Z2",
                part: "xc7z020clg400-1",
                yosys_family: "xc7",
                flow: Flow::Pynq {
                    board_part: "tul.com.tw:pynq-z2:part0:1.0",
                    ps: Ps::Zynq7,
                    control_base: 0x4000_0000,
                },
                default_clock_mhz: 100.0,
                capacity: Capacity { lut: 53_200, ff: 106_400, dsp: 220, bram36: 140, uram: 0 },
                capacity_source: "AMD DS190 (Zynq-7000 SoC overview), XC7Z020",
            },
            Board::Zcu104 => BoardSpec {
                board: self,
                name: "ZCU104",
                part: "xczu7ev-ffvc1156-2-e",
                yosys_family: "xcup",
                flow: Flow::Pynq {
                    board_part: "xilinx.com:zcu104:part0:1.1",
                    ps: Ps::ZynqMp,
                    control_base: 0xA000_0000,
                },
                default_clock_mhz: 200.0,
                capacity: Capacity { lut: 230_400, ff: 460_800, dsp: 1_728, bram36: 312, uram: 96 },
                capacity_source: "AMD DS891 (Zynq UltraScale+ MPSoC overview), XCZU7EV",
            },
        }
    }

    /// The name used on the command line and in manifests.
    pub fn id(self) -> &'static str {
        match self {
            Board::U55c => "u55c",
            Board::U250 => "u250",
            Board::U280 => "u280",
            Board::PynqZ2 => "pynq-z2",
            Board::Zcu104 => "zcu104",
        }
    }

    pub fn is_alveo(self) -> bool {
        matches!(self.spec().flow, Flow::Alveo { .. })
    }
}

impl std::str::FromStr for Board {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|b| b.id() == s).ok_or_else(|| {
            let ids: Vec<_> = Self::ALL.iter().map(|b| b.id()).collect();
            format!("unknown board `{s}` (one of {})", ids.join(", "))
        })
    }
}

impl fmt::Display for Board {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_serde_and_from_str() {
        for b in Board::ALL {
            assert_eq!(serde_json::to_string(&b).unwrap(), format!("\"{}\"", b.id()));
            assert_eq!(b.id().parse::<Board>().unwrap(), b);
            assert_eq!(b.spec().board, b);
        }
        assert!("u50".parse::<Board>().unwrap_err().contains("pynq-z2"));
    }
}
