//! An AXI4 slave memory for the `m_axi_gmem` port.
//!
//! The model is deliberately strict: it checks every request against the
//! rules a Vitis platform's memory path relies on (INCR bursts of full beats,
//! no 4 KiB crossing, payload held until the handshake) and against the
//! buffers the host allocated, so a unit that would hang or corrupt memory on
//! a board fails loudly here. Latency, backpressure and a seeded RNG let tests
//! shake out handshake bugs deterministically.
use crate::SimError;
use ferrite_hw::vitis::{Inputs, Outputs, DATA_WORDS, MAX_DATA_BITS};
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// Storage is allocated in pages of this many bytes on first write.
const PAGE_BITS: u32 = 16;
const PAGE: u64 = 1 << PAGE_BITS;
/// Largest memory the sparse page table supports (64 GiB).
const MAX_SIZE: u64 = 1 << 36;
/// The first buffer starts here, so a null or unprogrammed pointer is never valid.
const ALLOC_BASE: u64 = 4096;
const ALLOC_ALIGN: u64 = 4096;
/// AXI bursts must not cross this boundary.
const AXI_BOUNDARY: u64 = 4096;
/// Write bursts accepted before their data arrives.
const MAX_OUTSTANDING_WRITES: usize = 64;
/// W beats the slave buffers ahead of their AW (AXI lets data lead the address).
const W_BUFFER_BEATS: usize = 512;
const BURST_INCR: u8 = 1;
const RESP_OKAY: u8 = 0;
const RESP_SLVERR: u8 = 2;

/// Timing, backpressure and size of an [`AxiMemory`].
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// Bytes of addressable memory; pages are allocated on first write.
    pub size: u64,
    /// Width of `m_axi_gmem` data in bits; must match the unit.
    pub data_bits: usize,
    /// Cycles from an AR handshake to the earliest first R beat (at least 1).
    pub read_latency: u32,
    /// Cycles from the last W beat of a burst to the earliest B response (at least 1).
    pub write_latency: u32,
    /// Read bursts accepted but not fully returned before `arready` drops.
    pub max_outstanding_reads: usize,
    /// Probability per cycle that each of `arready`, `awready`, `wready` is low.
    pub ready_stall_prob: f64,
    /// Probability per cycle that an available R beat or B response is held back.
    pub valid_stall_prob: f64,
    /// Seed of the stall RNG: equal seeds give identical runs.
    pub seed: u64,
    /// Never accept a read or write request, to test `ap_done` timeouts.
    pub hang: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            size: 256 << 20,
            data_bits: 512,
            read_latency: 20,
            write_latency: 10,
            max_outstanding_reads: 64,
            ready_stall_prob: 0.0,
            valid_stall_prob: 0.0,
            seed: 0,
            hang: false,
        }
    }
}

impl MemoryConfig {
    fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Config(m));
        if !self.data_bits.is_power_of_two() || !(8..=MAX_DATA_BITS).contains(&self.data_bits) {
            return bad(format!("memory data_bits = {} (powers of two 8..={MAX_DATA_BITS})", self.data_bits));
        }
        if self.size == 0 || self.size > MAX_SIZE {
            return bad(format!("memory size = {} (1..={MAX_SIZE} bytes)", self.size));
        }
        if self.max_outstanding_reads == 0 {
            return bad("max_outstanding_reads must be at least 1".into());
        }
        for (name, p) in [("ready_stall_prob", self.ready_stall_prob), ("valid_stall_prob", self.valid_stall_prob)] {
            // 1.0 would stall forever; `hang` is the explicit way to ask for that.
            if !(0.0..1.0).contains(&p) {
                return bad(format!("{name} = {p} (must be in 0..1)"));
            }
        }
        Ok(())
    }
}

/// Traffic counters. One beat per channel per cycle, so `read_beats` is also
/// the number of cycles with a read beat (and likewise for writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Clock cycles the port has seen (out of reset).
    pub cycles: u64,
    pub read_bursts: u64,
    pub write_bursts: u64,
    pub read_beats: u64,
    pub write_beats: u64,
}

/// Sparse byte storage: untouched pages read as zero and cost nothing.
#[derive(Debug)]
struct Store {
    size: u64,
    pages: Vec<Option<Box<[u8]>>>,
}

impl Store {
    fn new(size: u64) -> Self {
        Self { size, pages: vec![None; size.div_ceil(PAGE) as usize] }
    }

