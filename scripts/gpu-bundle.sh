#!/usr/bin/env bash
# Build what the lent GPU machine runs (it has CUDA 13 and PyTorch but no Rust)
# into the git-ignored folder gpu-bundle/: the release CLI (`ferrite`, which
# also holds `ferrite bench gpu`), the CUDA test binary, the PyTorch reference
# script, and run.sh, which runs all of it there. Binaries are stripped so the
# folder stays well under the 64 MiB a device call may carry.
#
#   scripts/gpu-bundle.sh            # build
#   (on the GPU machine) gpu-bundle/run.sh [OUTDIR] [STEPS]
#   STEPS: comma-separated subset of tests,cli,demo,bench,block (default: tests,cli,demo,bench;
#   block runs the realistic decoder block and its PyTorch float reference, minutes of CPU golden model)
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
rm -rf "$out"
mkdir -p "$out"

cargo build --release -p ferrite-host --features cuda --bin ferrite
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cp "$target/release/ferrite" "$out/ferrite"

# The test binary's path is only known from cargo's JSON messages.
tests=$(cargo test --release -p ferrite-host --features cuda --test cuda --no-run --message-format=json \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cuda" and m.get("executable"):
        print(m["executable"])')
cp "$tests" "$out/test-cuda"
strip "$out/ferrite" "$out/test-cuda"
cp scripts/torch_reference.py scripts/block_reference.py "$out/"

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs on the GPU machine: tests, the CLI on cuda, the benchmark. OUTDIR gets
# the logs and bench.json. NVRTC comes from the CUDA toolkit or PyTorch's wheel.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
outdir=${1:-$here/out}
steps=",${2:-tests,cli,demo,bench},"
mkdir -p "$outdir"
nvrtc=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(os.path.dirname(nvidia.cu13.__file__), "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${nvrtc:+$nvrtc:}${LD_LIBRARY_PATH:-}
export FERRITE_CACHE=${FERRITE_CACHE:-$outdir/cache}
status=0
# step LOG CMD...: run CMD, keep its output in OUTDIR/LOG, remember a failure.
step() {
  local log=$1; shift
  echo "== $*"
  "$@" 2>&1 | tee "$outdir/$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "FAILED (exit $rc): $*"; status=1; }
}
want() { [[ $steps == *",$1,"* ]]; }
# Time limits: a hung kernel must not eat the whole device call.
want tests && step tests.log timeout 300 "$here/test-cuda" --test-threads=1 --nocapture
if want cli; then
  step run.log "$here/ferrite" run gemm --device cuda --m 1000 --n 777 --k 1234 --bias --relu --requant 1073741824,40
  step run-attention.log "$here/ferrite" run attention --device cuda --batch 2 --heads 4 --seq 300 --seq-kv 500 --dim 128 --causal
  step run-attention-int8.log "$here/ferrite" run attention --device cuda --seq 77 --dim 64 --kv-len 50 --int8-out
  if "$here/ferrite" run moe --help >/dev/null 2>&1; then
    step run-moe.log "$here/ferrite" run moe --device cuda --tokens 4096 --hidden 1024 --experts 64 --top-k 8 \
      --capacity-factor 1.25 --renormalize --bias
    step run-moe-topk.log "$here/ferrite" run moe --device cuda --tokens 1000 --hidden 96 --experts 256 --top-k 8 \
      --mode topk-softmax
  else
    echo "== ferrite run moe: not in this build"
  fi
  step block.log "$here/ferrite" block --device cuda
  step block-medium.log "$here/ferrite" block --device cuda --tokens 128 --hidden 256 --heads 4 --experts 8 --ffn 512
fi
# The demo also simulates the RTL; without Verilator there that is rust-hdl (slow), so keep it small.
want demo && step demo.log timeout 120 "$here/ferrite" demo --size 32
want bench && step bench.log timeout 300 "$here/ferrite" bench gpu --script "$here/torch_reference.py" --json "$outdir/bench.json"
if want block; then
  # The realistic block of issue 17 (docs/block.md): checked against the golden block, timed with
  # NVML energy, then the same layer as a PyTorch float block (float64 cross-check, fp32/bf16 times).
  step block-realistic.log timeout 400 "$here/ferrite" block --device cuda --tokens 512 --hidden 1024 --heads 16 \
    --experts 64 --top-k 8 --ffn 2816 --min-time-ms 2000 --save-weights "$outdir/block-layer"
  step block-reference.log timeout 120 python3 "$here/block_reference.py" "$outdir/block-layer" --json "$outdir/block-reference.json"
  step block-compare.log timeout 200 "$here/ferrite" compare --workload block 32x64x2x4x2x128 128x256x4x8x2x512 \
    --devices cpu-fast,cuda --min-time-ms 1000 --out "$outdir/block-compare"
fi
exit $status
RUN
chmod +x "$out/run.sh"
du -sh "$out"
ls -la "$out"
