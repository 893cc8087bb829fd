//! Bit-exact golden model of the GEMM unit, and its float64 reference.
//!
//! The model is the unit's specification: `C = epilogue(A·B + bias)` with an
//! exact int32 accumulator, two's-complement wrapping bias add, optional ReLU,
//! then optional requantization (see [`crate::numerics::requantize`]). Tiling
//! does not change the result, so the model needs no [`super::GemmConfig`]
//! (only [`gemm_registers`], which also says what the unit refuses).
use super::config::{FLAG_BIAS, FLAG_RELU, FLAG_REQUANT};
use super::{GemmConfig, GemmProblem};
use crate::numerics::{requantize, Requant, MAX_REQUANT_SHIFT};
use crate::unit::{check_bias, check_len, Memory, Output, RegisterValues};
use crate::HwError;

/// Output of one GEMM: int32, or int8 when requantized. Row-major M×N.
pub type GemmOutput = Output;

/// Check operand lengths (host or device buffers) against the problem's shapes.
pub fn check_operands(p: &GemmProblem, a_len: usize, b_len: usize, bias: Option<&[i32]>) -> Result<(), HwError> {
    p.validate()?;
    check_len("A", a_len, p.m * p.k, || format!("M×K = {}×{}", p.m, p.k))?;
    check_len("B", b_len, p.k * p.n, || format!("K×N = {}×{}", p.k, p.n))?;
    check_bias(p.bias, bias, p.n, || format!("N = {}", p.n))
}

/// The int32 value of output (i, j) before requantization.
fn pre_requant(p: &GemmProblem, a: &[i8], b: &[i8], bias: Option<&[i32]>, i: usize, j: usize) -> i32 {
    let acc = (0..p.k).fold(0i32, |acc, kk| acc.wrapping_add(a[i * p.k + kk] as i32 * b[kk * p.n + j] as i32));
    finish(p, acc, bias, j)
}

/// Wrapping bias add and ReLU on the accumulator of column `j`.
fn finish(p: &GemmProblem, acc: i32, bias: Option<&[i32]>, j: usize) -> i32 {
    let v = acc.wrapping_add(bias.map_or(0, |b| b[j]));
    if p.relu {
        v.max(0)
    } else {
        v
    }
}

/// The golden model: exactly what the hardware writes to C.
pub fn gemm(p: &GemmProblem, a: &[i8], b: &[i8], bias: Option<&[i32]>) -> Result<GemmOutput, HwError> {
    check_operands(p, a.len(), b.len(), bias)?;
    let vals = (0..p.m).flat_map(|i| (0..p.n).map(move |j| (i, j)));
    Ok(match p.requant {
        None => GemmOutput::I32(vals.map(|(i, j)| pre_requant(p, a, b, bias, i, j)).collect()),
        Some(rq) => GemmOutput::I8(vals.map(|(i, j)| requantize(pre_requant(p, a, b, bias, i, j), rq)).collect()),
    })
}

/// The golden model on some rows of A only, for checks of problems too large
/// to run whole: those rows of [`gemm`]'s output, in that order (and
/// [`gemm_f64`]'s for `f64_rows`). B is read through one transposed copy, so
/// every output is a sequential dot product (column reads of a large B miss
/// the cache on every element).
pub fn gemm_rows(
    p: &GemmProblem,
    a: &[i8],
    b: &[i8],
    bias: Option<&[i32]>,
    rows: &[usize],
) -> Result<(GemmOutput, Vec<f64>), HwError> {
    check_operands(p, a.len(), b.len(), bias)?;
    if let Some(&bad) = rows.iter().find(|&&i| i >= p.m) {
        return Err(HwError::Problem(format!("row {bad} outside M = {}", p.m)));
    }
    let mut bt = vec![0i8; p.n * p.k];
    for (kk, row) in b.chunks_exact(p.n).enumerate() {
        for (j, &x) in row.iter().enumerate() {
            bt[j * p.k + kk] = x;
        }
    }
    let col = |j: usize| &bt[j * p.k..(j + 1) * p.k];
    let (mut acc, mut reference) = (Vec::with_capacity(rows.len() * p.n), Vec::with_capacity(rows.len() * p.n));
    let scale = p.requant.map_or(1.0, |rq| rq.multiplier as f64 / 2f64.powi(rq.shift as i32));
    for &i in rows {
        let ai = &a[i * p.k..(i + 1) * p.k];
        for j in 0..p.n {
            let dot = ai.iter().zip(col(j)).fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32));
            acc.push(finish(p, dot, bias, j));
            let mut f: f64 = ai.iter().zip(col(j)).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>()
                + bias.map_or(0.0, |b| b[j] as f64);
            if p.relu {
                f = f.max(0.0);
            }
            reference.push(f * scale);
        }
    }
    let out = match p.requant {
        None => GemmOutput::I32(acc),
        Some(rq) => GemmOutput::I8(acc.into_iter().map(|x| requantize(x, rq)).collect()),
    };
    Ok((out, reference))
}

