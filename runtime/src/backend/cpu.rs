//! The CPU device: the golden model itself, or a fast path through a tuned
//! CPU GEMM that must stay bit-exact with it.
use crate::device::{
    check_attention_buffers, check_gemm_buffers, check_moe_buffers, AttentionArgs, Buffer, Device, DeviceError,
    DeviceInfo, DeviceKind, GemmArgs, Launch, Layout, MoeArgs, Problem, RegisterArgs, RunStats,
};
use crate::driver;
use crate::ops::{pack_attention, pack_output, unpack_rows};
use ferrite_hw::attention::AttentionLayout;
use ferrite_hw::gemm::model::check_operands;
use ferrite_hw::gemm::{GemmLayout, GemmOutput, GemmProblem};
use ferrite_hw::moe::config::RECORD_BYTES;
use ferrite_hw::moe::MoeLayout;
use ferrite_hw::numerics::requantize;
use ferrite_hw::unit::{Memory, RegisterValues};
use ferrite_hw::HwError;
use ndarray::Array2;
use std::collections::HashMap;
use std::time::Instant;

/// Which CPU implementation runs GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuMode {
    /// `ferrite_hw::gemm::gemm`, the specification (slow, obviously right).
    Golden,
    /// [`gemm_fast`]: matrixmultiply's dgemm plus an integer epilogue.
    Fast,
}

/// Host-memory device; buffers are plain byte vectors.
#[derive(Debug)]
pub struct CpuDevice {
    mode: CpuMode,
    buffers: HashMap<u64, Vec<u8>>,
    next_id: u64,
}

impl CpuDevice {
    pub fn new(mode: CpuMode) -> Self {
        Self { mode, buffers: HashMap::new(), next_id: 1 }
    }

