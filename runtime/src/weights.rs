//! A decoder block's weights on disk, so that a layer exported from PyTorch
//! runs through `ferrite block`: int8 `.npy` tensors, whose shapes give H, E
//! and F, and `block.json` with what no tensor says (heads, top-k, gate mode,
//! the real step of every weight and activation). docs/block.md shows the
//! export from a PyTorch layer.
use crate::npy::{self, NpyError};
use ferrite_hw::block::{BlockShape, BlockWeights, Matrix, Scales};
use ferrite_hw::moe::GateMode;
use ndarray::{ArrayD, Axis};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file beside the tensors.
pub const CONFIG: &str = "block.json";

/// Why a weights directory cannot be used; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("{path}: shape {found:?}, expected {expected}")]
    Shape { path: PathBuf, found: Vec<usize>, expected: String },
    /// The io error is in the message, not the source chain, so it prints once.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
}

/// `block.json`: everything about the layer that is not a tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockConfig {
    pub heads: usize,
    pub top_k: usize,
    pub mode: GateMode,
    /// Real value of one integer step of each int8 activation.
    pub activation_scales: ActivationScales,
    /// Real value of one integer step of each weight tensor (per expert for w1, w2).
    pub weight_scales: WeightScales,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationScales {
    pub residual: f64,
    pub qkv: f64,
    pub attn: f64,
    pub ffn: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightScales {
    pub wq: f64,
    pub wk: f64,
    pub wv: f64,
    pub wo: f64,
    pub gate: f64,
    pub w1: Vec<f64>,
    pub w2: Vec<f64>,
}

/// A loaded layer: its weights, scales and the dimensions the files give.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedBlock {
    pub config: BlockConfig,
    pub weights: BlockWeights,
    pub hidden: usize,
    pub experts: usize,
    pub ffn: usize,
}

impl LoadedBlock {
    pub fn scales(&self) -> Scales {
        let a = self.config.activation_scales;
        Scales { residual: a.residual, qkv: a.qkv, attn: a.attn, ffn: a.ffn }
    }
}

/// Read `path` as an int8 array of `rank` dimensions.
fn tensor(path: &Path, rank: usize, layout: &str) -> Result<ArrayD<i8>, WeightsError> {
    let a = npy::read_i8_array(path)?;
    if a.ndim() != rank {
        return Err(WeightsError::Shape { path: path.into(), found: a.shape().to_vec(), expected: layout.into() });
    }
    Ok(a)
}

