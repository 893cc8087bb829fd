//! The PYNQ deploy path against a fake board: a temporary directory laid out
//! like a PYNQ image's sysfs, configfs, /lib/firmware and /dev, with regular
//! files standing in for `/dev/uioN` and `/dev/udmabuf0` (mapped the same
//! way). A thread playing the unit watches the mapped CTRL register, runs the
//! golden model on the operands it finds at the programmed addresses and
//! raises ap_done, so the whole register sequence, address arithmetic and
//! cache-sync protocol run end to end. Nothing here touches the real /sys.
#![cfg(target_os = "linux")]
use ferrite_host::backend::pynq::{find_uio, program_fpga, PynqDevice, PynqOptions, PynqPaths, Registers, UdmaBuf};
use ferrite_host::bitstream::board::Board;
use ferrite_host::bitstream::{build, on_path, BuildRequest, Outcome};
use ferrite_host::compare::report::DeviceId;
use ferrite_host::deploy::{deploy_pynq, gemm_problems, self_test_dma_bytes};
use ferrite_host::driver::ControlPort;
use ferrite_host::manifest::{Manifest, UnitConfig};
use ferrite_host::{Device, DeviceError};
use ferrite_hw::attention::{attention, AttentionConfig, AttentionOutput, AttentionParams, AttentionProblem};
use ferrite_hw::gemm::config::{BUFFER_ALIGN, FLAG_BIAS, FLAG_RELU, FLAG_REQUANT};
use ferrite_hw::gemm::{gemm, GemmConfig, GemmOutput, GemmProblem};
use ferrite_hw::moe::config::RECORD_BYTES;
use ferrite_hw::moe::{route, CapacityFactor, GateMode, MoeConfig, MoeProblem};
use ferrite_hw::numerics::Requant;
use ferrite_hw::regmap::{RegisterMap, CTRL, CTRL_AP_DONE, CTRL_AP_IDLE, CTRL_AP_START};
use memmap2::{MmapMut, MmapOptions};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the fake u-dma-buf region sits in "physical" memory: nonzero, so a
/// driver that forgot to add it would hand the unit wrong addresses.
const PHYS: u64 = 0x3800_0000;
/// The PYNQ-Z2's control window, where overlay.tcl and the dtso put the unit.
const CONTROL_BASE: u64 = 0x4000_0000;
const PART: &str = "7z020clg400";

fn cfg() -> GemmConfig {
    GemmConfig { clock_mhz: 100.0, ..GemmConfig::small(2, 2) }
}

fn gemm_unit() -> UnitConfig {
    UnitConfig::Gemm(cfg())
}

/// A minimal `.bit`: preamble, the a–d strings, and `e` data with a sync word.
fn fake_bit(words: &[u32]) -> Vec<u8> {
    let mut v = vec![0x00, 0x09, 0x0f, 0xf0, 0x0f, 0xf0, 0x0f, 0xf0, 0x0f, 0xf0, 0x00, 0x00, 0x01];
    for (key, text) in [(b'a', "overlay_wrapper"), (b'b', PART), (b'c', "2026/11/23"), (b'd', "03:00:00")] {
        v.push(key);
        v.extend_from_slice(&(text.len() as u16 + 1).to_be_bytes());
        v.extend_from_slice(text.as_bytes());
        v.push(0);
    }
    let data: Vec<u8> = [0xFFFF_FFFF, 0xAA99_5566].iter().chain(words).flat_map(|w| w.to_be_bytes()).collect();
    v.push(b'e');
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(&data);
    v
}

/// A PYNQ-Z2 build of the small unit with a (fake) bitstream, hwh and dtbo, as
/// the build on a Vivado machine leaves it; returns the manifest path.
fn built_image(dir: &Path) -> PathBuf {
    built_image_of(dir, &gemm_unit())
}

/// [`built_image`] of any unit.
fn built_image_of(dir: &Path, unit: &UnitConfig) -> PathBuf {
    let report = build(&BuildRequest {
        unit: unit.clone(),
        board: Board::PynqZ2,
        clock_mhz: 100.0,
        out: dir.to_path_buf(),
        run_vendor_tools: false,
    })
    .unwrap();
    assert!(report.success(), "{report}");
    fs::write(dir.join("overlay.bit"), fake_bit(&[0x3000_8001, 0x0000_0007])).unwrap();
    fs::write(dir.join("overlay.hwh"), "<hwh/>").unwrap();
    // dtc compiled the real one when installed; otherwise stand-in bytes (the fake kernel never parses it).
    if !dir.join("overlay.dtbo").exists() {
        fs::write(dir.join("overlay.dtbo"), b"fake dtbo").unwrap();
    }
    let m: Manifest = serde_json::from_str(&fs::read_to_string(&report.manifest).unwrap()).unwrap();
    let mut overlay = m.overlay.clone().unwrap();
    overlay.dtbo = Some("overlay.dtbo".into());
    let mut files: Vec<String> = m.files.keys().filter(|f| *f != "overlay.dtbo").cloned().collect();
    files.extend(["overlay.bit", "overlay.hwh", "overlay.dtbo"].map(String::from));
    Manifest::new(m.unit, m.board, m.clock_mhz, Some("overlay.bit".into()), Some(overlay), dir, &files)
        .unwrap()
        .write(dir)
        .unwrap()
}

