//! Registers folded into the ECP5's multipliers, between synthesis and place
//! and route.
//!
//! Vivado puts the registers before and after a multiply into the DSP48's
//! A/B and P registers, and Lattice's own synthesis does the same for the
//! ECP5's MULT18X18D; yosys's `synth_ecp5` does not: every multiply becomes a
//! combinational MULT18X18D with its registers in the fabric, so each one
//! costs register → routing → 3.9 ns of multiplier → routing → register, a
//! floor near 140 MHz that no RTL change lifts (docs/timing.md). This pass
//! does the folding on yosys's JSON netlist, so the flow measures the RTL as
//! a vendor flow would build it:
//!
//! * a MULT18X18D whose A and B inputs all come from flip-flops (one clock
//!   and one enable per input, no reset) takes them as its input registers;
//!   an enable the flip-flops take inverted (`CEMUX INV`: yosys picks the
//!   polarity, e.g. for a register that holds while `hold`) reaches the
//!   block's CE through one LUT inverter per enable net; a synchronous reset
//!   to zero comes along on one of the block's RST pins when the flip-flops
//!   load every cycle (yosys makes one of a shifter's zero fill), so whether
//!   reset or enable wins never matters;
//!   a flip-flop that also drives other logic stays, and the multiplier gets
//!   its own copy;
//! * one whose every used product bit drives exactly one such flip-flop and
//!   nothing else takes those as its output register.
//!
//! * a DP16KD block RAM whose every read-data bit that is read drives exactly
//!   one flip-flop (one clock, any enable, no reset) takes those as its
//!   output register (`REGMODE OUTREG`, the enable on `OCE`): its read is
//!   5.8 ns clock-to-out without it.
//!
//! The function is the same cycle for cycle; nextpnr then times the blocks
//! as the registered blocks they are (`MULT18X18D_REGS_*`, `DP16KD_REGMODE_*`).
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Bumped whenever the pass changes what it folds: part of the timing cache key.
pub const VERSION: &str =
    "ferrite register packing 4: MULT18X18D inputs and outputs with enables of either polarity or a synchronous reset, DP16KD outputs";

/// What the pass folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Packing {
    /// MULT18X18D in the netlist.
    pub multipliers: usize,
    /// Those that took their A and B input registers.
    pub input_registers: usize,
    /// Those that took their output register.
    pub output_registers: usize,
    /// DP16KD block RAMs in the netlist.
    #[serde(default)]
    pub block_rams: usize,
    /// Those that took the register after their read port as their output register.
    #[serde(default)]
    pub ram_output_registers: usize,
    /// Fabric flip-flops removed (folded, and driving nothing else).
    pub flip_flops_removed: usize,
}

impl Packing {
    /// `36 MULT18X18D: 32 took their input registers, … (… fabric flip-flops folded away)`.
    pub fn summary(&self) -> String {
        format!(
            "{} MULT18X18D: {} took their input registers, {} their output register; {} DP16KD: {} took their \
             output register ({} fabric flip-flops folded away)",
            self.multipliers,
            self.input_registers,
            self.output_registers,
            self.block_rams,
            self.ram_output_registers,
            self.flip_flops_removed
        )
    }
}

/// A connection bit: a net number (constants are the strings "0", "1", "x").
fn net(bit: &Value) -> Option<u64> {
    bit.as_u64()
}

/// The first bit of `port` on `cell`, if connected.
fn bit_of<'a>(cell: &'a Value, port: &str) -> Option<&'a Value> {
    cell["connections"].get(port).and_then(|b| b.get(0))
}

/// How a flip-flop loads: its enable (a net, the constant "1" when it loads
/// every cycle), whether it loads while that net is low, and its synchronous
/// reset to zero, taken only with no enable.
#[derive(Clone, Debug, PartialEq)]
struct Load {
    enable: Value,
    low: bool,
    reset: Option<Value>,
}

/// A register's clock net and how it loads.
type Control = (u64, Load);

