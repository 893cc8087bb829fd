//! Run-time Verilator builds of a unit's Verilog, cached on disk.
//!
//! Units are parameterized by the CLI, so the design is only known at run
//! time: the Verilog is verilated and compiled into a shared object together
//! with a C++ shim generated from [`ferrite_hw::vitis::ports`], then loaded
//! with `libloading`. The shim copies the `#[repr(C)]` [`Inputs`] into the
//! model's ports and the ports into [`Outputs`]; the C structs are generated
//! from the same field table as the layout checks, so a drift between the Rust
//! structs and the shim is a compile or load error, never memory corruption.
use crate::SimError;
use ferrite_hw::vitis::{ports, Dir, Inputs, Outputs, PinLevel, MAX_DATA_BITS};
use sha2::{Digest, Sha256};
use std::ffi::{c_char, c_void, CString};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Bumped when the build recipe changes, so stale cached objects are not reused.
const RECIPE: &str = "ferrite-sim build recipe 5: --cc --exe -O3 -shared -Bsymbolic, x-initial choice, \
     then make with clang++-19 OPT_FAST=-O2 (else the default compiler, OPT_FAST=-O3) OPT_GLOBAL=-O2, \
     one evaluation per cycle where no output depends on an input";

/// C type of one field of [`Inputs`] / [`Outputs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CType {
    U8,
    U32,
    U64,
    Words(usize),
}

impl CType {
    fn bits(self) -> usize {
        match self {
            CType::U8 => 8,
            CType::U32 => 32,
            CType::U64 => 64,
            CType::Words(n) => 32 * n,
        }
    }
}

/// Rust field types the shim can mirror.
trait CField {
    const C: CType;
}
impl CField for u8 {
    const C: CType = CType::U8;
}
impl CField for u32 {
    const C: CType = CType::U32;
}
impl CField for u64 {
    const C: CType = CType::U64;
}
impl<const N: usize> CField for [u32; N] {
    const C: CType = CType::Words(N);
}

#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    ty: CType,
    offset: usize,
}

/// Lists a struct's fields with their Rust offsets; the closure makes the
/// compiler check each declared type against the real field.
macro_rules! fields {
    ($s:ident { $($f:ident: $t:ty),* $(,)? }) => {
        vec![$({
            let _type_check: fn(&$s) -> &$t = |s| &s.$f;
            Field { name: stringify!($f), ty: <$t as CField>::C, offset: std::mem::offset_of!($s, $f) }
        }),*]
    };
}

fn input_fields() -> Vec<Field> {
    use ferrite_hw::vitis::DATA_WORDS as W;
    fields!(Inputs {
        ap_rst_n: u8,
        ctrl_awvalid: u8,
        ctrl_wvalid: u8,
        ctrl_bready: u8,
        ctrl_arvalid: u8,
        ctrl_rready: u8,
        gmem_awready: u8,
        gmem_wready: u8,
        gmem_bvalid: u8,
        gmem_arready: u8,
        gmem_rvalid: u8,
        gmem_rlast: u8,
        gmem_bresp: u8,
        gmem_rresp: u8,
        ctrl_wstrb: u8,
        ctrl_awaddr: u32,
        ctrl_araddr: u32,
        ctrl_wdata: u32,
        gmem_rdata: [u32; W],
    })
}

fn output_fields() -> Vec<Field> {
    use ferrite_hw::vitis::DATA_WORDS as W;
    fields!(Outputs {
        interrupt: u8,
        ctrl_awready: u8,
        ctrl_wready: u8,
        ctrl_bvalid: u8,
        ctrl_arready: u8,
        ctrl_rvalid: u8,
        ctrl_bresp: u8,
        ctrl_rresp: u8,
        gmem_awvalid: u8,
        gmem_wvalid: u8,
        gmem_wlast: u8,
        gmem_bready: u8,
        gmem_arvalid: u8,
        gmem_rready: u8,
        gmem_awlen: u8,
        gmem_arlen: u8,
        gmem_awsize: u8,
        gmem_arsize: u8,
        gmem_awburst: u8,
        gmem_arburst: u8,
        ctrl_rdata: u32,
        gmem_awaddr: u64,
        gmem_araddr: u64,
        gmem_wdata: [u32; W],
        gmem_wstrb: [u32; W / 8],
    })
}

/// The C definition of a struct, with its layout asserted against Rust's.
fn c_struct(name: &str, fields: &[Field], size: usize) -> String {
    let mut s = format!("struct {name} {{\n");
    for f in fields {
        let _ = match f.ty {
            CType::U8 => writeln!(s, "    uint8_t {};", f.name),
            CType::U32 => writeln!(s, "    uint32_t {};", f.name),
            CType::U64 => writeln!(s, "    uint64_t {};", f.name),
            CType::Words(n) => writeln!(s, "    uint32_t {}[{n}];", f.name),
        };
    }
    s.push_str("};\n");
    let _ = writeln!(s, "static_assert(sizeof({name}) == {size}, \"{name}: size differs from Rust\");");
    for f in fields {
        let _ = writeln!(
            s,
            "static_assert(offsetof({name}, {0}) == {1}, \"{name}.{0}: offset differs from Rust\");",
            f.name, f.offset
        );
    }
    s
}

