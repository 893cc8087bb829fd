//! NumPy `.npy` input and output for the CLI: int8 operands, int32 bias,
//! int32 or int8 results.
use ferrite_hw::attention::AttentionOutput;
use ferrite_hw::gemm::GemmOutput;
use ferrite_hw::moe::MoeOutput;
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use ndarray_npy::{read_npy, write_npy, ReadNpyError};
use std::path::{Path, PathBuf};

/// Why an `.npy` file could not be used; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("{path}: dtype is {found}, expected {expected}")]
    Dtype { path: PathBuf, found: String, expected: &'static str },
    #[error("{path}: array has {found} dimensions, expected {expected}")]
    Rank { path: PathBuf, found: usize, expected: usize },
    /// Attention tensors are per head: `[batch, heads, seq, dim]`, or with
    /// batch and heads flattened, `[batch·heads, seq, dim]`.
    #[error(
        "{path}: array has {found} dimensions, expected 4 ([batch, heads, seq, dim]) or 3 ([batch·heads, seq, dim])"
    )]
    HeadsRank { path: PathBuf, found: usize },
    #[error("{path}: {len} elements do not form a {m}×{n} matrix")]
    Shape { path: PathBuf, len: usize, m: usize, n: usize },
    #[error("{path}: {len} elements do not form an array of shape {shape:?}")]
    TensorShape { path: PathBuf, len: usize, shape: Vec<usize> },
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: ReadNpyError,
    },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: ndarray_npy::WriteNpyError,
    },
}

/// Read `path` as `T`, naming the file in every error. `rank` is the rank a
/// fixed-rank `T` expects; a dynamic-rank `ArrayD` never fails on rank, so
/// its callers pass 0 and check the rank themselves.
fn read<T: ndarray_npy::ReadNpyExt>(path: &Path, dtype: &'static str, rank: usize) -> Result<T, NpyError> {
    read_npy(path).map_err(|e| match e {
        ReadNpyError::WrongDescriptor(found) => {
            NpyError::Dtype { path: path.into(), found: found.to_string(), expected: dtype }
        }
        ReadNpyError::WrongNdim(_, found) => NpyError::Rank { path: path.into(), found, expected: rank },
        source => NpyError::Read { path: path.into(), source },
    })
}

/// An int8 matrix (`numpy.int8`, 2-D).
pub fn read_i8_matrix(path: &Path) -> Result<Array2<i8>, NpyError> {
    read(path, "int8 ('|i1')", 2)
}

/// An int32 vector (`numpy.int32`, 1-D), e.g. a bias.
pub fn read_i32_vector(path: &Path) -> Result<Array1<i32>, NpyError> {
    read(path, "int32 ('<i4')", 1)
}

/// An int8 attention operand (`numpy.int8`) of shape `[batch, heads, seq, dim]`
/// or `[batch·heads, seq, dim]`; read at any rank so that a wrong rank is
/// reported with both accepted layouts.
pub fn read_i8_heads(path: &Path) -> Result<ArrayD<i8>, NpyError> {
    let array: ArrayD<i8> = read(path, "int8 ('|i1')", 0)?;
    match array.ndim() {
        3 | 4 => Ok(array),
        found => Err(NpyError::HeadsRank { path: path.into(), found }),
    }
}

/// Write an attention output (int32 Q16 or int8, whichever it is) with `shape`.
pub fn write_attention(path: &Path, out: &AttentionOutput, shape: &[usize]) -> Result<(), NpyError> {
    let shape_err = |_| NpyError::TensorShape { path: path.into(), len: out.len(), shape: shape.to_vec() };
    let written = match out {
        AttentionOutput::Fixed(v) => {
            write_npy(path, &ArrayD::from_shape_vec(IxDyn(shape), v.clone()).map_err(shape_err)?)
        }
        AttentionOutput::I8(v) => write_npy(path, &ArrayD::from_shape_vec(IxDyn(shape), v.clone()).map_err(shape_err)?),
    };
    written.map_err(|source| NpyError::Write { path: path.into(), source })
}

/// Write an M×N output as int32 or int8, whichever it is.
pub fn write_output(path: &Path, out: &GemmOutput, m: usize, n: usize) -> Result<(), NpyError> {
    let shape_err = |_| NpyError::Shape { path: path.into(), len: out.len(), m, n };
    let written = match out {
        GemmOutput::I32(v) => write_npy(path, &Array2::from_shape_vec((m, n), v.clone()).map_err(shape_err)?),
        GemmOutput::I8(v) => write_npy(path, &Array2::from_shape_vec((m, n), v.clone()).map_err(shape_err)?),
    };
    written.map_err(|source| NpyError::Write { path: path.into(), source })
}

/// Write a router's result into `dir` as `experts.npy` (T×k uint8),
/// `weights.npy` (T×k uint16, Q0.16), `slots.npy` (T×k int32, −1 = dropped),
/// `load.npy` (E uint32) and `dispatch.npy` (E×capacity int32, −1 past each
/// expert's kept tokens). Returns the paths written.
pub fn write_moe(dir: &Path, out: &MoeOutput, k: usize) -> Result<Vec<PathBuf>, NpyError> {
    let t = out.experts.len() / k.max(1);
    let cap = out.capacity as usize;
    let mut dispatch = Array2::from_elem((out.dispatch.len(), cap), -1i32);
    for (e, toks) in out.dispatch.iter().enumerate() {
        for (s, &tok) in toks.iter().enumerate().take(cap) {
            dispatch[(e, s)] = tok as i32;
        }
    }
    let paths: Vec<PathBuf> =
        ["experts", "weights", "slots", "load", "dispatch"].iter().map(|n| dir.join(format!("{n}.npy"))).collect();
    let per_token = |path: &Path, len: usize| NpyError::TensorShape { path: path.into(), len, shape: vec![t, k] };
    save(&paths[0], Array2::from_shape_vec((t, k), out.experts.clone()).map_err(|_| per_token(&paths[0], t * k))?)?;
    save(&paths[1], Array2::from_shape_vec((t, k), out.weights.clone()).map_err(|_| per_token(&paths[1], t * k))?)?;
    save(&paths[2], Array2::from_shape_vec((t, k), out.slots.clone()).map_err(|_| per_token(&paths[2], t * k))?)?;
    save(&paths[3], Array1::from_vec(out.load.clone()))?;
    save(&paths[4], dispatch)?;
    Ok(paths)
}

fn save<A: ndarray_npy::WriteNpyExt>(path: &Path, array: A) -> Result<(), NpyError> {
    write_npy(path, &array).map_err(|source| NpyError::Write { path: path.into(), source })
}