    fn check(&self, addr: u64, len: u64) -> Result<(), SimError> {
        match addr.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(SimError::Memory(format!(
                "access of {len} bytes at {addr:#x} is outside the {:#x}-byte memory",
                self.size
            ))),
        }
    }

    /// Calls `f(page_index, offset_in_page, range_in_buffer)` for each page a range touches.
    fn chunks(addr: u64, len: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>)) {
        let mut done = 0;
        while done < len {
            let a = addr + done as u64;
            let off = (a % PAGE) as usize;
            let n = (PAGE as usize - off).min(len - done);
            f((a >> PAGE_BITS) as usize, off, done..done + n);
            done += n;
        }
    }

    /// Reads a range already checked against the size.
    fn read(&self, addr: u64, out: &mut [u8]) {
        Self::chunks(addr, out.len(), |page, off, r| match &self.pages[page] {
            Some(p) => out[r.clone()].copy_from_slice(&p[off..off + r.len()]),
            None => out[r].fill(0),
        });
    }

    /// Writes the bytes of `data` whose `enable` is true, in a checked range.
    fn write(&mut self, addr: u64, data: &[u8], enable: impl Fn(usize) -> bool) {
        Self::chunks(addr, data.len(), |page, off, r| {
            let p = self.pages[page].get_or_insert_with(|| vec![0; PAGE as usize].into_boxed_slice());
            for (j, i) in r.enumerate() {
                if enable(i) {
                    p[off + j] = data[i];
                }
            }
        });
    }
}

/// An address-channel request as the master presented it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AddrReq {
    addr: u64,
    len: u8,
    size: u8,
    burst: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct WBeat {
    data: [u32; DATA_WORDS],
    strb: [u32; DATA_WORDS / 8],
    last: bool,
}

#[derive(Debug)]
struct Burst {
    addr: u64,
    beats: u32,
    done: u32,
    /// Cycle from which the first R beat (reads) may be presented.
    ready_at: u64,
    /// False after a protocol error: no data is moved and the response is SLVERR.
    ok: bool,
}

/// The slave's view of its handshakes during one cycle.
#[derive(Debug, Default)]
struct Drive {
    arready: bool,
    awready: bool,
    wready: bool,
    /// R beat being presented, held until `rready`.
    r: Option<([u32; DATA_WORDS], bool, u8)>,
    /// B response being presented, held until `bready`.
    b: Option<u8>,
}

/// A flat byte memory acting as the AXI4 slave on `m_axi_gmem`.
///
/// Each cycle the owner calls [`drive`](Self::drive) to set the slave's inputs
/// to the unit, evaluates the unit, then calls [`clock`](Self::clock) with the
/// inputs and the outputs as they were settled before the rising edge.
#[derive(Debug)]
pub struct AxiMemory {
    cfg: MemoryConfig,
    store: Store,
    rng: ChaCha8Rng,
    /// Allocated buffers as `(start, end)`, ascending.
    allocs: Vec<(u64, u64)>,
    next_alloc: u64,
    cycle: u64,
    reads: VecDeque<Burst>,
    writes: VecDeque<Burst>,
    wbuf: VecDeque<WBeat>,
    /// B responses: (earliest cycle, resp).
    bresp: VecDeque<(u64, u8)>,
    drive: Drive,
    /// Requests presented but not accepted last cycle, which must be held.
    held_ar: Option<AddrReq>,
    held_aw: Option<AddrReq>,
    held_w: Option<WBeat>,
    error: Option<String>,
    stats: MemoryStats,
}

impl AxiMemory {
    pub fn new(cfg: MemoryConfig) -> Result<Self, SimError> {
        cfg.validate()?;
        Ok(Self {
            store: Store::new(cfg.size),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            allocs: Vec::new(),
            next_alloc: ALLOC_BASE,
            cycle: 0,
            reads: VecDeque::new(),
            writes: VecDeque::new(),
            wbuf: VecDeque::new(),
            bresp: VecDeque::new(),
            drive: Drive::default(),
            held_ar: None,
            held_aw: None,
            held_w: None,
            error: None,
            stats: MemoryStats::default(),
        })
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.cfg
    }

    fn beat_bytes(&self) -> usize {
        self.cfg.data_bits / 8
    }