    fn buffer(&self, buf: Buffer, offset: u64, len: usize) -> Result<&[u8], DeviceError> {
        let data = self.buffers.get(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        let range = span(buf, offset, len, data.len())?;
        Ok(&data[range])
    }

    fn buffer_mut(&mut self, buf: Buffer, offset: u64, len: usize) -> Result<&mut [u8], DeviceError> {
        let data = self.buffers.get_mut(&buf.id()).ok_or(DeviceError::UnknownBuffer(buf.id()))?;
        let range = span(buf, offset, len, data.len())?;
        Ok(&mut data[range])
    }

    /// The unit's register-level golden model on the CPU's buffers; a STATUS
    /// with bit 0 set is a refused run, as the board driver reports it.
    fn run_registers(&mut self, r: &RegisterArgs) -> Result<(), DeviceError> {
        let address = |buf: Buffer| {
            if self.buffers.contains_key(&buf.id()) {
                Ok(buf.id() << BUFFER_SHIFT)
            } else {
                Err(DeviceError::UnknownBuffer(buf.id()))
            }
        };
        let args = driver::register_args(&*r.unit.0, r, &address)?;
        let values = RegisterValues(args.values);
        let status = r.unit.0.run_registers(&values, &mut AddressSpace(&mut self.buffers))?;
        if status & 1 != 0 {
            return Err(DeviceError::Fault { status });
        }
        Ok(())
    }

    /// The golden model in both modes: fixed-point attention has no faster
    /// CPU library path that stays bit-exact.
    fn run_attention(&mut self, a: &AttentionArgs) -> Result<(), DeviceError> {
        check_attention_buffers(a)?;
        let (p, l) = (&a.problem, &a.layout);
        let (nh, d) = (p.heads_total(), p.dim);
        let read = |dev: &Self, buf: Buffer, rows: usize, stride: u64| -> Result<Vec<i8>, DeviceError> {
            let bytes = dev.buffer(buf, 0, (stride * nh as u64) as usize)?;
            Ok(to_i8(unpack_rows(bytes, nh, rows * d, stride as usize)))
        };
        let q = read(self, a.q, p.seq_q, l.q_stride)?;
        let k = read(self, a.k, p.seq_kv, l.kv_stride)?;
        let v = read(self, a.v, p.seq_kv, l.kv_stride)?;
        let out = ferrite_hw::attention::attention(p, &q, &k, &v)?;
        let o = self.buffer_mut(a.o, 0, (l.o_stride * nh as u64) as usize)?;
        pack_attention(&out, p, l.o_stride as usize, o);
        Ok(())
    }

    /// The golden router; writes the same bytes the unit does (dispatch rows
    /// only up to each expert's kept count, the rest left as it was).
    fn run_moe(&mut self, m: &MoeArgs) -> Result<(), DeviceError> {
        check_moe_buffers(m)?;
        let (p, l) = (&m.problem, &m.layout);
        let (t, h, e) = (p.tokens, p.hidden, p.experts);
        let x = to_i8(unpack_rows(self.buffer(m.x, 0, (l.ldx * t as u64) as usize)?, t, h, l.ldx as usize));
        let w = to_i8(unpack_rows(self.buffer(m.w, 0, (l.ldw * e as u64) as usize)?, e, h, l.ldw as usize));
        let bias = match m.bias {
            Some(buf) => Some(
                self.buffer(buf, 0, 4 * e)?
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect::<Vec<_>>(),
            ),
            None => None,
        };
        let out = ferrite_hw::moe::route(p, &x, &w, bias.as_deref())?;
        let route = self.buffer_mut(m.route, 0, RECORD_BYTES * t)?;
        for (tok, rec) in route.chunks_exact_mut(RECORD_BYTES).enumerate() {
            rec.copy_from_slice(&out.record(tok, p.top_k));
        }
        let words: Vec<u8> =
            [out.dropped, out.capacity].iter().chain(&out.load).flat_map(|v| v.to_le_bytes()).collect();
        self.buffer_mut(m.stats, 0, words.len())?.copy_from_slice(&words);
        for (ex, tokens) in out.dispatch.iter().enumerate() {
            let row: Vec<u8> = tokens.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.buffer_mut(m.dispatch, ex as u64 * l.dpitch, row.len())?.copy_from_slice(&row);
        }
        Ok(())
    }

    fn run_gemm(&mut self, g: &GemmArgs) -> Result<(), DeviceError> {
        check_gemm_buffers(g)?;
        let (p, l) = (&g.problem, &g.layout);
        let a = to_i8(unpack_rows(self.buffer(g.a, 0, (l.lda * p.m as u64) as usize)?, p.m, p.k, l.lda as usize));
        let b = to_i8(unpack_rows(self.buffer(g.b, 0, (l.ldb * p.k as u64) as usize)?, p.k, p.n, l.ldb as usize));
        let bias = match g.bias {
            Some(buf) => Some(
                self.buffer(buf, 0, 4 * p.n)?
                    .chunks_exact(4)
                    .map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                    .collect::<Vec<_>>(),
            ),
            None => None,
        };
        let out = match self.mode {
            CpuMode::Golden => ferrite_hw::gemm::gemm(p, &a, &b, bias.as_deref())?,
            CpuMode::Fast => gemm_fast(p, &a, &b, bias.as_deref())?,
        };
        let ldc = l.ldc as usize;
        let c = self.buffer_mut(g.c, 0, ldc * p.m)?;
        pack_output(&out, p, ldc, c);
        Ok(())
    }
}

/// Bits of a register-level launch's address below the buffer id: buffer
/// `id` sits at `id << BUFFER_SHIFT`, so every buffer gets a 1 TiB window.
const BUFFER_SHIFT: u32 = 40;

/// The CPU's buffers as the flat address space a register-level golden model
/// reads and writes; an access outside a buffer is an error, as on a board's
/// memory protection, never a silent wrap.
struct AddressSpace<'a>(&'a mut HashMap<u64, Vec<u8>>);

impl AddressSpace<'_> {
    fn span(&self, addr: u64, len: usize) -> Result<(u64, std::ops::Range<usize>), HwError> {
        let (id, offset) = (addr >> BUFFER_SHIFT, addr & ((1 << BUFFER_SHIFT) - 1));
        let size = self.0.get(&id).map(Vec::len);
        let end = (offset as usize).checked_add(len).filter(|&e| size.is_some_and(|s| e <= s));
        end.map(|end| (id, offset as usize..end)).ok_or_else(|| {
            HwError::Problem(format!("the unit accessed {len} bytes at {addr:#x}, outside every buffer"))
        })
    }
}

impl Memory for AddressSpace<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), HwError> {
        let (id, range) = self.span(addr, out.len())?;
        out.copy_from_slice(&self.0[&id][range]);
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), HwError> {
        let (id, range) = self.span(addr, data.len())?;
        self.0.get_mut(&id).expect("span checked the buffer")[range].copy_from_slice(data);
        Ok(())
    }
}