/// A flip-flop on a rising clock, with no reset or a synchronous one to zero
/// and no enable: its clock and how it loads.
fn ff_control(cell: &Value) -> Option<Control> {
    if cell["type"] != "TRELLIS_FF" {
        return None;
    }
    let param = |k: &str| cell["parameters"].get(k).and_then(Value::as_str).map(str::trim);
    let tied = |port: &str, level: &str| bit_of(cell, port).is_none_or(|b| b == level);
    let clocked = param("CLKMUX").is_none_or(|m| m == "CLK");
    let ce = || bit_of(cell, "CE").cloned().unwrap_or_else(|| "1".into());
    let (enable, low) = match param("CEMUX") {
        Some("1") => ("1".into(), false),
        None | Some("CE") => (ce(), false),
        Some("INV") => (ce(), true),
        _ => return None,
    };
    let reset = if tied("LSR", "0") {
        None
    } else {
        let to_zero_on_the_edge = param("LSRMUX").is_none_or(|m| m == "LSR")
            && param("SRMODE").is_none_or(|m| m == "LSR_OVER_CE")
            && param("REGSET").is_none_or(|m| m == "RESET");
        if !(to_zero_on_the_edge && enable == "1" && !low) {
            return None;
        }
        bit_of(cell, "LSR").cloned()
    };
    let load = Load { enable, low, reset };
    clocked.then(|| bit_of(cell, "CLK").and_then(net).map(|clk| (clk, load))).flatten()
}

/// Who drives each net and how many cell inputs (and top-level outputs) read it.
struct Index {
    driver: HashMap<u64, (String, String)>,
    loads: HashMap<u64, Vec<(String, String)>>,
}

impl Index {
    fn new(module: &Value) -> Result<Self> {
        let mut index = Index { driver: HashMap::new(), loads: HashMap::new() };
        for (name, port) in module["ports"].as_object().into_iter().flatten() {
            if port["direction"] != "input" {
                for bit in port["bits"].as_array().into_iter().flatten().filter_map(net) {
                    index.loads.entry(bit).or_default().push((String::new(), name.clone()));
                }
            }
        }
        for (name, cell) in module["cells"].as_object().context("the netlist's top module has no cells")? {
            let dirs = cell["port_directions"].as_object();
            for (port, bits) in cell["connections"].as_object().into_iter().flatten() {
                let Some(dir) = dirs.and_then(|d| d.get(port)).and_then(Value::as_str) else {
                    bail!("cell {name} ({}) gives no direction for its port {port}", cell["type"]);
                };
                for bit in bits.as_array().into_iter().flatten().filter_map(net) {
                    if dir == "output" {
                        index.driver.insert(bit, (name.clone(), port.clone()));
                    } else {
                        index.loads.entry(bit).or_default().push((name.clone(), port.clone()));
                    }
                }
            }
        }
        Ok(index)
    }
}

/// A register group a block would take: its clock, its enable, and the
/// flip-flop behind each pin.
type Flops = (Control, Vec<(String, String)>);

/// The nets that drive blocks' enable ports: an enable taken inverted gets
/// one LUT inverter per net, added to the netlist on first use.
struct EnableNets {
    next_net: u64,
    inverted: HashMap<u64, Value>,
}

