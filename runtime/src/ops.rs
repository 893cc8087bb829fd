//! Host-array convenience layer over [`Device`]: pack, launch, unpack.
use crate::device::{AttentionArgs, Buffer, Device, DeviceError, GemmArgs, Launch, Layout, MoeArgs, Problem, RunStats};
use ferrite_hw::attention::model::check_operands as check_attention;
use ferrite_hw::attention::{AttentionLayout, AttentionOutput, AttentionProblem};
use ferrite_hw::gemm::model::check_operands;
use ferrite_hw::gemm::{GemmLayout, GemmOutput, GemmProblem};
use ferrite_hw::moe::config::RECORD_BYTES;
use ferrite_hw::moe::model::check_operands as check_moe;
use ferrite_hw::moe::{MoeLayout, MoeOutput, MoeProblem};

/// Byte the output buffer is filled with before a launch, so elements the unit
/// never writes read back as 0xA5A5A5A5 / -91 and fail comparisons.
pub const POISON: u8 = 0xA5;

/// `C = epilogue(A·B + bias)` on `dev`, with host arrays in dense row-major
/// order. Buffers are laid out the way the device asks and freed afterwards.
pub fn gemm(
    dev: &mut dyn Device,
    p: &GemmProblem,
    a: &[i8],
    b: &[i8],
    bias: Option<&[i32]>,
) -> Result<(GemmOutput, RunStats), DeviceError> {
    check_operands(p, a.len(), b.len(), bias)?;
    let Layout::Gemm(layout) = dev.layout(&Problem::Gemm(*p))? else {
        return Err(DeviceError::Problem("device answered a GEMM problem with another layout".into()));
    };
    staged(dev, |s| gemm_staged(s, p, layout, a, Weights::Host(b), bias))
}

/// [`gemm`] with B already on the device ([`Packed`], e.g. a layer's weights
/// uploaded once): only A and the output move.
pub fn gemm_packed(
    dev: &mut dyn Device,
    p: &GemmProblem,
    a: &[i8],
    b: &Packed,
    bias: Option<&[i32]>,
) -> Result<(GemmOutput, RunStats), DeviceError> {
    check_operands(p, a.len(), b.rows * b.cols, bias)?;
    let Layout::Gemm(layout) = dev.layout(&Problem::Gemm(*p))? else {
        return Err(DeviceError::Problem("device answered a GEMM problem with another layout".into()));
    };
    b.check("B", p.k, p.n, layout.ldb, layout.b_bytes)?;
    staged(dev, |s| gemm_staged(s, p, layout, a, Weights::Device(b.buf), bias))
}

/// The rest of a GEMM once B is on the device.
fn gemm_staged(
    s: &mut Staging,
    p: &GemmProblem,
    layout: GemmLayout,
    a: &[i8],
    b: Weights,
    bias: Option<&[i32]>,
) -> Result<(GemmOutput, RunStats), DeviceError> {
    {
        let (lda, ldc) = (layout.lda as usize, layout.ldc as usize);
        let a_buf = s.upload(layout.a_bytes, &pack_rows(&i8_bytes(a), p.m, p.k, lda))?;
        let b_buf = b.stage(s, p.k, p.n, layout.ldb, layout.b_bytes)?;
        let bias_buf = match bias {
            Some(bias) => Some(s.upload(layout.bias_bytes, &i32_bytes(bias, layout.bias_bytes))?),
            None => None,
        };
        let c_buf = s.poisoned(layout.c_bytes)?;
        let launch = Launch::Gemm(GemmArgs { problem: *p, layout, a: a_buf, b: b_buf, bias: bias_buf, c: c_buf });
        let stats = s.dev.launch(&launch)?;
        let c = s.download(c_buf, 0, ldc * p.m)?;
        Ok((unpack_output(&c, p, ldc), stats))
    }
}

/// `C2 = epilogue2(epilogue1(A·B1)·B2)` on `dev`, the first product staying in
/// device memory as the second's A (an FFN's up and down projections). The
/// first must requantize to int8 and its C layout must be the second's A layout.
pub fn gemm_pair(
    dev: &mut dyn Device,
    p1: &GemmProblem,
    p2: &GemmProblem,
    a: &[i8],
    b1: &[i8],
    b2: &[i8],
) -> Result<(GemmOutput, [RunStats; 2]), DeviceError> {
    check_operands(p1, a.len(), b1.len(), None)?;
    check_operands(p2, p2.m * p2.k, b2.len(), None)?;
    let (l1, l2) = pair_layouts(dev, p1, p2)?;
    staged(dev, |s| pair_staged(s, [p1, p2], [l1, l2], a, [Weights::Host(b1), Weights::Host(b2)]))
}

