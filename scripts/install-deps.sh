#!/usr/bin/env bash
# Install the system tools Ferrite's tests and demo use (Debian/Ubuntu, as root or with sudo).
# Verilator builds and runs the exported RTL; Icarus Verilog (iverilog, vvp)
# co-simulates it as an event-driven simulator (docs/simulators.md); yosys runs resource estimates and
# the synthesis check. The board path needs XRT's headers and libraries
# (libxrt-dev, bindgen's libclang-dev) for the `xrt` feature, an OpenCL ICD
# loader and PoCL for the `opencl` feature's tests, tclsh to check the
# generated Vivado Tcl, and dtc to compile the PYNQ device-tree overlay. Safe to run again: installed packages are skipped.
set -euo pipefail

need=()
command -v verilator >/dev/null 2>&1 || need+=(verilator)
command -v yosys >/dev/null 2>&1 || need+=(yosys)
command -v iverilog >/dev/null 2>&1 || need+=(iverilog)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v tclsh >/dev/null 2>&1 || need+=(tcl)
command -v dtc >/dev/null 2>&1 || need+=(device-tree-compiler)
for pkg in libxrt-dev libclang-dev pocl-opencl-icd ocl-icd-opencl-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done

if [ ${#need[@]} -eq 0 ]; then
  echo "install-deps: verilator, iverilog, yosys, g++, make, tclsh, dtc, XRT, libclang, OpenCL and PoCL are present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install: ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
verilator --version
iverilog -V 2>/dev/null | head -n 1 || true
