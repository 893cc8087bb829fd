//! Every endpoint's slack from the SDF nextpnr writes (`--sdf`), so that one
//! place-and-route shows all the paths that miss the clock target, not only
//! the single worst one its report names.
//!
//! The SDF holds the routed design's delays: per cell, `IOPATH in out` delays
//! (a register's clock-to-out among them) and `SETUPHOLD` checks (setup
//! first); in the top cell, `INTERCONNECT driver/port sink/port` delays. The
//! analysis takes every maximum delay, starts paths at clock-to-out arcs,
//! finds the latest arrival at every pin in topological order, and gives each
//! setup check the slack `period − setup − arrival`: the worst of them is
//! nextpnr's own Fmax. Failing endpoints are grouped by the rust-hdl fields
//! (see [`field_path`]) of the register their worst path starts at and the
//! one it ends at, since a field's bits fail together.
use super::field_path;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

/// Failing endpoints with the same start and end field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathGroup {
    /// The field of the register (or RAM, multiplier) the worst path starts at.
    pub from: String,
    /// The field of the register the endpoints belong to.
    pub to: String,
    /// The worst endpoint's slack (negative: it fails).
    pub worst_slack_ns: f64,
    /// Failing endpoints (register input pins) in the group.
    pub endpoints: usize,
    /// The worst path's clock-to-out, cell delays and setup.
    pub logic_ns: f64,
    /// The worst path's interconnect delays.
    pub routing_ns: f64,
    /// The largest fan-out (sinks) of a net on the worst path: a net to a
    /// hundred registers spread over the die costs 1.5–2 ns a hop on ECP5,
    /// where nextpnr builds no buffer tree (docs/timing.md), so a path with a
    /// wide net wants its driver copied or its decision registered nearer.
    #[serde(default)]
    pub max_fanout: usize,
    /// Nets on the worst path (interconnect with a delay: a carry chain's
    /// own hops have none) and the slowest of them. An ECP5 net costs about
    /// 0.6 ns within two tiles and 2–5 ns across a fifth of the die
    /// (docs/timing.md): most failing paths have one such net, which a
    /// register at its far end gives a cycle of its own, rather than too
    /// many LUT levels.
    /// 0 in groups analyzed before they were recorded.
    #[serde(default)]
    pub nets: usize,
    #[serde(default)]
    pub longest_net_ns: f64,
    /// The fields the worst path's cells stand for, in order, each once per run.
    pub fields: Vec<String>,
}

impl PathGroup {
    pub fn route(&self) -> String {
        route(&self.from, &self.to)
    }
}

/// `shell.ar_valid → b_occ`, or one field when the paths start and end in it.
fn route(from: &str, to: &str) -> String {
    if from == to {
        from.to_string()
    } else {
        format!("{from} → {to}")
    }
}

/// One placement's endpoints against the clock target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailingPaths {
    pub target_mhz: f64,
    /// Setup checks reached from a clocked start.
    pub endpoints: usize,
    /// Those with negative slack.
    pub failing: usize,
    /// The worst slack of all endpoints: `1000/target − 1000/Fmax`.
    pub worst_slack_ns: f64,
    /// Worst slack first.
    pub groups: Vec<PathGroup>,
}

impl FailingPaths {
    /// The clock every endpoint meets: the period less the worst slack
    /// (nextpnr's Fmax to the picosecond).
    pub fn fmax_mhz(&self) -> f64 {
        1000.0 / (1000.0 / self.target_mhz - self.worst_slack_ns)
    }

    /// `225 of 21464 endpoints fail 150 MHz in 37 groups`.
    pub fn summary(&self) -> String {
        if self.failing == 0 {
            return format!(
                "all {} endpoints meet {:.0} MHz (worst slack {:+.2} ns)",
                self.endpoints, self.target_mhz, self.worst_slack_ns
            );
        }
        let n = self.groups.len();
        format!(
            "{} of {} endpoints fail {:.0} MHz in {n} group{}",
            self.failing,
            self.endpoints,
            self.target_mhz,
            if n == 1 { "" } else { "s" }
        )
    }
}