/// [`gemm_pair`] with both B already on the device ([`Packed`]).
pub fn gemm_pair_packed(
    dev: &mut dyn Device,
    p1: &GemmProblem,
    p2: &GemmProblem,
    a: &[i8],
    b1: &Packed,
    b2: &Packed,
) -> Result<(GemmOutput, [RunStats; 2]), DeviceError> {
    check_operands(p1, a.len(), b1.rows * b1.cols, None)?;
    check_operands(p2, p2.m * p2.k, b2.rows * b2.cols, None)?;
    let (l1, l2) = pair_layouts(dev, p1, p2)?;
    b1.check("B1", p1.k, p1.n, l1.ldb, l1.b_bytes)?;
    b2.check("B2", p2.k, p2.n, l2.ldb, l2.b_bytes)?;
    staged(dev, |s| pair_staged(s, [p1, p2], [l1, l2], a, [Weights::Device(b1.buf), Weights::Device(b2.buf)]))
}

/// The layouts of a chained pair, refused unless the first's int8 output is the second's A.
fn pair_layouts(dev: &dyn Device, p1: &GemmProblem, p2: &GemmProblem) -> Result<(GemmLayout, GemmLayout), DeviceError> {
    if p1.requant.is_none() || (p2.m, p2.k) != (p1.m, p1.n) {
        return Err(DeviceError::Problem(format!(
            "cannot chain {}×{} int{} output into a {}×{} A",
            p1.m,
            p1.n,
            if p1.requant.is_some() { 8 } else { 32 },
            p2.m,
            p2.k
        )));
    }
    let (Layout::Gemm(l1), Layout::Gemm(l2)) = (dev.layout(&Problem::Gemm(*p1))?, dev.layout(&Problem::Gemm(*p2))?)
    else {
        return Err(DeviceError::Problem("device answered a GEMM problem with another layout".into()));
    };
    if l1.ldc != l2.lda {
        return Err(DeviceError::Problem(format!(
            "the first GEMM's C pitch {} is not the second's A pitch {} on this device",
            l1.ldc, l2.lda
        )));
    }
    Ok((l1, l2))
}

/// The rest of a chained pair once both B are on the device.
fn pair_staged(
    s: &mut Staging,
    [p1, p2]: [&GemmProblem; 2],
    [l1, l2]: [GemmLayout; 2],
    a: &[i8],
    [b1, b2]: [Weights; 2],
) -> Result<(GemmOutput, [RunStats; 2]), DeviceError> {
    let a_buf = s.upload(l1.a_bytes, &pack_rows(&i8_bytes(a), p1.m, p1.k, l1.lda as usize))?;
    let b1 = b1.stage(s, p1.k, p1.n, l1.ldb, l1.b_bytes)?;
    let b2 = b2.stage(s, p2.k, p2.n, l2.ldb, l2.b_bytes)?;
    let mid = s.poisoned(l1.c_bytes)?;
    let c_buf = s.poisoned(l2.c_bytes)?;
    let first = Launch::Gemm(GemmArgs { problem: *p1, layout: l1, a: a_buf, b: b1, bias: None, c: mid });
    let s1 = s.dev.launch(&first)?;
    let second = Launch::Gemm(GemmArgs { problem: *p2, layout: l2, a: mid, b: b2, bias: None, c: c_buf });
    let s2 = s.dev.launch(&second)?;
    let c = s.download(c_buf, 0, l2.ldc as usize * p2.m)?;
    Ok((unpack_output(&c, p2, l2.ldc as usize), [s1, s2]))
}