/// Name of the `Inputs`/`Outputs` field that carries a port.
fn field_name(port: &str) -> String {
    if let Some(rest) = port.strip_prefix("s_axi_control_") {
        format!("ctrl_{rest}")
    } else if let Some(rest) = port.strip_prefix("m_axi_gmem_") {
        format!("gmem_{rest}")
    } else {
        port.to_string()
    }
}

fn mask(bits: usize) -> String {
    if bits >= 64 {
        "~0ULL".into()
    } else {
        format!("0x{:x}ULL", (1u64 << bits) - 1)
    }
}

/// C++ statements moving one port between the model and its field.
fn port_copy(port: &str, dir: Dir, bits: usize, f: &Field) -> String {
    let (name, words) = (f.name, bits.div_ceil(32));
    match (dir, f.ty, bits) {
        (Dir::In, CType::Words(_), b) if b > 64 => {
            let mut s = String::new();
            for i in 0..words {
                let m = if i + 1 == words && b % 32 != 0 { (1u64 << (b % 32)) - 1 } else { 0xffff_ffff };
                let _ = writeln!(s, "    port_{port}(t)[{i}] = in->{name}[{i}] & 0x{m:x}u;");
            }
            s
        }
        (Dir::In, CType::Words(_), b) => {
            let hi = if b > 32 { format!(" | ((uint64_t)in->{name}[1] << 32)") } else { String::new() };
            format!("    port_{port}(t) = ((uint64_t)in->{name}[0]{hi}) & {};\n", mask(b))
        }
        (Dir::In, _, b) => format!("    port_{port}(t) = (uint64_t)in->{name} & {};\n", mask(b)),
        (Dir::Out, CType::Words(_), b) if b > 64 => {
            (0..words).map(|i| format!("    out->{name}[{i}] = port_{port}(t)[{i}];\n")).collect()
        }
        (Dir::Out, CType::Words(_), b) => {
            let hi = if b > 32 {
                format!("    out->{name}[1] = (uint32_t)((uint64_t)port_{port}(t) >> 32);\n")
            } else {
                String::new()
            };
            format!("    out->{name}[0] = (uint32_t)port_{port}(t);\n{hi}")
        }
        (Dir::Out, _, _) => format!("    out->{name} = port_{port}(t);\n"),
    }
}

/// The C++ shim for a design: port copies plus the C entry points.
fn shim_source(top: &str, data_bits: usize, trace: bool) -> Result<String, SimError> {
    let (ins, outs) = (input_fields(), output_fields());
    let (mut apply, mut sample, mut accessors) = (String::new(), String::new(), String::new());
    let mut has_clock = false;
    for p in ports(data_bits) {
        if p.name == "ap_clk" {
            has_clock = true;
            continue;
        }
        let fname = field_name(&p.name);
        let (list, code) = match p.dir {
            Dir::In => (&ins, &mut apply),
            Dir::Out => (&outs, &mut sample),
        };
        let f = list.iter().find(|f| f.name == fname).ok_or_else(|| {
            SimError::Config(format!("port {} has no field `{fname}` in ferrite_hw::vitis::Inputs/Outputs", p.name))
        })?;
        if p.bits == 0 || p.bits > f.ty.bits() {
            return Err(SimError::Config(format!(
                "port {} is {} bits but its field `{fname}` holds {}",
                p.name,
                p.bits,
                f.ty.bits()
            )));
        }
        code.push_str(&port_copy(&p.name, p.dir, p.bits, f));
        let _ = writeln!(accessors, "FERRITE_PORT({})", p.name);
    }
    if !has_clock {
        return Err(SimError::Config("the Vitis port list has no ap_clk".into()));
    }
    let structs = [
        c_struct("FerriteInputs", &ins, std::mem::size_of::<Inputs>()),
        c_struct("FerriteOutputs", &outs, std::mem::size_of::<Outputs>()),
    ]
    .concat();
    Ok(SHIM_TEMPLATE
        .replace("@TRACE@", if trace { "1" } else { "0" })
        .replace("@TOP@", top)
        .replace("@STRUCTS@", &structs)
        .replace("@ACCESSORS@", &accessors)
        .replace("@APPLY@", &apply)
        .replace("@SAMPLE@", &sample))
}

/// The shim's line that [`compile`] switches to one evaluation per cycle.
const ONE_EVAL_OFF: &str = "#define FERRITE_ONE_EVAL 0";