impl EnableNets {
    fn new(module: &Value) -> Self {
        let bits = module["ports"].as_object().into_iter().flatten().flat_map(|(_, p)| p["bits"].as_array());
        let conns = module["cells"]
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(_, c)| c["connections"].as_object().into_iter().flatten().map(|(_, b)| b));
        let nets = module["netnames"].as_object().into_iter().flatten().map(|(_, n)| &n["bits"]);
        let max = bits
            .chain(conns.filter_map(Value::as_array))
            .chain(nets.filter_map(Value::as_array))
            .flatten()
            .filter_map(net)
            .max()
            .unwrap_or(1);
        Self { next_net: max + 1, inverted: HashMap::new() }
    }

    /// The bit to wire to a block's enable port for `load`.
    fn bit(&mut self, cells: &mut Map<String, Value>, load: &Load) -> Value {
        if !load.low {
            return load.enable.clone();
        }
        let Some(n) = net(&load.enable) else {
            return if load.enable == "0" { "1".into() } else { "0".into() };
        };
        if let Some(z) = self.inverted.get(&n) {
            return z.clone();
        }
        let z = Value::from(self.next_net);
        self.next_net += 1;
        // LUT4 Z = INIT[{D, C, B, A}]: with B, C, D tied low, Z = !A.
        cells.insert(
            format!("$ferrite_ce_inv${n}"),
            serde_json::json!({"hide_name": 1, "type": "LUT4", "parameters": {"INIT": "0101010101010101"}, "attributes": {},
                   "port_directions": {"A": "input", "B": "input", "C": "input", "D": "input", "Z": "output"},
                   "connections": {"A": [n], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [z.clone()]}}),
        );
        self.inverted.insert(n, z.clone());
        z
    }
}

/// The flip-flops a multiplier's input port (`A`, `B`) would take, pin by
/// pin, if every non-constant bit comes from one, all on one clock and
/// enable (and none of them is already some multiplier's output register).
fn input_flops(
    cells: &Map<String, Value>,
    index: &Index,
    dsp: &Value,
    port: char,
    taken: &BTreeSet<String>,
) -> Option<Flops> {
    let mut control = None;
    let mut flops = Vec::new();
    for i in 0..18 {
        let pin = format!("{port}{i}");
        let Some(bit) = bit_of(dsp, &pin).and_then(net) else { continue };
        let (ff, q) = index.driver.get(&bit)?;
        let c = (q == "Q" && !taken.contains(ff)).then(|| ff_control(&cells[ff])).flatten()?;
        if *control.get_or_insert_with(|| c.clone()) != c {
            return None;
        }
        flops.push((pin, ff.clone()));
    }
    control.map(|c| (c, flops))
}

/// The flip-flops a block's outputs `pins` would take as its output
/// register, pin by pin, and their clock and enable, if every output bit that
/// is read is read by exactly one flip-flop and nothing else.
fn output_flops(
    cells: &Map<String, Value>,
    index: &Index,
    block: &Value,
    pins: impl Iterator<Item = String>,
) -> Option<Flops> {
    let mut control = None;
    let mut flops = Vec::new();
    for pin in pins {
        let Some(bit) = bit_of(block, &pin).and_then(net) else { continue };
        let Some(loads) = index.loads.get(&bit) else { continue };
        let [(ff, di)] = loads.as_slice() else { return None };
        let c = (di == "DI" && !ff.is_empty()).then(|| ff_control(&cells[ff])).flatten()?;
        if *control.get_or_insert_with(|| c.clone()) != c {
            return None;
        }
        flops.push((pin, ff.clone()));
    }
    control.map(|c| (c, flops))
}