/// The byte range `offset..offset+len` of a buffer, checked.
fn span(buf: Buffer, offset: u64, len: usize, size: usize) -> Result<std::ops::Range<usize>, DeviceError> {
    let oob = || DeviceError::OutOfBounds { id: buf.id(), offset, len: len as u64, size: size as u64 };
    let start = usize::try_from(offset).map_err(|_| oob())?;
    let end = start.checked_add(len).filter(|&e| e <= size).ok_or_else(oob)?;
    Ok(start..end)
}

fn to_i8(bytes: Vec<u8>) -> Vec<i8> {
    bytes.into_iter().map(|b| b as i8).collect()
}

impl Device for CpuDevice {
    fn info(&self) -> DeviceInfo {
        let name = match self.mode {
            CpuMode::Golden => "cpu (golden model)",
            CpuMode::Fast => "cpu-fast (matrixmultiply)",
        };
        DeviceInfo { name: name.into(), kind: DeviceKind::Cpu, clock_mhz: None }
    }

    /// Dense rows: the CPU has no beat to align to.
    fn layout(&self, problem: &Problem) -> Result<Layout, DeviceError> {
        match problem {
            Problem::Gemm(p) => {
                p.validate()?;
                Ok(Layout::Gemm(GemmLayout::with_beat(p, 1)))
            }
            Problem::Attention(p) => {
                p.validate()?;
                Ok(Layout::Attention(AttentionLayout::new(p, 1)))
            }
            Problem::Moe(p) => {
                p.validate()?;
                Ok(Layout::Moe(MoeLayout::with_beat(p, 1)))
            }
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, DeviceError> {
        let oom = || DeviceError::OutOfMemory { requested: bytes, available: 0 };
        crate::memory::check_host(bytes)?;
        let len = usize::try_from(bytes).map_err(|_| oom())?;
        let mut data = Vec::new();
        data.try_reserve_exact(len).map_err(|_| oom())?;
        data.resize(len, 0);
        let id = self.next_id;
        self.next_id += 1;
        self.buffers.insert(id, data);
        Ok(Buffer::new(id, bytes))
    }

    fn upload(&mut self, buf: Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.buffer_mut(buf, offset, data.len())?.copy_from_slice(data);
        Ok(())
    }

    fn download(&mut self, buf: Buffer, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        out.copy_from_slice(self.buffer(buf, offset, out.len())?);
        Ok(())
    }

    fn free(&mut self, buf: Buffer) -> Result<(), DeviceError> {
        self.buffers.remove(&buf.id()).map(drop).ok_or(DeviceError::UnknownBuffer(buf.id()))
    }

    fn launch(&mut self, launch: &Launch) -> Result<RunStats, DeviceError> {
        let start = Instant::now();
        match launch {
            Launch::Gemm(g) => self.run_gemm(g)?,
            Launch::Attention(a) => self.run_attention(a)?,
            Launch::Moe(m) => self.run_moe(m)?,
            Launch::Registers(r) => self.run_registers(r)?,
        }
        Ok(RunStats { wall: start.elapsed(), useful_macs: launch.useful_macs(), cycles: None })
    }
}

/// The GEMM through matrixmultiply's dgemm (via ndarray), epilogue in integers.
///
/// Each product of two int8 values is below 2^14 in magnitude, so any sum of
/// fewer than 2^39 of them is an exact f64 integer whatever order dgemm adds
/// in. Converting through i64 to i32 then wraps modulo 2^32 exactly like the
/// unit's int32 accumulator, which makes the result bit-exact with
/// [`ferrite_hw::gemm::gemm`].
pub fn gemm_fast(p: &GemmProblem, a: &[i8], b: &[i8], bias: Option<&[i32]>) -> Result<GemmOutput, HwError> {
    check_operands(p, a.len(), b.len(), bias)?;
    let a = Array2::from_shape_fn((p.m, p.k), |(i, kk)| a[i * p.k + kk] as f64);
    let b = Array2::from_shape_fn((p.k, p.n), |(kk, j)| b[kk * p.n + j] as f64);
    let acc = a.dot(&b);
    let pre = acc.outer_iter().flat_map(|row| {
        row.into_iter()
            .enumerate()
            .map(|(j, &v)| {
                let v = (v as i64 as i32).wrapping_add(bias.map_or(0, |b| b[j]));
                if p.relu {
                    v.max(0)
                } else {
                    v
                }
            })
            .collect::<Vec<_>>()
    });
    Ok(match p.requant {
        None => GemmOutput::I32(pre.collect()),
        Some(rq) => GemmOutput::I8(pre.map(|v| requantize(v, rq)).collect()),
    })
}