const SHIM_TEMPLATE: &str = r#"// Generated by ferrite-sim from ferrite_hw::vitis; do not edit.
#define FERRITE_TRACE @TRACE@
// 1 (set by the build after reading the verilated model): no output depends
// combinationally on an input and the clock's only trigger is its rising
// edge, so a cycle is one evaluation, the inputs and the edge together, and
// the outputs before the edge are those after the last one. The model's
// edge detector remembers the clock as high; FERRITE_CLK_PREV names it.
#define FERRITE_ONE_EVAL 0
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include "verilated.h"
#if FERRITE_TRACE
#include "verilated_vcd_c.h"
#endif
#include "V@TOP@.h"
#if FERRITE_ONE_EVAL
#include "V@TOP@___024root.h"
#endif

@STRUCTS@
namespace {
// Verilator prefixes ports named like C++ words (`interrupt`) with __SYM__;
// port_NAME(t) picks whichever member the model has.
#define FERRITE_PORT(name)                                                        \
    template <class T, class = void> struct sym_##name : std::false_type {};     \
    template <class T>                                                           \
    struct sym_##name<T, std::void_t<decltype(std::declval<T&>().__SYM__##name)>> : std::true_type {}; \
    template <class T> auto& port_##name(T* t) {                                 \
        if constexpr (sym_##name<T>::value) return t->__SYM__##name;             \
        else return t->name;                                                     \
    }
@ACCESSORS@
struct Model {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<V@TOP@> top;
#if FERRITE_TRACE
    std::unique_ptr<VerilatedVcdC> vcd;
#endif
    bool finished = false;
    // The outputs after the last evaluation.
    FerriteOutputs prev;
};

void apply(V@TOP@* t, const FerriteInputs* in) {
@APPLY@}

void sample(const V@TOP@* t, FerriteOutputs* out) {
    std::memset(out, 0, sizeof(*out));
@SAMPLE@}

void dump(Model* m) {
#if FERRITE_TRACE
    if (m->vcd) m->vcd->dump(m->ctx->time());
#endif
    (void)m;
}
}  // namespace

extern "C" {
size_t ferrite_sizeof_inputs(void) { return sizeof(FerriteInputs); }
size_t ferrite_sizeof_outputs(void) { return sizeof(FerriteOutputs); }
int ferrite_has_trace(void) { return FERRITE_TRACE; }

// Returns null when the VCD file cannot be opened. A non-zero `seed` fills
// every register and memory without an initial value with random bits from
// it (effective in builds with --x-initial unique).
void* ferrite_new(const char* vcd_path, uint32_t seed) {
    Model* m = new Model;
    m->ctx.reset(new VerilatedContext);
    if (seed != 0) {
        m->ctx->randReset(2);
        m->ctx->randSeed((int)seed);
    }
#if FERRITE_TRACE
    if (vcd_path) m->ctx->traceEverOn(true);
#endif
    m->top.reset(new V@TOP@(m->ctx.get(), "TOP"));
#if FERRITE_TRACE
    if (vcd_path) {
        m->vcd.reset(new VerilatedVcdC);
        m->top->trace(m->vcd.get(), 99);
        m->vcd->open(vcd_path);
        if (!m->vcd->isOpen()) {
            m->vcd.reset();
            delete m;
            return nullptr;
        }
    }
#else
    (void)vcd_path;
#endif
    m->top->ap_clk = 0;
    m->top->eval();
    sample(m->top.get(), &m->prev);
    return m;
}

void ferrite_finish(void* p) {
    Model* m = static_cast<Model*>(p);
    if (m->finished) return;
    m->finished = true;
    m->top->final();
#if FERRITE_TRACE
    if (m->vcd) m->vcd->close();
#endif
}

void ferrite_free(void* p) {
    ferrite_finish(p);
    delete static_cast<Model*>(p);
}

void ferrite_eval(void* p, const FerriteInputs* in, FerriteOutputs* out) {
    Model* m = static_cast<Model*>(p);
    apply(m->top.get(), in);
    m->top->ap_clk = 0;
    m->top->eval();
    sample(m->top.get(), out);
    m->prev = *out;
}

// Raises the clock (dumped) and reports the outputs.
static void edge(Model* m, FerriteOutputs* out) {
    m->ctx->timeInc(5);
    m->top->ap_clk = 1;
    m->top->eval();
    dump(m);
    m->ctx->timeInc(5);
    sample(m->top.get(), out);
    m->prev = *out;
}

// Settles with the clock low (dumped), raises it (dumped), reports the outputs.
void ferrite_tick(void* p, const FerriteInputs* in, FerriteOutputs* out) {
    Model* m = static_cast<Model*>(p);
    apply(m->top.get(), in);
    m->top->ap_clk = 0;
    m->top->eval();
    dump(m);
    edge(m, out);
}

int ferrite_one_eval(void) { return FERRITE_ONE_EVAL; }

// ferrite_eval then ferrite_tick in one call: two evaluations (the tick's
// settle would repeat the eval's with the same inputs), or one (FERRITE_ONE_EVAL).
void ferrite_cycle(void* p, const FerriteInputs* in, FerriteOutputs* settled, FerriteOutputs* after) {
    Model* m = static_cast<Model*>(p);
    apply(m->top.get(), in);
#if FERRITE_ONE_EVAL
    *settled = m->prev;
    m->top->rootp->FERRITE_CLK_PREV = 0;
    m->ctx->timeInc(5);
    m->top->ap_clk = 1;
    m->top->eval();
    m->ctx->timeInc(5);
    sample(m->top.get(), after);
    m->prev = *after;
#else
    m->top->ap_clk = 0;
    m->top->eval();
    dump(m);
    sample(m->top.get(), settled);
    edge(m, after);
#endif
}
}
"#;

