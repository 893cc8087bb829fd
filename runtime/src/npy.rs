//! NumPy `.npy` input and output for the CLI: int8 operands, int32 bias,
//! int32 or int8 results.
use ferrite_hw::attention::AttentionOutput;
use ferrite_hw::gemm::GemmOutput;
use ferrite_hw::moe::MoeOutput;
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use ndarray_npy::{write_npy, ReadNpyError};
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
    /// The file cannot be read at all (missing, unreadable).
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not the `.npy` file they claim to be; `reason` says what
    /// was expected where (magic, header, dtype, shape, byte count).
    #[error("{path}: not a valid .npy file: {reason}")]
    Malformed { path: PathBuf, reason: String },
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
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io { path: path.into(), source })?;
    from_bytes(path, &bytes, dtype, rank)
}

/// [`read`] of bytes already in memory; `path` only names them in errors.
/// The header is checked first ([`check_header`]), so a short or lying file
/// is described rather than reported as an I/O error, and a shape larger
/// than the file is never allocated.
fn from_bytes<T: ndarray_npy::ReadNpyExt>(
    path: &Path,
    bytes: &[u8],
    dtype: &'static str,
    rank: usize,
) -> Result<T, NpyError> {
    check_header(bytes).map_err(|reason| NpyError::Malformed { path: path.into(), reason })?;
    T::read_npy(bytes).map_err(|e| match e {
        ReadNpyError::WrongDescriptor(found) => {
            NpyError::Dtype { path: path.into(), found: found.to_string(), expected: dtype }
        }
        ReadNpyError::WrongNdim(_, found) => NpyError::Rank { path: path.into(), found, expected: rank },
        // ndarray-npy's parse errors draw a multi-line caret diagram: keep it on one line.
        other => {
            let reason = other.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
            NpyError::Malformed { path: path.into(), reason }
        }
    })
}

/// The parts of an `.npy` header that say how many bytes follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The dtype descriptor, e.g. `|i1` or `<i4`.
    pub descr: String,
    pub shape: Vec<usize>,
    /// Offset of the data: magic, version, length field and header text.
    pub data_offset: usize,
    /// Bytes of data the header announces.
    pub data_bytes: u64,
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// Parse and check the header of an `.npy` file: magic, version, header
/// length, `descr` and `shape`, and that the file holds the data bytes the
/// shape and dtype announce. The error says what was expected and found.
pub fn check_header(bytes: &[u8]) -> Result<Header, String> {
    if bytes.len() < MAGIC.len() + 2 || !bytes.starts_with(MAGIC) {
        let got = &bytes[..bytes.len().min(MAGIC.len())];
        return Err(format!("expected the magic \\x93NUMPY at the start, found {:?}", String::from_utf8_lossy(got)));
    }
    let major = bytes[MAGIC.len()];
    let len_bytes = match major {
        1 => 2,
        2 | 3 => 4,
        v => return Err(format!("format version {v} (expected 1, 2 or 3)")),
    };
    let start = MAGIC.len() + 2 + len_bytes;
    let field = bytes.get(MAGIC.len() + 2..start).ok_or_else(|| {
        format!("the file ends inside the header-length field ({} bytes, expected at least {start})", bytes.len())
    })?;
    let header_len = field.iter().rev().fold(0usize, |acc, &b| (acc << 8) | b as usize);
    let data_offset = start + header_len;
    let text = bytes.get(start..data_offset).ok_or_else(|| {
        format!("the header announces {header_len} bytes but the file has {} after the magic", bytes.len() - start)
    })?;
    let text = std::str::from_utf8(text).map_err(|_| "the header is not text".to_string())?;
    let descr = quoted_value(text, "descr").ok_or_else(|| format!("the header has no 'descr' string: {text:?}"))?;
    let shape = shape_value(text).ok_or_else(|| format!("the header has no 'shape' tuple of integers: {text:?}"))?;
    let item = item_size(&descr).ok_or_else(|| format!("dtype {descr:?} is not a plain numeric type"))?;
    let data_bytes = shape
        .iter()
        .try_fold(item, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| format!("shape {shape:?} of {descr} overflows 64 bits"))?;
    let have = (bytes.len() - data_offset) as u64;
    if have != data_bytes {
        return Err(format!(
            "shape {shape:?} of {descr} needs {data_bytes} bytes of data after the header, the file has {have}"
        ));
    }
    Ok(Header { descr, shape, data_offset, data_bytes })
}

/// The string after `'key':` in a header dict.
fn quoted_value(text: &str, key: &str) -> Option<String> {
    let rest = &text[text.find(&format!("'{key}'"))? + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let body = &rest[1..];
    Some(body[..body.find(quote)?].to_string())
}

/// The tuple after `'shape':` in a header dict: `()`, `(3,)`, `(2, 3)`.
fn shape_value(text: &str) -> Option<Vec<usize>> {
    let rest = &text[text.find("'shape'")? + 7..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('(')?;
    let body = &rest[..rest.find(')')?];
    body.split(',').map(str::trim).filter(|d| !d.is_empty()).map(|d| d.parse().ok()).collect()
}

/// Bytes per element of a numeric descriptor such as `<i4`, `|u1`, `>f8`.
fn item_size(descr: &str) -> Option<u64> {
    let body = descr.trim_start_matches(['<', '>', '|', '=']);
    let kind = body.chars().next().filter(|c| "iufb".contains(*c))?;
    let size: u64 = body[kind.len_utf8()..].parse().ok()?;
    (1..=16).contains(&size).then_some(size)
}

/// An int8 matrix (`numpy.int8`, 2-D).
pub fn read_i8_matrix(path: &Path) -> Result<Array2<i8>, NpyError> {
    read(path, "int8 ('|i1')", 2)
}

/// An int8 array of any rank; the caller checks the rank.
pub fn read_i8_array(path: &Path) -> Result<ArrayD<i8>, NpyError> {
    read(path, "int8 ('|i1')", 0)
}

/// Write `data` as an int8 array of `shape`.
pub fn write_i8_array(path: &Path, shape: &[usize], data: Vec<i8>) -> Result<(), NpyError> {
    let len = data.len();
    let array = ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|_| NpyError::TensorShape {
        path: path.into(),
        len,
        shape: shape.to_vec(),
    })?;
    write_npy(path, &array).map_err(|source| NpyError::Write { path: path.into(), source })
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
        AttentionOutput::I32(v) => {
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
