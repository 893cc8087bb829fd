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
use ferrite_runtime::block::{run_block, BlockDevices, OneDevice, PerUnit};
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