/// `verilator --version`, or `None` when Verilator cannot be run.
pub fn verilator_version() -> Option<String> {
    static VERSION: OnceLock<Option<String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let out = Command::new("verilator").arg("--version").output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .clone()
}

/// The compiler for the verilated model when it is installed (`scripts/install-deps.sh`).
/// A model is a few hundred kilobytes of straight-line code run once per cycle,
/// so its speed is bound by instruction fetch; clang 19 at `-O2` made the
/// default GEMM and MoE units' models 1.2× and 1.1× faster than g++ 12 at
/// `-O3` (clang 14 made the GEMM's 2.5× slower, clang 15 the MoE's 8 % slower
/// than 19: docs/simulators.md).
const CLANG: &str = "clang++-19";

/// `CLANG --version` when it runs, else `None` (the build uses Verilator's
/// default compiler, g++).
fn clang_version() -> Option<String> {
    static VERSION: OnceLock<Option<String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let out = Command::new(CLANG).arg("--version").output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .clone()
}

pub fn verilator_available() -> bool {
    verilator_version().is_some()
}

/// For tests that need Verilator: `true` when it is installed. Without it they
/// skip with a printed reason, except under CI (env `CI` set), where a missing
/// Verilator is a broken install and fails the test instead of passing silently.
pub fn verilator_or_skip() -> bool {
    if verilator_available() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but Verilator is missing: run scripts/install-deps.sh");
    eprintln!("skipped: Verilator is not installed (scripts/install-deps.sh installs it)");
    false
}

/// `$FERRITE_CACHE`, else `$HOME/.cache/ferrite/verilator`.
fn default_cache_dir() -> Result<PathBuf, SimError> {
    if let Some(dir) = std::env::var_os("FERRITE_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".cache/ferrite/verilator")),
        None => Err(SimError::Config("neither FERRITE_CACHE nor HOME is set: no place for the build cache".into())),
    }
}

type NewFn = unsafe extern "C" fn(*const c_char, u32) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type StepFn = unsafe extern "C" fn(*mut c_void, *const Inputs, *mut Outputs);
type CycleFn = unsafe extern "C" fn(*mut c_void, *const Inputs, *mut Outputs, *mut Outputs);

/// A loaded shared object and its entry points (valid while `_lib` lives).
struct Library {
    new: NewFn,
    free: FreeFn,
    finish: FreeFn,
    eval: StepFn,
    tick: StepFn,
    cycle: CycleFn,
    /// The shim clocks a cycle with one evaluation of the model.
    one_eval: bool,
    _lib: libloading::Library,
}

impl Library {
    fn load(path: &Path, trace: bool) -> Result<Self, SimError> {
        let err = |reason: String| SimError::Load { path: path.to_path_buf(), reason };
        // SAFETY: the library is one this module built; its initializers are Verilator's.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| err(e.to_string()))?;
        // SAFETY: each symbol is declared in the generated shim with exactly this signature.
        unsafe {
            let size_in: libloading::Symbol<unsafe extern "C" fn() -> usize> =
                lib.get(b"ferrite_sizeof_inputs").map_err(|e| err(e.to_string()))?;
            let size_out: libloading::Symbol<unsafe extern "C" fn() -> usize> =
                lib.get(b"ferrite_sizeof_outputs").map_err(|e| err(e.to_string()))?;
            let has_trace: libloading::Symbol<unsafe extern "C" fn() -> i32> =
                lib.get(b"ferrite_has_trace").map_err(|e| err(e.to_string()))?;
            let (si, so) = (size_in(), size_out());
            if si != std::mem::size_of::<Inputs>() || so != std::mem::size_of::<Outputs>() {
                return Err(err(format!(
                    "layout mismatch: shim Inputs/Outputs are {si}/{so} bytes, Rust's are {}/{}",
                    std::mem::size_of::<Inputs>(),
                    std::mem::size_of::<Outputs>()
                )));
            }
            if (has_trace() != 0) != trace {
                return Err(err("tracing support differs from the cache key".into()));
            }
            let new: NewFn = *lib.get(b"ferrite_new").map_err(|e| err(e.to_string()))?;
            let free: FreeFn = *lib.get(b"ferrite_free").map_err(|e| err(e.to_string()))?;
            let finish: FreeFn = *lib.get(b"ferrite_finish").map_err(|e| err(e.to_string()))?;
            let eval: StepFn = *lib.get(b"ferrite_eval").map_err(|e| err(e.to_string()))?;
            let tick: StepFn = *lib.get(b"ferrite_tick").map_err(|e| err(e.to_string()))?;
            let cycle: CycleFn = *lib.get(b"ferrite_cycle").map_err(|e| err(e.to_string()))?;
            let one_eval: libloading::Symbol<unsafe extern "C" fn() -> i32> =
                lib.get(b"ferrite_one_eval").map_err(|e| err(e.to_string()))?;
            let one_eval = one_eval() != 0;
            Ok(Self { new, free, finish, eval, tick, cycle, one_eval, _lib: lib })
        }
    }
}