/// Fold registers into the MULT18X18D and DP16KD of `top` in a yosys JSON netlist.
pub fn pack(netlist: &mut Value, top: &str) -> Result<Packing> {
    let module = netlist["modules"].get_mut(top).with_context(|| format!("the netlist has no module {top}"))?;
    let index = Index::new(module)?;
    let mut enables = EnableNets::new(module);
    let cells = module["cells"].as_object_mut().context("the netlist's top module has no cells")?;
    let dsps: Vec<String> = cells.iter().filter(|(_, c)| c["type"] == "MULT18X18D").map(|(n, _)| n.clone()).collect();
    let mut packing = Packing { multipliers: dsps.len(), ..Packing::default() };

    // Outputs first, so that no flip-flop is both an output register and a
    // copied input register (the copy would read a net the fold disconnects).
    let mut outputs = HashMap::new();
    let mut taken = BTreeSet::new();
    for name in &dsps {
        let product = (0..36).map(|i| format!("P{i}"));
        if let Some(flops) = output_flops(cells, &index, &cells[name], product) {
            taken.extend(flops.1.iter().map(|(_, ff)| ff.clone()));
            outputs.insert(name.clone(), flops);
        }
    }
    let rams: Vec<String> = cells.iter().filter(|(_, c)| c["type"] == "DP16KD").map(|(n, _)| n.clone()).collect();
    packing.block_rams = rams.len();
    for name in &rams {
        let ram = &cells[name];
        let read = ["A", "B"].iter().flat_map(|p| (0..18).map(move |i| format!("DO{p}{i}")));
        let Some(((clk, ce), flops)) = output_flops(cells, &index, ram, read) else { continue };
        let clocks = ["CLKA", "CLKB"].map(|p| bit_of(ram, p).and_then(net));
        let plain =
            ["CLKAMUX", "CLKBMUX"].iter().all(|p| ram["parameters"][p].as_str().is_none_or(|m| m.starts_with("CLK")));
        if clocks != [Some(clk); 2] || !plain || ce.reset.is_some() {
            continue;
        }
        taken.extend(flops.iter().map(|(_, ff)| ff.clone()));
        let rewired: Vec<(String, Value)> =
            flops.iter().map(|(pin, ff)| (pin.clone(), cells[ff]["connections"]["Q"].clone())).collect();
        let ce = enables.bit(cells, &ce);
        let ram = cells.get_mut(name).expect("listed above");
        for (pin, bits) in rewired {
            ram["connections"][&pin] = bits;
        }
        for port in ["A", "B"] {
            if flops.iter().any(|(pin, _)| pin.starts_with(&format!("DO{port}"))) {
                ram["parameters"][format!("REGMODE_{port}")] = "OUTREG".into();
                ram["connections"][format!("OCE{port}")] = Value::Array(vec![ce.clone()]);
            }
        }
        packing.ram_output_registers += 1;
    }
    let mut copied = BTreeSet::new();
    for name in &dsps {
        let dsp = &cells[name];
        let signs_fixed = ["SIGNEDA", "SIGNEDB"].iter().all(|p| bit_of(dsp, p).is_none_or(|b| net(b).is_none()));
        let a = input_flops(cells, &index, dsp, 'A', &taken);
        let b = input_flops(cells, &index, dsp, 'B', &taken);
        let output = outputs.remove(name);
        let clock = output.as_ref().map(|((clk, _), _)| *clk);
        // Each register takes its own enable port: A on CE0, B on CE1, the product on CE2.
        let mut groups: Vec<(&str, &str, Flops)> = Vec::new();
        if let (Some(a), Some(b)) = (a, b) {
            if signs_fixed && a.0 .0 == b.0 .0 && clock.is_none_or(|c| c == a.0 .0) {
                groups.extend([("REG_INPUTA", "CE0", a), ("REG_INPUTB", "CE1", b)]);
                packing.input_registers += 1;
            }
        }
        if let Some(o) = output {
            groups.push(("REG_OUTPUT", "CE2", o));
            packing.output_registers += 1;
        }
        let Some(clock) = groups.first().map(|(_, _, ((clk, _), _))| *clk) else { continue };
        let mut rewired: Vec<(String, Value)> = Vec::new();
        for (reg, _, (_, flops)) in &groups {
            let side = if *reg == "REG_OUTPUT" { "Q" } else { "DI" };
            for (pin, ff) in flops {
                rewired.push((pin.clone(), cells[ff]["connections"][side].clone()));
                if side == "DI" {
                    copied.insert(ff.clone());
                }
            }
        }
        let enable_bits: Vec<Value> = groups.iter().map(|(_, _, ((_, e), _))| enables.bit(cells, e)).collect();
        let dsp = cells.get_mut(name).expect("listed above");
        for (pin, bits) in rewired {
            dsp["connections"][&pin] = bits;
        }
        let mut ports = vec![("CLK0", Value::from(clock)), ("RST0", "0".into())];
        // A register group that resets takes a reset pin of its own (the block's RESETMODE is SYNC).
        for (((reg, ce, ((_, load), _)), enable), rst) in groups.iter().zip(enable_bits).zip(["RST1", "RST2", "RST3"]) {
            let rst = match &load.reset {
                Some(bit) => {
                    ports.push((rst, bit.clone()));
                    rst
                }
                None => "RST0",
            };
            for (what, value) in [("CLK", "CLK0"), ("CE", *ce), ("RST", rst)] {
                dsp["parameters"][format!("{reg}_{what}")] = value.into();
            }
            ports.push((ce, enable));
        }
        dsp["parameters"]["RESETMODE"] = "SYNC".into();
        for (port, bit) in ports {
            dsp["connections"][port] = Value::Array(vec![bit]);
            dsp["port_directions"][port] = "input".into();
        }
        dsp["parameters"]["GSR"] = "DISABLED".into();
    }

    // Output registers go (the multiplier drives their nets now); a copied
    // input register goes when nothing else reads it any more.
    let mut read: HashSet<u64> =
        index.loads.iter().filter(|(_, l)| l.iter().any(|(c, _)| c.is_empty())).map(|(b, _)| *b).collect();
    for (_, c) in cells.iter().filter(|(n, _)| !taken.contains(*n)) {
        for (port, bits) in c["connections"].as_object().into_iter().flatten() {
            if c["port_directions"][port] == "input" {
                read.extend(bits.as_array().into_iter().flatten().filter_map(net));
            }
        }
    }
    let mut gone = taken;
    gone.extend(
        copied.into_iter().filter(|ff| bit_of(&cells[ff], "Q").and_then(net).is_none_or(|q| !read.contains(&q))),
    );
    for ff in &gone {
        cells.remove(ff);
    }
    packing.flip_flops_removed = gone.len();
    Ok(packing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ff(d: u64, q: u64) -> Value {
        json!({"type": "TRELLIS_FF", "parameters": {"CEMUX": "1 ", "CLKMUX": "CLK", "GSR": "DISABLED", "LSRMUX": "LSR", "REGSET": "RESET"},
               "port_directions": {"CE": "input", "CLK": "input", "DI": "input", "LSR": "input", "Q": "output"},
               "connections": {"CLK": [2], "DI": [d], "LSR": ["0"], "Q": [q]}})
    }

    /// `a_r`, `b_r` (a_r also read by a LUT) → MULT18X18D → `p_r`, `p_r` read by a LUT.
    fn netlist(p_fanout: bool) -> Value {
        let mut cells = Map::new();
        cells.insert("a_r".into(), ff(10, 11));
        cells.insert("b_r".into(), ff(20, 21));
        cells.insert("p_r".into(), ff(30, 31));
        cells.insert(
            "mul".into(),
            json!({"type": "MULT18X18D", "parameters": {},
                   "port_directions": {"A0": "input", "A1": "input", "B0": "input", "SIGNEDA": "input", "P0": "output", "P1": "output"},
                   "connections": {"A0": [11], "A1": ["0"], "B0": [21], "SIGNEDA": ["1"], "P0": [30], "P1": [40]}}),
        );
        cells.insert(
            "lut".into(),
            json!({"type": "LUT4", "parameters": {}, "port_directions": {"A": "input", "B": "input", "Z": "output"},
                   "connections": {"A": [11], "B": [if p_fanout { 30 } else { 31 }], "Z": [50]}}),
        );
        json!({"modules": {"top": {"ports": {"z": {"direction": "output", "bits": [50]}}, "cells": cells}}})
    }

    #[test]
    fn registers_fold_into_the_multiplier() {
        let mut n = netlist(false);
        let p = pack(&mut n, "top").unwrap();
        assert_eq!(
            p,
            Packing {
                multipliers: 1,
                input_registers: 1,
                output_registers: 1,
                flip_flops_removed: 2,
                ..Packing::default()
            }
        );
        let cells = &n["modules"]["top"]["cells"];
        let mul = &cells["mul"];
        // A and B read the flip-flops' inputs; the product drives p_r's output net.
        assert_eq!(mul["connections"]["A0"], json!([10]));
        assert_eq!(mul["connections"]["B0"], json!([20]));
        assert_eq!(mul["connections"]["P0"], json!([31]));
        assert_eq!(mul["connections"]["P1"], json!([40]));
        assert_eq!(mul["connections"]["CLK0"], json!([2]));
        for reg in ["REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"] {
            assert_eq!(mul["parameters"][reg], "CLK0", "{reg}");
        }
        // a_r stays for the LUT that reads it; b_r and p_r are folded away.
        assert!(cells.get("a_r").is_some());
        assert!(cells.get("b_r").is_none() && cells.get("p_r").is_none());
    }

    #[test]
    fn a_product_read_elsewhere_keeps_its_register_in_the_fabric() {
        let mut n = netlist(true);
        let p = pack(&mut n, "top").unwrap();
        assert_eq!((p.input_registers, p.output_registers), (1, 0));
        let cells = &n["modules"]["top"]["cells"];
        assert_eq!(cells["mul"]["connections"]["P0"], json!([30]));
        assert!(cells["mul"]["parameters"].get("REG_OUTPUT_CLK").is_none());
        assert!(cells.get("p_r").is_some());
    }

    #[test]
    fn a_reset_register_with_an_enable_stays_outside_and_an_enable_comes_along() {
        let mut n = netlist(false);
        n["modules"]["top"]["cells"]["b_r"]["connections"]["LSR"] = json!([60]);
        n["modules"]["top"]["cells"]["b_r"]["parameters"]["CEMUX"] = json!("CE");
        n["modules"]["top"]["cells"]["b_r"]["connections"]["CE"] = json!([63]);
        n["modules"]["top"]["cells"]["p_r"]["parameters"]["CEMUX"] = json!("CE");
        n["modules"]["top"]["cells"]["p_r"]["connections"]["CE"] = json!([61]);
        let p = pack(&mut n, "top").unwrap();
        assert_eq!((p.input_registers, p.output_registers, p.flip_flops_removed), (0, 1, 1));
        let mul = &n["modules"]["top"]["cells"]["mul"];
        assert_eq!(mul["connections"]["A0"], json!([11]), "b_r resets, so neither input register moves");
        assert_eq!(mul["connections"]["CE2"], json!([61]));
        assert_eq!(mul["parameters"]["REG_OUTPUT_CE"], "CE2");
        assert!(mul["parameters"].get("REG_INPUTA_CLK").is_none());
    }

    #[test]
    fn a_register_that_loads_every_cycle_brings_its_reset_along() {
        let mut n = netlist(false);
        n["modules"]["top"]["cells"]["b_r"]["connections"]["LSR"] = json!([60]);
        n["modules"]["top"]["cells"]["b_r"]["parameters"]["SRMODE"] = json!("LSR_OVER_CE");
        let p = pack(&mut n, "top").unwrap();
        assert_eq!((p.input_registers, p.output_registers), (1, 1));
        let mul = &n["modules"]["top"]["cells"]["mul"];
        assert_eq!(mul["parameters"]["REG_INPUTA_RST"], "RST0", "a_r never resets");
        assert_eq!(mul["parameters"]["REG_INPUTB_RST"], "RST2");
        assert_eq!(mul["connections"]["RST2"], json!([60]));
        assert_eq!(mul["connections"]["RST0"], json!(["0"]));
        assert_eq!(mul["parameters"]["RESETMODE"], "SYNC");
        // An asynchronous reset does not fold.
        let mut n = netlist(false);
        n["modules"]["top"]["cells"]["b_r"]["connections"]["LSR"] = json!([60]);
        n["modules"]["top"]["cells"]["b_r"]["parameters"]["SRMODE"] = json!("ASYNC");
        assert_eq!(pack(&mut n, "top").unwrap().input_registers, 0);
    }

    #[test]
    fn an_inverted_enable_reaches_the_block_through_one_inverter() {
        let mut n = netlist(false);
        for r in ["a_r", "b_r"] {
            n["modules"]["top"]["cells"][r]["parameters"]["CEMUX"] = json!("INV");
            n["modules"]["top"]["cells"][r]["connections"]["CE"] = json!([62]);
        }
        let p = pack(&mut n, "top").unwrap();
        assert_eq!((p.input_registers, p.output_registers), (1, 1));
        let cells = &n["modules"]["top"]["cells"];
        let mul = &cells["mul"];
        let ce0 = mul["connections"]["CE0"][0].as_u64().expect("a net");
        assert_eq!(mul["connections"]["CE1"], json!([ce0]), "A and B share the one inverter");
        assert!(ce0 > 62, "a new net");
        let inverters: Vec<&Value> = cells.as_object().unwrap().values().filter(|c| c["type"] == "LUT4").collect();
        assert_eq!(inverters.len(), 2, "the design's LUT and one inverter");
        let inv = inverters.iter().find(|c| c["connections"]["Z"] == json!([ce0])).expect("the inverter drives CE0");
        assert_eq!(inv["connections"]["A"], json!([62]));
        assert_eq!(inv["parameters"]["INIT"], "0101010101010101");
        // The output register loads every cycle: its enable is the constant.
        assert_eq!(mul["connections"]["CE2"], json!(["1"]));
    }

    #[test]
    fn a_block_ram_takes_the_register_after_its_read_port() {
        let mut enabled = ff(30, 31);
        enabled["parameters"]["CEMUX"] = json!("CE");
        enabled["connections"]["CE"] = json!([70]);
        let ram = |dob1: u64| {
            json!({"type": "DP16KD", "parameters": {"CLKAMUX": "CLKA", "CLKBMUX": "CLKB", "REGMODE_A": "NOREG", "REGMODE_B": "NOREG"},
                   "port_directions": {"CLKA": "input", "CLKB": "input", "DOA0": "output", "DOB0": "output", "DOB1": "output"},
                   "connections": {"CLKA": [2], "CLKB": [2], "DOA0": [80], "DOB0": [30], "DOB1": [dob1]}})
        };
        let lut = json!({"type": "LUT4", "parameters": {}, "port_directions": {"A": "input", "Z": "output"},
                         "connections": {"A": [31], "Z": [50]}});
        let design = |dob1: u64, extra: Option<Value>| {
            let mut cells = Map::new();
            cells.insert("ram".into(), ram(dob1));
            cells.insert("r".into(), enabled.clone());
            cells.insert("lut".into(), lut.clone());
            if let Some(c) = extra {
                cells.insert("other".into(), c);
            }
            json!({"modules": {"top": {"ports": {"z": {"direction": "output", "bits": [50]}}, "cells": cells}}})
        };
        let mut n = design(90, None);
        let p = pack(&mut n, "top").unwrap();
        assert_eq!((p.block_rams, p.ram_output_registers, p.flip_flops_removed), (1, 1, 1));
        let r = &n["modules"]["top"]["cells"]["ram"];
        assert_eq!(r["connections"]["DOB0"], json!([31]));
        assert_eq!(r["connections"]["OCEB"], json!([70]));
        assert_eq!(r["parameters"]["REGMODE_B"], "OUTREG");
        assert_eq!(r["parameters"]["REGMODE_A"], "NOREG", "port A's data is not read");
        // A read bit that feeds logic directly keeps the RAM unregistered.
        let mut n = design(30, Some(lut.clone()));
        n["modules"]["top"]["cells"]["other"]["connections"]["A"] = json!([30]);
        let p = pack(&mut n, "top").unwrap();
        assert_eq!((p.ram_output_registers, p.flip_flops_removed), (0, 0));
    }
}