fn write(path: PathBuf, text: impl AsRef<[u8]>) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn read(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fake PYNQ image's filesystem under a temporary directory.
struct FakeBoard {
    _root: tempfile::TempDir,
    paths: PynqPaths,
    unit: UnitConfig,
    map: RegisterMap,
    /// Output register whose first byte the fake unit flips after each run (a faulty unit).
    corrupt: Option<&'static str>,
}

impl FakeBoard {
    /// Everything present: FPGA manager in `operating`, configfs, a decoy UIO
    /// device and the unit's (uio1), a u-dma-buf of `dma_bytes`.
    fn new(dma_bytes: u64) -> Self {
        Self::with_unit(gemm_unit(), dma_bytes)
    }

    /// [`FakeBoard::new`] with `unit` in the PL.
    fn with_unit(unit: UnitConfig, dma_bytes: u64) -> Self {
        let root = tempfile::tempdir().unwrap();
        let paths = PynqPaths::under(root.path());
        let map = unit.register_map();
        fs::create_dir_all(&paths.firmware).unwrap();
        fs::create_dir_all(&paths.overlays).unwrap();
        for attr in ["flags", "firmware"] {
            write(paths.fpga_manager.join(attr), "");
        }
        write(paths.fpga_manager.join("state"), "operating\n");
        for (dev, name, addr) in [("uio0", "audio-codec", 0x4300_0000u64), ("uio1", map.kernel.as_str(), CONTROL_BASE)]
        {
            let d = paths.uio_class.join(dev);
            write(d.join("name"), format!("{name}\n"));
            write(d.join("maps/map0/addr"), format!("{addr:#010x}\n"));
            write(d.join("maps/map0/size"), "0x00001000\n");
            write(paths.dev.join(dev), vec![0u8; 4096]);
        }
        let u = paths.udmabuf_class.join("udmabuf0");
        write(u.join("phys_addr"), format!("{PHYS:#018x}\n"));
        write(u.join("size"), format!("{dma_bytes}\n"));
        for attr in ["sync_mode", "sync_direction", "sync_offset", "sync_size", "sync_for_cpu", "sync_for_device"] {
            write(u.join(attr), "");
        }
        write(paths.dev.join("udmabuf0"), vec![0u8; dma_bytes as usize]);
        let hwinfo = unit.hwinfo();
        let board = Self { _root: root, paths, unit, map, corrupt: None };
        board.set_reg("HWINFO", hwinfo);
        board.set_reg("CTRL", CTRL_AP_IDLE);
        board
    }

    fn options(&self) -> PynqOptions {
        PynqOptions { paths: self.paths.clone(), timeout: Duration::from_millis(50), ..PynqOptions::default() }
    }

    /// Set a register of the unit's fake control window, as the PL would.
    fn set_reg(&self, name: &str, value: u32) {
        let offset = if name == "CTRL" { CTRL } else { self.map.offset(name) };
        let mut regs = Registers::open(&self.paths.dev.join("uio1"), 4096).unwrap();
        regs.write32(offset, value).unwrap();
    }

    /// What the deploy wrote to the FPGA manager's `firmware`.
    fn loaded_firmware(&self) -> String {
        read(self.paths.fpga_manager.join("firmware"))
    }
}

fn map_file(path: &Path) -> MmapMut {
    let f = fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    // SAFETY: a test-owned temporary file, shared with the backend under test like a device node.
    unsafe { MmapOptions::new().map_mut(&f).unwrap() }
}

fn reg(m: &MmapMut, off: u32) -> u32 {
    // SAFETY: 4-aligned offset inside the 4 KiB mapping; volatile as the backend writes it concurrently.
    unsafe { m.as_ptr().add(off as usize).cast::<u32>().read_volatile() }
}

fn set(m: &mut MmapMut, off: u32, v: u32) {
    // SAFETY: as in `reg`.
    unsafe { m.as_mut_ptr().add(off as usize).cast::<u32>().write_volatile(v) }
}

/// What the fake unit saw over a run.
#[derive(Debug, Default)]
struct UnitLog {
    launches: usize,
    /// (A, B, C) register values of each launch.
    addresses: Vec<(u64, u64, u64)>,
    errors: Vec<String>,
}

/// The unit: on ap_start, check the caches were handed to it, read the
/// arguments from the registers and the operands from the DMA region at
/// address − PHYS, run the unit's golden model, write its outputs, CYCLES,
/// STATUS, then ap_done | ap_idle. Stops when `stop` is set (or after 60 s,
/// never hanging a test).
fn fake_unit(board: &FakeBoard, stop: Arc<AtomicBool>) -> JoinHandle<UnitLog> {
    let regs = map_file(&board.paths.dev.join("uio1"));
    let mem = map_file(&board.paths.dev.join("udmabuf0"));
    let sysfs = board.paths.udmabuf_class.join("udmabuf0");
    let (map, unit, corrupt) = (board.map.clone(), board.unit.clone(), board.corrupt);
    std::thread::spawn(move || {
        let mut log = UnitLog::default();
        let mut run = Run { regs, mem, map, synced: 0 };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            if reg(&run.regs, CTRL) & CTRL_AP_START == 0 {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            set(&mut run.regs, CTRL, 0);
            let sync = |attr: &str| fs::read_to_string(sysfs.join(attr)).unwrap_or_default();
            if sync("sync_for_device").trim() != "1" || sync("sync_offset").trim() != "0" {
                log.errors.push(format!("launch {}: started without sync_for_device of the region", log.launches));
            }
            run.synced = sync("sync_size").trim().parse().unwrap_or(0);
            let cycles = match &unit {
                UnitConfig::Gemm(_) => run.gemm(&mut log),
                UnitConfig::Attention(c) => run.attention(c.head_dim),
                UnitConfig::Moe(_) => run.moe(),
            };
            if let Some(off) = corrupt.and_then(|name| run.at(name, 1).ok()) {
                run.mem[off] ^= 1;
            }
            match cycles {
                Ok(c) => {
                    let _ = fs::write(sysfs.join("sync_for_device"), "");
                    let cycles = run.map.offset("CYCLES");
                    set(&mut run.regs, cycles, c as u32);
                    set(&mut run.regs, run.map.offset("STATUS"), 0);
                    log.launches += 1;
                }
                Err(e) => log.errors.push(format!("launch {}: {e}", log.launches)),
            }
            set(&mut run.regs, CTRL, CTRL_AP_DONE | CTRL_AP_IDLE);
        }
        log
    })
}

/// One launch as the fake unit sees it: its registers and the DMA region.
struct Run {
    regs: MmapMut,
    mem: MmapMut,
    map: RegisterMap,
    /// Bytes of the region the driver synced for the device.
    synced: u64,
}

impl Run {
    fn r(&self, name: &str) -> u32 {
        reg(&self.regs, self.map.offset(name))
    }

    fn r64(&self, name: &str) -> u64 {
        self.r(name) as u64 | (reg(&self.regs, self.map.offset(name) + 4) as u64) << 32
    }

    /// Region offset of the `bytes` at the address in register `name`, inside the synced part.
    fn at(&self, name: &str, bytes: usize) -> Result<usize, String> {
        let addr = self.r64(name);
        addr.checked_sub(PHYS)
            .filter(|off| off + bytes as u64 <= self.synced)
            .map(|off| off as usize)
            .ok_or_else(|| format!("{name} {addr:#x} + {bytes} bytes is outside the synced region"))
    }

    /// `count` rows of `len` bytes, `pitch` apart from `base`.
    fn rows(&self, base: usize, pitch: usize, count: usize, len: usize) -> Vec<i8> {
        (0..count).flat_map(|i| self.mem[base + i * pitch..][..len].iter().map(|&x| x as i8)).collect()
    }

    fn words(&self, base: usize, n: usize) -> Vec<i32> {
        self.mem[base..base + 4 * n].chunks_exact(4).map(|w| i32::from_le_bytes(w.try_into().unwrap())).collect()
    }

    fn gemm(&mut self, log: &mut UnitLog) -> Result<u64, String> {
        let r = |name: &str| self.r(name);
        let (m, n, k) = (r("M") as usize, r("N") as usize, r("K") as usize);
        let (lda, ldb, ldc, flags) = (r("LDA") as usize, r("LDB") as usize, r("LDC") as usize, r("FLAGS"));
        let p = GemmProblem {
            bias: flags & FLAG_BIAS != 0,
            relu: flags & FLAG_RELU != 0,
            requant: (flags & FLAG_REQUANT != 0).then(|| Requant { multiplier: r("QMULT") as i32, shift: r("QSHIFT") }),
            ..GemmProblem::new(m, n, k)
        };
        log.addresses.push((self.r64("A"), self.r64("B"), self.r64("C")));
        let (a0, b0, c0) = (self.at("A", lda * m)?, self.at("B", ldb * k)?, self.at("C", ldc * m)?);
        let (av, bv) = (self.rows(a0, lda, m, k), self.rows(b0, ldb, k, n));
        let biasv = if p.bias { Some(self.words(self.at("BIAS", 4 * n)?, n)) } else { None };
        let out = gemm(&p, &av, &bv, biasv.as_deref()).map_err(|e| format!("golden model: {e}"))?;
        let elem = p.out_elem_bytes();
        for i in 0..m {
            for j in 0..n {
                let dst = c0 + i * ldc + j * elem;
                match &out {
                    GemmOutput::I32(v) => self.mem[dst..dst + 4].copy_from_slice(&v[i * n + j].to_le_bytes()),
                    GemmOutput::I8(v) => self.mem[dst] = v[i * n + j] as u8,
                }
            }
        }
        Ok((m * n * k) as u64)
    }

    fn attention(&mut self, dim: usize) -> Result<u64, String> {
        let r = |name: &str| self.r(name) as usize;
        let (heads, hpb, seq_q, seq_kv) = (r("HEADS"), r("HPB"), r("SEQ_Q"), r("SEQ_KV"));
        let (qs, kvs, os, flags) = (r("Q_STRIDE"), r("KV_STRIDE"), r("O_STRIDE"), r("FLAGS"));
        let batch = heads / hpb;
        let kv_len = if flags & 2 != 0 {
            Some(self.words(self.at("KVLEN", 4 * batch)?, batch).iter().map(|&n| n as usize).collect())
        } else {
            None
        };
        let params = AttentionParams {
            score: Requant { multiplier: r("SMULT") as i32, shift: r("SSHIFT") as u32 },
            out: (flags & 4 != 0).then(|| Requant { multiplier: r("OMULT") as i32, shift: r("OSHIFT") as u32 }),
        };
        let p = AttentionProblem { batch, heads: hpb, seq_q, seq_kv, dim, causal: flags & 1 != 0, kv_len, params };
        let (q0, k0, v0) = (self.at("Q", qs * heads)?, self.at("K", kvs * heads)?, self.at("V", kvs * heads)?);
        let o0 = self.at("O", os * heads)?;
        let (q, k, v) = (
            self.rows(q0, qs, heads, seq_q * dim),
            self.rows(k0, kvs, heads, seq_kv * dim),
            self.rows(v0, kvs, heads, seq_kv * dim),
        );
        let out = attention(&p, &q, &k, &v).map_err(|e| format!("golden model: {e}"))?;
        let per_head = seq_q * dim;
        for i in 0..out.len() {
            let (h, e) = (i / per_head, i % per_head);
            match &out {
                AttentionOutput::I32(o) => {
                    let dst = o0 + h * os + 4 * e;
                    self.mem[dst..dst + 4].copy_from_slice(&o[i].to_le_bytes());
                }
                AttentionOutput::I8(o) => self.mem[o0 + h * os + e] = o[i] as u8,
            }
        }
        Ok((heads * seq_q * seq_kv) as u64)
    }

    fn moe(&mut self) -> Result<u64, String> {
        let r = |name: &str| self.r(name) as usize;
        let (t, h, e, k) = (r("T"), r("H"), r("E"), r("K"));
        let (ldx, ldw, dpitch, flags) = (r("LDX"), r("LDW"), r("DPITCH"), r("FLAGS"));
        let p = MoeProblem {
            tokens: t,
            hidden: h,
            experts: e,
            top_k: k,
            mode: if flags & 2 != 0 { GateMode::TopkSoftmax } else { GateMode::SoftmaxTopk },
            renormalize: flags & 4 != 0,
            capacity: (flags & 8 != 0).then(|| CapacityFactor(r("CF") as u32)),
            bias: flags & 1 != 0,
            logit: Requant { multiplier: r("SMULT") as i32, shift: r("SSHIFT") as u32 },
        };
        let (x0, w0) = (self.at("X", ldx * t)?, self.at("WG", ldw * e)?);
        let (x, w) = (self.rows(x0, ldx, t, h), self.rows(w0, ldw, e, h));
        let bias = if p.bias { Some(self.words(self.at("BIAS", 4 * e)?, e)) } else { None };
        let out = route(&p, &x, &w, bias.as_deref()).map_err(|e| format!("golden model: {e}"))?;
        let route0 = self.at("ROUTE", RECORD_BYTES * t)?;
        for tok in 0..t {
            self.mem[route0 + tok * RECORD_BYTES..][..RECORD_BYTES].copy_from_slice(&out.record(tok, k));
        }
        let stats0 = self.at("STATS", 4 * (e + 2))?;
        let head = [out.dropped, out.capacity].into_iter().chain(out.load.iter().copied());
        for (i, v) in head.enumerate() {
            self.mem[stats0 + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
        let d0 = self.at("DISPATCH", dpitch * e)?;
        for (ex, tokens) in out.dispatch.iter().enumerate() {
            for (i, tok) in tokens.iter().enumerate() {
                self.mem[d0 + ex * dpitch + 4 * i..][..4].copy_from_slice(&tok.to_le_bytes());
            }
        }
        Ok((t * e) as u64)
    }
}

/// Run `f` with the fake unit running, then stop it and return its log.
fn with_unit<T>(board: &FakeBoard, f: impl FnOnce() -> T) -> (T, UnitLog) {
    let stop = Arc::new(AtomicBool::new(false));
    let unit = fake_unit(board, stop.clone());
    let out = f();
    stop.store(true, Ordering::Relaxed);
    (out, unit.join().unwrap())
}

#[test]
fn deploy_programs_the_pl_and_passes_the_self_test() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let board = FakeBoard::new(self_test_dma_bytes(&gemm_unit()));
    let (result, log) = with_unit(&board, || deploy_pynq(&manifest, &board.options()));
    let cases = result.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(log.errors.is_empty(), "{:?}", log.errors);
    assert_eq!(cases.len(), 4);
    assert_eq!(log.launches, 4, "one launch per self-test case");
    for (c, p) in cases.iter().zip(gemm_problems(&cfg())) {
        assert!(c.failure.is_none(), "{c:?}");
        assert_eq!(c.cycles, Some((p.m * p.n * p.k) as u64), "CYCLES read back from the unit");
    }

    let kernel = cfg().kernel_name();
    let p = &board.paths;
    // The FPGA manager got the .bin (header stripped, words byte-swapped) under the name written to it.
    assert_eq!(read(p.fpga_manager.join("flags")), "0");
    assert_eq!(board.loaded_firmware(), format!("{kernel}.bit.bin"));
    let bin = fs::read(p.firmware.join(format!("{kernel}.bit.bin"))).unwrap();
    let mut want = vec![0xFF; 4];
    want.extend_from_slice(&[0x66, 0x55, 0x99, 0xAA, 0x01, 0x80, 0x00, 0x30, 0x07, 0x00, 0x00, 0x00]);
    assert_eq!(bin, want);
    // The overlay: its dtbo copied to the firmware directory and named in configfs.
    assert_eq!(read(p.overlays.join(&kernel).join("path")), format!("{kernel}.dtbo"));
    assert_eq!(
        fs::read(p.firmware.join(format!("{kernel}.dtbo"))).unwrap(),
        fs::read(image.path().join("overlay.dtbo")).unwrap()
    );
    // Buffers: A, B, C of the 1×1×1 case on consecutive pages from PHYS.
    assert_eq!(log.addresses[0], (PHYS, PHYS + BUFFER_ALIGN, PHYS + 2 * BUFFER_ALIGN));
    // Caches: bidirectional, handed back to the CPU after the last launch.
    let u = p.udmabuf_class.join("udmabuf0");
    assert_eq!(read(u.join("sync_direction")), "0");
    assert_eq!(read(u.join("sync_for_cpu")), "1");
}

#[test]
fn a_stale_overlay_is_removed_before_the_pl_is_reprogrammed() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let board = FakeBoard::new(self_test_dma_bytes(&gemm_unit()));
    let stale = board.paths.overlays.join(cfg().kernel_name());
    fs::create_dir(&stale).unwrap();
    let (result, _) = with_unit(&board, || deploy_pynq(&manifest, &board.options()));
    result.unwrap();
    assert!(stale.join("path").is_file(), "the overlay was re-applied");
}

/// The deploy error (whole chain) on `board`, with no unit running.
fn deploy_error(manifest: &Path, board: &FakeBoard) -> String {
    let e = format!("{:#}", deploy_pynq(manifest, &board.options()).unwrap_err());
    eprintln!("deploy error: {e}");
    e
}

#[test]
fn missing_platform_pieces_fail_before_the_pl_is_touched() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let need = self_test_dma_bytes(&gemm_unit());
    type Break = fn(&PynqPaths);
    let cases: [(&str, Break, &str); 4] = [
        ("FPGA manager", |p| fs::remove_dir_all(&p.fpga_manager).unwrap(), "no FPGA manager"),
        ("configfs", |p| fs::remove_dir_all(&p.overlays).unwrap(), "configfs device-tree overlays"),
        ("UIO", |p| fs::remove_dir_all(&p.uio_class).unwrap(), "no UIO"),
        ("u-dma-buf", |p| fs::remove_dir_all(&p.udmabuf_class).unwrap(), "modprobe u-dma-buf"),
    ];
    for (what, break_it, expected) in cases {
        let board = FakeBoard::new(need);
        break_it(&board.paths);
        let e = deploy_error(&manifest, &board);
        assert!(e.contains(expected), "without {what}: {e}");
        if board.paths.fpga_manager.exists() {
            assert_eq!(board.loaded_firmware(), "", "without {what} the FPGA manager must not be written");
        }
    }

    let board = FakeBoard::new(need - BUFFER_ALIGN);
    let e = deploy_error(&manifest, &board);
    assert!(e.contains(&format!("has {} bytes, {need} are needed", need - BUFFER_ALIGN)), "{e}");
    assert_eq!(board.loaded_firmware(), "", "a too-small u-dma-buf is refused before programming");
}

