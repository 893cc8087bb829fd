//! Build script: generates Rust bindings of XRT's C API with bindgen, only when
//! the `xrt` feature is on, so the default build needs neither XRT nor libclang.
//!
//! Headers are searched in `$XILINX_XRT/include` (Xilinx's own packages, under
//! /opt/xilinx/xrt) and then /usr/include/xrt (Debian's `libxrt-dev`). The
//! bindings cover the xrtDevice/xrtBO/xrtKernel/xrtRun C functions from
//! `src/backend/xrt_wrapper.h`, and the crate links `libxrt_coreutil`, which
//! exports them.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "xrt")]
    xrt::generate();
}

#[cfg(feature = "xrt")]
mod xrt {
    use std::path::{Path, PathBuf};

    const WRAPPER: &str = "src/backend/xrt_wrapper.h";

    pub fn generate() {
        println!("cargo:rerun-if-changed={WRAPPER}");
        println!("cargo:rerun-if-env-changed=XILINX_XRT");
        let mut candidates = Vec::new();
        if let Some(root) = std::env::var_os("XILINX_XRT") {
            let root = PathBuf::from(root);
            candidates.push((root.join("include"), Some(root.join("lib"))));
        }
        candidates.push((PathBuf::from("/usr/include/xrt"), None));
        let Some((include, lib)) = candidates.into_iter().find(|(inc, _)| inc.join("xrt/xrt_device.h").is_file())
        else {
            panic!(
                "feature `xrt`: XRT's C headers (xrt/xrt_device.h) are in neither $XILINX_XRT/include \
                 nor /usr/include/xrt; install them (`apt-get install libxrt-dev` on Debian, or \
                 Xilinx's xrt package and `source /opt/xilinx/xrt/setup.sh`), or build without `--features xrt`"
            );
        };
        if let Some(lib) = lib.filter(|l| l.is_dir()) {
            println!("cargo:rustc-link-search=native={}", lib.display());
        }
        println!("cargo:rustc-link-lib=dylib=xrt_coreutil");

        let bindings = bindgen::Builder::default()
            .header(WRAPPER)
            .clang_arg(format!("-I{}", include.display()))
            .allowlist_function("xrt(Device|BO|PLKernel|Kernel|Run)[A-Za-z]*")
            .allowlist_type("xclBOSyncDirection")
            .allowlist_var("XCL_BO_FLAGS_.*")
            .default_enum_style(bindgen::EnumVariation::ModuleConsts)
            .layout_tests(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .generate()
            .unwrap_or_else(|e| {
                panic!("feature `xrt`: bindgen failed on {WRAPPER} with -I{}: {e} (is libclang installed? Debian: libclang-dev)", include.display())
            });
        let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("xrt_bindings.rs");
        bindings.write_to_file(&out).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    }
}
