//! `ferrite bench gpu`: times the fast float kernels of the CUDA backend against
//! what a PyTorch user would run instead, checks every output against a float64
//! reference, and writes every figure (ours, PyTorch's, the ratio) as JSON. The
//! int8 GEMM twin is timed against cuBLASLt int8 (`torch._int_mm`) and checked
//! bit for bit against the golden model on sampled rows.
//!
//! PyTorch's timings come from `scripts/torch_reference.py`, run as a child
//! process on the same GPU (or read from a JSON it wrote before, `--torch`).
//! Values are checked in float64 on the CPU, on fresh random inputs, with the
//! output poisoned (NaN / -1) before the checked run: for the 8192³ GEMM and the
//! attention cases on sampled rows, for the MoE gate on every token.
use crate::backend::cuda::float::{flash_attention, from_bf16, gemm_bf16, moe_gate, to_bf16};
use crate::backend::cuda::runtime::{driver, Gpu};
use crate::backend::cuda::CudaDevice;
use crate::checks;
use crate::device::{AttentionArgs, Device, DeviceError, GemmArgs, Layout, MoeArgs, Problem};
use crate::ops;
use anyhow::{bail, Context, Result};
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use ferrite_hw::attention::model::attention_rows;
use ferrite_hw::attention::{AttentionParams, AttentionProblem};
use ferrite_hw::gemm::model::gemm_rows;
use ferrite_hw::gemm::{GemmOutput, GemmProblem};
use ferrite_hw::moe::{route, CapacityFactor, GateMode, MoeProblem};
use ferrite_hw::numerics::Requant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

/// Options of `ferrite bench gpu`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchGpuArgs {
    /// Write every figure as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// PyTorch's figures from an earlier `torch_reference.py --out FILE`
    /// instead of running the script.
    #[arg(long)]
    pub torch: Option<PathBuf>,
    /// The reference script to run when --torch is not given.
    #[arg(long, default_value = "scripts/torch_reference.py")]
    pub script: PathBuf,
    /// Python interpreter with PyTorch.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Timed repetitions per case (median reported).
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
    /// Only the cases whose name starts with this (`attn`: the float
    /// attention kernel and the twin; `gemm_bf16`, `moe`, `gemm_i8`).
    #[arg(long)]
    pub only: Option<String>,
}

/// One measured case: our median time, and what it is compared with.
struct Case {
    name: String,
    /// Floating-point operations (or bytes for the gate) per run, for rates.
    flops: f64,
    ours: Timing,
    rel_err: f64,
    /// Largest error that passes (bf16: 1e-2).
    tol: f64,
    /// Keys of the PyTorch figures in the reference JSON, with labels.
    refs: Vec<(&'static str, String)>,
}

fn rng() -> ChaCha8Rng {
    // Fresh inputs on every run: seeded from the clock, printed for replay.
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    println!("input seed {seed}");
    ChaCha8Rng::seed_from_u64(seed)
}

fn normal(rng: &mut ChaCha8Rng) -> f32 {
    let (u1, u2): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen());
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Launches captured per CUDA graph when timing in steady state.
const GRAPH_REPS: usize = 20;

/// Both figures of one case, in ms per call (medians).
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// An event, the launch call(s), an event: host launch latency included,
    /// as a caller that waits for each result sees it.
    launch: f64,
    /// [`GRAPH_REPS`] back-to-back calls captured in a CUDA graph and replayed
    /// between two events, divided by the count: device time per call once host
    /// dispatch is out of the way (PyTorch is captured the same way).
    graph: f64,
}

/// Median kernel time in ms over `iters` runs (after 3 warm-ups), by events.
fn time_ms(gpu: &Gpu, iters: usize, f: impl FnMut() -> Result<(), DeviceError>) -> Result<Timing> {
    time_on(&gpu.ctx, &gpu.stream, iters, f)
}

