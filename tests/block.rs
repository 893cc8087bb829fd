//! The int8 MoE decoder block (issue 17) on devices, bit for bit against its
//! golden model (`ferrite_hw::block::block`): the CPU device in both modes and
//! three simulated units (GEMM, attention, router in Verilator, stalling
//! memory, random input padding), on random blocks with capacity drops and
//! tokens routed to the same expert.
use ferrite_hw::attention::AttentionConfig;
use ferrite_hw::block::{block, random_input, BlockShape, BlockWeights, Scales};
use ferrite_hw::gemm::GemmConfig;
use ferrite_hw::moe::MoeConfig;
use ferrite_runtime::backend::cpu::{CpuDevice, CpuMode};
use ferrite_runtime::backend::sim::{Engine, SimDevice};
use ferrite_runtime::block::{
    project_block, run_block, run_block_resident, sim_units, Basis, BlockDevices, OneDevice, PerUnit, Projection,
    Resident,
};
use ferrite_runtime::device::{Buffer, DeviceInfo, Layout, Problem};
use ferrite_runtime::{Device, DeviceError, Launch, RunStats};
use ferrite_sim::MemoryConfig;

/// The CI block and the tight variant (choices dropped, softmax then top-k).
fn shapes() -> [BlockShape; 2] {
    [BlockShape::small(), BlockShape::tight()]
}

fn check(devs: &mut dyn BlockDevices, name: &str) {
    for (i, s) in shapes().iter().enumerate() {
        let (w, x, sc) = (BlockWeights::random(s, 40 + i as u64), random_input(s, 50 + i as u64), Scales::default());
        let want = block(s, &w, &sc, &x).unwrap();
        let got = run_block(devs, s, &w, &sc, &x).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.output, want, "{name}: block {s:?} differs from the golden model");
        // Every expert that received tokens ran both projections on the device.
        let experts = want.route.dispatch.iter().filter(|d| !d.is_empty()).count();
        assert_eq!(
            got.steps.len(),
            6 + 2 * experts,
            "{name}: {:?}",
            got.steps.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        if s.capacity.is_some() && i == 1 {
            assert!(want.route.dropped > 0, "the tight case must drop choices");
        }
        // Tokens routed to the same expert: some expert serves more than one token.
        assert!(want.route.dispatch.iter().any(|d| d.len() > 1));
    }
}

#[test]
fn block_on_the_cpu_device_matches_the_golden_model() {
    for mode in [CpuMode::Golden, CpuMode::Fast] {
        let mut dev = CpuDevice::new(mode);
        check(&mut OneDevice(&mut dev), &format!("cpu {mode:?}"));
    }
}

#[test]
fn block_on_simulated_units_matches_the_golden_model() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    let mem = |seed| MemoryConfig { ready_stall_prob: 0.1, valid_stall_prob: 0.1, seed, ..Default::default() };
    let attention =
        AttentionConfig { head_dim: 32, lanes: 2, dot_par: 32, port_bits: 256, read_fifo_depth: 32, clock_mhz: 300.0 };
    let mut gemm = SimDevice::new(GemmConfig::small(4, 4), mem(1), Engine::Verilator, None).unwrap();
    let mut attention = SimDevice::new(attention, mem(2), Engine::Verilator, None).unwrap();
    let mut moe = SimDevice::new(MoeConfig::small(), mem(3), Engine::Verilator, None).unwrap();
    check(&mut PerUnit { gemm: &mut gemm, attention: &mut attention, moe: &mut moe }, "sim");
}

/// A device that counts the bytes uploaded to it.
struct Counting {
    inner: CpuDevice,
    uploaded: u64,
}

impl Device for Counting {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        self.inner.layout(problem)
    }
    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        self.inner.alloc(bytes)
    }
    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.uploaded += data.len() as u64;
        self.inner.upload(buf, offset, data)
    }
    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.download(buf, offset, out)
    }
    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        self.inner.free(buf)
    }
    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        self.inner.launch(launch)
    }
}