/// Load the layer in `dir`: `g1.npy`, `g2.npy` `[H]`; `wq.npy`, `wk.npy`,
/// `wv.npy`, `wo.npy` `[H, H]` (in × out); `gate.npy` `[E, H]`; `w1.npy`
/// `[E, H, F]`; `w2.npy` `[E, F, H]`, all int8, and [`CONFIG`]. Shapes that
/// disagree are refused naming the file; the caller checks the whole block
/// against its shape ([`BlockWeights::check`]).
pub fn load(dir: &Path) -> Result<LoadedBlock, WeightsError> {
    let path = dir.join(CONFIG);
    let text = std::fs::read_to_string(&path).map_err(|error| WeightsError::Io { path: path.clone(), error })?;
    let config: BlockConfig =
        serde_json::from_str(&text).map_err(|e| WeightsError::Config { path: path.clone(), reason: e.to_string() })?;
    let ws = &config.weight_scales;
    let file = |name: &str| dir.join(format!("{name}.npy"));
    let wq = tensor(&file("wq"), 2, "[H, H]")?;
    let hidden = wq.shape()[0];
    let gate = tensor(&file("gate"), 2, "[E, H]")?;
    let experts = gate.shape()[0];
    let w1 = tensor(&file("w1"), 3, "[E, H, F]")?;
    let ffn = w1.shape()[2];
    let w2 = tensor(&file("w2"), 3, "[E, F, H]")?;
    let expect = |name: &str, a: &ArrayD<i8>, shape: &[usize], layout: &str| {
        if a.shape() == shape {
            Ok(())
        } else {
            Err(WeightsError::Shape {
                path: file(name),
                found: a.shape().to_vec(),
                expected: format!("{layout} = {shape:?} (H = {hidden} from wq.npy, E = {experts} from gate.npy, F = {ffn} from w1.npy)"),
            })
        }
    };
    for (name, scales) in [("w1", &ws.w1), ("w2", &ws.w2)] {
        if scales.len() != experts {
            let reason =
                format!("weight_scales.{name} has {} scales, expected one per expert (E = {experts})", scales.len());
            return Err(WeightsError::Config { path, reason });
        }
    }
    let matrix = |name: &str, layout: &str, rows: usize, cols: usize, scale: f64| {
        let a = if name == "wq" { wq.clone() } else { tensor(&file(name), 2, layout)? };
        expect(name, &a, &[rows, cols], layout)?;
        Ok::<_, WeightsError>(Matrix { rows, cols, data: a.iter().copied().collect(), scale })
    };
    let gain = |name: &str| {
        let a = tensor(&file(name), 1, "[H]")?;
        expect(name, &a, &[hidden], "[H]")?;
        Ok::<_, WeightsError>(a.iter().copied().collect::<Vec<i8>>())
    };
    expect("gate", &gate, &[experts, hidden], "[E, H]")?;
    expect("w1", &w1, &[experts, hidden, ffn], "[E, H, F]")?;
    expect("w2", &w2, &[experts, ffn, hidden], "[E, F, H]")?;
    let experts_of = |a: &ArrayD<i8>, rows, cols, scales: &[f64]| -> Vec<Matrix> {
        a.axis_iter(Axis(0))
            .zip(scales)
            .map(|(m, &scale)| Matrix { rows, cols, data: m.iter().copied().collect(), scale })
            .collect()
    };
    let weights = BlockWeights {
        g1: gain("g1")?,
        g2: gain("g2")?,
        wq: matrix("wq", "[H, H]", hidden, hidden, ws.wq)?,
        wk: matrix("wk", "[H, H]", hidden, hidden, ws.wk)?,
        wv: matrix("wv", "[H, H]", hidden, hidden, ws.wv)?,
        wo: matrix("wo", "[H, H]", hidden, hidden, ws.wo)?,
        gate: Matrix { rows: experts, cols: hidden, data: gate.iter().copied().collect(), scale: ws.gate },
        w1: experts_of(&w1, hidden, ffn, &ws.w1),
        w2: experts_of(&w2, ffn, hidden, &ws.w2),
    };
    Ok(LoadedBlock { config, weights, hidden, experts, ffn })
}

