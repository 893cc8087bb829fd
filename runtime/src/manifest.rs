//! The manifest of a built image: what unit and configuration it holds, for
//! which board and clock, its register map, and a sha256 of every file of the
//! build. `ferrite deploy` and the XRT backend load images only through a
//! checked manifest, so a stale, edited or mismatched image is refused before
//! it reaches a card.
use crate::bitfile::BitFile;
use crate::board::{Board, Flow};
use crate::device::{
    check_attention_buffers, check_gemm_buffers, check_moe_buffers, Buffer, DeviceError, Launch, Layout, Problem,
};
use crate::driver::{self, LaunchArgs};
use ferrite_hw::attention::{AttentionConfig, AttentionLayout};
use ferrite_hw::gemm::{GemmConfig, GemmLayout};
use ferrite_hw::moe::{MoeConfig, MoeLayout};
use ferrite_hw::regmap::RegisterMap;
use ferrite_hw::unit::Unit;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// File name of the manifest inside a build directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Version of the manifest format; loading refuses any other.
pub const FORMAT: u32 = 1;

/// The unit an image holds, with its generation-time configuration, one
/// variant per unit. The serde tags (`gemm`, `attention`, `moe`) are the
/// manifest's `unit` field, so GEMM manifests of earlier builds still load.
/// Exhaustive on purpose: a new unit's variant makes the compiler list every
/// place (layout, launch arguments, self-test) that must learn it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "unit", content = "config", rename_all = "lowercase")]
pub enum UnitConfig {
    Gemm(GemmConfig),
    Attention(AttentionConfig),
    Moe(MoeConfig),
}

impl From<GemmConfig> for UnitConfig {
    fn from(cfg: GemmConfig) -> Self {
        Self::Gemm(cfg)
    }
}

impl From<AttentionConfig> for UnitConfig {
    fn from(cfg: AttentionConfig) -> Self {
        Self::Attention(cfg)
    }
}

impl From<MoeConfig> for UnitConfig {
    fn from(cfg: MoeConfig) -> Self {
        Self::Moe(cfg)
    }
}

impl UnitConfig {
    /// The unit behind the variant: everything that is not layout or launch
    /// asks it (see [`Unit`]).
    pub fn unit(&self) -> &dyn Unit {
        match self {
            Self::Gemm(c) => c,
            Self::Attention(c) => c,
            Self::Moe(c) => c,
        }
    }