    /// Reserves a 4 KiB-aligned buffer that the unit may access; the only memory it may.
    pub fn alloc(&mut self, bytes: u64) -> Result<u64, SimError> {
        if bytes == 0 {
            return Err(SimError::Memory("zero-byte allocation".into()));
        }
        let start = self.next_alloc;
        let end = start.checked_add(bytes).filter(|&e| e <= self.cfg.size).ok_or_else(|| {
            SimError::Memory(format!(
                "out of simulated memory: {bytes} bytes requested, {} of {} in use",
                start, self.cfg.size
            ))
        })?;
        // Bursts are whole beats, so the last beat of a buffer is the unit's to touch.
        let beat = self.beat_bytes() as u64;
        self.allocs.push((start, end.div_ceil(beat) * beat));
        self.next_alloc = end.div_ceil(ALLOC_ALIGN) * ALLOC_ALIGN;
        Ok(start)
    }

    /// Host-side write (no AXI checks beyond the memory's size).
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        self.store.check(addr, data.len() as u64)?;
        self.store.write(addr, data, |_| true);
        Ok(())
    }

    /// Host-side read.
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, SimError> {
        self.store.check(addr, len as u64)?;
        let mut out = vec![0; len];
        self.store.read(addr, &mut out);
        Ok(out)
    }

    /// Sets a range to one byte value, e.g. to poison an output buffer.
    pub fn fill(&mut self, addr: u64, len: usize, byte: u8) -> Result<(), SimError> {
        self.store.check(addr, len as u64)?;
        Self::chunked_fill(&mut self.store, addr, len, byte);
        Ok(())
    }

    fn chunked_fill(store: &mut Store, addr: u64, len: usize, byte: u8) {
        let chunk = vec![byte; len.min(PAGE as usize)];
        let mut done = 0;
        while done < len {
            let n = chunk.len().min(len - done);
            store.write(addr + done as u64, &chunk[..n], |_| true);
            done += n;
        }
    }

    pub fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// The first protocol error seen, kept until [`clear_error`](Self::clear_error).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    pub fn clear_error(&mut self) {
        self.error = None;
    }

    fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(format!("cycle {}: m_axi_gmem {msg}", self.stats.cycles));
        }
    }

    /// Drops every in-flight transfer (the unit is in reset); contents stay.
    pub fn reset_port(&mut self) {
        self.reads.clear();
        self.writes.clear();
        self.wbuf.clear();
        self.bresp.clear();
        self.drive = Drive::default();
        self.held_ar = None;
        self.held_aw = None;
        self.held_w = None;
    }

    fn stall(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p)
    }

    /// Sets the slave-driven `gmem_*` fields of `inputs` for this cycle.
    pub fn drive(&mut self, inputs: &mut Inputs) {
        let (ready_p, valid_p) = (self.cfg.ready_stall_prob, self.cfg.valid_stall_prob);
        let hang = self.cfg.hang;
        self.drive.arready = !hang && self.reads.len() < self.cfg.max_outstanding_reads && !self.stall(ready_p);
        self.drive.awready = !hang && self.writes.len() < MAX_OUTSTANDING_WRITES && !self.stall(ready_p);
        self.drive.wready = self.wbuf.len() < W_BUFFER_BEATS && !self.stall(ready_p);
        // A presented R beat or B response stays until taken (AXI forbids withdrawing it).
        if self.drive.r.is_none() {
            let available = self.reads.front().is_some_and(|b| b.ready_at <= self.cycle);
            if available && !self.stall(valid_p) {
                self.drive.r = Some(self.next_read_beat());
            }
        }
        if self.drive.b.is_none() {
            let available = self.bresp.front().is_some_and(|&(at, _)| at <= self.cycle);
            if available && !self.stall(valid_p) {
                self.drive.b = self.bresp.front().map(|&(_, resp)| resp);
            }
        }
        inputs.gmem_arready = self.drive.arready.into();
        inputs.gmem_awready = self.drive.awready.into();
        inputs.gmem_wready = self.drive.wready.into();
        let (rvalid, (data, last, rresp)) = match self.drive.r {
            Some(r) => (true, r),
            None => (false, ([0; DATA_WORDS], false, RESP_OKAY)),
        };
        inputs.gmem_rvalid = rvalid.into();
        inputs.gmem_rdata = data;
        inputs.gmem_rlast = last.into();
        inputs.gmem_rresp = rresp;
        inputs.gmem_bvalid = self.drive.b.is_some().into();
        inputs.gmem_bresp = self.drive.b.unwrap_or(RESP_OKAY);
    }

    /// Data, rlast and rresp of the front read burst's next beat.
    fn next_read_beat(&self) -> ([u32; DATA_WORDS], bool, u8) {
        let Some(b) = self.reads.front() else {
            return ([0; DATA_WORDS], false, RESP_OKAY);
        };
        let mut words = [0; DATA_WORDS];
        if b.ok {
            let mut buf = [0; MAX_DATA_BITS / 8];
            let bytes = &mut buf[..self.beat_bytes()];
            self.store.read(b.addr + u64::from(b.done) * bytes.len() as u64, bytes);
            // Little-endian words; a beat narrower than a word fills the low bytes.
            let (whole, rest) = bytes.as_chunks::<4>();
            for (word, chunk) in words.iter_mut().zip(whole) {
                *word = u32::from_le_bytes(*chunk);
            }
            for (i, &byte) in rest.iter().enumerate() {
                words[whole.len()] |= u32::from(byte) << (8 * i);
            }
        }
        (words, b.done + 1 == b.beats, if b.ok { RESP_OKAY } else { RESP_SLVERR })
    }

    /// Observes the handshakes of this cycle (`inputs` as driven, `outputs`
    /// settled before the edge) and advances the model past the rising edge.
    pub fn clock(&mut self, inputs: &Inputs, outputs: &Outputs) {
        self.check_held(outputs);
        let ar = AddrReq {
            addr: outputs.gmem_araddr,
            len: outputs.gmem_arlen,
            size: outputs.gmem_arsize,
            burst: outputs.gmem_arburst,
        };
        let aw = AddrReq {
            addr: outputs.gmem_awaddr,
            len: outputs.gmem_awlen,
            size: outputs.gmem_awsize,
            burst: outputs.gmem_awburst,
        };
        let w = || WBeat { data: outputs.gmem_wdata, strb: outputs.gmem_wstrb, last: outputs.gmem_wlast != 0 };
        let ar_valid = outputs.gmem_arvalid != 0;
        let aw_valid = outputs.gmem_awvalid != 0;
        let w_valid = outputs.gmem_wvalid != 0;
        let ar_fire = ar_valid && inputs.gmem_arready != 0;
        let aw_fire = aw_valid && inputs.gmem_awready != 0;
        let w_fire = w_valid && inputs.gmem_wready != 0;
        self.held_ar = (ar_valid && !ar_fire).then_some(ar);
        self.held_aw = (aw_valid && !aw_fire).then_some(aw);
        self.held_w = (w_valid && !w_fire).then(w);

        if ar_fire {
            let ok = self.check_request("AR", ar);
            let ready_at = self.cycle + u64::from(self.cfg.read_latency.max(1));
            self.reads.push_back(Burst { addr: ar.addr, beats: u32::from(ar.len) + 1, done: 0, ready_at, ok });
            self.stats.read_bursts += 1;
        }
        if inputs.gmem_rvalid != 0 && outputs.gmem_rready != 0 {
            self.drive.r = None;
            self.stats.read_beats += 1;
            if let Some(b) = self.reads.front_mut() {
                b.done += 1;
                if b.done == b.beats {
                    self.reads.pop_front();
                }
            }
        }
        if aw_fire {
            let ok = self.check_request("AW", aw);
            self.writes.push_back(Burst { addr: aw.addr, beats: u32::from(aw.len) + 1, done: 0, ready_at: 0, ok });
            self.stats.write_bursts += 1;
        }
        if w_fire {
            self.wbuf.push_back(w());
            self.stats.write_beats += 1;
        }
        self.apply_writes();
        if inputs.gmem_bvalid != 0 && outputs.gmem_bready != 0 {
            self.drive.b = None;
            self.bresp.pop_front();
        }
        self.cycle += 1;
        self.stats.cycles += 1;
    }

    /// AXI: once valid is high, it and the payload must stay until the handshake.
    fn check_held(&mut self, o: &Outputs) {
        let now_ar = AddrReq { addr: o.gmem_araddr, len: o.gmem_arlen, size: o.gmem_arsize, burst: o.gmem_arburst };
        let now_aw = AddrReq { addr: o.gmem_awaddr, len: o.gmem_awlen, size: o.gmem_awsize, burst: o.gmem_awburst };
        if let Some(held) = self.held_ar {
            if o.gmem_arvalid == 0 || held != now_ar {
                self.fail(format!("AR: arvalid dropped or request changed before arready ({held:?} -> {now_ar:?})"));
            }
        }
        if let Some(held) = self.held_aw {
            if o.gmem_awvalid == 0 || held != now_aw {
                self.fail(format!("AW: awvalid dropped or request changed before awready ({held:?} -> {now_aw:?})"));
            }
        }
        if let Some(held) = &self.held_w {
            let same = held.data == o.gmem_wdata && held.strb == o.gmem_wstrb && held.last == (o.gmem_wlast != 0);
            if o.gmem_wvalid == 0 || !same {
                self.fail("W: wvalid dropped or beat changed before wready".into());
            }
        }
    }

    /// Checks an accepted AR/AW request; false means it is answered with SLVERR.
    fn check_request(&mut self, chan: &str, r: AddrReq) -> bool {
        let bytes = self.beat_bytes() as u64;
        let len = (u64::from(r.len) + 1) * bytes;
        let end = r.addr.saturating_add(len);
        let problem = if u32::from(r.size) != bytes.trailing_zeros() {
            Some(format!("size {} is not log2 of the {bytes}-byte beat", r.size))
        } else if r.burst != BURST_INCR {
            Some(format!("burst type {} is not INCR", r.burst))
        } else if !r.addr.is_multiple_of(bytes) {
            Some(format!("address {:#x} is not aligned to the {bytes}-byte beat", r.addr))
        } else if r.addr / AXI_BOUNDARY != (end - 1) / AXI_BOUNDARY {
            Some(format!("burst {:#x}..{end:#x} crosses a 4 KiB boundary", r.addr))
        } else if !self.allocated(r.addr, end) {
            Some(format!("burst {:#x}..{end:#x} is outside every allocated buffer", r.addr))
        } else {
            None
        };
        match problem {
            Some(p) => {
                self.fail(format!("{chan} {r:?}: {p}"));
                false
            }
            None => true,
        }
    }

    fn allocated(&self, start: u64, end: u64) -> bool {
        let i = self.allocs.partition_point(|&(s, _)| s <= start);
        i > 0 && end <= self.allocs[i - 1].1 && end <= self.cfg.size
    }

    /// Matches buffered W beats to accepted AW bursts, in order.
    fn apply_writes(&mut self) {
        let bytes = self.beat_bytes();
        while !self.wbuf.is_empty() && !self.writes.is_empty() {
            let (Some(beat), Some(burst)) = (self.wbuf.pop_front(), self.writes.front_mut()) else {
                break;
            };
            let expect_last = burst.done + 1 == burst.beats;
            if burst.ok {
                let addr = burst.addr + u64::from(burst.done) * bytes as u64;
                let mut data = [0; MAX_DATA_BITS / 8];
                for (i, byte) in data[..bytes].iter_mut().enumerate() {
                    *byte = (beat.data[i / 4] >> (8 * (i % 4))) as u8;
                }
                self.store.write(addr, &data[..bytes], |i| beat.strb[i / 32] >> (i % 32) & 1 != 0);
            }
            burst.done += 1;
            let (ok, index, beats) = (burst.ok, burst.done, burst.beats);
            let done = index == beats;
            if beat.last != expect_last {
                self.fail(format!("W: wlast = {} on beat {index} of a {beats}-beat burst", beat.last));
            }
            if done {
                self.writes.pop_front();
                let at = self.cycle + u64::from(self.cfg.write_latency.max(1));
                self.bresp.push_back((at, if ok { RESP_OKAY } else { RESP_SLVERR }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BITS: usize = 128;

    fn mem(cfg: MemoryConfig) -> AxiMemory {
        AxiMemory::new(MemoryConfig { data_bits: BITS, ..cfg }).unwrap()
    }

    fn req(addr: u64, len: u8) -> AddrReq {
        AddrReq { addr, len, size: 4, burst: BURST_INCR }
    }

    /// A scripted master: requests are held until accepted, R and B always ready.
    #[derive(Default)]
    struct Master {
        ar: VecDeque<AddrReq>,
        aw: VecDeque<AddrReq>,
        w: VecDeque<WBeat>,
        /// (cycle, data bytes, rlast) of every R beat received.
        r: Vec<(u64, Vec<u8>, bool, u8)>,
        b: Vec<(u64, u8)>,
    }

    impl Master {
        fn outputs(&self) -> Outputs {
            let mut o = Outputs { gmem_rready: 1, gmem_bready: 1, ..Outputs::default() };
            if let Some(r) = self.ar.front() {
                (o.gmem_arvalid, o.gmem_araddr, o.gmem_arlen, o.gmem_arsize, o.gmem_arburst) =
                    (1, r.addr, r.len, r.size, r.burst);
            }
            if let Some(r) = self.aw.front() {
                (o.gmem_awvalid, o.gmem_awaddr, o.gmem_awlen, o.gmem_awsize, o.gmem_awburst) =
                    (1, r.addr, r.len, r.size, r.burst);
            }
            if let Some(w) = self.w.front() {
                (o.gmem_wvalid, o.gmem_wdata, o.gmem_wstrb, o.gmem_wlast) = (1, w.data, w.strb, w.last.into());
            }
            o
        }

        /// One cycle against `m`; returns the inputs the memory drove.
        fn cycle(&mut self, m: &mut AxiMemory) -> Inputs {
            let mut inp = Inputs::default();
            m.drive(&mut inp);
            let out = self.outputs();
            let now = m.stats().cycles;
            if out.gmem_arvalid != 0 && inp.gmem_arready != 0 {
                self.ar.pop_front();
            }
            if out.gmem_awvalid != 0 && inp.gmem_awready != 0 {
                self.aw.pop_front();
            }
            if out.gmem_wvalid != 0 && inp.gmem_wready != 0 {
                self.w.pop_front();
            }
            if inp.gmem_rvalid != 0 {
                let bytes = (0..BITS / 8).map(|i| (inp.gmem_rdata[i / 4] >> (8 * (i % 4))) as u8).collect();
                self.r.push((now, bytes, inp.gmem_rlast != 0, inp.gmem_rresp));
            }
            if inp.gmem_bvalid != 0 {
                self.b.push((now, inp.gmem_bresp));
            }
            m.clock(&inp, &out);
            inp
        }

        fn run(&mut self, m: &mut AxiMemory, cycles: u64) {
            for _ in 0..cycles {
                self.cycle(m);
            }
        }

        fn write_burst(&mut self, addr: u64, beats: &[[u8; 16]], strb: u32) {
            self.aw.push_back(req(addr, beats.len() as u8 - 1));
            for (i, b) in beats.iter().enumerate() {
                let mut data = [0; DATA_WORDS];
                for (j, byte) in b.iter().enumerate() {
                    data[j / 4] |= u32::from(*byte) << (8 * (j % 4));
                }
                let mut s = [0; DATA_WORDS / 8];
                s[0] = strb;
                self.w.push_back(WBeat { data, strb: s, last: i + 1 == beats.len() });
            }
        }
    }

    #[test]
    fn read_burst_arrives_after_latency_in_order() {
        let mut m = mem(MemoryConfig { read_latency: 7, ..MemoryConfig::default() });
        let a = m.alloc(4096).unwrap();
        let data: Vec<u8> = (0..64).collect();
        m.write(a, &data).unwrap();
        let mut master = Master::default();
        master.ar.push_back(req(a, 3));
        master.run(&mut m, 20);
        assert_eq!(master.r.len(), 4);
        assert_eq!(master.r[0].0, 7, "first beat {} cycles after the AR handshake", 7);
        for (i, (_, bytes, last, resp)) in master.r.iter().enumerate() {
            assert_eq!(bytes[..], data[16 * i..16 * i + 16]);
            assert_eq!((*last, *resp), (i == 3, RESP_OKAY));
        }
        let s = m.stats();
        assert_eq!((s.read_bursts, s.read_beats), (1, 4));
        assert!(m.error().is_none());
    }

    #[test]
    fn write_applies_strobes_and_responds_after_latency() {
        let mut m = mem(MemoryConfig { write_latency: 5, ..MemoryConfig::default() });
        let a = m.alloc(4096).unwrap();
        m.fill(a, 32, 0xEE).unwrap();
        let mut master = Master::default();
        // Data first: the slave buffers W beats that lead their AW.
        master.write_burst(a, &[[1; 16], [2; 16]], 0x00FF);
        let aw = master.aw.pop_front().unwrap();
        master.run(&mut m, 3);
        assert_eq!(master.w.len(), 0, "W beats accepted before AW");
        master.aw.push_back(aw);
        master.run(&mut m, 20);
        let mut expect = [1u8; 8].to_vec();
        expect.extend([0xEE; 8]);
        expect.extend([2; 8]);
        expect.extend([0xEE; 8]);
        assert_eq!(m.read(a, 32).unwrap(), expect);
        assert_eq!(master.b.len(), 1);
        // AW accepted in cycle 3 and applied in the same cycle: B from cycle 3 + 5.
        assert_eq!(master.b[0], (8, RESP_OKAY));
        assert_eq!(m.stats().write_beats, 2);
        assert!(m.error().is_none());
    }

    fn error_of(setup: impl FnOnce(&mut Master, u64)) -> String {
        let mut m = mem(MemoryConfig::default());
        let a = m.alloc(8192).unwrap();
        let mut master = Master::default();
        setup(&mut master, a);
        master.run(&mut m, 40);
        m.error().unwrap_or("no error").to_string()
    }

    #[test]
    fn protocol_errors_are_recorded() {
        type Setup = Box<dyn FnOnce(&mut Master, u64)>;
        let cases: [(&str, Setup); 7] = [
            ("4 KiB", Box::new(|m, a| m.ar.push_back(req(a + 4096 - 32, 3)))),
            ("size", Box::new(|m, a| m.ar.push_back(AddrReq { size: 3, ..req(a, 0) }))),
            ("INCR", Box::new(|m, a| m.ar.push_back(AddrReq { burst: 2, ..req(a, 0) }))),
            ("aligned", Box::new(|m, a| m.aw.push_back(req(a + 8, 0)))),
            ("outside", Box::new(|m, a| m.ar.push_back(req(a + 8192, 0)))),
            ("outside", Box::new(|m, _| m.ar.push_back(req(0, 0)))),
            (
                "wlast",
                Box::new(|m, a| {
                    m.write_burst(a, &[[0; 16], [0; 16]], 0xFFFF);
                    m.w[0].last = true;
                }),
            ),
        ];
        for (needle, setup) in cases {
            let e = error_of(setup);
            assert!(e.contains(needle), "expected `{needle}` in: {e}");
        }
    }

    #[test]
    fn bad_requests_get_slverr_and_move_no_data() {
        let mut m = mem(MemoryConfig::default());
        let a = m.alloc(4096).unwrap();
        let mut master = Master::default();
        master.ar.push_back(req(a + 4, 0));
        master.run(&mut m, 30);
        assert_eq!(master.r.len(), 1);
        assert_eq!(master.r[0].3, RESP_SLVERR);
        m.clear_error();
        assert!(m.error().is_none());
    }

    #[test]
    fn withdrawn_request_is_an_error() {
        let mut m = mem(MemoryConfig { ready_stall_prob: 0.9, seed: 3, ..MemoryConfig::default() });
        let a = m.alloc(4096).unwrap();
        let mut master = Master::default();
        // Present AR until the first cycle it is not accepted, then withdraw it.
        master.ar.push_back(req(a, 0));
        loop {
            let inp = master.cycle(&mut m);
            if inp.gmem_arready == 0 {
                break;
            }
            master.ar.push_back(req(a, 0));
        }
        master.ar.clear();
        master.run(&mut m, 1);
        assert!(m.error().unwrap_or_default().contains("arvalid dropped"), "{:?}", m.error());
    }

    #[test]
    fn outstanding_reads_are_bounded() {
        let mut m = mem(MemoryConfig { read_latency: 50, max_outstanding_reads: 2, ..MemoryConfig::default() });
        let a = m.alloc(4096).unwrap();
        let mut master = Master::default();
        for i in 0..4 {
            master.ar.push_back(req(a + 16 * i, 0));
        }
        master.run(&mut m, 10);
        assert_eq!((master.ar.len(), m.stats().read_bursts), (2, 2));
        master.run(&mut m, 100);
        assert_eq!(master.r.len(), 4);
    }

    #[test]
    fn hang_accepts_nothing() {
        let mut m = mem(MemoryConfig { hang: true, ..MemoryConfig::default() });
        let a = m.alloc(4096).unwrap();
        let mut master = Master::default();
        master.ar.push_back(req(a, 0));
        master.write_burst(a, &[[0; 16]], 0xFFFF);
        master.run(&mut m, 1000);
        assert_eq!((master.ar.len(), master.aw.len()), (1, 1));
        assert_eq!(m.stats().read_bursts + m.stats().write_bursts, 0);
    }

    /// Every port width packs a beat's bytes into little-endian words, a beat
    /// narrower than a word in the low bytes of word 0 (the rest zero).
    #[test]
    fn read_beats_pack_little_endian_at_every_width() {
        for bits in [8, 16, 32, 128, MAX_DATA_BITS] {
            let mut m = AxiMemory::new(MemoryConfig { data_bits: bits, ..MemoryConfig::default() }).unwrap();
            let a = m.alloc(4096).unwrap();
            let data: Vec<u8> = (0..1024u32).map(|i| (i.wrapping_mul(37) ^ 0xA5) as u8).collect();
            m.write(a, &data).unwrap();
            let beat = bits / 8;
            m.reads.push_back(Burst { addr: a + beat as u64, beats: 2, done: 1, ready_at: 0, ok: true });
            let (words, last, resp) = m.next_read_beat();
            let want = &data[2 * beat..3 * beat];
            for (i, w) in words.iter().enumerate() {
                let expect = (0..4).fold(0, |acc, j| acc | want.get(4 * i + j).map_or(0, |&b| u32::from(b) << (8 * j)));
                assert_eq!(*w, expect, "{bits}-bit port, word {i}");
            }
            assert!(last && resp == RESP_OKAY, "{bits}-bit port: the burst's second beat is its last");
        }
    }

    #[test]
    fn stalls_are_deterministic_per_seed_and_lose_nothing() {
        let trace = |seed| {
            let cfg = MemoryConfig { ready_stall_prob: 0.5, valid_stall_prob: 0.5, seed, ..MemoryConfig::default() };
            let mut m = mem(cfg);
            let a = m.alloc(4096).unwrap();
            let data: Vec<u8> = (0..=255).collect();
            m.write(a, &data).unwrap();
            let mut master = Master::default();
            master.ar.push_back(req(a, 15));
            master.write_burst(a + 1024, &[[9; 16]; 8], 0xFFFF);
            master.run(&mut m, 200);
            assert!(m.error().is_none());
            assert_eq!(master.r.iter().flat_map(|r| r.1.clone()).collect::<Vec<_>>(), data);
            assert_eq!(m.read(a + 1024, 128).unwrap(), vec![9; 128]);
            assert_eq!(master.b.len(), 1);
            master.r.iter().map(|r| r.0).collect::<Vec<_>>()
        };
        assert_eq!(trace(7), trace(7));
        assert_ne!(trace(7), trace(8));
    }

    #[test]
    fn allocator_and_host_access_bounds() {
        let mut m = mem(MemoryConfig { size: 64 << 10, ..MemoryConfig::default() });
        let a = m.alloc(100).unwrap();
        let b = m.alloc(5000).unwrap();
        assert_eq!((a, b), (4096, 8192));
        assert!(matches!(m.alloc(64 << 10), Err(SimError::Memory(_))));
        assert!(matches!(m.alloc(0), Err(SimError::Memory(_))));
        assert!(m.write((64 << 10) - 2, &[1, 2, 3]).is_err());
        assert!(m.read(u64::MAX, 2).is_err());
        assert!(m.fill(64 << 10, 1, 0).is_err());
        assert_eq!(m.read(60 << 10, 4).unwrap(), [0; 4], "untouched memory reads as zero");
    }

    #[test]
    fn large_memories_are_sparse_and_pages_split_correctly() {
        let mut m = mem(MemoryConfig { size: 16 << 30, ..MemoryConfig::default() });
        let addr = (8 << 30) + PAGE - 3;
        m.write(addr, &[1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(m.read(addr - 1, 8).unwrap(), [0, 1, 2, 3, 4, 5, 6, 0]);
        assert_eq!(m.store.pages.iter().filter(|p| p.is_some()).count(), 2);
    }

    #[test]
    fn invalid_configs_are_refused() {
        for cfg in [
            MemoryConfig { data_bits: 96, ..MemoryConfig::default() },
            MemoryConfig { size: 0, ..MemoryConfig::default() },
            MemoryConfig { ready_stall_prob: 1.0, ..MemoryConfig::default() },
            MemoryConfig { valid_stall_prob: f64::NAN, ..MemoryConfig::default() },
            MemoryConfig { max_outstanding_reads: 0, ..MemoryConfig::default() },
        ] {
            assert!(matches!(AxiMemory::new(cfg), Err(SimError::Config(_))));
        }
    }
}