/// `O = attention(Q, K, V)` on `dev`, with host tensors dense
/// `[batch·heads][seq][dim]`. Heads are laid out as the device asks, O is
/// poisoned before the launch, and every buffer is freed afterwards.
pub fn attention(
    dev: &mut dyn Device,
    p: &AttentionProblem,
    q: &[i8],
    k: &[i8],
    v: &[i8],
) -> Result<(AttentionOutput, RunStats), DeviceError> {
    check_attention(p, q, k, v)?;
    let Layout::Attention(l) = dev.layout(&Problem::Attention(p.clone()))? else {
        return Err(DeviceError::Problem("device answered an attention problem with another layout".into()));
    };
    staged(dev, |s| {
        let (nh, d) = (p.heads_total(), p.dim);
        let (qs, kvs, os) = (l.q_stride as usize, l.kv_stride as usize, l.o_stride as usize);
        let q_buf = s.upload(l.q_bytes, &pack_rows(&i8_bytes(q), nh, p.seq_q * d, qs))?;
        let k_buf = s.upload(l.kv_bytes, &pack_rows(&i8_bytes(k), nh, p.seq_kv * d, kvs))?;
        let v_buf = s.upload(l.kv_bytes, &pack_rows(&i8_bytes(v), nh, p.seq_kv * d, kvs))?;
        let kv_len = match &p.kv_len {
            Some(lens) => {
                let lens: Vec<i32> = lens.iter().map(|&n| n as i32).collect();
                Some(s.upload(l.kv_len_bytes, &i32_bytes(&lens, l.kv_len_bytes))?)
            }
            None => None,
        };
        let o_buf = s.poisoned(l.o_bytes)?;
        let launch = Launch::Attention(AttentionArgs {
            problem: p.clone(),
            layout: l,
            q: q_buf,
            k: k_buf,
            v: v_buf,
            o: o_buf,
            kv_len,
        });
        let stats = s.dev.launch(&launch)?;
        let o = s.download(o_buf, 0, os * nh)?;
        Ok((unpack_attention(&o, p, os), stats))
    })
}

/// Read an attention output stored with head pitch `stride`.
pub(crate) fn unpack_attention(bytes: &[u8], p: &AttentionProblem, stride: usize) -> AttentionOutput {
    let elem = AttentionLayout::out_elem_bytes(p);
    let dense = unpack_rows(bytes, p.heads_total(), p.seq_q * p.dim * elem, stride);
    match p.params.out {
        Some(_) => AttentionOutput::I8(dense.into_iter().map(|b| b as i8).collect()),
        None => {
            AttentionOutput::I32(dense.chunks_exact(4).map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect())
        }
    }
}

/// Write an attention output into `dst` with head pitch `stride`.
pub(crate) fn pack_attention(out: &AttentionOutput, p: &AttentionProblem, stride: usize, dst: &mut [u8]) {
    let elem = AttentionLayout::out_elem_bytes(p);
    let per_head = p.seq_q * p.dim;
    for (h, head) in dst.chunks_exact_mut(stride).take(p.heads_total()).enumerate() {
        for i in 0..per_head {
            head[i * elem..(i + 1) * elem].copy_from_slice(&out.get(h * per_head + i).to_le_bytes()[..elem]);
        }
    }
}

/// Route `T` tokens `x` (T×H) with gate weights `w` (E×H, one row per
/// expert) on `dev`. Route records, dispatch plan and statistics are poisoned
/// before the launch; every buffer is freed afterwards.
pub fn moe(
    dev: &mut dyn Device,
    p: &MoeProblem,
    x: &[i8],
    w: &[i8],
    bias: Option<&[i32]>,
) -> Result<(MoeOutput, RunStats), DeviceError> {
    check_moe(p, x.len(), w.len(), bias)?;
    let Layout::Moe(l) = dev.layout(&Problem::Moe(*p))? else {
        return Err(DeviceError::Problem("device answered an MoE problem with another layout".into()));
    };
    staged(dev, |s| moe_staged(s, p, l, x, Weights::Host(w), bias))
}

/// [`moe`] with the gate weights already on the device ([`Packed`]).
pub fn moe_packed(
    dev: &mut dyn Device,
    p: &MoeProblem,
    x: &[i8],
    w: &Packed,
    bias: Option<&[i32]>,
) -> Result<(MoeOutput, RunStats), DeviceError> {
    check_moe(p, x.len(), w.rows * w.cols, bias)?;
    let Layout::Moe(l) = dev.layout(&Problem::Moe(*p))? else {
        return Err(DeviceError::Problem("device answered an MoE problem with another layout".into()));
    };
    w.check("W", p.experts, p.hidden, l.ldw, l.w_bytes)?;
    staged(dev, |s| moe_staged(s, p, l, x, Weights::Device(w.buf), bias))
}

