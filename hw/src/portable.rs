//! Makes rust-hdl's Verilog simulate the same in every standard simulator.
//!
//! Two rewrites of rust-hdl's combinational blocks (`docs/simulators.md`):
//!
//! - `always_comb`: rust-hdl writes combinational logic (its `update`
//!   bodies, the links between parent and child signals, and our own custom
//!   blocks) as `always @(*)`. An `always @(*)` block runs only when one of its
//!   inputs changes, so a block whose inputs keep their time-zero value (a
//!   FIFO's `empty` before the first push) never runs in an event-driven
//!   simulator such as Icarus or Vivado's xsim: its outputs stay X and the unit
//!   hangs. IEEE 1800 `always_comb` is the same logic plus one evaluation at
//!   time zero, so the exported file uses it and is SystemVerilog (`.sv`).
//! - `write_once`: rust-hdl assigns a default and then overrides it
//!   (`x = 0; if (c) x = 1;`). In an event-driven simulator each assignment
//!   that changes the value is an event, even when the block ends where it
//!   started, so a block's glitching output wakes a block that reads it, whose
//!   glitching output wakes the first again: parent and child loop forever in
//!   one time step. Each such signal is computed in a block-private shadow and
//!   written once, at the end of the block.
//!
//! Verilator orders blocks statically and sees neither; the exported text is
//! the same logic.

use std::collections::{HashMap, HashSet};

/// File extension of an exported unit: the text uses `always_comb`.
pub const EXTENSION: &str = "sv";

/// Suffix of a signal's shadow in [`write_once`]; rust-hdl never emits `$$`.
const SHADOW: &str = "$$c";

/// rust-hdl's Verilog made portable: `always_comb`, then `write_once`.
pub fn portable(verilog: &str) -> String {
    write_once(&always_comb(verilog))
}

/// rust-hdl's Verilog with every `always @(*)` turned into `always_comb`.
fn always_comb(verilog: &str) -> String {
    verilog.replace("always @(*)", "always_comb")
}

/// Every `always_comb begin … end` block rewritten so that each signal it
/// assigns more than once is computed in a shadow register and assigned to
/// the signal once, at the end of the block.
fn write_once(verilog: &str) -> String {
    let lines: Vec<&str> = verilog.lines().collect();
    let mut out = String::with_capacity(verilog.len() + verilog.len() / 8);
    // Declarations of the current module: name → "reg [signed] [range]".
    let mut regs: Vec<(&str, String)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("module ") {
            regs.clear();
        }
        if let Some(decl) = reg_declaration(line) {
            regs.push(decl);
        }
        let end = (line.trim_end().ends_with("always_comb begin")).then(|| block_end(&lines, i)).flatten();
        let Some(end) = end else {
            out.push_str(line);
            out.push('\n');
            i += 1;
            continue;
        };
        let body = &lines[i + 1..end];
        let indent = &line[..line.len() - line.trim_start().len()];
        let mut writes: HashMap<&str, usize> = HashMap::new();
        for name in body.iter().filter_map(|l| assigned(l)) {
            *writes.entry(name).or_default() += 1;
        }
        let shadowed: Vec<&(&str, String)> =
            regs.iter().filter(|(name, _)| writes.get(name).is_some_and(|&n| n > 1)).collect();
        let names: HashSet<&str> = shadowed.iter().map(|(name, _)| *name).collect();
        for (name, kind) in &shadowed {
            out.push_str(&format!("{indent}{kind} {name}{SHADOW};\n"));
        }
        out.push_str(line);
        out.push('\n');
        for l in body {
            out.push_str(&rename(l, &names));
            out.push('\n');
        }
        for (name, _) in &shadowed {
            out.push_str(&format!("{indent}    {name} = {name}{SHADOW};\n"));
        }
        out.push_str(lines[end]);
        out.push('\n');
        i = end + 1;
    }
    if !verilog.ends_with('\n') {
        out.pop();
    }
    out
}