    pub fn name(&self) -> &'static str {
        self.unit().name()
    }

    pub fn kernel_name(&self) -> String {
        self.unit().kernel_name()
    }

    pub fn register_map(&self) -> RegisterMap {
        self.unit().register_map()
    }

    pub fn validate(&self) -> Result<(), ferrite_hw::HwError> {
        self.unit().validate()
    }

    /// The HWINFO value the unit reports; a board backend compares it after loading.
    pub fn hwinfo(&self) -> u32 {
        self.unit().hwinfo()
    }

    pub fn clock_mhz(&self) -> f64 {
        self.unit().clock_mhz()
    }

    /// Multipliers of the unit, for utilization.
    pub fn multipliers(&self) -> u64 {
        self.unit().multipliers()
    }

    /// Width of the unit's AXI4 memory port in bits.
    pub fn port_bits(&self) -> usize {
        self.unit().port_bits()
    }

    /// The unit's Verilog (generated on a large stack, see [`ferrite_hw::unit::verilog`]).
    pub fn verilog(&self) -> Result<String, DeviceError> {
        Ok(ferrite_hw::unit::verilog(self.unit())?)
    }

    /// Beat-aligned layout of `problem` on this unit, after checking that it
    /// fits; `device` names the device in errors. The board backends (xrt,
    /// pynq) share this so they lay out buffers exactly as the simulator does.
    pub fn layout(&self, device: &str, problem: &Problem) -> Result<Layout, DeviceError> {
        self.fits(device, problem)?;
        Ok(match (self, problem) {
            (Self::Gemm(c), Problem::Gemm(p)) => Layout::Gemm(GemmLayout::new(c, p)),
            (Self::Attention(c), Problem::Attention(p)) => {
                Layout::Attention(AttentionLayout::new(p, c.port_bytes() as u64))
            }
            (Self::Moe(c), Problem::Moe(p)) => Layout::Moe(MoeLayout::new(c, p)),
            _ => return Err(DeviceError::Unsupported { device: device.to_string(), unit: problem.unit() }),
        })
    }

    /// The problem is valid and within this unit's limits; another unit's problem is `Unsupported`.
    fn fits(&self, device: &str, problem: &Problem) -> Result<(), DeviceError> {
        let too_big =
            |e: ferrite_hw::HwError| DeviceError::TooBig { device: self.kernel_name(), reason: e.to_string() };
        match (self, problem) {
            (Self::Gemm(c), Problem::Gemm(p)) => {
                p.validate()?;
                p.validate_for(c).map_err(too_big)
            }
            (Self::Attention(c), Problem::Attention(p)) => {
                p.validate()?;
                p.validate_for(c).map_err(too_big)
            }
            (Self::Moe(c), Problem::Moe(p)) => {
                p.validate()?;
                p.validate_for(c).map_err(too_big)
            }
            _ => Err(DeviceError::Unsupported { device: device.to_string(), unit: problem.unit() }),
        }
    }

    /// Check a launch as the simulator does (buffers, limits, beat-multiple
    /// pitches) and give its register arguments; `address` maps a buffer to
    /// its bus address.
    pub fn launch_args(
        &self,
        device: &str,
        launch: &Launch,
        address: &dyn Fn(Buffer) -> Result<u64, DeviceError>,
    ) -> Result<LaunchArgs, DeviceError> {
        let beat_multiples = |beat: usize, pitches: [(&str, u64); 3], what: &str| {
            let beat = beat as u64;
            match pitches.iter().find(|(_, v)| !v.is_multiple_of(beat)) {
                Some((name, v)) => {
                    Err(DeviceError::Problem(format!("{name}{what} {v} is not a multiple of the {beat}-byte beat")))
                }
                None => Ok(()),
            }
        };
        match (self, launch) {
            (Self::Gemm(c), Launch::Gemm(g)) => {
                check_gemm_buffers(g)?;
                self.fits(device, &Problem::Gemm(g.problem))?;
                let l = &g.layout;
                beat_multiples(c.port_bytes(), [("LDA", l.lda), ("LDB", l.ldb), ("LDC", l.ldc)], " =")?;
                driver::gemm_args(c, g, address)
            }
            (Self::Attention(c), Launch::Attention(a)) => {
                check_attention_buffers(a)?;
                self.fits(device, &Problem::Attention(a.problem.clone()))?;
                let l = &a.layout;
                let strides = [("Q", l.q_stride), ("KV", l.kv_stride), ("O", l.o_stride)];
                beat_multiples(c.port_bytes(), strides, " head stride")?;
                driver::attention_args(c, a, address)
            }
            (Self::Moe(c), Launch::Moe(m)) => {
                check_moe_buffers(m)?;
                self.fits(device, &Problem::Moe(m.problem))?;
                let l = &m.layout;
                beat_multiples(c.port_bytes(), [("LDX", l.ldx), ("LDW", l.ldw), ("DPITCH", l.dpitch)], " =")?;
                driver::moe_args(c, m, address)
            }
            (_, l) => Err(DeviceError::Unsupported { device: device.to_string(), unit: l.unit() }),
        }
    }
}

/// Where a PYNQ overlay puts the unit, as its `.hwh` will say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayInfo {
    /// Block-design cell name of the unit (PYNQ: `overlay.<cell>`).
    pub cell: String,
    /// Physical base address of the 4 KiB control window.
    pub control_base: u64,
    pub control_range: u64,
    /// The hardware-handoff file PYNQ reads next to the bitstream.
    pub hwh: String,
    /// Compiled device-tree overlay that creates the unit's UIO node
    /// (`overlay.dtso` built with `dtc`); `None` when `dtc` was not installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtbo: Option<String>,
}

/// A built image, as written next to it in `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    #[serde(flatten)]
    pub unit: UnitConfig,
    pub kernel: String,
    pub board: Board,
    pub clock_mhz: f64,
    pub register_map: RegisterMap,
    /// The loadable image (an `.xclbin` for Alveo, the overlay `.bit` for
    /// PYNQ), relative to the manifest; `None` when the vendor tools did not run.
    pub image: Option<String>,
    pub overlay: Option<OverlayInfo>,
    /// sha256 (hex) of every file of the build, by path relative to the manifest.
    pub files: BTreeMap<String, String>,
    /// The image's post-route timing as the vendor recipe recorded it;
    /// `None` when the vendor tools did not run (the clock is then assumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<RoutedTiming>,
}