/// A design built by Verilator; cheap to clone and to instantiate many times.
#[derive(Clone)]
pub struct VerilatorModel {
    lib: Arc<Library>,
    top: String,
    data_bits: usize,
    trace: bool,
    path: PathBuf,
    cached: bool,
}

impl std::fmt::Debug for VerilatorModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerilatorModel")
            .field("top", &self.top)
            .field("data_bits", &self.data_bits)
            .field("trace", &self.trace)
            .field("path", &self.path)
            .field("cached", &self.cached)
            .finish()
    }
}

impl VerilatorModel {
    /// Builds (or loads from the cache) module `top` of `verilog`, whose memory
    /// port is `data_bits` wide; `trace` adds VCD support.
    pub fn build(verilog: &str, top: &str, data_bits: usize, trace: bool) -> Result<Self, SimError> {
        Self::build_in(&default_cache_dir()?, verilog, top, data_bits, trace)
    }

    /// [`build`](Self::build) with `--x-initial unique --x-assign unique`:
    /// registers and memories without an initial value, and X assignments,
    /// take random values chosen per instance by [`instance_seeded`](Self::instance_seeded).
    /// A design that works here does not rely on a simulator zeroing its state.
    pub fn build_x_random(verilog: &str, top: &str, data_bits: usize) -> Result<Self, SimError> {
        Self::build_with(&default_cache_dir()?, verilog, top, data_bits, false, true)
    }

    /// [`build`](Self::build) with an explicit cache directory.
    pub fn build_in(cache: &Path, verilog: &str, top: &str, data_bits: usize, trace: bool) -> Result<Self, SimError> {
        Self::build_with(cache, verilog, top, data_bits, trace, false)
    }

    fn build_with(
        cache: &Path,
        verilog: &str,
        top: &str,
        data_bits: usize,
        trace: bool,
        x_random: bool,
    ) -> Result<Self, SimError> {
        let ident = top.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && top.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ident {
            return Err(SimError::Config(format!("top module name `{top}` is not a plain Verilog identifier")));
        }
        if !data_bits.is_multiple_of(8) || !(8..=MAX_DATA_BITS).contains(&data_bits) {
            return Err(SimError::Config(format!("data_bits = {data_bits} (multiples of 8 up to {MAX_DATA_BITS})")));
        }
        let version = verilator_version().ok_or(SimError::VerilatorNotFound)?;
        let shim = shim_source(top, data_bits, trace)?;
        let compiler = clang_version().unwrap_or_default();
        let hash = cache_key(&[
            verilog,
            top,
            &data_bits.to_string(),
            &trace.to_string(),
            &x_random.to_string(),
            &version,
            &compiler,
            &shim,
        ]);
        fs::create_dir_all(cache).map_err(|e| SimError::io(format!("creating cache dir {}", cache.display()), e))?;
        let stem = cache.join(format!("{top}-{hash}"));
        let so = stem.with_extension("so");
        let mut cached = so.exists();
        if !cached {
            // Concurrent builders of the same design wait here; the loser finds the result.
            let lock_path = stem.with_extension("lock");
            let lock =
                File::create(&lock_path).map_err(|e| SimError::io(format!("creating {}", lock_path.display()), e))?;
            lock.lock().map_err(|e| SimError::io(format!("locking {}", lock_path.display()), e))?;
            cached = so.exists();
            if !cached {
                let outputs: Vec<String> =
                    ports(data_bits).into_iter().filter(|p| p.dir == Dir::Out).map(|p| p.name).collect();
                compile(&stem, verilog, top, &shim, &outputs, trace, x_random)?;
            }
        }
        let lib = Arc::new(Library::load(&so, trace)?);
        Ok(Self { lib, top: top.to_string(), data_bits, trace, path: so, cached })
    }

    /// A fresh instance of the design; `vcd` asks for a waveform (needs a `trace` build).
    pub fn instance(&self, vcd: Option<&Path>) -> Result<VerilatorInstance, SimError> {
        self.instance_seeded(vcd, 0)
    }

