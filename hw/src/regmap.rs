//! Machine-readable register maps.
//!
//! Every unit exposes the Vitis `ap_ctrl_hs` block at 0x00–0x0C followed by its
//! arguments from 0x10, then the shell's status words. Each unit declares its
//! arguments once, with [`register_table!`]: the declaration gives the [`Table`]
//! from which the [`RegisterMap`] (the JSON written next to the Verilog, the host
//! drivers, `kernel.xml`) is built, and the rust-hdl decoder through which the
//! RTL reads each argument by name, so they cannot disagree.
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

/// Status words the shell appends to every unit's arguments: CYCLES (lo, hi), HWINFO, STATUS.
pub const STATUS_WORDS: usize = 4;

/// What an argument register holds, and so its width in the map and in the RTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A 64-bit buffer address (two words, low first).
    Buffer,
    /// A 32-bit scalar.
    Scalar,
    /// A right shift, 0..=[`MAX_REQUANT_SHIFT`](crate::numerics::MAX_REQUANT_SHIFT):
    /// the RTL reads bits 5..0 and refuses a launch whose word is larger.
    Shift,
    /// A word of single-bit options, each named in the table.
    Flags,
}

/// The rust-hdl type the decoder gives each [`Field`], named after it so that
/// [`register_table!`] can pick it by the field kind's name.
pub mod field {
    use rust_hdl::prelude::Bits;
    pub type Buffer = Bits<64>;
    pub type Scalar = Bits<32>;
    pub type Shift = Bits<6>;
    pub type Flags = Bits<32>;
}

/// One argument register of a unit's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    pub name: &'static str,
    pub field: Field,
    pub description: &'static str,
    /// For [`Field::Flags`]: each option's name and bit.
    pub flags: &'static [(&'static str, u32)],
}

impl Arg {
    /// 32-bit words the register takes.
    pub const fn words(&self) -> usize {
        match self.field {
            Field::Buffer => 2,
            _ => 1,
        }
    }
}

/// A unit's register table: its arguments in word order, and what its shell's
/// HWINFO and STATUS words mean for it. Written with [`register_table!`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub args: &'static [Arg],
    pub hwinfo: &'static str,
    pub status: &'static str,
}

impl Table {
    /// Argument words, from 0x10 up to the shell's status words.
    pub const fn words(&self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.args.len() {
            n += self.args[i].words();
            i += 1;
        }
        n
    }

    /// Whether every buffer precedes every other register ([`register_table!`] needs it).
    pub const fn buffers_first(&self) -> bool {
        let mut i = 1;
        while i < self.args.len() {
            if matches!(self.args[i].field, Field::Buffer) && !matches!(self.args[i - 1].field, Field::Buffer) {
                return false;
            }
            i += 1;
        }
        true
    }

    /// Index of the first argument word of register `name`.
    pub fn word(&self, name: &str) -> usize {
        let at = self.args.iter().position(|a| a.name == name).unwrap_or_else(|| panic!("no register {name}"));
        self.args[..at].iter().map(Arg::words).sum()
    }

    /// The full register map of a unit with this table.
    pub fn map(&self, kernel: &str, memory_data_bits: u32) -> RegisterMap {
        use {Access::*, ArgKind::*};
        let mut map = RegisterMap::new(kernel, memory_data_bits);
        for a in self.args {
            let kind = if a.field == Field::Buffer { Buffer } else { Scalar };
            map.push(a.name, 32 * a.words() as u32, ReadWrite, kind, a.description);
        }
        map.push("CYCLES", 64, ReadOnly, Status, "clock cycles from ap_start to ap_done of the last run")
            .push("HWINFO", 32, ReadOnly, Status, self.hwinfo)
            .push("STATUS", 32, ReadOnly, Status, self.status);
        map
    }
}

