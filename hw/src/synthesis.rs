//! What a synthesis tool reads of an exported unit.
//!
//! Some blocks carry a second form for Verilator only (`` `ifdef VERILATOR
//! … `else … `endif ``, `` `ifndef VERILATOR … `else … `endif ``): the same
//! registers written so that its model runs faster (docs/simulators.md).
//! yosys does not define `VERILATOR`, so a change to those forms leaves the
//! netlist as it was, provided every token yosys reads keeps its line and
//! column (yosys names cells by source position, and nextpnr's placement
//! follows the names). [`synthesis_text`] is the text with exactly that
//! information: caches of synthesis and place-and-route results are keyed by
//! it, so a faster simulation form does not discard a measured clock.

/// `verilog` with its Verilator-only text (the `VERILATOR` directives and
/// the branches that yosys skips) turned into spaces, line breaks kept, and
/// the trailing blanks of each line that had some removed: two exports give
/// the same text exactly when yosys reads the same tokens at the same
/// positions, and an export without Verilator forms is its own synthesis
/// text. A text whose `VERILATOR` directives do not nest (an `` `elsif ``,
/// an `` `else `` or `` `endif `` without its `` `ifdef ``, an `` `ifdef ``
/// left open) is returned as it is: no branch of it is dropped.
pub fn synthesis_text(verilog: &str) -> String {
    let Some(blanked) = blank_verilator_branches(verilog) else { return verilog.to_string() };
    let lines: Vec<&str> = verilog
        .split('\n')
        .zip(blanked.split('\n'))
        .map(|(was, now)| if was == now { now } else { now.trim_end() })
        .collect();
    lines.join("\n")
}

/// One open `` `ifdef ``/`` `ifndef ``: on `VERILATOR`, whether synthesis
/// reads its current branch; on any other macro, `None` (its text and
/// directives stay: which branch a tool reads there is not ours to know).
type Frame = Option<bool>;

fn blank_verilator_branches(verilog: &str) -> Option<String> {
    let mut out = String::with_capacity(verilog.len());
    let mut frames: Vec<Frame> = Vec::new();
    let reading = |frames: &[Frame]| frames.iter().all(|f| f.unwrap_or(true));
    let mut rest = verilog;
    while let Some(at) = rest.find('`') {
        let (before, from) = rest.split_at(at);
        push(&mut out, before, reading(&frames));
        let word_len = from[1..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(from.len(), |n| n + 1);
        let (directive, after) = from.split_at(word_len);
        // The macro a conditional names, after its blanks.
        let macro_name = || {
            let name = after.trim_start_matches([' ', '\t']);
            let len = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(name.len());
            (&name[..len], after.len() - name.len() + len)
        };
        let mut taken = directive.len();
        let verilator = match directive {
            "`ifdef" | "`ifndef" => {
                let (name, len) = macro_name();
                let frame = (name == "VERILATOR").then_some(directive == "`ifndef");
                if frame.is_some() {
                    taken += len;
                }
                frames.push(frame);
                frame.is_some()
            }
            "`elsif" => match frames.last()? {
                Some(_) => return None,
                None => false,
            },
            "`else" => match frames.last_mut()? {
                Some(synth) => {
                    *synth = !*synth;
                    true
                }
                None => false,
            },
            "`endif" => frames.pop()?.is_some(),
            _ => false,
        };
        // A VERILATOR directive is blanked like the branch it opens or closes.
        push(&mut out, &from[..taken], !verilator && reading(&frames));
        rest = &from[taken..];
    }
    push(&mut out, rest, reading(&frames));
    frames.is_empty().then_some(out)
}

/// `text` as it is when synthesis reads it, else as blanks with its line breaks.
fn push(out: &mut String, text: &str, read: bool) {
    if read {
        out.push_str(text);
    } else {
        out.extend(text.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
    }
}

#[cfg(test)]
mod tests {
    use super::synthesis_text;

    #[test]
    fn verilator_forms_vanish_and_positions_stay() {
        let v = "reg a; `ifdef VERILATOR fast(a); `else\nslow(a); `endif\nwire b = a;";
        assert_eq!(synthesis_text(v), "reg a;\nslow(a);\nwire b = a;");
        // A change to the Verilator form alone: the same text.
        let faster = "reg a; `ifdef VERILATOR faster(a, b); `else\nslow(a); `endif\nwire b = a;";
        assert_eq!(synthesis_text(faster), synthesis_text(v));
        // A token synthesis reads moved a column: another text.
        let moved = "reg a; `ifdef VERILATOR fast(a); `else\n slow(a); `endif\nwire b = a;";
        assert_ne!(synthesis_text(moved), synthesis_text(v));
        // Lines without Verilator text keep even their trailing blanks.
        assert_eq!(synthesis_text("a  \nb `ifdef VERILATOR c `endif\n"), "a  \nb\n");
        // A Verilator form in the middle of a line keeps what follows in its column.
        let mid = "x `ifdef VERILATOR y `endif z";
        assert_eq!(synthesis_text(mid), format!("x{}z", " ".repeat(27)));
    }

    #[test]
    fn ifndef_nesting_and_other_macros() {
        let v = "a `ifndef VERILATOR\nb `ifdef VERILATOR c `else d `endif\ne `else f `endif\ng";
        assert_eq!(synthesis_text(v), format!("a\nb{}d\ne\ng", " ".repeat(26)));
        // Another macro's conditional is left to the tool, Verilator's inside it still goes.
        let other = "`ifdef SIM x `ifdef VERILATOR y `endif `else z `endif";
        assert_eq!(synthesis_text(other), format!("`ifdef SIM x{}`else z `endif", " ".repeat(27)));
        // A directive naming a longer macro is not VERILATOR's.
        assert_eq!(synthesis_text("`ifdef VERILATOR_X a `endif"), "`ifdef VERILATOR_X a `endif");
    }

    #[test]
    fn unbalanced_directives_keep_every_branch() {
        for v in ["a `ifdef VERILATOR b", "a `endif b", "a `else b", "`ifdef VERILATOR a `elsif X b `endif"] {
            assert_eq!(synthesis_text(v), v, "{v}");
        }
    }
}