/// [`time_ms`] for callers that hold the device mutably (the router twin).
fn time_on(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    iters: usize,
    mut f: impl FnMut() -> Result<(), DeviceError>,
) -> Result<Timing> {
    for _ in 0..3 {
        f()?;
    }
    stream.synchronize().map_err(driver("running a kernel"))?;
    let launch = median_ms(ctx, stream, iters, || Ok(f()?))?;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(driver("capturing a graph"))?;
    // The capture must end even when a launch fails, or the stream stays unusable.
    let captured = (0..GRAPH_REPS).try_for_each(|_| f());
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).map_err(driver("instantiating a graph"))?;
    captured?;
    let graph = graph.context("the captured CUDA graph is empty")?;
    graph.upload().map_err(driver("uploading a graph"))?;
    for _ in 0..2 {
        graph.launch().map_err(driver("launching a graph"))?;
    }
    let per_graph = median_ms(ctx, stream, iters, || Ok(graph.launch().map_err(driver("launching a graph"))?))?;
    Ok(Timing { launch, graph: per_graph / GRAPH_REPS as f64 })
}

/// Median over `iters` of the event-timed `f`.
fn median_ms(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        let start = ctx.new_event(flags).map_err(driver("creating an event"))?;
        let end = ctx.new_event(flags).map_err(driver("creating an event"))?;
        start.record(stream).map_err(driver("recording an event"))?;
        f()?;
        end.record(stream).map_err(driver("recording an event"))?;
        times.push(start.elapsed_ms(&end).map_err(driver("timing"))? as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn upload<T: cudarc::driver::DeviceRepr>(gpu: &Gpu, x: &[T]) -> Result<CudaSlice<T>> {
    Ok(gpu.stream.clone_htod(x).map_err(driver("uploading"))?)
}

fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(gpu: &Gpu, x: &CudaSlice<T>) -> Result<Vec<T>> {
    Ok(gpu.stream.clone_dtoh(x).map_err(driver("downloading"))?)
}

/// ‖got − ref‖ / ‖ref‖; infinite when anything is NaN (an unwritten output).
fn rel_err(got: &[f64], reference: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (g, r) in got.iter().zip(reference) {
        if !g.is_finite() {
            return f64::INFINITY;
        }
        num += (g - r) * (g - r);
        den += r * r;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

fn bench_gemm(gpu: &Gpu, rng: &mut ChaCha8Rng, iters: usize, s: usize) -> Result<Case> {
    let a: Vec<u16> = (0..s * s).map(|_| to_bf16(normal(rng))).collect();
    let b: Vec<u16> = (0..s * s).map(|_| to_bf16(normal(rng))).collect();
    let (da, db) = (upload(gpu, &a)?, upload(gpu, &b)?);
    let mut dc = upload(gpu, &vec![0xffffu16; s * s])?; // NaN poison
    gemm_bf16(gpu, &da, &db, &mut dc, (s, s, s))?;
    gpu.sync()?;
    let c = download(gpu, &dc)?;
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for r in checks::gemm_rows(s) {
        let ar: Vec<f64> = a[r * s..(r + 1) * s].iter().map(|&x| from_bf16(x) as f64).collect();
        for j in 0..s {
            let br = &b[j * s..(j + 1) * s];
            want.push(ar.iter().zip(br).map(|(x, &y)| x * from_bf16(y) as f64).sum());
            got.push(from_bf16(c[r * s + j]) as f64);
        }
    }
    let ours = time_ms(gpu, iters, || gemm_bf16(gpu, &da, &db, &mut dc, (s, s, s)))?;
    Ok(Case {
        name: format!("gemm_bf16_{s}"),
        flops: 2.0 * (s as f64).powi(3),
        ours,
        rel_err: rel_err(&got, &want),
        tol: 1e-2,
        refs: vec![("cublas", format!("gemm_bf16_{s}"))],
    })
}

fn bench_attention(gpu: &Gpu, rng: &mut ChaCha8Rng, iters: usize, d: usize, causal: bool) -> Result<Case> {
    let (bsz, heads, n) = (4usize, 16usize, 4096usize);
    let bh = bsz * heads;
    let len = bh * n * d;
    let mut gen = || -> Vec<u16> { (0..len).map(|_| to_bf16(normal(rng))).collect() };
    let (q, k, v) = (gen(), gen(), gen());
    let (dq, dk, dv) = (upload(gpu, &q)?, upload(gpu, &k)?, upload(gpu, &v)?);
    let mut dout = upload(gpu, &vec![0xffffu16; len])?;
    flash_attention(gpu, &dq, &dk, &dv, &mut dout, bh, n, d, causal)?;
    gpu.sync()?;
    let out = download(gpu, &dout)?;
    let f = |x: u16| from_bf16(x) as f64;
    let scale = 1.0 / (d as f64).sqrt();
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for h in [0, bh / 2, bh - 1] {
        for i in [0, 1, 127, 128, n / 2 + 3, n - 1] {
            let base = h * n * d;
            let keys = if causal { i + 1 } else { n };
            let qi = &q[base + i * d..base + (i + 1) * d];
            let s: Vec<f64> = (0..keys)
                .map(|j| {
                    qi.iter().zip(&k[base + j * d..base + (j + 1) * d]).map(|(&a, &b)| f(a) * f(b)).sum::<f64>() * scale
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = w.iter().sum();
            for x in 0..d {
                want.push((0..keys).map(|j| w[j] * f(v[base + j * d + x])).sum::<f64>() / sum);
                got.push(f(out[base + i * d + x]));
            }
        }
    }
    let ours = time_ms(gpu, iters, || flash_attention(gpu, &dq, &dk, &dv, &mut dout, bh, n, d, causal))?;
    let name = format!("attn_d{d}_{}", if causal { "causal" } else { "full" });
    let pairs = if causal { (n * (n + 1) / 2) as f64 } else { (n * n) as f64 };
    Ok(Case {
        flops: 4.0 * bh as f64 * pairs * d as f64,
        ours,
        rel_err: rel_err(&got, &want),
        tol: 1e-2,
        refs: vec![("sdpa_flash", format!("{name}_flash")), ("sdpa_cudnn", format!("{name}_cudnn"))],
        name,
    })
}

fn bench_moe(gpu: &Gpu, rng: &mut ChaCha8Rng, iters: usize, e: usize, k: usize) -> Result<Case> {
    let t = 16384usize;
    let logits: Vec<f32> = (0..t * e).map(|_| 2.0 * normal(rng)).collect();
    let dl = upload(gpu, &logits)?;
    let mut dw = upload(gpu, &vec![f32::NAN; t * k])?;
    let mut di = upload(gpu, &vec![-1i32; t * k])?;
    moe_gate(gpu, &dl, &mut dw, &mut di, (t, e, k))?;
    gpu.sync()?;
    let (w, idx) = (download(gpu, &dw)?, download(gpu, &di)?);
    let (mut got, mut want, mut wrong_index) = (Vec::new(), Vec::new(), 0usize);
    for tok in 0..t {
        let x: Vec<f64> = logits[tok * e..(tok + 1) * e].iter().map(|&v| v as f64).collect();
        let mx = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = x.iter().map(|v| (v - mx).exp()).collect();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        let top = &order[..k];
        let sum: f64 = top.iter().map(|&i| p[i]).sum();
        for (slot, &i) in top.iter().enumerate() {
            if idx[tok * k + slot] != i as i32 {
                wrong_index += 1;
            }
            want.push(p[i] / sum);
            got.push(w[tok * k + slot] as f64);
        }
    }
    let ours = time_ms(gpu, iters, || moe_gate(gpu, &dl, &mut dw, &mut di, (t, e, k)))?;
    Ok(Case {
        name: format!("moe_gate_e{e}_k{k}"),
        // Bytes moved (logits in, weights and indices out) stand in for FLOPs.
        flops: (t * e * 4 + t * k * 8) as f64,
        ours,
        // A wrong expert is a wrong answer whatever the weights say.
        rel_err: if wrong_index > 0 { f64::INFINITY } else { rel_err(&got, &want) },
        tol: 1e-5,
        refs: vec![("softmax_topk", format!("moe_gate_e{e}_k{k}"))],
    })
}

/// The int8 GEMM twin (the unit's layouts: A and B row-major) on s³ through
/// the [`Device`] path, the Bᵀ pre-pass included in every figure. Checked
/// bit for bit against the golden model on 16 sampled rows of a poisoned C,
/// then timed. `epilogue` adds bias, ReLU and requantization to
/// int8; without it C is int32 like `torch._int_mm`'s, the reference.
fn bench_gemm_i8(dev: &mut CudaDevice, rng: &mut ChaCha8Rng, iters: usize, s: usize, epilogue: bool) -> Result<Case> {
    let p = if epilogue {
        GemmProblem {
            bias: true,
            relu: true,
            requant: Some(Requant { multiplier: 1 << 30, shift: 44 }),
            ..GemmProblem::new(s, s, s)
        }
    } else {
        GemmProblem::new(s, s, s)
    };
    let a: Vec<i8> = (0..s * s).map(|_| rng.gen()).collect();
    let b: Vec<i8> = (0..s * s).map(|_| rng.gen()).collect();
    let bias: Vec<i32> = (0..s).map(|_| rng.gen_range(-1 << 20..1 << 20)).collect();
    let Layout::Gemm(layout) = dev.layout(&Problem::Gemm(p))? else { bail!("the cuda device gave no GEMM layout") };
    let as_bytes = |v: &[i8]| -> Vec<u8> { v.iter().map(|&x| x as u8).collect() };
    let buf = |dev: &mut CudaDevice, data: &[u8]| -> Result<_> {
        let b = dev.alloc(data.len() as u64)?;
        dev.upload(b, 0, data)?;
        Ok(b)
    };
    // s is a multiple of 16, so the layout is dense.
    let args = GemmArgs {
        problem: p,
        layout,
        a: buf(dev, &as_bytes(&a))?,
        b: buf(dev, &as_bytes(&b))?,
        bias: if epilogue {
            Some(buf(dev, &bias.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())?)
        } else {
            None
        },
        c: buf(dev, &vec![ops::POISON; layout.c_bytes as usize])?,
    };
    dev.enqueue_gemm(&args)?;
    dev.gpu().sync()?;
    let rows = checks::gemm_rows(s);
    let (want, _) = gemm_rows(&p, &a, &b, epilogue.then_some(&bias[..]), &rows)?;
    let mut got = vec![0u8; rows.len() * s * p.out_elem_bytes()];
    for (chunk, &r) in got.chunks_exact_mut(s * p.out_elem_bytes()).zip(&rows) {
        dev.download(args.c, r as u64 * layout.ldc, chunk)?;
    }
    let got = match p.requant {
        Some(_) => GemmOutput::I8(got.iter().map(|&x| x as i8).collect()),
        None => GemmOutput::I32(got.chunks_exact(4).map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()),
    };
    let exact = got == want;
    let (ctx, stream) = (dev.gpu().ctx.clone(), dev.gpu().stream.clone());
    let ours = time_on(&ctx, &stream, iters, || dev.enqueue_gemm(&args))?;
    for b in [Some(args.a), Some(args.b), args.bias, Some(args.c)].into_iter().flatten() {
        dev.free(b)?;
    }
    let key = format!("gemm_i8_{s}");
    Ok(Case {
        name: if epilogue { format!("{key}_bias_relu_requant") } else { key.clone() },
        flops: 2.0 * (s as f64).powi(3),
        ours,
        rel_err: if exact { 0.0 } else { f64::INFINITY },
        tol: 0.0,
        refs: vec![("int_mm", key.clone()), ("int_mm_rowB", format!("{key}_row_major_b"))],
    })
}

/// The attention twin (the unit's fixed-point online softmax on int8 Q, K,
/// V; Q16 out) on the float kernel's shape, B = 4, H = 16, N = 4096, through
/// the [`Device`] path: checked bit for bit against the golden model on 18
/// sampled rows (3 heads) of a poisoned O, then timed. Its rate counts the
/// float case's FLOPs (4·d per unmasked query–key pair), so the two rates
/// compare directly. Inputs: Gaussian, σ = 32 LSB, scales 1/32.
fn bench_attention_twin(
    dev: &mut CudaDevice,
    rng: &mut ChaCha8Rng,
    iters: usize,
    d: usize,
    causal: bool,
) -> Result<Case> {
    let (bsz, heads, n) = (4usize, 16usize, 4096usize);
    let s = 1.0 / 32.0;
    let p = AttentionProblem {
        batch: bsz,
        heads,
        seq_q: n,
        seq_kv: n,
        dim: d,
        causal,
        kv_len: None,
        params: AttentionParams::from_scales(d, s, s, s, None)?,
    };
    let bh = p.heads_total();
    let len = bh * n * d;
    let mut gen =
        || -> Vec<u8> { (0..len).map(|_| (normal(rng) * 32.0).round().clamp(-128.0, 127.0) as i8 as u8).collect() };
    let (q, k, v) = (gen(), gen(), gen());
    let Layout::Attention(layout) = dev.layout(&Problem::Attention(p.clone()))? else {
        bail!("the cuda device gave no attention layout")
    };
    let buf = |dev: &mut CudaDevice, data: &[u8]| -> Result<_> {
        let b = dev.alloc(data.len() as u64)?;
        dev.upload(b, 0, data)?;
        Ok(b)
    };
    // n·d is a multiple of 16, so the layout is dense.
    let args = AttentionArgs {
        problem: p.clone(),
        layout,
        q: buf(dev, &q)?,
        k: buf(dev, &k)?,
        v: buf(dev, &v)?,
        o: buf(dev, &vec![ops::POISON; layout.o_bytes as usize])?,
        kv_len: None,
    };
    dev.enqueue_attention(&args)?;
    dev.gpu().sync()?;
    let rows = checks::attention_rows(&p);
    let as_i8 = |x: &[u8]| -> Vec<i8> { x.iter().map(|&b| b as i8).collect() };
    let want = attention_rows(&p, &as_i8(&q), &as_i8(&k), &as_i8(&v), &rows)?;
    let mut exact = true;
    for (r, &(h, i)) in rows.iter().enumerate() {
        let mut got = vec![0u8; d * 4];
        dev.download(args.o, h as u64 * layout.o_stride + (i * d * 4) as u64, &mut got)?;
        exact &= got
            .chunks_exact(4)
            .enumerate()
            .all(|(x, w)| i32::from_le_bytes([w[0], w[1], w[2], w[3]]) == want.get(r * d + x));
    }
    let (ctx, stream) = (dev.gpu().ctx.clone(), dev.gpu().stream.clone());
    let ours = time_on(&ctx, &stream, iters, || dev.enqueue_attention(&args))?;
    for b in [args.q, args.k, args.v, args.o] {
        dev.free(b)?;
    }
    let float = format!("attn_d{d}_{}", if causal { "causal" } else { "full" });
    let pairs = if causal { (n * (n + 1) / 2) as f64 } else { (n * n) as f64 };
    Ok(Case {
        name: format!("{}_twin", float.replacen("attn", "attn_i8", 1)),
        flops: 4.0 * bh as f64 * pairs * d as f64,
        ours,
        rel_err: if exact { 0.0 } else { f64::INFINITY },
        tol: 0.0,
        refs: vec![("sdpa_flash", format!("{float}_flash")), ("sdpa_cudnn", format!("{float}_cudnn"))],
    })
}

/// The MoE router twin (int8 logits, fixed-point softmax, top-k, capacity
/// slots, dispatch plan) on T = 16384, H = 1024: checked bit for bit against
/// `ferrite_hw::moe::route` with poisoned outputs, then timed. PyTorch has no
/// such kernel, so it has no reference figure; its rate is in tokens/s.
fn bench_moe_twin(dev: &mut CudaDevice, rng: &mut ChaCha8Rng, iters: usize, e: usize, k: usize) -> Result<Case> {
    let (t, h) = (16384usize, 1024usize);
    let p = MoeProblem {
        renormalize: true,
        capacity: Some(CapacityFactor::from_f64(1.25)?),
        ..MoeProblem::new(t, h, e, k, GateMode::SoftmaxTopk, 1.0 / 32.0, 1.0 / 64.0)?
    };
    let x: Vec<i8> = (0..t * h).map(|_| rng.gen()).collect();
    let w: Vec<i8> = (0..e * h).map(|_| rng.gen_range(-40..=40)).collect();
    let want = route(&p, &x, &w, None)?;
    let (got, _) = ops::moe(dev, &p, &x, &w, None)?;
    let exact = got == want;
    let Layout::Moe(layout) = dev.layout(&Problem::Moe(p))? else { bail!("the cuda device gave no MoE layout") };
    let pad = |v: &[i8], pitch: u64| -> Vec<u8> {
        v.chunks(h).flat_map(|r| r.iter().map(|&b| b as u8).chain(std::iter::repeat_n(0, pitch as usize - h))).collect()
    };
    let alloc = |dev: &mut CudaDevice, bytes: u64, data: Option<Vec<u8>>| -> Result<_> {
        let b = dev.alloc(bytes)?;
        dev.upload(b, 0, &data.unwrap_or_else(|| vec![ops::POISON; bytes as usize]))?;
        Ok(b)
    };
    let args = MoeArgs {
        problem: p,
        layout,
        x: alloc(dev, layout.x_bytes, Some(pad(&x, layout.ldx)))?,
        w: alloc(dev, layout.w_bytes, Some(pad(&w, layout.ldw)))?,
        bias: None,
        route: alloc(dev, layout.route_bytes, None)?,
        dispatch: alloc(dev, layout.dispatch_bytes, None)?,
        stats: alloc(dev, layout.stats_bytes, None)?,
    };
    let (ctx, stream) = (dev.gpu().ctx.clone(), dev.gpu().stream.clone());
    let ours = time_on(&ctx, &stream, iters, || dev.enqueue_moe(&args))?;
    for b in [args.x, args.w, args.route, args.dispatch, args.stats] {
        dev.free(b)?;
    }
    Ok(Case {
        name: format!("moe_router_twin_e{e}_k{k}"),
        // Tokens routed stand in for FLOPs.
        flops: t as f64,
        ours,
        rel_err: if exact { 0.0 } else { f64::INFINITY },
        tol: 0.0,
        refs: Vec::new(),
    })
}

fn torch_reference(args: &BenchGpuArgs) -> Result<Value> {
    let text = match &args.torch {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => {
            println!("running {} {} (PyTorch reference)", args.python, args.script.display());
            let out = Command::new(&args.python)
                .arg(&args.script)
                .output()
                .with_context(|| format!("starting {}", args.python))?;
            if !out.status.success() {
                bail!(
                    "{} failed: {}",
                    args.script.display(),
                    String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
                );
            }
            String::from_utf8(out.stdout).context("reference output is not UTF-8")?
        }
    };
    serde_json::from_str(&text).context("parsing the PyTorch reference JSON")
}

/// Run every case, print the ratio table, write the JSON; fails if any output
/// is wrong (the figures are still printed and written first).
pub fn run(args: &BenchGpuArgs) -> Result<()> {
    let mut dev = CudaDevice::new(0)?;
    let gpu = dev.gpu();
    let (name, arch, sm_count) = (gpu.name.clone(), gpu.arch.clone(), gpu.sm_count);
    println!("device {name} ({arch}, {sm_count} SMs)");
    let mut rng = rng();
    let it = args.iters;
    // Case families by name prefix; a skipped family draws no inputs, so the
    // others get other data than in a full run (the seed is printed either way).
    let want = |family: &str| args.only.as_deref().is_none_or(|o| family.starts_with(o));
    let mut cases = Vec::new();
    if want("gemm_bf16") {
        cases.push(bench_gemm(gpu, &mut rng, it, 8192)?);
    }
    if want("attn") {
        for d in [64, 128] {
            for causal in [false, true] {
                cases.push(bench_attention(gpu, &mut rng, it, d, causal)?);
            }
        }
    }
    if want("moe_gate") {
        cases.push(bench_moe(gpu, &mut rng, it.max(100), 8, 2)?);
        cases.push(bench_moe(gpu, &mut rng, it.max(100), 64, 8)?);
    }
    if want("moe_router_twin") {
        cases.push(bench_moe_twin(&mut dev, &mut rng, it, 8, 2)?);
        cases.push(bench_moe_twin(&mut dev, &mut rng, it, 64, 8)?);
    }
    if want("gemm_i8") {
        for s in [1024, 4096, 8192] {
            cases.push(bench_gemm_i8(&mut dev, &mut rng, it, s, false)?);
        }
    }
    if want("attn_i8") {
        for d in [64, 128] {
            for causal in [false, true] {
                cases.push(bench_attention_twin(&mut dev, &mut rng, it, d, causal)?);
            }
        }
    }
    if want("gemm_i8") {
        cases.push(bench_gemm_i8(&mut dev, &mut rng, it, 4096, true)?);
    }
    if cases.is_empty() {
        bail!("no case name starts with {:?}", args.only.as_deref().unwrap_or(""));
    }
    let torch = torch_reference(args)?;
    let mut rows = Vec::new();
    println!(
        "per launch: event, launch, event; graph: {GRAPH_REPS} calls in a CUDA graph, per call; ratio > 1: ours faster"
    );
    println!(
        "{:<24} {:>10} {:>10} {:>15} {:>8}  {:<12} {:>10} {:>10} {:>8} {:>8}",
        "case", "ours ms", "graph ms", "rate", "rel err", "reference", "ref ms", "ref graph", "ratio", "graph"
    );
    let fmt = |x: Option<f64>, unit: &str| x.map_or("n/a".to_string(), |v| format!("{v:.4}{unit}"));
    for c in &cases {
        let unit = if c.name.starts_with("gemm_i8") || c.name.starts_with("attn_i8") {
            ("TOP/s", 1e12)
        } else if c.name.starts_with("moe_router") {
            ("Mtok/s", 1e6)
        } else if c.name.starts_with("moe") {
            ("GB/s", 1e9)
        } else {
            ("TFLOP/s", 1e12)
        };
        let rate = c.flops / (c.ours.launch * 1e-3) / unit.1;
        // The attention twin against our float kernel on the same shape.
        let float = c.name.strip_suffix("_twin").map(|n| n.replacen("attn_i8", "attn", 1));
        let share = float.and_then(|f| cases.iter().find(|x| x.name == f)).map(|f| {
            let (launch, graph) = (f.ours.launch / c.ours.launch, f.ours.graph / c.ours.graph);
            println!(
                "{}: {:.1} % of the float flash kernel's rate per launch, {:.1} % in graph time",
                c.name,
                100.0 * launch,
                100.0 * graph
            );
            json!({ "launch": launch, "graph": graph })
        });
        let row = |label: &str, ms: Option<f64>, graph: Option<f64>| {
            println!(
                "{:<24} {:>10.4} {:>10.4} {:>7.1} {:<7} {:>8.1e}  {:<12} {:>10} {:>10} {:>8} {:>8}",
                c.name,
                c.ours.launch,
                c.ours.graph,
                rate,
                unit.0,
                c.rel_err,
                label,
                fmt(ms, ""),
                fmt(graph, ""),
                fmt(ms.map(|r| r / c.ours.launch), "×"),
                fmt(graph.map(|r| r / c.ours.graph), "×"),
            )
        };
        if c.refs.is_empty() {
            row("(none)", None, None);
        }
        let mut refs = serde_json::Map::new();
        for (label, key) in &c.refs {
            let (ms, graph) = (torch["cases"][key]["ms"].as_f64(), torch["cases"][key]["graph_ms"].as_f64());
            row(label, ms, graph);
            refs.insert(
                label.to_string(),
                json!({
                    "key": key, "ms": ms, "ratio": ms.map(|r| r / c.ours.launch),
                    "graph_ms": graph, "graph_ratio": graph.map(|r| r / c.ours.graph),
                }),
            );
        }
        rows.push(json!({
            "name": c.name, "ours_ms": c.ours.launch, "ours_graph_ms": c.ours.graph,
            "rate": rate, "rate_unit": unit.0,
            "rel_err": if c.rel_err.is_finite() { json!(c.rel_err) } else { json!("inf") },
            "tol": c.tol, "pass": c.rel_err <= c.tol, "reference": refs, "share_of_float_kernel": share,
        }));
    }
    let report = json!({
        "device": name, "arch": arch, "sm_count": sm_count,
        "date_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "torch": torch.get("torch"), "torch_device": torch.get("device"),
        "graph_reps": GRAPH_REPS, "cases": rows,
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let failed: Vec<&str> = cases.iter().filter(|c| c.rel_err > c.tol).map(|c| c.name.as_str()).collect();
    if !failed.is_empty() {
        bail!("outputs outside tolerance: {}", failed.join(", "));
    }
    Ok(())
}