/// Declare a unit's register table. In the invoking module (which must `use
/// rust_hdl::prelude::*`) this defines `TABLE` ([`Table`]), a `&str` constant
/// per register name, `flag::NAME` bit masks, and `Args`: a rust-hdl block whose
/// input `words` are the argument words and whose outputs are the registers by
/// field name (typed by [`field`]) and each flag as a `Bit`, plus `bad_shift`:
/// some Shift word is above `MAX_REQUANT_SHIFT` (the whole word compared, so
/// 64 is not read as 0), which every unit refuses.
///
/// ```ignore
/// register_table! {
///     hwinfo: "…", status: "…";
///     a: A Buffer "int8 A";
///     m: M Scalar "rows";
///     flags: FLAGS Flags "bit0 bias" { bias: BIAS = 0 };
/// }
/// ```
#[macro_export]
macro_rules! register_table {
    (
        hwinfo: $hwinfo:literal, status: $status:literal;
        $($field:ident: $name:ident $kind:ident $desc:literal $({ $($flag:ident: $fname:ident = $bit:tt),* $(,)? })?;)*
    ) => {
        /// The register table: word order, names and meanings.
        pub const TABLE: $crate::regmap::Table = $crate::regmap::Table {
            args: &[$($crate::regmap::Arg {
                name: stringify!($name),
                field: $crate::regmap::Field::$kind,
                description: $desc,
                flags: &[$($((stringify!($fname), $bit)),*)?],
            }),*],
            hwinfo: $hwinfo,
            status: $status,
        };
        const _: () = assert!(TABLE.buffers_first(), "list the buffers first: see __register_decoder");
        $(
            #[doc = $desc]
            pub const $name: &str = stringify!($name);
        )*
        /// FLAGS bits as masks.
        pub mod flag {
            $($($(pub const $fname: u32 = 1 << $bit;)*)?)*
        }
        /// The arguments by name, decoded from their words.
        #[derive(LogicBlock)]
        pub struct Args {
            pub words: Vec<Signal<In, Bits<32>>>,
            $(pub $field: Signal<Out, $crate::regmap::field::$kind>, $($(pub $flag: Signal<Out, Bit>,)*)?)*
            pub bad_shift: Signal<Out, Bit>,
            c_shift_max: Constant<Bits<32>>,
        }
        impl Default for Args {
            fn default() -> Self {
                Self {
                    words: $crate::many(TABLE.words()),
                    $($field: Default::default(), $($($flag: Default::default(),)*)?)*
                    bad_shift: Default::default(),
                    c_shift_max: Constant::new(($crate::numerics::MAX_REQUANT_SHIFT as u64).into()),
                }
            }
        }
        $crate::__register_decoder! { [] [] [] [] (0) $($field $name $kind $({ $($flag $bit)* })?;)* }
    };
}

/// [`register_table!`]'s decoder. `#[hdl_gen]` cannot expand a macro inside
/// `update` and evaluates an index only from literals and loop variables, so
/// the registers are first sorted by kind; then one transcription writes every
/// statement (so that `self` in the body is the `self` of the signature). A
/// buffer's first word is a literal sum `(0 + 2 + 1 …)` in table order: its
/// `bit_cast` is evaluated in Rust, where a loop variable does not exist. rustc
/// breaks a long sum over lines, which the Verilog then keeps, so buffers come
/// first in a table ([`Table::buffers_first`]); the others read `words[w]`
/// with `w` looped over their one word.
#[doc(hidden)]
#[macro_export]
macro_rules! __register_decoder {
    (
        [$($b:ident $bw:tt)*]
        [$($s:ident $sn:ident)*]
        [$($h:ident $hn:ident)*]
        [$($f:ident $fname:ident { $($fl:ident $bit:tt)* })*]
        $end:tt
    ) => {
        impl Logic for Args {
            // Buffer words are sums, loop ends are sums, in parentheses (`#[hdl_gen]` appends `.into()`).
            #[allow(unused_parens)]
            #[hdl_gen]
            fn update(&mut self) {
                $(self.$b.next = bit_cast::<64, 32>(self.words[$bw].val())
                    | (bit_cast::<64, 32>(self.words[$bw + 1].val()) << 32);)*
                $(for w in TABLE.word($sn)..(TABLE.word($sn) + 1) {
                    self.$s.next = self.words[w].val();
                })*
                self.bad_shift.next = false;
                $(for w in TABLE.word($hn)..(TABLE.word($hn) + 1) {
                    self.$h.next = self.words[w].val().get_bits::<6>(0);
                    if self.words[w].val() > self.c_shift_max.val() {
                        self.bad_shift.next = true;
                    }
                })*
                $(for w in TABLE.word($fname)..(TABLE.word($fname) + 1) {
                    self.$f.next = self.words[w].val();
                    $(self.$fl.next = self.words[w].val().get_bit($bit);)*
                })*
            }
        }
    };
    ([$($b:tt)*] [$($s:tt)*] [$($h:tt)*] [$($f:tt)*] ($($at:tt)*) $field:ident $name:ident Buffer; $($rest:tt)*) => {
        $crate::__register_decoder! { [$($b)* $field ($($at)*)] [$($s)*] [$($h)*] [$($f)*] ($($at)* + 2) $($rest)* }
    };
    ([$($b:tt)*] [$($s:tt)*] [$($h:tt)*] [$($f:tt)*] ($($at:tt)*) $field:ident $name:ident Scalar; $($rest:tt)*) => {
        $crate::__register_decoder! { [$($b)*] [$($s)* $field $name] [$($h)*] [$($f)*] ($($at)* + 1) $($rest)* }
    };
    ([$($b:tt)*] [$($s:tt)*] [$($h:tt)*] [$($f:tt)*] ($($at:tt)*) $field:ident $name:ident Shift; $($rest:tt)*) => {
        $crate::__register_decoder! { [$($b)*] [$($s)*] [$($h)* $field $name] [$($f)*] ($($at)* + 1) $($rest)* }
    };
    (
        [$($b:tt)*] [$($s:tt)*] [$($h:tt)*] [$($f:tt)*] ($($at:tt)*)
        $field:ident $name:ident Flags { $($flag:ident $bit:tt)* }; $($rest:tt)*
    ) => {
        $crate::__register_decoder! {
            [$($b)*] [$($s)*] [$($h)*] [$($f)* $field $name { $($flag $bit)* }] ($($at)* + 1) $($rest)*
        }
    };
}

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