/// Write `w` and `sc` for a block of shape `s` in the layout [`load`] reads;
/// returns the files written.
pub fn save(dir: &Path, s: &BlockShape, w: &BlockWeights, sc: &Scales) -> Result<Vec<PathBuf>, WeightsError> {
    std::fs::create_dir_all(dir).map_err(|error| WeightsError::Io { path: dir.into(), error })?;
    let (h, e, f) = (s.hidden, s.experts, s.ffn);
    let stack = |ms: &[Matrix]| ms.iter().flat_map(|m| m.data.iter().copied()).collect::<Vec<i8>>();
    let tensors: [(&str, Vec<usize>, Vec<i8>); 9] = [
        ("g1", vec![h], w.g1.clone()),
        ("g2", vec![h], w.g2.clone()),
        ("wq", vec![h, h], w.wq.data.clone()),
        ("wk", vec![h, h], w.wk.data.clone()),
        ("wv", vec![h, h], w.wv.data.clone()),
        ("wo", vec![h, h], w.wo.data.clone()),
        ("gate", vec![e, h], w.gate.data.clone()),
        ("w1", vec![e, h, f], stack(&w.w1)),
        ("w2", vec![e, f, h], stack(&w.w2)),
    ];
    let mut written = Vec::new();
    for (name, shape, data) in tensors {
        let path = dir.join(format!("{name}.npy"));
        npy::write_i8_array(&path, &shape, data)?;
        written.push(path);
    }
    let config = BlockConfig {
        heads: s.heads,
        top_k: s.top_k,
        mode: s.mode,
        activation_scales: ActivationScales { residual: sc.residual, qkv: sc.qkv, attn: sc.attn, ffn: sc.ffn },
        weight_scales: WeightScales {
            wq: w.wq.scale,
            wk: w.wk.scale,
            wv: w.wv.scale,
            wo: w.wo.scale,
            gate: w.gate.scale,
            w1: w.w1.iter().map(|m| m.scale).collect(),
            w2: w.w2.iter().map(|m| m.scale).collect(),
        },
    };
    let path = dir.join(CONFIG);
    let text = serde_json::to_string_pretty(&config).expect("plain data serializes");
    std::fs::write(&path, text + "\n").map_err(|error| WeightsError::Io { path: path.clone(), error })?;
    written.push(path);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_hw::block::BlockShape;

    #[test]
    fn saved_weights_load_back_the_same() {
        let s = BlockShape::small();
        let (w, sc) = (BlockWeights::random(&s, 3), Scales { residual: 0.05, ..Scales::default() });
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &s, &w, &sc).unwrap();
        let got = load(dir.path()).unwrap();
        assert_eq!((got.hidden, got.experts, got.ffn), (s.hidden, s.experts, s.ffn));
        assert_eq!((got.config.heads, got.config.top_k, got.config.mode), (s.heads, s.top_k, s.mode));
        assert_eq!(got.weights, w);
        assert_eq!(got.scales(), sc);
    }

    #[test]
    fn bad_files_are_named_with_what_was_expected() {
        let s = BlockShape::small();
        let w = BlockWeights::random(&s, 4);
        let fresh = || {
            let dir = tempfile::tempdir().unwrap();
            save(dir.path(), &s, &w, &Scales::default()).unwrap();
            dir
        };
        let err = |dir: &tempfile::TempDir| {
            let e = load(dir.path()).unwrap_err().to_string();
            assert_eq!(e.lines().count(), 1, "{e}");
            e
        };
        // A tensor of the wrong shape, rank, dtype; a missing file; a config that does not parse.
        let d = fresh();
        npy::write_i8_array(&d.path().join("wk.npy"), &[s.hidden, s.hidden + 1], vec![0; s.hidden * (s.hidden + 1)])
            .unwrap();
        let e = err(&d);
        assert!(e.contains("wk.npy") && e.contains(&format!("[H, H] = [{0}, {0}]", s.hidden)), "{e}");
        let d = fresh();
        npy::write_i8_array(&d.path().join("w2.npy"), &[s.ffn, s.hidden], vec![0; s.ffn * s.hidden]).unwrap();
        let e = err(&d);
        assert!(e.contains("w2.npy") && e.contains("expected [E, F, H]"), "{e}");
        let d = fresh();
        ndarray_npy::write_npy(d.path().join("g1.npy"), &ndarray::Array1::<i32>::zeros(s.hidden)).unwrap();
        let e = err(&d);
        assert!(e.contains("g1.npy") && e.contains("int8"), "{e}");
        let d = fresh();
        std::fs::remove_file(d.path().join("gate.npy")).unwrap();
        assert!(err(&d).contains("gate.npy"));
        let d = fresh();
        let path = d.path().join(CONFIG);
        let text = std::fs::read_to_string(&path).unwrap().replace("\"top_k\"", "\"topk\"");
        std::fs::write(&path, text).unwrap();
        let e = err(&d);
        assert!(e.contains(CONFIG) && e.contains("topk"), "{e}");
    }
}