#[test]
fn the_unit_must_be_found_where_the_image_put_it() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let board = FakeBoard::new(self_test_dma_bytes(&gemm_unit()));
    write(board.paths.uio_class.join("uio1/name"), "something_else\n");
    let e = deploy_error(&manifest, &board);
    assert!(e.contains(&format!("no UIO device named `{}`", cfg().kernel_name())), "{e}");
    assert!(e.contains("uio0 `audio-codec`, uio1 `something_else`"), "{e}");

    let board = FakeBoard::new(self_test_dma_bytes(&gemm_unit()));
    write(board.paths.uio_class.join("uio1/maps/map0/addr"), "0x43c00000\n");
    let e = deploy_error(&manifest, &board);
    assert!(e.contains("is at 0x43c00000") && e.contains("control window is at 0x40000000"), "{e}");
}

#[test]
fn the_fpga_manager_sequence_stops_at_the_first_failure() {
    let root = tempfile::tempdir().unwrap();
    let p = PynqPaths::under(root.path());
    let e = program_fpga(&p, "x.bit.bin", b"bin").unwrap_err();
    assert!(matches!(e, DeviceError::MissingTool { .. }) && e.to_string().contains("no FPGA manager"), "{e}");

    fs::create_dir_all(&p.fpga_manager).unwrap();
    let e = program_fpga(&p, "x.bit.bin", b"bin").unwrap_err().to_string();
    assert!(e.contains("firmware directory"), "{e}");

    // No `flags` attribute: the bitstream is already in /lib/firmware, `firmware` is never written.
    fs::create_dir_all(&p.firmware).unwrap();
    write(p.fpga_manager.join("firmware"), "");
    let e = program_fpga(&p, "x.bit.bin", b"bin").unwrap_err().to_string();
    assert!(e.contains("flags"), "{e}");
    assert_eq!(fs::read(p.firmware.join("x.bit.bin")).unwrap(), b"bin");
    assert_eq!(read(p.fpga_manager.join("firmware")), "");

    // The kernel refused the bitstream.
    write(p.fpga_manager.join("flags"), "");
    write(p.fpga_manager.join("state"), "write error\n");
    let e = program_fpga(&p, "x.bit.bin", b"bin").unwrap_err().to_string();
    assert!(e.contains("state `write error`"), "{e}");
    assert_eq!(
        (read(p.fpga_manager.join("flags")), read(p.fpga_manager.join("firmware"))),
        ("0".into(), "x.bit.bin".into())
    );

    write(p.fpga_manager.join("state"), "operating\n");
    program_fpga(&p, "x.bit.bin", b"bin").unwrap();
}