/// The rest of a routing call once W is on the device.
fn moe_staged(
    s: &mut Staging,
    p: &MoeProblem,
    l: MoeLayout,
    x: &[i8],
    w: Weights,
    bias: Option<&[i32]>,
) -> Result<(MoeOutput, RunStats), DeviceError> {
    {
        let (t, h, e) = (p.tokens, p.hidden, p.experts);
        let x_buf = s.upload(l.x_bytes, &pack_rows(&i8_bytes(x), t, h, l.ldx as usize))?;
        let w_buf = w.stage(s, e, h, l.ldw, l.w_bytes)?;
        let bias_buf = match bias {
            Some(b) => Some(s.upload(l.bias_bytes, &i32_bytes(b, l.bias_bytes))?),
            None => None,
        };
        let (route, dispatch, stats_buf) =
            (s.poisoned(l.route_bytes)?, s.poisoned(l.dispatch_bytes)?, s.poisoned(l.stats_bytes)?);
        let launch = Launch::Moe(MoeArgs {
            problem: *p,
            layout: l,
            x: x_buf,
            w: w_buf,
            bias: bias_buf,
            route,
            dispatch,
            stats: stats_buf,
        });
        let stats = s.dev.launch(&launch)?;
        let words = |s: &mut Staging, buf: Buffer, offset: u64, n: usize| -> Result<Vec<u32>, DeviceError> {
            let bytes = s.download(buf, offset, 4 * n)?;
            Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        };
        let records = s.download(route, 0, RECORD_BYTES * t)?;
        let (experts, weights, slots) = MoeOutput::parse_records(&records, t, p.top_k);
        let head = words(s, stats_buf, 0, e + 2)?;
        let (dropped, capacity, load) = (head[0], head[1], head[2..].to_vec());
        if capacity as usize > p.tokens || load.iter().any(|&n| n as usize > p.tokens) {
            return Err(DeviceError::Problem(format!(
                "the device wrote implausible statistics (capacity {capacity}, loads up to {}) for T = {}",
                load.iter().max().unwrap_or(&0),
                p.tokens
            )));
        }
        let dispatch = (0..e)
            .map(|ex| words(s, dispatch, ex as u64 * l.dpitch, load[ex].min(capacity) as usize))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((MoeOutput { experts, weights, slots, load, dropped, capacity, dispatch }, stats))
    }
}

/// An int8 matrix already on a device, rows `pitch` bytes apart: a layer's
/// weights uploaded once ([`Packed::upload`]) and used by many launches, as a
/// deployed model keeps them in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub buf: Buffer,
    pub rows: usize,
    pub cols: usize,
    pub pitch: u64,
    /// Size of the buffer.
    pub bytes: u64,
}

impl Packed {
    /// Upload dense row-major `data` (`rows × cols`) into a new `bytes`-byte
    /// buffer with rows `pitch` bytes apart (a layout's `ldb` and `b_bytes`).
    pub fn upload(
        dev: &mut dyn Device,
        data: &[i8],
        rows: usize,
        cols: usize,
        pitch: u64,
        bytes: u64,
    ) -> Result<Self, DeviceError> {
        if data.len() != rows * cols || (pitch as usize) < cols || bytes < pitch * rows as u64 {
            return Err(DeviceError::Problem(format!(
                "cannot pack {} values as {rows}×{cols} rows {pitch} bytes apart in {bytes} bytes",
                data.len()
            )));
        }
        let buf = dev.alloc(bytes)?;
        let packed = pack_rows(&i8_bytes(data), rows, cols, pitch as usize);
        if let Err(e) = dev.upload(buf, 0, &packed) {
            let _ = dev.free(buf);
            return Err(e);
        }
        Ok(Self { buf, rows, cols, pitch, bytes })
    }

    /// Refuse a packed operand whose shape or pitch is not what the launch's layout asks.
    fn check(&self, name: &str, rows: usize, cols: usize, pitch: u64, bytes: u64) -> Result<(), DeviceError> {
        if (self.rows, self.cols, self.pitch) != (rows, cols, pitch) || self.bytes < bytes {
            return Err(DeviceError::Problem(format!(
                "{name} on the device is {}×{} with pitch {} in {} bytes; this launch needs {rows}×{cols} with pitch {pitch} in {bytes}",
                self.rows, self.cols, self.pitch, self.bytes
            )));
        }
        Ok(())
    }
}