    /// [`instance`](Self::instance) whose uninitialized state is random from
    /// `seed` (≠ 0) in a [`build_x_random`](Self::build_x_random) build.
    pub fn instance_seeded(&self, vcd: Option<&Path>, seed: u32) -> Result<VerilatorInstance, SimError> {
        let vcd_c = match vcd {
            Some(_) if !self.trace => {
                return Err(SimError::Config(format!("a VCD was requested but `{}` was built without trace", self.top)))
            }
            Some(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    fs::create_dir_all(dir).map_err(|e| SimError::io(format!("creating {}", dir.display()), e))?;
                }
                let text = path.to_str().ok_or_else(|| SimError::Config(format!("VCD path {path:?} is not UTF-8")))?;
                Some(CString::new(text).map_err(|_| SimError::Config(format!("VCD path {path:?} contains NUL")))?)
            }
            None => None,
        };
        let ptr = vcd_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: `ptr` is null or a NUL-terminated string that outlives the call.
        let model = unsafe { (self.lib.new)(ptr, seed) };
        if model.is_null() {
            let path = vcd.map(Path::display);
            return Err(SimError::Config(format!(
                "cannot open VCD file {}",
                path.map(|p| p.to_string()).unwrap_or_default()
            )));
        }
        Ok(VerilatorInstance { lib: Arc::clone(&self.lib), model, data_bits: self.data_bits })
    }

    pub fn top(&self) -> &str {
        &self.top
    }

    pub fn data_bits(&self) -> usize {
        self.data_bits
    }

    pub fn trace(&self) -> bool {
        self.trace
    }

    /// The cached shared object.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the build was found in the cache rather than compiled now.
    pub fn cached(&self) -> bool {
        self.cached
    }

    /// Whether a clock cycle is one evaluation of the model (the inputs and
    /// the rising edge together) rather than two (settle, then edge): chosen
    /// at build time when no output depends combinationally on an input.
    /// Never in `trace` builds, whose waveforms show the clock low too.
    pub fn one_eval(&self) -> bool {
        self.lib.one_eval
    }
}

/// Hex digest of the length-prefixed parts and the build recipe.
fn cache_key(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for part in parts.iter().chain([&RECIPE]) {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Builds the shared object `<stem>.so` in a scratch directory and renames it into place.
fn compile(
    stem: &Path,
    verilog: &str,
    top: &str,
    shim: &str,
    outputs: &[String],
    trace: bool,
    x_random: bool,
) -> Result<(), SimError> {
    eprintln!("ferrite-sim: building {top} with Verilator (cached afterwards)...");
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = stem.with_extension(format!("build-{}-{nanos}", std::process::id()));
    let io = |what: &str, e| SimError::io(format!("{what} in {}", dir.display()), e);
    fs::create_dir_all(&dir).map_err(|e| io("creating the build dir", e))?;
    let (v_path, shim_path, log_path) = (
        dir.join(format!("{top}.{}", ferrite_hw::portable::EXTENSION)),
        dir.join("ferrite_shim.cpp"),
        dir.join("build.log"),
    );
    fs::write(&v_path, verilog).map_err(|e| io("writing the Verilog", e))?;
    fs::write(&shim_path, shim).map_err(|e| io("writing the shim", e))?;
    let log = File::create(&log_path).map_err(|e| io("creating the log", e))?;
    let out_so = dir.join("libferrite_model.so");
    let x = if x_random { "unique" } else { "fast" };
    // Verilate, read the model (one evaluation per cycle?), then compile it.
    let mut verilate = Command::new("verilator");
    verilate
        .args(["--cc", "--exe", "-O3", "--x-assign", x, "--x-initial", x, "-Wno-fatal"])
        .args(["--top-module", top, "-CFLAGS", "-fPIC -O2", "-LDFLAGS", "-shared -Wl,-Bsymbolic"])
        .args(["--Mdir", "obj_dir", "-o"])
        .arg(&out_so)
        .args(trace.then_some("--trace"))
        .arg(&v_path)
        .arg(&shim_path);
    let mut make = Command::new("make");
    make.args(["-C", "obj_dir", "-f", &format!("V{top}.mk"), "-j", "2", "OPT_GLOBAL=-O2"]);
    // Verilator compiles the model with -Os by default (OPT_FAST): the
    // wide-word helpers (VL_SHIFTL_WWI, VL_ZERO_W) then stay calls.
    if clang_version().is_some() {
        make.args([format!("CXX={CLANG}"), format!("LINK={CLANG}"), "OPT_FAST=-O2".into()]);
    } else {
        make.arg("OPT_FAST=-O3");
    }
    let mut failed = false;
    for (i, cmd) in [&mut verilate, &mut make].into_iter().enumerate() {
        let out = log.try_clone().map_err(|e| io("opening the log", e))?;
        let err = log.try_clone().map_err(|e| io("opening the log", e))?;
        let status = match cmd.current_dir(&dir).stdin(Stdio::null()).stdout(out).stderr(err).status() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && i == 0 => return Err(SimError::VerilatorNotFound),
            Err(e) => return Err(io(if i == 0 { "running verilator" } else { "running make" }, e)),
        };
        if !status.success() {
            failed = true;
            break;
        }
        if i == 0 && !trace {
            if let Some(prev) = one_eval_clock(&dir.join("obj_dir"), top, outputs) {
                let one = format!("#define FERRITE_ONE_EVAL 1\n#define FERRITE_CLK_PREV {prev}");
                fs::write(&shim_path, shim.replace(ONE_EVAL_OFF, &one)).map_err(|e| io("writing the shim", e))?;
            }
        }
    }
    if failed || !out_so.exists() {
        // Keep the log beside the cache entry; the scratch directory goes.
        let kept = stem.with_extension("log");
        let log = if fs::rename(&log_path, &kept).is_ok() { kept } else { log_path };
        let _ = fs::remove_dir_all(&dir);
        return Err(SimError::Build { top: top.to_string(), tail: log_tail(&log, 30), log });
    }
    fs::rename(&out_so, stem.with_extension("so")).map_err(|e| io("moving the library into the cache", e))?;
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}

/// The member of the verilated model that remembers the clock for its edge
/// detector, when one evaluation per cycle (inputs and rising edge together)
/// is the same as two (settle, then edge): no function of the model's
/// input-combinational region (`ico`), nor any it calls, reads or writes an
/// output port or the clock, and the rising clock edge is its only trigger.
/// `None` (two evaluations) for anything else, a Verilator that names these
/// differently included.
fn one_eval_clock(obj_dir: &Path, top: &str, outputs: &[String]) -> Option<&'static str> {
    let prefix = format!("V{top}");
    let mut text = String::new();
    for entry in fs::read_dir(obj_dir).ok()? {
        let path = entry.ok()?.path();
        let name = path.file_name()?.to_str()?;
        if name.starts_with(&prefix) && (name.ends_with(".cpp") || name.ends_with(".h")) {
            text.push_str(&fs::read_to_string(&path).ok()?);
            text.push('\n');
        }
    }
    let prev = ["__Vtrigrprev__TOP__ap_clk", "__Vtrigprevexpr___TOP__ap_clk__0"]
        .into_iter()
        .find(|m| text.contains(&format!("{m};")))?;
    let funcs = model_functions(&text);
    // Exactly one trigger, the clock's rising edge.
    let act = funcs.iter().find(|(name, _)| name.ends_with("___eval_triggers__act"))?.1;
    if !act.contains(".at(0U) = ") || act.contains(".at(1U)") || !act.contains("ap_clk") {
        return None;
    }
    let mut todo: Vec<&str> = funcs.iter().filter(|(n, _)| n.contains("___ico_sequent")).map(|(n, _)| *n).collect();
    if todo.is_empty() {
        return None;
    }
    let mut seen: std::collections::HashSet<&str> = todo.iter().copied().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    // `w` in `body`, not inside a longer identifier.
    let word = |body: &str, w: &str| {
        body.match_indices(w).any(|(i, _)| !body[i + w.len()..].starts_with(ident) && !body[..i].ends_with(ident))
    };
    while let Some(f) = todo.pop() {
        let body = funcs.iter().find(|(n, _)| *n == f)?.1;
        for port in outputs.iter().map(String::as_str).chain(["ap_clk"]) {
            if word(body, &format!("vlSelf->{port}")) || word(body, &format!("vlSelf->__SYM__{port}")) {
                return None;
            }
        }
        for (name, _) in &funcs {
            if word(body, name) && seen.insert(name) {
                todo.push(name);
            }
        }
    }
    Some(prev)
}

