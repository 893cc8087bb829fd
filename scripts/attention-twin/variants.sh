#!/bin/bash
# variants.sh NCHECK ITERS name:sedexpr ... (name:keep uses v_name.cu): build the harness once per variant of attention_mma.cu (in parallel), run each.
cd "$(dirname "$0")"
nc=$1; it=$2; shift 2
names=()
for v in "$@"; do
  n=${v%%:*}; e=${v#*:}
  if [ "$e" = keep ]; then :; elif [ -n "$e" ]; then sed "$e" attention_mma.cu > v_$n.cu; else cp attention_mma.cu v_$n.cu; fi
  cmp -s attention_mma.cu v_$n.cu && [ -n "$e" ] && [ "$e" != keep ] && echo "WARNING: variant $n unchanged"
  nvcc -O3 -arch=sm_90a -std=c++17 -DEXP2_FRAC_BITS=8 -DGEMM_FLAG_BIAS=1 -DGEMM_FLAG_RELU=2 -DGEMM_FLAG_REQUANT=4 \
    -DNEWFILE="\"v_$n.cu\"" -Xptxas -v harness.cu -o h_$n > ptx_$n.log 2>&1 &
  names+=("$n")
done
wait
for n in "${names[@]}"; do
  echo "=== $n: $(grep -A3 "Compiling entry.*ferrite_attention_mma_d\(64\|128\)_hi" ptx_$n.log | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' ')"
  grep -i " error" ptx_$n.log | head -5
  ./h_$n $nc $it | grep -v "^check: .* 0 mismatches"
done