/// A weight operand of one launch: host rows to pack and upload now (after
/// the activations, so buffers keep their order on the device), or a
/// [`Packed`] buffer already there.
#[derive(Clone, Copy)]
enum Weights<'a> {
    Host(&'a [i8]),
    Device(Buffer),
}

impl Weights<'_> {
    fn stage(self, s: &mut Staging, rows: usize, cols: usize, pitch: u64, bytes: u64) -> Result<Buffer, DeviceError> {
        match self {
            Self::Host(data) => s.upload(bytes, &pack_rows(&i8_bytes(data), rows, cols, pitch as usize)),
            Self::Device(buf) => Ok(buf),
        }
    }
}

/// Buffers of one launch on a device: each is recorded so that [`staged`]
/// frees them all afterwards, whatever happened in between.
struct Staging<'a> {
    dev: &'a mut dyn Device,
    buffers: Vec<Buffer>,
}

impl Staging<'_> {
    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let buf = self.dev.alloc(bytes)?;
        self.buffers.push(buf);
        Ok(buf)
    }

    fn upload(&mut self, bytes: u64, data: &[u8]) -> Result<Buffer, DeviceError> {
        let buf = self.alloc(bytes)?;
        self.dev.upload(buf, 0, data)?;
        Ok(buf)
    }

    /// An output buffer filled with [`POISON`].
    fn poisoned(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        self.upload(bytes, &vec![POISON; bytes as usize])
    }

    fn download(&mut self, buf: Buffer, offset: u64, len: usize) -> Result<Vec<u8>, DeviceError> {
        let mut out = vec![0; len];
        self.dev.download(buf, offset, &mut out)?;
        Ok(out)
    }
}

/// Run `f` with a [`Staging`] on `dev`, then free every buffer it allocated;
/// the first error wins.
fn staged<T>(dev: &mut dyn Device, f: impl FnOnce(&mut Staging) -> Result<T, DeviceError>) -> Result<T, DeviceError> {
    let mut s = Staging { dev, buffers: Vec::new() };
    let result = f(&mut s);
    let mut freed = Ok(());
    for buf in std::mem::take(&mut s.buffers) {
        if let Err(e) = s.dev.free(buf) {
            freed = freed.and(Err(e));
        }
    }
    let out = result?;
    freed.map(|()| out)
}

/// Little-endian int32 words, zero padded to `bytes`.
fn i32_bytes(v: &[i32], bytes: u64) -> Vec<u8> {
    let mut out: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    out.resize((bytes as usize).max(out.len()), 0);
    out
}

fn i8_bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

/// Dense rows of `row_bytes` into rows `pitch` bytes apart, zero padded.
pub(crate) fn pack_rows(dense: &[u8], rows: usize, row_bytes: usize, pitch: usize) -> Vec<u8> {
    let mut out = vec![0; rows * pitch];
    for (dst, src) in out.chunks_exact_mut(pitch).zip(dense.chunks_exact(row_bytes)) {
        dst[..row_bytes].copy_from_slice(src);
    }
    out
}

/// The first `row_bytes` of each of `rows` rows `pitch` bytes apart, densely.
pub(crate) fn unpack_rows(pitched: &[u8], rows: usize, row_bytes: usize, pitch: usize) -> Vec<u8> {
    (0..rows).flat_map(|r| &pitched[r * pitch..r * pitch + row_bytes]).copied().collect()
}

/// Write `out` into `dst` with row pitch `ldc`, leaving the padding as it is.
pub(crate) fn pack_output(out: &GemmOutput, p: &GemmProblem, ldc: usize, dst: &mut [u8]) {
    let eb = p.out_elem_bytes();
    for (i, row) in dst.chunks_exact_mut(ldc).take(p.m).enumerate() {
        for j in 0..p.n {
            let v = out.get(i * p.n + j);
            row[j * eb..(j + 1) * eb].copy_from_slice(&v.to_le_bytes()[..eb]);
        }
    }
}

/// Read an output of problem `p` stored with row pitch `ldc`.
pub(crate) fn unpack_output(bytes: &[u8], p: &GemmProblem, ldc: usize) -> GemmOutput {
    let dense = unpack_rows(bytes, p.m, p.n * p.out_elem_bytes(), ldc);
    match p.requant {
        Some(_) => GemmOutput::I8(dense.into_iter().map(|b| b as i8).collect()),
        None => GemmOutput::I32(dense.chunks_exact(4).map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()),
    }
}
