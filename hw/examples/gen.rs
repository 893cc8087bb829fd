//! Print the Verilog of a GEMM unit: `cargo run -p ferrite-hw --example gen -- ROWS COLS PORT_BITS`.
fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|s| s.parse().expect("numeric argument")).collect();
    let cfg = ferrite_hw::gemm::GemmConfig {
        rows: a[0],
        cols: a[1],
        port_bits: a[2],
        ..ferrite_hw::gemm::GemmConfig::small(a[0], a[1])
    };
    match ferrite_hw::gemm::rtl::verilog(&cfg) {
        Ok(v) => print!("{v}"),
        Err(e) => eprintln!("{e}"),
    }
}
