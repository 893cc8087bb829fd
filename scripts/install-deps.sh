#!/usr/bin/env bash
# Install the system tools Ferrite's tests and demo use (Debian/Ubuntu, as root or with sudo).
# Verilator builds and runs the exported RTL; yosys runs resource estimates and
# the synthesis check. Safe to run again: installed packages are skipped.
set -euo pipefail

need=()
command -v verilator >/dev/null 2>&1 || need+=(verilator)
command -v yosys >/dev/null 2>&1 || need+=(yosys)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)

if [ ${#need[@]} -eq 0 ]; then
  echo "install-deps: verilator, yosys, g++ and make are present"
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