/// `(name, body)` of every function defined at the start of a line in `text`
/// (Verilator's layout: the signature on one line ending in `{`, the body up
/// to a line that is `}`).
fn model_functions(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find("\n") {
        let line = &rest[..pos];
        let after = &rest[pos + 1..];
        let is_def = !line.starts_with(' ') && line.trim_end().ends_with(") {") && line.contains('(');
        if is_def {
            let head = &line[..line.find('(').unwrap_or(0)];
            let name = head.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or("");
            let end = after.find("\n}\n").map_or(after.len(), |e| e + 1);
            if !name.is_empty() {
                out.push((name, &after[..end]));
            }
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out
}

fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(file) = File::open(path) else {
        return String::from("(log unreadable)");
    };
    let all: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One running instance of a [`VerilatorModel`].
pub struct VerilatorInstance {
    lib: Arc<Library>,
    model: *mut c_void,
    data_bits: usize,
}

// SAFETY: a Verilator model with its own VerilatedContext may move between
// threads; `&mut self` on every call keeps it single-threaded.
unsafe impl Send for VerilatorInstance {}

impl VerilatorInstance {
    /// Runs `final` blocks and flushes the VCD; later ticks are not dumped.
    pub fn finish(&mut self) {
        // SAFETY: `model` is live until drop; finishing twice is a no-op in the shim.
        unsafe { (self.lib.finish)(self.model) }
    }
}

impl PinLevel for VerilatorInstance {
    fn eval(&mut self, inputs: &Inputs) -> Outputs {
        let mut out = Outputs::default();
        // SAFETY: the shim's structs are asserted to match Rust's layout at load.
        unsafe { (self.lib.eval)(self.model, inputs, &mut out) };
        out
    }

    fn tick(&mut self, inputs: &Inputs) -> Outputs {
        let mut out = Outputs::default();
        // SAFETY: as in `eval`.
        unsafe { (self.lib.tick)(self.model, inputs, &mut out) };
        out
    }

    fn cycle(&mut self, inputs: &Inputs, settled: &mut Outputs, after: &mut Outputs) {
        // SAFETY: as in `eval`.
        unsafe { (self.lib.cycle)(self.model, inputs, settled, after) };
    }

    fn data_bits(&self) -> usize {
        self.data_bits
    }
}

impl Drop for VerilatorInstance {
    fn drop(&mut self) {
        // SAFETY: `model` came from this library's `ferrite_new` and is freed once.
        unsafe { (self.lib.free)(self.model) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C layout implied by the field tables equals Rust's `#[repr(C)]` layout.
    #[test]
    fn field_tables_cover_the_structs() {
        for (fields, size) in
            [(input_fields(), std::mem::size_of::<Inputs>()), (output_fields(), std::mem::size_of::<Outputs>())]
        {
            let (mut end, mut max_align) = (0usize, 1usize);
            for f in &fields {
                let align = match f.ty {
                    CType::U8 => 1,
                    CType::U32 | CType::Words(_) => 4,
                    CType::U64 => 8,
                };
                max_align = max_align.max(align);
                assert_eq!(f.offset, end.next_multiple_of(align), "{}", f.name);
                end = f.offset + f.ty.bits() / 8;
            }
            assert_eq!(end.next_multiple_of(max_align), size);
        }
    }

    #[test]
    fn shim_maps_every_port_at_each_width() {
        for bits in [128, 256, 512, 1024] {
            let shim = shim_source("unit", bits, false).unwrap();
            assert!(shim.contains("port_m_axi_gmem_rdata(t)[0] = in->gmem_rdata[0]"));
            assert!(shim.contains("out->interrupt = port_interrupt(t);"));
        }
        let shim = shim_source("unit", 512, true).unwrap();
        assert!(shim.contains("out->gmem_wstrb[1] = (uint32_t)((uint64_t)port_m_axi_gmem_wstrb(t) >> 32);"));
        assert!(shim.contains("#define FERRITE_TRACE 1"));
    }

    /// One evaluation per cycle only for a model whose input-combinational
    /// functions (and those they call) touch no output and no clock.
    #[test]
    fn one_eval_needs_no_input_to_output_path() {
        let header = "struct Vt___024root {\n    CData/*0:0*/ __Vtrigrprev__TOP__ap_clk;\n};\n";
        let act = "void Vt___024root___eval_triggers__act(Vt___024root* vlSelf) {\n    \
                   vlSelf->__VactTriggered.at(0U) = (vlSelf->ap_clk & ~vlSelf->__Vtrigrprev__TOP__ap_clk);\n}\n";
        let ico = |body: &str| {
            format!(
                "VL_INLINE_OPT void Vt___024root___ico_sequent__TOP__0(Vt___024root* vlSelf) {{\n{body}\n}}\n\
                 void Vt___024root___ico_helper(Vt___024root* vlSelf) {{\n    vlSelf->m_axi_gmem_rready = 1U;\n}}\n"
            )
        };
        let outputs = vec!["m_axi_gmem_rready".to_string(), "interrupt".to_string()];
        let check = |cpp: &str| {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join("Vt___024root.h"), header).unwrap();
            fs::write(dir.path().join("Vt___024root__DepSet_0.cpp"), cpp).unwrap();
            one_eval_clock(dir.path(), "t", &outputs)
        };
        let clean = ico("    vlSelf->t__DOT__go = vlSelf->m_axi_gmem_rvalid;");
        assert_eq!(check(&(clean.clone() + act)), Some("__Vtrigrprev__TOP__ap_clk"));
        // An output written there, or in a function called from there.
        assert_eq!(check(&(ico("    vlSelf->__SYM__interrupt = vlSelf->ap_rst_n;") + act)), None);
        assert_eq!(check(&(ico("    Vt___024root___ico_helper(vlSelf);") + act)), None);
        // A second trigger (a falling edge), or no input-combinational region.
        assert_eq!(check(&(clean.clone() + &act.replace("}\n", "    vlSelf->__VactTriggered.at(1U) = 0;\n}\n"))), None);
        assert_eq!(check(act), None);
    }

    #[test]
    fn every_part_of_the_key_matters() {
        let base = ["module m; endmodule", "m", "128", "false", "Verilator 5", "shim"];
        let key = cache_key(&base);
        assert_eq!(key, cache_key(&base));
        for i in 0..base.len() {
            let mut other = base;
            other[i] = "x";
            assert_ne!(cache_key(&other), key, "part {i}");
        }
        // Length prefixes keep part boundaries apart.
        assert_ne!(cache_key(&["ab", "c"]), cache_key(&["a", "bc"]));
    }

    #[test]
    fn bad_names_and_widths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (top, bits) in [("a b", 128), ("1x", 128), ("ok", 2048), ("ok", 12)] {
            let r = VerilatorModel::build_in(dir.path(), "", top, bits, false);
            assert!(matches!(r, Err(SimError::Config(_))), "{top} {bits}: {r:?}");
        }
    }
}
