//! Ferrite's hardware units.
//!
//! Each unit lives in its own module with the same three parts side by side:
//! `config` (the one config type every layer reads), `rtl` (the rust-hdl
//! generator) and `model` (the bit-exact golden model, which is the unit's
//! specification). All units share the Vitis RTL-kernel top-level port list
//! described in [`vitis`], so one simulator shim, one memory model and one
//! register-level driver serve every unit.
/// A block's struct literal in which the fields named after `..` take their
/// `Default`. rust-hdl blocks cannot use `..Default::default()`: `Constant`s
/// and sized blocks (RAMs, FIFOs, lanes) have no default, so without this every
/// signal and register would be listed a second time as `x: Default::default()`.
#[macro_export]
macro_rules! with_defaults {
    ($ty:ident { $($field:ident: $value:expr,)* .. $($default:ident),+ $(,)? }) => {
        $ty { $($field: $value,)* $($default: Default::default(),)+ }
    };
}

/// `n` default-built blocks or signals, for a block's per-lane vectors.
pub fn many<T: Default>(n: usize) -> Vec<T> {
    std::iter::repeat_with(T::default).take(n).collect()
}

pub mod attention;
pub mod block;
pub mod blocks;
pub mod control;
pub mod gemm;
pub mod moe;
pub mod numerics;
pub mod portable;
pub mod regmap;
pub mod shell;
pub mod synthesis;
pub mod unit;
pub mod vitis;

/// Errors raised when a unit is configured or asked to run something it cannot.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HwError {
    #[error("invalid unit configuration: {0}")]
    Config(String),
    #[error("invalid problem: {0}")]
    Problem(String),
}

/// rust-hdl's `dff_setup!`, also for a clock inside an interface
/// (`vitis.ap_clk`): `#[hdl_gen]` reads the clock argument as an expression,
/// rust-hdl's own macro takes only a field name. Imported by name where used
/// (`use ferrite_hw::dff_setup`), which shadows the prelude's; the call is
/// `#[rustfmt::skip]`, as rustfmt would give every register its own line.
#[macro_export]
macro_rules! dff_setup {
    ($self:ident, $port:ident . $clock:ident, $($dff:ident),+ $(,)?) => {
        $($self.$dff.clock.next = $self.$port.$clock.val();)+
        $($self.$dff.d.next = $self.$dff.q.val();)+
    };
    ($self:ident, $clock:ident, $($dff:ident),+ $(,)?) => {
        $($self.$dff.clock.next = $self.$clock.val();)+
        $($self.$dff.d.next = $self.$dff.q.val();)+
    };
}

/// rust-hdl's `clock!` (sub-blocks on one clock), also for a clock inside an
/// interface, as [`dff_setup!`]: `use crate::clock;` where used.
#[macro_export]
macro_rules! clock {
    ($self:ident, $port:ident . $clock:ident, $($sub:ident),+ $(,)?) => {
        $($self.$sub.clock.next = $self.$port.$clock.val();)+
    };
    ($self:ident, $clock:ident, $($sub:ident),+ $(,)?) => {
        $($self.$sub.clock.next = $self.$clock.val();)+
    };
}
