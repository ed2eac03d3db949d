#!/usr/bin/env bash
# Everything perfcheck measures on a lent H200, in one script, one device call per stage:
#   bench/h200.sh trust WORKLOADS MODES SECONDS TAG   -> $OUT/trust-TAG.json (bench/trust.py)
#   bench/h200.sh suite [JOBS]                        -> $OUT/suite/ (the default GPU suite, base + head)
#   bench/h200.sh demo                                -> $OUT/demo/ (the demo review on the GPU)
# Packages the image lacks (pydantic and its needs, perfcheck itself) travel as wheels in .whl/.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$OUT/gpu-$1.txt" 2>&1
python3 -c 'import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)' >> "$OUT/gpu-$1.txt"
case "$1" in
  trust)
    python3 bench/trust.py --device cuda --workloads "$2" --modes "$3" --seconds "$4" --out "$OUT/trust-$5.json"
    ;;
  suite)
    mkdir -p /tmp/tree
    start=$(date +%s)
    python3 -m perfcheck review --base /tmp/tree --head /tmp/tree --config bench/gpu-suite.yml --device cuda \
      --jobs "${2:-4}" --out "$OUT/suite"
    echo "exit code $? · wall $(( $(date +%s) - start )) s"
    ;;
  demo)
    python3 -m perfcheck review --base examples/demo/base --head examples/demo/head --device cuda --jobs 4 \
      --out "$OUT/demo"
    echo "exit code $?"
    ;;
  *) echo "usage: bench/h200.sh trust|suite|demo ..." >&2; exit 2 ;;
esac