/// Float64 reference of the same computation: real-valued scale, no rounding
/// and no saturation. Comparing it with [`gemm`] measures the model's error.
pub fn gemm_f64(p: &GemmProblem, a: &[i8], b: &[i8], bias: Option<&[i32]>) -> Result<Vec<f64>, HwError> {
    check_operands(p, a.len(), b.len(), bias)?;
    let scale = p.requant.map_or(1.0, |rq| rq.multiplier as f64 / 2f64.powi(rq.shift as i32));
    let mut out = Vec::with_capacity(p.m * p.n);
    for i in 0..p.m {
        for j in 0..p.n {
            let mut acc: f64 = (0..p.k).map(|kk| a[i * p.k + kk] as f64 * b[kk * p.n + j] as f64).sum();
            acc += bias.map_or(0.0, |b| b[j] as f64);
            if p.relu {
                acc = acc.max(0.0);
            }
            out.push(acc * scale);
        }
    }
    Ok(out)
}

/// Error of an integer output against the float64 reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    /// Largest |out − ref| in output units (LSB for int8).
    pub max_abs: f64,
    /// ‖out − ref‖ / ‖ref‖ (Frobenius); 0 when the reference is all zero.
    pub rel_fro: f64,
    /// Elements whose reference lies outside the output range (saturated).
    pub saturated: usize,
}

pub fn error_vs_f64(out: &GemmOutput, reference: &[f64]) -> ErrorStats {
    let (lo, hi) = match out {
        GemmOutput::I8(_) => (i8::MIN as f64, i8::MAX as f64),
        GemmOutput::I32(_) => (i32::MIN as f64, i32::MAX as f64),
    };
    let (mut max_abs, mut num, mut den, mut saturated) = (0f64, 0f64, 0f64, 0);
    for (i, &r) in reference.iter().enumerate() {
        let d = out.get(i) as f64 - r;
        if r < lo - 0.5 || r > hi + 0.5 {
            saturated += 1;
        } else {
            max_abs = max_abs.max(d.abs());
        }
        num += d * d;
        den += r * r;
    }
    ErrorStats { max_abs, rel_fro: if den > 0.0 { (num / den).sqrt() } else { num.sqrt() }, saturated }
}