#[test]
fn wrong_hwinfo_is_refused_at_open() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let loaded = Manifest::load(&manifest).unwrap();
    let board = FakeBoard::new(self_test_dma_bytes(&gemm_unit()));
    let other = GemmConfig::small(4, 4).hwinfo();
    board.set_reg("HWINFO", other);
    match PynqDevice::open(&loaded, &board.options()) {
        Err(DeviceError::HwInfoMismatch { expected, found }) => assert_eq!((expected, found), (cfg().hwinfo(), other)),
        Err(e) => panic!("expected HwInfoMismatch, got {e}"),
        Ok(_) => panic!("expected HwInfoMismatch, the device opened"),
    }
    let board = FakeBoard::new(self_test_dma_bytes(&gemm_unit()));
    board.set_reg("HWINFO", other);
    let e = deploy_error(&manifest, &board);
    assert!(e.contains("HWINFO is 0x01070404, expected 0x01070202"), "{e}");
}

#[test]
fn a_unit_that_never_finishes_times_out_quickly() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let board = FakeBoard::new(self_test_dma_bytes(&gemm_unit()));
    let start = Instant::now();
    let e = deploy_error(&manifest, &board);
    assert!(e.contains("timeout: no ap_done after") && e.contains("(limit 50000)"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    // ap_start stayed set, so the later cases are refused as busy rather than waiting again.
    assert!(e.contains("4 of 4 cases failed"), "{e}");
}

#[test]
fn dma_buffers_allocate_page_aligned_and_run_out_clearly() {
    let image = tempfile::tempdir().unwrap();
    let loaded = Manifest::load(&built_image(image.path())).unwrap();
    let board = FakeBoard::new(3 * BUFFER_ALIGN);
    let mut dev = PynqDevice::open(&loaded, &board.options()).unwrap();
    assert!(dev.info().name.contains("uio1 at 0x40000000"), "{}", dev.info().name);
    let a = dev.alloc(BUFFER_ALIGN + 1).unwrap();
    let b = dev.alloc(100).unwrap();
    match dev.alloc(1) {
        Err(DeviceError::OutOfMemory { requested: 1, available: 0 }) => {}
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    dev.upload(b, 96, &[1, 2, 3, 4]).unwrap();
    let mut out = [0u8; 6];
    dev.download(b, 94, &mut out).unwrap();
    assert_eq!(out, [0, 0, 1, 2, 3, 4]);
    assert!(matches!(dev.upload(b, 98, &[0; 3]), Err(DeviceError::OutOfBounds { .. })));
    // The bytes sit at their offset in the region: b is the third page.
    let region = fs::read(board.paths.dev.join("udmabuf0")).unwrap();
    assert_eq!(&region[2 * BUFFER_ALIGN as usize + 96..][..4], &[1, 2, 3, 4]);

    dev.free(a).unwrap();
    assert!(matches!(dev.free(a), Err(DeviceError::UnknownBuffer(_))));
    let c = dev.alloc(2 * BUFFER_ALIGN).unwrap();
    dev.download(c, 0, &mut out).unwrap();
    assert_eq!(out, [0; 6], "a fresh buffer reads zero");

    // The region's own view: device address = phys_addr + offset.
    let mut mem = UdmaBuf::open(&board.paths, "udmabuf0").unwrap();
    let off = mem.alloc(10).unwrap();
    assert_eq!((mem.phys_addr, mem.device_address(off)), (PHYS, PHYS + off));
}

#[test]
fn uio_lookup_reads_the_window_of_the_named_device() {
    let board = FakeBoard::new(BUFFER_ALIGN);
    let m = find_uio(&board.paths, &cfg().kernel_name()).unwrap();
    assert_eq!((m.device.as_str(), m.addr, m.size), ("uio1", CONTROL_BASE, 0x1000));
    let mut regs = Registers::open(&board.paths.dev.join("uio1"), m.size).unwrap();
    assert_eq!(regs.read32(board.map.offset("HWINFO")).unwrap(), cfg().hwinfo());
    assert!(regs.read32(0x1000).is_err() && regs.write32(2, 0).is_err(), "outside or unaligned");
}

#[test]
fn pynq_builds_write_the_uio_overlay_source_and_compile_it_with_dtc() {
    for board in [Board::PynqZ2, Board::Zcu104] {
        let dir = tempfile::tempdir().unwrap();
        let report = build(&BuildRequest {
            unit: UnitConfig::Gemm(cfg()),
            board,
            clock_mhz: 100.0,
            out: dir.path().to_path_buf(),
            run_vendor_tools: false,
        })
        .unwrap();
        let dtso = read(dir.path().join("overlay.dtso"));
        assert!(dtso.contains(&format!("{}@", cfg().kernel_name())) && dtso.contains("generic-uio"), "{dtso}");
        let check = report.checks.iter().find(|(n, _)| n == "overlay.dtso").map(|(_, o)| o.clone());
        let overlay = Manifest::load(&report.manifest).unwrap().manifest.overlay.unwrap();
        if on_path("dtc") {
            assert!(matches!(check, Some(Outcome::Pass(_))), "{report}");
            let dtbo = fs::read(dir.path().join("overlay.dtbo")).unwrap();
            assert_eq!(&dtbo[..4], &[0xd0, 0x0d, 0xfe, 0xed], "a flattened device tree");
            assert_eq!(overlay.dtbo.as_deref(), Some("overlay.dtbo"));
        } else {
            assert!(matches!(check, Some(Outcome::Skipped(_))), "{report}");
            assert_eq!(overlay.dtbo, None);
        }
    }
}

#[test]
fn manifests_refuse_a_bitstream_for_another_part_and_an_unchecksummed_dtbo() {
    let image = tempfile::tempdir().unwrap();
    let dir = image.path();
    let manifest = built_image(dir);
    let mut bit = fake_bit(&[]);
    let at = bit.windows(PART.len()).position(|w| w == PART.as_bytes()).unwrap();
    bit[at..at + PART.len()].copy_from_slice(b"7z010clg400");
    let m = Manifest::load(&manifest).unwrap().manifest;
    fs::write(dir.join("overlay.bit"), &bit).unwrap();
    let files: Vec<String> = m.files.keys().cloned().collect();
    let path = Manifest::new(m.unit.clone(), m.board, m.clock_mhz, m.image.clone(), m.overlay.clone(), dir, &files)
        .unwrap()
        .write(dir)
        .unwrap();
    let e = Manifest::load(&path).unwrap_err().to_string();
    assert!(e.contains("for part `7z010clg400`"), "{e}");

    fs::write(dir.join("overlay.bit"), fake_bit(&[])).unwrap();
    let files: Vec<String> = m.files.keys().filter(|f| *f != "overlay.dtbo").cloned().collect();
    Manifest::new(m.unit, m.board, m.clock_mhz, m.image, m.overlay, dir, &files).unwrap().write(dir).unwrap();
    let e = Manifest::load(&path).unwrap_err().to_string();
    assert!(e.contains("`overlay.dtbo` has no checksum"), "{e}");
}

#[test]
fn deploy_cli_refuses_device_for_a_pynq_image() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let out = assert_cmd::Command::cargo_bin("ferrite")
        .unwrap()
        .args(["deploy", "--device", "0", "--manifest"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--device 0: a pynq-z2 has one programmable logic region"), "{err}");
}

#[test]
fn deploy_self_tests_attention_and_moe_units_bit_exact() {
    let units = [
        UnitConfig::Attention(AttentionConfig {
            head_dim: 16,
            lanes: 2,
            dot_par: 16,
            port_bits: 128,
            clock_mhz: 100.0,
            ..AttentionConfig::default()
        }),
        UnitConfig::Moe(MoeConfig { clock_mhz: 100.0, ..MoeConfig::small() }),
    ];
    for unit in units {
        let image = tempfile::tempdir().unwrap();
        let manifest = built_image_of(image.path(), &unit);
        let board = FakeBoard::with_unit(unit.clone(), self_test_dma_bytes(&unit));
        let (result, log) = with_unit(&board, || deploy_pynq(&manifest, &board.options()));
        let cases = result.unwrap_or_else(|e| panic!("{}: {e:#}", unit.name()));
        assert!(log.errors.is_empty(), "{}: {:?}", unit.name(), log.errors);
        assert_eq!(cases.len(), 3, "{cases:?}");
        assert_eq!(log.launches, cases.len(), "one launch per self-test case");
        assert!(cases.iter().all(|c| c.failure.is_none() && c.cycles.is_some()), "{cases:?}");
        assert_eq!(board.loaded_firmware(), format!("{}.bit.bin", unit.kernel_name()));
    }
}

#[test]
fn a_faulty_attention_or_moe_unit_fails_the_self_test_naming_the_mismatch() {
    let cases = [
        (
            UnitConfig::Attention(AttentionConfig {
                head_dim: 16,
                lanes: 2,
                dot_par: 16,
                port_bits: 128,
                clock_mhz: 100.0,
                ..AttentionConfig::default()
            }),
            "O",
            "element 0: got",
        ),
        (UnitConfig::Moe(MoeConfig { clock_mhz: 100.0, ..MoeConfig::small() }), "ROUTE", "experts[0]: got"),
    ];
    for (unit, output, mismatch) in cases {
        let image = tempfile::tempdir().unwrap();
        let manifest = built_image_of(image.path(), &unit);
        let mut board = FakeBoard::with_unit(unit.clone(), self_test_dma_bytes(&unit));
        board.corrupt = Some(output);
        let (result, log) = with_unit(&board, || deploy_pynq(&manifest, &board.options()));
        let e = format!("{:#}", result.unwrap_err());
        assert!(log.errors.is_empty(), "{:?}", log.errors);
        assert!(e.contains("3 of 3 cases failed") && e.contains(mismatch), "{}: {e}", unit.name());
    }
}

#[test]
fn an_moe_unit_that_never_finishes_fails_every_case() {
    let unit = UnitConfig::Moe(MoeConfig { clock_mhz: 100.0, ..MoeConfig::small() });
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image_of(image.path(), &unit);
    let board = FakeBoard::with_unit(unit.clone(), self_test_dma_bytes(&unit));
    // No unit thread: a run that never finishes fails every case with a timeout.
    let e = deploy_error(&manifest, &board);
    assert!(e.contains("3 of 3 cases failed") && e.contains("timeout"), "{e}");
}

/// `ferrite run gemm --device pynq`: the user's `.npy` operands through the
/// CLI onto the (fake) board, bit-exact, the result written as `.npy`.
#[test]
fn run_cli_runs_user_npy_on_the_board_bit_exact() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let board = FakeBoard::new(1 << 20);
    let data = tempfile::tempdir().unwrap();
    let a = ndarray::Array2::<i8>::from_shape_fn((5, 7), |(i, j)| (i as i32 * 37 - j as i32 * 19) as i8);
    let b = ndarray::Array2::<i8>::from_shape_fn((7, 3), |(i, j)| ((j as i32 * 53 + i as i32 * 11) ^ 0x55) as i8);
    let (pa, pb, pc) = (data.path().join("a.npy"), data.path().join("b.npy"), data.path().join("c.npy"));
    ndarray_npy::write_npy(&pa, &a).unwrap();
    ndarray_npy::write_npy(&pb, &b).unwrap();
    let (out, log) = with_unit(&board, || {
        assert_cmd::Command::cargo_bin("ferrite")
            .unwrap()
            .args(["run", "gemm", "--device", "pynq", "--manifest"])
            .arg(&manifest)
            .arg("--pynq-root")
            .arg(board._root.path())
            .args(["--a", pa.to_str().unwrap(), "--b", pb.to_str().unwrap(), "--out", pc.to_str().unwrap()])
            .output()
            .unwrap()
    });
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("bit-exact"), "{stdout}");
    assert!(log.errors.is_empty(), "{:?}", log.errors);
    assert_eq!(log.launches, 1);
    let p = GemmProblem::new(5, 3, 7);
    let want = gemm(&p, a.as_slice().unwrap(), b.as_slice().unwrap(), None).unwrap();
    let got: ndarray::Array2<i32> = ndarray_npy::read_npy(&pc).unwrap();
    assert_eq!(GemmOutput::I32(got.into_raw_vec()), want);
}

/// The CLI's pynq errors: no manifest, an image of another unit, and this
/// machine (no FPGA manager) — each one line, before anything is written.
#[test]
fn run_cli_pynq_errors_are_one_line() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let m = manifest.to_str().unwrap();
    let empty = tempfile::tempdir().unwrap();
    for (args, want) in [
        (vec!["run", "gemm", "--device", "pynq", "--m", "2", "--n", "2", "--k", "2"], "needs --manifest"),
        (
            vec![
                "run",
                "moe",
                "--device",
                "pynq",
                "--manifest",
                m,
                "--tokens",
                "4",
                "--hidden",
                "16",
                "--experts",
                "4",
            ],
            "holds the gemm unit: run it with `ferrite run gemm`",
        ),
        (
            vec![
                "run",
                "gemm",
                "--device",
                "pynq",
                "--manifest",
                m,
                "--pynq-root",
                empty.path().to_str().unwrap(),
                "--m",
                "2",
                "--n",
                "2",
                "--k",
                "2",
            ],
            "FPGA manager",
        ),
    ]
    .into_iter()
    .chain(
        // This machine's own root: no FPGA manager either (on a board, this would program its PL).
        (!Path::new("/sys/class/fpga_manager/fpga0").exists()).then(|| {
            (
                vec!["run", "gemm", "--device", "pynq", "--manifest", m, "--m", "2", "--n", "2", "--k", "2"],
                "FPGA manager",
            )
        }),
    ) {
        let out = assert_cmd::Command::cargo_bin("ferrite").unwrap().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `compare --devices sim,pynq --manifest`: the board row is measured on the
/// (fake) board, bit-exact, at the image's clock and labelled with it; the sim
/// row beside it projects the image's own unit on the image's board at that
/// clock, so projection and board describe the same configuration.
#[test]
fn compare_measures_the_board_beside_the_projection_of_its_unit() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let board = FakeBoard::new(1 << 20);
    let out = tempfile::tempdir().unwrap();
    let (res, log) = with_unit(&board, || {
        assert_cmd::Command::cargo_bin("ferrite")
            .unwrap()
            .args(["compare", "--workload", "gemm", "20x12x36", "--devices", "sim,pynq", "--quiet"])
            .args(["--min-time-ms", "1", "--manifest"])
            .arg(&manifest)
            .arg("--pynq-root")
            .arg(board._root.path())
            .arg("--out")
            .arg(out.path())
            .output()
            .unwrap()
    });
    let (stdout, stderr) = (String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
    assert!(res.status.success(), "{stdout}\n{stderr}");
    assert!(log.errors.is_empty(), "{:?}", log.errors);
    let report: ferrite_host::compare::report::Report =
        serde_json::from_str(&fs::read_to_string(out.path().join("report.json")).unwrap()).unwrap();
    let case = &report.cases[0];
    let row = |id| case.rows.iter().find(|r| r.device == id);
    let pynq = row(DeviceId::Pynq).unwrap_or_else(|| panic!("no pynq row: {:?}", case.skipped));
    let b = pynq.board.as_ref().expect("the pynq row carries its board run");
    assert!(pynq.bit_exact, "{pynq:?}");
    assert_eq!(log.launches as u32, pynq.runs + 1, "one checked launch, then the timed ones");
    assert_eq!((b.kernel.as_str(), b.clock_mhz, b.cycles), (cfg().kernel_name().as_str(), 100.0, 20 * 12 * 36));
    assert!(b.clock_source.starts_with("assumed"), "{}", b.clock_source);
    assert!(stdout.contains("@ 100 MHz assumed"), "{stdout}");
    match row(DeviceId::Sim) {
        Some(sim) => {
            let f = sim.fpga.as_ref().expect("the sim row is a projection");
            assert_eq!((f.kernel.as_str(), f.board.as_str(), f.clock_mhz), (b.kernel.as_str(), "PYNQ-Z2", 100.0));
            assert!(sim.bit_exact);
        }
        None => eprintln!("sim row skipped ({:?}): the projection side needs Verilator", case.skipped),
    }
}

/// Board devices in `compare` need an image, and an image's board that is not
/// there fails up front: one line each.
#[test]
fn compare_board_errors_are_one_line() {
    let image = tempfile::tempdir().unwrap();
    let manifest = built_image(image.path());
    let m = manifest.to_str().unwrap();
    let empty = tempfile::tempdir().unwrap();
    for (args, want) in [
        (vec!["--devices", "cpu,pynq"], "--devices pynq measures a built image on the board: pass --manifest"),
        (vec!["--devices", "pynq", "--manifest", m, "--pynq-root", empty.path().to_str().unwrap()], "FPGA manager"),
    ] {
        let out = assert_cmd::Command::cargo_bin("ferrite")
            .unwrap()
            .args(["compare", "--workload", "gemm", "8", "--quiet", "--out"])
            .arg(empty.path().join("report"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