/// Achieved timing of a routed image (Vivado's worst setup slack after routing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutedTiming {
    /// `Vivado 2023.2`.
    pub tool: String,
    pub part: String,
    /// The kernel clock the design was built for.
    pub target_mhz: f64,
    /// Worst negative slack at that clock; negative: the clock is not met.
    pub wns_ns: f64,
    /// The clock the worst path allows: 1000 / (period − WNS).
    pub achieved_mhz: f64,
}

impl RoutedTiming {
    /// The clock the image runs at: the target when met, else the achieved.
    pub fn clock_mhz(&self) -> f64 {
        if self.wns_ns >= 0.0 {
            self.target_mhz
        } else {
            self.achieved_mhz
        }
    }
}

/// Every way a manifest can be refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid manifest: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "{file}: checksum mismatch (manifest sha256 {expected}, file has {found}): the file changed after the build"
    )]
    Checksum { file: PathBuf, expected: String, found: String },
    #[error("{file}: image does not match the manifest: {reason}")]
    Image { file: PathBuf, reason: String },
}

/// A manifest that passed every check, with the directory its paths are relative to.
#[derive(Debug, Clone)]
pub struct LoadedManifest {
    pub manifest: Manifest,
    pub dir: PathBuf,
}

impl LoadedManifest {
    /// Absolute path of the image, when the build produced one.
    pub fn image_path(&self) -> Option<PathBuf> {
        self.manifest.image.as_ref().map(|f| self.dir.join(f))
    }
}

/// sha256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn read(path: &Path) -> Result<Vec<u8>, ManifestError> {
    std::fs::read(path).map_err(|source| ManifestError::Io { path: path.to_path_buf(), source })
}

impl Manifest {
    /// A manifest for the files `files` (relative to `dir`) of a build; reads each to checksum it.
    pub fn new(
        unit: UnitConfig,
        board: Board,
        clock_mhz: f64,
        image: Option<String>,
        overlay: Option<OverlayInfo>,
        dir: &Path,
        files: &[String],
    ) -> Result<Self, ManifestError> {
        let mut sums = BTreeMap::new();
        for f in files {
            sums.insert(f.clone(), sha256_hex(&read(&dir.join(f))?));
        }
        Ok(Self {
            format: FORMAT,
            kernel: unit.kernel_name(),
            register_map: unit.register_map(),
            unit,
            board,
            clock_mhz,
            image,
            overlay,
            files: sums,
            timing: None,
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest always serializes")
    }

    /// Write to `dir/manifest.json`.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        std::fs::write(&path, self.to_json()).map_err(|source| ManifestError::Io { path: path.clone(), source })?;
        Ok(path)
    }

    /// Read and check a manifest: valid JSON of this format, a kernel name and
    /// register map that are what its configuration generates, every listed
    /// file present with its checksum, and an image that is the right kind of
    /// file for the board and holds this kernel.
    pub fn load(path: &Path) -> Result<LoadedManifest, ManifestError> {
        let bytes = read(path)?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|source| ManifestError::Json { path: path.to_path_buf(), source })?;
        let invalid = |reason: String| ManifestError::Invalid { path: path.to_path_buf(), reason };
        if manifest.format != FORMAT {
            return Err(invalid(format!("manifest format {} (this ferrite reads format {FORMAT})", manifest.format)));
        }
        manifest.unit.validate().map_err(|e| invalid(format!("configuration: {e}")))?;
        if manifest.kernel != manifest.unit.kernel_name() {
            return Err(invalid(format!(
                "kernel `{}` is not the configuration's `{}`",
                manifest.kernel,
                manifest.unit.kernel_name()
            )));
        }
        manifest.register_map.check().map_err(|e| invalid(e.to_string()))?;
        if manifest.register_map != manifest.unit.register_map() {
            return Err(invalid("the register map differs from the one its configuration generates".into()));
        }
        if !(manifest.clock_mhz.is_finite() && manifest.clock_mhz > 0.0) {
            return Err(invalid(format!("clock_mhz = {}", manifest.clock_mhz)));
        }
        if let Some(t) = &manifest.timing {
            if !(t.clock_mhz().is_finite() && t.clock_mhz() > 0.0 && t.wns_ns.is_finite()) {
                return Err(invalid(format!("timing: achieved {} MHz, WNS {} ns", t.achieved_mhz, t.wns_ns)));
            }
        }
        let dir = path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        for (file, expected) in &manifest.files {
            let rel = Path::new(file);
            if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
                return Err(invalid(format!("file `{file}` is not a plain relative path")));
            }
            let full = dir.join(rel);
            let found = sha256_hex(&read(&full)?);
            if &found != expected {
                return Err(ManifestError::Checksum { file: full, expected: expected.clone(), found });
            }
        }
        if let Some(image) = &manifest.image {
            if !manifest.files.contains_key(image) {
                return Err(invalid(format!("image `{image}` has no checksum in `files`")));
            }
            let full = dir.join(image);
            check_image(&read(&full)?, &manifest).map_err(|reason| ManifestError::Image { file: full, reason })?;
        }
        if let Some(o) = &manifest.overlay {
            if !manifest.files.contains_key(&o.hwh) && manifest.image.is_some() {
                return Err(invalid(format!("overlay metadata `{}` has no checksum in `files`", o.hwh)));
            }
            if let Some(dtbo) = o.dtbo.as_ref().filter(|d| !manifest.files.contains_key(*d)) {
                return Err(invalid(format!("device-tree overlay `{dtbo}` has no checksum in `files`")));
            }
        }
        Ok(LoadedManifest { manifest, dir })
    }
}