/// `(name, "reg [signed] [range]")` of a `reg` declaration line (ports included).
fn reg_declaration(line: &str) -> Option<(&str, String)> {
    let decl = line.trim().strip_suffix(';')?;
    let decl = decl.strip_prefix("output ").unwrap_or(decl).trim_start();
    let rest = decl.strip_prefix("reg ")?.trim_start();
    let (signed, rest) = match rest.strip_prefix("signed ") {
        Some(r) => (true, r.trim_start()),
        None => (false, rest),
    };
    let (range, name) = match rest.strip_prefix('[') {
        Some(r) => {
            let close = r.find(']')?;
            (Some(&r[..close]), r[close + 1..].trim())
        }
        None => (None, rest.trim()),
    };
    // Memories (`mem[0:7]`) and initialized registers are not block outputs.
    if name.is_empty() || !name.chars().all(ident_char) {
        return None;
    }
    let mut kind = String::from("reg");
    if signed {
        kind.push_str(" signed");
    }
    if let Some(r) = range {
        kind.push_str(&format!(" [{r}]"));
    }
    Some((name, kind))
}

/// Index of the `end` closing the block opened at `open`: the first later
/// line with the same indentation.
fn block_end(lines: &[&str], open: usize) -> Option<usize> {
    let indent = lines[open].len() - lines[open].trim_start().len();
    lines[open + 1..]
        .iter()
        .position(|l| l.trim_end() == format!("{}end", &lines[open][..indent]))
        .map(|p| open + 1 + p)
}

/// The signal a blocking assignment line `name = …;` writes.
fn assigned(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let name_len = t.find(|c: char| !ident_char(c))?;
    let rest = t[name_len..].trim_start();
    (name_len > 0 && rest.starts_with('=') && !rest.starts_with("==")).then(|| &t[..name_len])
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// `line` with every whole identifier in `shadowed` replaced by its shadow.
/// System functions (`$signed`) and the digits of sized literals (`8'hff`)
/// are not identifiers.
fn rename(line: &str, shadowed: &HashSet<&str>) -> String {
    let mut out = String::with_capacity(line.len() + 16);
    let mut rest = line;
    let mut prev: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        if ident_char(c) && !c.is_ascii_digit() && prev != Some('\'') && c != '$' {
            let len = rest.find(|c: char| !ident_char(c)).unwrap_or(rest.len());
            let word = &rest[..len];
            out.push_str(word);
            if shadowed.contains(word) {
                out.push_str(SHADOW);
            }
            prev = word.chars().last();
            rest = &rest[len..];
        } else if ident_char(c) {
            // A system function, a number or a literal's digits: copy the whole run.
            let len = rest.find(|c: char| !ident_char(c)).unwrap_or(rest.len());
            out.push_str(&rest[..len]);
            prev = rest[..len].chars().last();
            rest = &rest[len..];
        } else {
            out.push(c);
            prev = Some(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn combinational_blocks_become_always_comb() {
        let v = "always @(*) begin\n  y = a;\nend\nalways @(posedge clock) q <= d;\nalways @(*) x$y = z$y;\n";
        let out = super::always_comb(v);
        assert_eq!(out, "always_comb begin\n  y = a;\nend\nalways @(posedge clock) q <= d;\nalways_comb x$y = z$y;\n");
    }

    #[test]
    fn signals_assigned_twice_are_written_once() {
        // The module's ports and declarations, which the rewrite keeps.
        let head = "\
module m(a, y, z);
    input wire [7:0] a;
    output reg [7:0] y;
    output reg signed [3:0] z;
    reg  c$d;
";
        let v = format!(
            "{head}    always_comb begin
        y = 8'h0;
        z = 4'sd1;
        c$d = a[0];
        if (a == 8'hff) begin
            y = a + y;
        end
        z = $signed(y[3:0]);
    end
endmodule
"
        );
        let want = format!(
            "{head}    reg [7:0] y$$c;
    reg signed [3:0] z$$c;
    always_comb begin
        y$$c = 8'h0;
        z$$c = 4'sd1;
        c$d = a[0];
        if (a == 8'hff) begin
            y$$c = a + y$$c;
        end
        z$$c = $signed(y$$c[3:0]);
        y = y$$c;
        z = z$$c;
    end
endmodule
"
        );
        assert_eq!(super::write_once(&v), want);
    }
}