/// The part of an SDF the analysis reads, delays in ps.
#[derive(Default)]
struct Graph {
    ids: HashMap<String, usize>,
    names: Vec<String>,
    /// Per pin: (successor, delay, whether a cell arc rather than routing).
    succ: Vec<Vec<(usize, f64, bool)>>,
    /// Per pin: its clock-to-out delay when a clocked arc drives it.
    clock_to_out: Vec<Option<f64>>,
    /// Per pin: its setup time when it is a setup check's data pin.
    setup: Vec<Option<f64>>,
}

impl Graph {
    fn pin(&mut self, name: String) -> usize {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len();
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        self.succ.push(Vec::new());
        self.clock_to_out.push(None);
        self.setup.push(None);
        id
    }
}

/// ECP5 clock inputs (`CLK` of a flip-flop, `CLK0`–`CLK3` of a multiplier,
/// `CLKA`/`CLKB` of a block RAM, `WCK` of a distributed RAM): an arc from
/// one is clock-to-out, where a path starts.
fn is_clock(port: &str) -> bool {
    port.starts_with("CLK") || port == "WCK"
}

/// Static timing of an SDF against each of `targets_mhz`: every endpoint's
/// slack and the failing ones grouped, one [`FailingPaths`] per target (the
/// SDF is read and its arrivals found once).
pub fn analyze(sdf: &str, targets_mhz: &[f64]) -> Result<Vec<FailingPaths>> {
    let g = parse(sdf)?;
    let n = g.names.len();
    // Latest arrival per pin and the arc it came through, in topological order.
    let mut indeg = vec![0usize; n];
    for s in &g.succ {
        for &(b, _, _) in s {
            indeg[b] += 1;
        }
    }
    let mut arrival: Vec<Option<f64>> = g.clock_to_out.clone();
    let mut pred: Vec<Option<(usize, f64, bool)>> = vec![None; n];
    let mut queue: VecDeque<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    while let Some(a) = queue.pop_front() {
        for &(b, d, logic) in &g.succ[a] {
            if let Some(t) = arrival[a].map(|t| t + d) {
                if arrival[b].is_none_or(|old| t > old) {
                    arrival[b] = Some(t);
                    pred[b] = Some((a, d, logic));
                }
            }
            indeg[b] -= 1;
            if indeg[b] == 0 {
                queue.push_back(b);
            }
        }
    }
    // Each endpoint's setup plus arrival, the latest first.
    let mut required: Vec<(f64, usize)> = (0..n).filter_map(|i| Some((g.setup[i]? + arrival[i]?, i))).collect();
    required.sort_by(|a, b| b.0.total_cmp(&a.0));
    if required.is_empty() {
        bail!("the SDF has no setup check reached from a clocked cell");
    }
    Ok(targets_mhz.iter().map(|&target| failing_at(&g, &pred, &required, target)).collect())
}

/// The endpoints of `required` (setup plus arrival, the latest first) that
/// miss `target_mhz`, grouped, with each group's worst path traced back
/// through `pred`.
fn failing_at(g: &Graph, pred: &[Option<(usize, f64, bool)>], required: &[(f64, usize)], target: f64) -> FailingPaths {
    let period = 1e6 / target;
    let cell = |pin: usize| g.names[pin].rsplit_once('/').map_or(g.names[pin].as_str(), |(c, _)| c);
    let field = |pin: usize| field_path(cell(pin)).unwrap_or_else(|| cell(pin).to_string());
    let failing: Vec<(f64, usize)> =
        required.iter().map(|&(r, end)| (period - r, end)).take_while(|s| s.0 < 0.0).collect();
    let fanout = |pin: usize| g.succ[pin].iter().filter(|&&(_, _, logic)| !logic).count();
    let mut groups: Vec<PathGroup> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    // Worst first, so a group's first endpoint is its worst.
    for &(slack, end) in &failing {
        let mut path = vec![end];
        let (mut logic, mut routing, mut max_fanout) = (g.setup[end].unwrap_or(0.0), 0.0, 0);
        let (mut nets, mut longest) = (0, 0.0f64);
        while let Some((p, d, is_logic)) = pred[*path.last().expect("a path has its endpoint")] {
            *(if is_logic { &mut logic } else { &mut routing }) += d;
            if !is_logic {
                max_fanout = max_fanout.max(fanout(p));
                if d > 0.0 {
                    nets += 1;
                    longest = longest.max(d);
                }
            }
            path.push(p);
        }
        let start = *path.last().expect("a path has its start");
        logic += g.clock_to_out[start].unwrap_or(0.0);
        let key = (field(start), field(end));
        if let Some(&i) = index.get(&key) {
            groups[i].endpoints += 1;
            continue;
        }
        let mut fields: Vec<String> = Vec::new();
        for f in path.iter().rev().filter_map(|&p| field_path(cell(p))) {
            if fields.last() != Some(&f) {
                fields.push(f);
            }
        }
        index.insert(key.clone(), groups.len());
        groups.push(PathGroup {
            from: key.0,
            to: key.1,
            worst_slack_ns: slack / 1000.0,
            endpoints: 1,
            logic_ns: logic / 1000.0,
            routing_ns: routing / 1000.0,
            max_fanout,
            nets,
            longest_net_ns: longest / 1000.0,
            fields,
        });
    }
    FailingPaths {
        target_mhz: target,
        endpoints: required.len(),
        failing: failing.len(),
        worst_slack_ns: (period - required[0].0) / 1000.0,
        groups,
    }
}