/// Leading bytes of every xclbin (`struct axlf`'s `m_magic`).
const XCLBIN_MAGIC: &[u8; 8] = b"xclbin2\0";

/// The image is an xclbin (Alveo) or a bitstream (PYNQ) that mentions the
/// manifest's kernel (xclbin: its IP layout and metadata) or part (bitstream
/// header, whose data must also convert for the FPGA manager).
fn check_image(bytes: &[u8], m: &Manifest) -> Result<(), String> {
    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    match m.board.spec().flow {
        Flow::Alveo { .. } => {
            if !bytes.starts_with(XCLBIN_MAGIC) {
                return Err("not an xclbin (no `xclbin2` magic)".into());
            }
            if !contains(m.kernel.as_bytes()) {
                return Err(format!("the xclbin does not contain kernel `{}`", m.kernel));
            }
        }
        Flow::Pynq { .. } => {
            let bit = BitFile::parse(bytes)?;
            let part = m.board.spec().part;
            let device = part.trim_start_matches("xc").split('-').next().unwrap_or(part);
            if !bit.part.contains(device) {
                return Err(format!("the bitstream is for part `{}`, not the {} part ({device})", bit.part, m.board));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_config_is_flattened_into_the_manifest() {
        let m = Manifest {
            format: FORMAT,
            unit: UnitConfig::Gemm(GemmConfig::small(2, 2)),
            kernel: GemmConfig::small(2, 2).kernel_name(),
            board: Board::U55c,
            clock_mhz: 300.0,
            register_map: GemmConfig::small(2, 2).register_map(),
            image: None,
            overlay: None,
            files: BTreeMap::new(),
            timing: None,
        };
        let v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(v["unit"], "gemm");
        assert_eq!(v["config"]["rows"], 2);
        assert!(v.get("timing").is_none(), "no timing key before the vendor tools ran");
        assert_eq!(serde_json::from_value::<Manifest>(v).unwrap(), m);
        // A recorded timing: met runs at the target, missed at the achieved clock.
        let t = RoutedTiming {
            tool: "Vivado 2023.2".into(),
            part: "xcu55c".into(),
            target_mhz: 300.0,
            wns_ns: -0.5,
            achieved_mhz: 260.87,
        };
        assert_eq!(t.clock_mhz(), 260.87);
        assert_eq!(RoutedTiming { wns_ns: 0.1, ..t.clone() }.clock_mhz(), 300.0);
        let m = Manifest { timing: Some(t), ..m };
        assert_eq!(serde_json::from_str::<Manifest>(&m.to_json()).unwrap(), m);
    }

    #[test]
    fn attention_and_moe_configs_round_trip_under_their_unit_tags() {
        let attention = AttentionConfig { head_dim: 16, lanes: 2, dot_par: 16, port_bits: 128, ..Default::default() };
        for (unit, tag) in
            [(UnitConfig::Attention(attention), "attention"), (UnitConfig::Moe(MoeConfig::small()), "moe")]
        {
            let v = serde_json::to_value(&unit).unwrap();
            assert_eq!(v["unit"], tag);
            assert_eq!(unit.name(), tag);
            assert_eq!(serde_json::from_value::<UnitConfig>(v).unwrap(), unit);
        }
    }
}