/// With the weights resident, a second run of the block uploads none of them
/// (only activations and poisoned outputs) and is still bit-exact; a packed
/// operand of the wrong shape is refused with the shapes named.
#[test]
fn resident_weights_are_uploaded_once() {
    let s = BlockShape::small();
    let (w, x, sc) = (BlockWeights::random(&s, 60), random_input(&s, 61), Scales::default());
    let want = block(&s, &w, &sc, &x).unwrap();
    let mut dev = Counting { inner: CpuDevice::new(CpuMode::Fast), uploaded: 0 };
    let mut resident = Resident::default();
    let mut uploads = Vec::new();
    for _ in 0..2 {
        dev.uploaded = 0;
        let got = run_block_resident(&mut OneDevice(&mut dev), &mut resident, &s, &w, &sc, &x).unwrap();
        assert_eq!(got.output, want);
        uploads.push(dev.uploaded);
    }
    let weights: u64 = [&w.wq, &w.wk, &w.wv, &w.wo, &w.gate].iter().map(|m| m.data.len() as u64).sum::<u64>()
        + w.w1.iter().chain(&w.w2).map(|m| m.data.len() as u64).sum::<u64>();
    // Experts that got no tokens are never uploaded, so the first run moves at least the used weights.
    assert!(uploads[0] - uploads[1] >= weights / 2, "{uploads:?} with {weights} weight bytes");
    assert!(uploads[1] < weights, "{uploads:?}: the second run moved the weights again");
    resident.free(&mut OneDevice(&mut dev)).unwrap();

    let p = ferrite_hw::gemm::GemmProblem::new(3, 8, 16);
    let packed = ferrite_runtime::ops::Packed::upload(&mut dev, &[1; 16 * 7], 16, 7, 7, 112).unwrap();
    let err = ferrite_runtime::ops::gemm_packed(&mut dev, &p, &[1; 48], &packed, None).unwrap_err().to_string();
    assert!(err.contains("B has 112 elements, expected 128"), "{err}");
    let packed = ferrite_runtime::ops::Packed::upload(&mut dev, &[1; 16 * 8], 16, 8, 9, 144).unwrap();
    let err = ferrite_runtime::ops::gemm_packed(&mut dev, &p, &[1; 48], &packed, None).unwrap_err().to_string();
    assert!(
        err.contains("B on the device is 16×8 with pitch 9 in 144 bytes; this launch needs 16×8 with pitch 8"),
        "{err}"
    );
}

/// The projection of a block (every launch large enough extrapolated from two
/// simulated sizes) against the same block simulated whole, launch by launch:
/// the GEMM's cycles are affine in N, so they match exactly; the attention
/// unit's are affine in heads but for the steps where a row's running maximum
/// rises (each may cost a lane a cycle), and the router's depend on its
/// dispatch, so those come close.
#[test]
fn projected_block_matches_the_simulated_block() {
    if !ferrite_sim::verilator_or_skip() {
        return;
    }
    // The CI block with 4 heads of 16, so that heads extrapolate too (the units of other tests).
    let small = BlockShape::small();
    let s = BlockShape {
        mode: small.mode,
        capacity: small.capacity,
        ..BlockShape::with_dims(32, 64, 4, 4, 2, 128).unwrap()
    };
    let (w, x, sc) = (BlockWeights::random(&s, 40), random_input(&s, 50), Scales::default());
    let (g, a, m) = sim_units(&s, 300.0).unwrap();
    let cols = g.cols;
    let mem = MemoryConfig::default();
    let mut gemm = SimDevice::new(g, mem.clone(), Engine::Verilator, None).unwrap();
    let mut attention = SimDevice::new(a, mem.clone(), Engine::Verilator, None).unwrap();
    let mut moe = SimDevice::new(m, mem, Engine::Verilator, None).unwrap();
    let mut devs = PerUnit { gemm: &mut gemm, attention: &mut attention, moe: &mut moe };
    let run = run_block(&mut devs, &s, &w, &sc, &x).unwrap();
    let how = Projection { direct_macs: 0, gemm_cols: cols, seed: 3 };
    let projected = project_block(&mut devs, (&s, &w, &sc), &run.output.route, &how, &mut |_, _, _| {}).unwrap();
    assert_eq!(projected.len(), run.steps.len());
    let cycles = |r: &RunStats| r.cycles.unwrap().cycles;
    for (p, r) in projected.iter().zip(&run.steps) {
        assert_eq!((&p.step.name, p.step.unit), (&r.name, r.unit));
        let (got, want) = (cycles(&p.step.stats), cycles(&r.stats));
        eprintln!("{}: projected {got} ({}), simulated {want}", r.name, p.basis);
        match r.unit {
            "moe" => assert!(got.abs_diff(want) * 20 <= want, "{}: {got} vs {want}", r.name),
            "attention" => assert!(got.abs_diff(want) * 100 <= want, "{}: {got} vs {want}", r.name),
            _ => assert_eq!(got, want, "{} ({})", r.name, p.basis),
        }
    }
    // Every kind of extrapolation ran: each unit's launches are larger than two of its steps.
    for dim in ["N", "heads", "tokens"] {
        assert!(
            projected.iter().any(|p| matches!(p.basis, Basis::Affine { dim: d, .. } if d == dim)),
            "nothing extrapolated in {dim}"
        );
    }
}