/// A group of paths that misses a clock above the target in several
/// placement seeds of one netlist (see [`recurring`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecurringGroup {
    pub from: String,
    pub to: String,
    /// The seeds in which some endpoint of the group misses the clock.
    pub seeds: Vec<u32>,
    /// The worst slack of the group over those seeds.
    pub worst_slack_ns: f64,
    /// The most endpoints the group has in one seed.
    pub endpoints: usize,
}

impl RecurringGroup {
    pub fn route(&self) -> String {
        route(&self.from, &self.to)
    }
}

/// The groups that miss `target_mhz` over the seeds analyzed at it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recurring {
    pub target_mhz: f64,
    /// The seeds whose endpoints were analyzed at `target_mhz`.
    pub seeds: Vec<u32>,
    /// In the most seeds first, then worst slack first.
    pub groups: Vec<RecurringGroup>,
}

/// The groups of the seeds' [`FailingPaths`] at one clock (above the
/// target), merged by start and end field. Nextpnr's worst path moves from
/// one group to another with the seed (±10 % in Fmax on these units), so a
/// fix for one seed's worst group moves the figure little; the groups that
/// miss a clock somewhat above the target in most seeds are the ones a
/// change should take out. `None` without seeds.
pub fn recurring(seeds: &[(u32, FailingPaths)]) -> Option<Recurring> {
    let target_mhz = seeds.first()?.1.target_mhz;
    let mut groups: Vec<RecurringGroup> = Vec::new();
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    for (seed, f) in seeds {
        for g in &f.groups {
            let i = *index.entry((&g.from, &g.to)).or_insert_with(|| {
                groups.push(RecurringGroup {
                    from: g.from.clone(),
                    to: g.to.clone(),
                    seeds: Vec::new(),
                    worst_slack_ns: 0.0,
                    endpoints: 0,
                });
                groups.len() - 1
            });
            let r = &mut groups[i];
            r.seeds.push(*seed);
            r.worst_slack_ns = r.worst_slack_ns.min(g.worst_slack_ns);
            r.endpoints = r.endpoints.max(g.endpoints);
        }
    }
    groups.sort_by(|a, b| b.seeds.len().cmp(&a.seeds.len()).then(a.worst_slack_ns.total_cmp(&b.worst_slack_ns)));
    Some(Recurring { target_mhz, seeds: seeds.iter().map(|(s, _)| *s).collect(), groups })
}

/// A token of the SDF's S-expressions; atoms have their `\` escapes removed.
enum Tok<'a> {
    Open,
    Close,
    Atom(Cow<'a, str>),
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    /// The line `pos` is on, for errors.
    line: usize,
}

