//! Host-array convenience layer over [`Device`]: pack, launch, unpack.
use crate::device::{Buffer, Device, DeviceError, GemmArgs, Launch, Layout, Problem, RunStats};
use ferrite_hw::gemm::model::check_operands;
use ferrite_hw::gemm::{GemmLayout, GemmOutput, GemmProblem};

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
    check_operands(p, a, b, bias)?;
    let Layout::Gemm(layout) = dev.layout(&Problem::Gemm(*p))?;
    let mut buffers = Vec::new();
    let result = run_gemm(dev, &mut buffers, p, layout, a, b, bias);
    let mut freed = Ok(());
    for buf in buffers {
        if let Err(e) = dev.free(buf) {
            freed = freed.and(Err(e));
        }
    }
    let out = result?;
    freed.map(|()| out)
}

/// Allocate (recording each buffer in `buffers` so the caller frees them
/// whatever happens), upload, poison C, launch, download.
fn run_gemm(
    dev: &mut dyn Device,
    buffers: &mut Vec<Buffer>,
    p: &GemmProblem,
    layout: GemmLayout,
    a: &[i8],
    b: &[i8],
    bias: Option<&[i32]>,
) -> Result<(GemmOutput, RunStats), DeviceError> {
    let mut upload =
        |dev: &mut dyn Device, bytes: u64, data: &[u8]| -> Result<Buffer, DeviceError> {
            let buf = dev.alloc(bytes)?;
            buffers.push(buf);
            dev.upload(buf, 0, data)?;
            Ok(buf)
        };
    let (lda, ldb, ldc) = (
        layout.lda as usize,
        layout.ldb as usize,
        layout.ldc as usize,
    );
    let a_buf = upload(dev, layout.a_bytes, &pack_rows(&i8_bytes(a), p.m, p.k, lda))?;
    let b_buf = upload(dev, layout.b_bytes, &pack_rows(&i8_bytes(b), p.k, p.n, ldb))?;
    let bias_buf = match bias {
        Some(bias) => Some(upload(
            dev,
            layout.bias_bytes,
            &bias
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>(),
        )?),
        None => None,
    };
    let c_buf = upload(dev, layout.c_bytes, &vec![POISON; layout.c_bytes as usize])?;
    let launch = Launch::Gemm(GemmArgs {
        problem: *p,
        layout,
        a: a_buf,
        b: b_buf,
        bias: bias_buf,
        c: c_buf,
    });
    let stats = dev.launch(&launch)?;
    let mut c = vec![0; ldc * p.m];
    dev.download(c_buf, 0, &mut c)?;
    Ok((unpack_output(&c, p, ldc), stats))
}

fn i8_bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

/// Dense rows of `row_bytes` into rows `pitch` bytes apart, zero padded.
pub(crate) fn pack_rows(dense: &[u8], rows: usize, row_bytes: usize, pitch: usize) -> Vec<u8> {
    let mut out = vec![0; rows * pitch];
    for (dst, src) in out
        .chunks_exact_mut(pitch)
        .zip(dense.chunks_exact(row_bytes))
    {
        dst[..row_bytes].copy_from_slice(src);
    }
    out
}

/// The first `row_bytes` of each of `rows` rows `pitch` bytes apart, densely.
pub(crate) fn unpack_rows(pitched: &[u8], rows: usize, row_bytes: usize, pitch: usize) -> Vec<u8> {
    (0..rows)
        .flat_map(|r| &pitched[r * pitch..r * pitch + row_bytes])
        .copied()
        .collect()
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
        None => GemmOutput::I32(
            dense
                .chunks_exact(4)
                .map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect(),
        ),
    }
}