/// The golden model at the register level, what the unit does with its
/// registers and memory: refuse (STATUS 1, no memory access) when M, N or K
/// is 0, K > k_max, or a bias comes with N > n_max; otherwise read A, B and the
/// bias at their addresses and pitches and write each row's N outputs of C
/// (int32, or int8 when requantizing), leaving the pitch padding as it was.
pub fn gemm_registers(cfg: &GemmConfig, args: &RegisterValues, mem: &mut dyn Memory) -> Result<u32, HwError> {
    let (m, n, k) = (args.get("M")? as usize, args.get("N")? as usize, args.get("K")? as usize);
    let flags = args.get("FLAGS")? as u32;
    let (bias_on, requant_on) = (flags & FLAG_BIAS != 0, flags & FLAG_REQUANT != 0);
    let (lda, ldb, ldc) = (args.get("LDA")?, args.get("LDB")?, args.get("LDC")?);
    let qshift = args.get("QSHIFT")?;
    let beat = cfg.port_bytes() as u64;
    let row_c = if requant_on { n } else { 4 * n } as u64;
    // What the RTL refuses at start (STATUS bit 0, no memory traffic): docs/gemm.md.
    if m == 0
        || n == 0
        || k == 0
        || k > cfg.k_max
        || (bias_on && n > cfg.n_max)
        || qshift > MAX_REQUANT_SHIFT as u64
        || [lda, ldb, ldc].iter().any(|ld| !ld.is_multiple_of(beat))
        || lda < k as u64
        || ldb < n as u64
        || ldc < row_c
    {
        return Ok(1);
    }
    let requant = match requant_on {
        true => Some(Requant { multiplier: args.get("QMULT")? as u32 as i32, shift: qshift as u32 }),
        false => None,
    };
    let p = GemmProblem { m, n, k, bias: bias_on, relu: flags & FLAG_RELU != 0, requant };
    let rows = |mem: &dyn Memory, base: u64, pitch: u64, count: usize, len: usize| -> Result<Vec<u8>, HwError> {
        let mut out = vec![0; count * len];
        for (r, row) in out.chunks_mut(len).enumerate() {
            mem.read(base + r as u64 * pitch, row)?;
        }
        Ok(out)
    };
    let as_i8 = |v: Vec<u8>| v.into_iter().map(|x| x as i8).collect::<Vec<_>>();
    let a = as_i8(rows(mem, args.get("A")?, lda, m, k)?);
    let b = as_i8(rows(mem, args.get("B")?, ldb, k, n)?);
    let bias = match bias_on {
        true => Some(
            rows(mem, args.get("BIAS")?, 0, 1, 4 * n)?
                .chunks(4)
                .map(|w| i32::from_le_bytes(w.try_into().expect("4-byte chunks")))
                .collect::<Vec<_>>(),
        ),
        false => None,
    };
    let out = gemm(&p, &a, &b, bias.as_deref())?;
    let bytes: Vec<u8> = match &out {
        GemmOutput::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        GemmOutput::I8(v) => v.iter().map(|&x| x as u8).collect(),
    };
    let (c, row_bytes) = (args.get("C")?, n * p.out_elem_bytes());
    for (i, row) in bytes.chunks(row_bytes).enumerate() {
        mem.write(c + i as u64 * ldc, row)?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::Requant;

    #[test]
    fn sampled_rows_equal_the_full_model() {
        let p = GemmProblem {
            bias: true,
            relu: true,
            requant: Some(Requant { multiplier: 1 << 30, shift: 36 }),
            ..GemmProblem::new(5, 3, 7)
        };
        let a: Vec<i8> = (0..35).map(|x| (x * 37 % 256) as u8 as i8).collect();
        let b: Vec<i8> = (0..21).map(|x| (x * 91 % 256) as u8 as i8).collect();
        let bias = [-70_000, 5, i32::MAX];
        let (GemmOutput::I8(full), f64_full) =
            (gemm(&p, &a, &b, Some(&bias)).unwrap(), gemm_f64(&p, &a, &b, Some(&bias)).unwrap())
        else {
            panic!("requantized output expected")
        };
        let (GemmOutput::I8(some), f64_some) = gemm_rows(&p, &a, &b, Some(&bias), &[4, 0, 2]).unwrap() else {
            panic!("requantized output expected")
        };
        assert_eq!(some, [&full[12..15], &full[0..3], &full[6..9]].concat());
        assert_eq!(f64_some, [&f64_full[12..15], &f64_full[0..3], &f64_full[6..9]].concat());
        assert!(gemm_rows(&p, &a, &b, Some(&bias), &[5]).is_err());
    }

    #[test]
    fn small_known_product() {
        // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50]
        let p = GemmProblem::new(2, 2, 2);
        let out = gemm(&p, &[1, 2, 3, 4], &[5, 6, 7, 8], None).unwrap();
        assert_eq!(out, GemmOutput::I32(vec![19, 22, 43, 50]));
        let p = GemmProblem { bias: true, relu: true, ..p };
        let out = gemm(&p, &[1, 2, 3, 4], &[5, 6, 7, 8], Some(&[-20, 0])).unwrap();
        assert_eq!(out, GemmOutput::I32(vec![0, 22, 23, 50]));
    }

    #[test]
    fn requant_error_is_within_half_lsb() {
        let p = GemmProblem { requant: Requant::from_scale(1.0 / 300.0), ..GemmProblem::new(3, 5, 7) };
        let a: Vec<i8> = (0..21).map(|i| (i * 37 % 255 - 127) as i8).collect();
        let b: Vec<i8> = (0..35).map(|i| (i * 53 % 255 - 127) as i8).collect();
        let out = gemm(&p, &a, &b, None).unwrap();
        let stats = error_vs_f64(&out, &gemm_f64(&p, &a, &b, None).unwrap());
        assert!(stats.max_abs <= 0.5 + 1e-9, "{stats:?}");
    }

    #[test]
    fn shape_errors_are_reported() {
        let p = GemmProblem::new(2, 2, 2);
        let err = gemm(&p, &[1, 2, 3], &[5, 6, 7, 8], None).unwrap_err();
        assert!(err.to_string().contains("A has 3 elements"), "{err}");
        assert!(gemm(&p, &[0; 4], &[0; 4], Some(&[0, 0])).is_err());
    }
}