impl<'a> Lexer<'a> {
    fn next(&mut self) -> Result<Option<Tok<'a>>> {
        let b = self.text.as_bytes();
        while self.pos < b.len() && b[self.pos].is_ascii_whitespace() {
            self.line += usize::from(b[self.pos] == b'\n');
            self.pos += 1;
        }
        let Some(&c) = b.get(self.pos) else { return Ok(None) };
        let start = self.pos;
        self.pos += 1;
        Ok(Some(match c {
            b'(' => Tok::Open,
            b')' => Tok::Close,
            b'"' => {
                let len =
                    self.text[self.pos..].find('"').with_context(|| format!("line {}: unclosed string", self.line))?;
                self.pos += len + 1;
                Tok::Atom(Cow::Borrowed(&self.text[start + 1..self.pos - 1]))
            }
            _ => {
                let mut escaped = c == b'\\';
                if escaped {
                    self.pos += 1;
                }
                while self.pos < b.len() && !b[self.pos].is_ascii_whitespace() && !matches!(b[self.pos], b'(' | b')') {
                    if b[self.pos] == b'\\' {
                        escaped = true;
                        self.pos += 1;
                    }
                    self.pos += 1;
                }
                self.pos = self.pos.min(b.len());
                let raw = &self.text[start..self.pos];
                Tok::Atom(if escaped { Cow::Owned(unescape(raw)) } else { Cow::Borrowed(raw) })
            }
        }))
    }
}

/// `unit.b_occ\$q` → `unit.b_occ$q`.
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' { chars.next().unwrap_or(c) } else { c });
    }
    out
}

/// A parsed entry (an `IOPATH`, an `INTERCONNECT`, ...): atoms and lists.
enum Sx {
    Atom(String),
    List(Vec<Sx>),
}

/// The rest of a list whose `(` and keyword were read.
fn read_list(lex: &mut Lexer) -> Result<Vec<Sx>> {
    let mut items = Vec::new();
    loop {
        match lex.next()? {
            None => bail!("line {}: the SDF ends inside a list", lex.line),
            Some(Tok::Close) => return Ok(items),
            Some(Tok::Open) => items.push(Sx::List(read_list(lex)?)),
            Some(Tok::Atom(a)) => items.push(Sx::Atom(a.into_owned())),
        }
    }
}

/// A port: `CLK`, or an edge `(posedge CLK)`.
fn port(sx: &Sx) -> Option<&str> {
    match sx {
        Sx::Atom(a) => Some(a),
        Sx::List(l) => match l.last()? {
            Sx::Atom(a) => Some(a),
            Sx::List(_) => None,
        },
    }
}

/// The maximum of a delay `(min:typ:max)` (or `(value)`, or `()` for none).
fn max_delay(sx: &Sx) -> Option<f64> {
    let Sx::List(l) = sx else { return None };
    let Some(Sx::Atom(a)) = l.first() else { return l.is_empty().then_some(0.0) };
    let last = a.split(':').rev().find(|v| !v.is_empty()).unwrap_or("0");
    last.parse().ok()
}

/// `(TIMESCALE 1ps)` or `(TIMESCALE 1 ns)` as picoseconds per unit.
fn timescale(items: &[Sx]) -> Option<f64> {
    let text: String = items.iter().map(|s| if let Sx::Atom(a) = s { a.as_str() } else { "" }).collect();
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let unit = match &text[split..] {
        "ps" => 1.0,
        "ns" => 1e3,
        "us" => 1e6,
        _ => return None,
    };
    Some(text[..split].parse::<f64>().ok()? * unit)
}

/// The delays, clock-to-out arcs and setup checks of an SDF.
fn parse(sdf: &str) -> Result<Graph> {
    let mut lex = Lexer { text: sdf, pos: 0, line: 1 };
    let mut g = Graph::default();
    let mut depth = 0usize;
    let (mut instance, mut scale) = (String::new(), 1.0);
    let mut seen_delayfile = false;
    while let Some(tok) = lex.next()? {
        let keyword = match tok {
            Tok::Open => match lex.next()? {
                Some(Tok::Atom(k)) => k,
                _ => bail!("line {}: a list without a keyword", lex.line),
            },
            Tok::Close if depth > 0 => {
                depth -= 1;
                continue;
            }
            Tok::Close => bail!("line {}: an unmatched `)`", lex.line),
            Tok::Atom(_) => continue,
        };
        seen_delayfile |= depth == 0 && keyword == "DELAYFILE";
        if !seen_delayfile {
            bail!("not an SDF file (no DELAYFILE at the top)");
        }
        let line = lex.line;
        let bad = || format!("line {line}: a malformed {keyword} entry");
        match keyword.as_ref() {
            "TIMESCALE" => scale = timescale(&read_list(&mut lex)?).with_context(bad)?,
            "INSTANCE" => {
                let items = read_list(&mut lex)?;
                instance = items.first().and_then(port).unwrap_or_default().to_string();
            }
            "INTERCONNECT" | "IOPATH" => {
                let items = read_list(&mut lex)?;
                let [from, to, rise, ..] = items.as_slice() else { bail!(bad()) };
                let (from, to) = (port(from).with_context(bad)?, port(to).with_context(bad)?);
                let delay = max_delay(rise).with_context(bad)? * scale;
                let fall = items.get(3).and_then(max_delay).unwrap_or(0.0) * scale;
                let delay = delay.max(fall);
                if keyword == "INTERCONNECT" {
                    let (a, b) = (g.pin(from.to_string()), g.pin(to.to_string()));
                    g.succ[a].push((b, delay, false));
                } else if is_clock(from) {
                    let q = g.pin(format!("{instance}/{to}"));
                    g.clock_to_out[q] = Some(g.clock_to_out[q].map_or(delay, |d: f64| d.max(delay)));
                } else {
                    let (a, b) = (g.pin(format!("{instance}/{from}")), g.pin(format!("{instance}/{to}")));
                    g.succ[a].push((b, delay, true));
                }
            }
            "SETUPHOLD" => {
                let items = read_list(&mut lex)?;
                let [data, _clock, setup, ..] = items.as_slice() else { bail!(bad()) };
                let setup = max_delay(setup).with_context(bad)? * scale;
                let d = g.pin(format!("{instance}/{}", port(data).with_context(bad)?));
                g.setup[d] = Some(g.setup[d].map_or(setup, |s: f64| s.max(setup)));
            }
            _ => depth += 1,
        }
    }
    if depth > 0 {
        bail!("the SDF ends inside a list");
    }
    if !seen_delayfile {
        bail!("not an SDF file (empty)");
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two registers, `a` and `b`, a LUT between them; `a` also feeds
    /// itself. At 150 MHz (6667 ps): a → LUT → b.DI arrives at
    /// 500 + 1000 + 300 + 5000 = 6800 ps, setup 100: slack −233 ps; a's own
    /// loop a.Q → a.DI arrives at 500 + 200, setup 100: slack 5867 ps.
    const SDF: &str = r#"(DELAYFILE
  (SDFVERSION "3.0")
  (DIVIDER /)
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT unit.a\$q_TRELLIS_FF_Q/Q unit.sum_LUT4_Z/A (0:900:1000) (0:900:1000))
        (INTERCONNECT unit.sum_LUT4_Z/F unit.lanes\$1.b_TRELLIS_FF_Q/DI (0:4000:5000) (0:4000:5000))
        (INTERCONNECT unit.a\$q_TRELLIS_FF_Q/Q unit.a\$q_TRELLIS_FF_Q/DI (200:200:200) (200:200:200))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE unit.a\$q_TRELLIS_FF_Q)
    (DELAY (ABSOLUTE (IOPATH CLK Q (400:450:500) (400:450:500))))
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:100) (0:0:0))
      (SETUPHOLD (negedge DI) (posedge CLK) (0:0:100) (0:0:0))
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE unit.sum_LUT4_Z)
    (DELAY (ABSOLUTE (IOPATH A F (200:250:300) (200:250:300))))
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE unit.lanes\$1.b_TRELLIS_FF_Q)
    (DELAY (ABSOLUTE (IOPATH CLK Q (400:450:500) (400:450:500))))
    (TIMINGCHECK (SETUPHOLD (posedge DI) (posedge CLK) (0:0:100) (0:0:0)))
  )
)
"#;

    #[test]
    fn a_hand_written_sdf_gives_exact_slacks_and_groups() {
        let [f, at140]: [FailingPaths; 2] = analyze(SDF, &[150.0, 140.0]).unwrap().try_into().unwrap();
        assert_eq!((f.endpoints, f.failing), (2, 1));
        let worst = 1e6 / 150.0 - 100.0 - 6800.0;
        assert!((f.worst_slack_ns * 1000.0 - worst).abs() < 1e-9, "{f:?}");
        assert_eq!(f.groups.len(), 1);
        let g = &f.groups[0];
        assert_eq!((g.from.as_str(), g.to.as_str(), g.endpoints), ("a", "lanes[1].b", 1));
        assert_eq!(g.worst_slack_ns, f.worst_slack_ns);
        // Clock-to-out, the LUT and setup are logic; the two nets routing.
        assert!((g.logic_ns - 0.9).abs() < 1e-9 && (g.routing_ns - 6.0).abs() < 1e-9, "{g:?}");
        assert_eq!(g.fields, ["a", "sum", "lanes[1].b"]);
        // a.Q has two sinks (the LUT and its own DI), the LUT one.
        assert_eq!(g.max_fanout, 2);
        // Two nets, the LUT's output the slower.
        assert_eq!(g.nets, 2);
        assert!((g.longest_net_ns - 5.0).abs() < 1e-9, "{g:?}");
        assert_eq!(g.route(), "a → lanes[1].b");
        assert_eq!(f.summary(), "1 of 2 endpoints fail 150 MHz in 1 group");
        // At 140 MHz (7143 ps) both meet their setup.
        let f = at140;
        assert_eq!((f.endpoints, f.failing, f.groups.len()), (2, 0, 0));
        assert!(f.summary().starts_with("all 2 endpoints meet 140 MHz (worst slack +0.24 ns)"), "{}", f.summary());
        // At 1.3 GHz (769 ps) the register's loop onto itself (500 + 200 + 100 ps) fails too.
        let [f]: [FailingPaths; 1] = analyze(SDF, &[1300.0]).unwrap().try_into().unwrap();
        assert_eq!((f.failing, f.groups.len()), (2, 2));
        assert_eq!(f.groups[1].route(), "a");
        assert!((f.groups[1].worst_slack_ns - (1e3 / 1300.0 - 0.8)).abs() < 1e-9, "{f:?}");
    }

    /// A seed's groups at a clock: (from, to, worst slack, endpoints).
    fn seed(groups: &[(&str, &str, f64, usize)]) -> FailingPaths {
        let groups = groups
            .iter()
            .map(|&(from, to, worst_slack_ns, endpoints)| PathGroup {
                from: from.into(),
                to: to.into(),
                worst_slack_ns,
                endpoints,
                logic_ns: 1.0,
                routing_ns: 5.0,
                max_fanout: 1,
                nets: 1,
                longest_net_ns: 5.0,
                fields: vec![from.into(), to.into()],
            })
            .collect();
        FailingPaths { target_mhz: 165.0, endpoints: 100, failing: 0, worst_slack_ns: -1.0, groups }
    }

    #[test]
    fn groups_merge_over_seeds_most_seeds_first() {
        let r = recurring(&[
            (1, seed(&[("phase", "go", -0.3, 2), ("acc", "acc", -0.1, 9)])),
            (2, seed(&[("rem", "quo", -0.9, 1), ("acc", "acc", -0.2, 4)])),
            (4, seed(&[("acc", "acc", -0.05, 16), ("phase", "go", -0.4, 1)])),
        ])
        .unwrap();
        assert_eq!((r.target_mhz, r.seeds.as_slice()), (165.0, &[1, 2, 4][..]));
        let got: Vec<_> =
            r.groups.iter().map(|g| (g.route(), g.seeds.clone(), g.worst_slack_ns, g.endpoints)).collect();
        assert_eq!(
            got,
            [
                ("acc".to_string(), vec![1, 2, 4], -0.2, 16),
                ("phase → go".to_string(), vec![1, 4], -0.4, 2),
                ("rem → quo".to_string(), vec![2], -0.9, 1),
            ]
        );
        assert_eq!(recurring(&[]), None);
    }

    #[test]
    fn missing_or_corrupt_sdfs_are_one_line_errors() {
        for (sdf, want) in [
            ("", "not an SDF file"),
            ("(CELL)", "not an SDF file"),
            (&SDF[..SDF.len() / 2], "ends inside a list"),
            ("(DELAYFILE))", "unmatched"),
            ("(DELAYFILE (CELL (INSTANCE x) (DELAY (ABSOLUTE (IOPATH A (1:2:3)))))))", "malformed IOPATH"),
            ("(DELAYFILE (CELL (INSTANCE x) (DELAY (ABSOLUTE (IOPATH A F (a:b:c)))))))", "malformed IOPATH"),
            ("(DELAYFILE (TIMESCALE 1 fortnight))", "malformed TIMESCALE"),
            ("(DELAYFILE (CELL (INSTANCE x)))", "no setup check"),
        ] {
            let err = format!("{:#}", analyze(sdf, &[150.0]).unwrap_err());
            assert!(err.contains(want) && !err.contains('\n'), "{sdf:?}: {err}");
        }
    }
}
