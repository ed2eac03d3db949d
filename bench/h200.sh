#!/usr/bin/env bash
# Everything perfcheck measures on a lent H200, in one script, one device call per stage:
#   bench/h200.sh processes MODELS PAIRS SECONDS TAG [SWITCH]
#                                                     -> $OUT/trust-TAG.json (bench/processes.py: A/A and
#                                                        planted slowdowns over pairs of processes), with
#                                                        SWITCH pairs of the Llama attention switch in
#                                                        $OUT/switch-TAG.json and one recorded device pass
#   bench/h200.sh suite [JOBS]                        -> $OUT/suite/ (the default GPU suite, base + head)
#   bench/h200.sh reuse [RUNS] [JOBS]                 -> $OUT/reuse-*.json, reuse-*.log (issue 41: the default GPU
#                                                        suite's A/A recorded with --record-base (RECORD_PROBES, e.g.
#                                                        compile,export,amp: only those probes), unless a store is
#                                                        here already (/tmp/store of a warm machine, or bench-store/
#                                                        carried, packed caches too); then up to RUNS A/A
#                                                        reviews reusing it, whole processes, as many as fit CALL_S);
#                                                        the store in $OUT/store/
#   bench/h200.sh ttv CASES [JOBS]                    -> $OUT/ttv.json (bench/time_to_verdict.py: whole reviews,
#                                                        default config and --jobs unless JOBS, each case timed; CASES e.g.
#                                                        "suite llama-switch"), results in $OUT/ttv/
#   bench/h200.sh demo                                -> $OUT/demo/ (the demo review on the GPU)
#   bench/h200.sh compile-latency [MEASURE] [RUNS]    -> $OUT/cl-*/ (compile latency: A/A twice, then a
#                                                        twice-as-deep head; ResNet-18/34, inductor)
#   bench/h200.sh cuda-fork                           -> $OUT/cuda-fork.jsonl (bench/cuda_fork.py: which import
#                                                        initializes CUDA's driver; a child forked after them on CUDA)
#   bench/h200.sh forkserver                          -> $OUT/fs-*/ (per-side probes forked and fresh, on CUDA)
#   bench/h200.sh sandbox                             -> $OUT/sandbox.json (bench/sandbox.py: the per-side
#                                                        sandbox's check, a hostile head's attacks on CUDA,
#                                                        the demo sandboxed and not, each timed)
#   bench/h200.sh action                              -> $OUT/action/ (the action's probe mode, 2 shards, + report)
#   bench/h200.sh distributed                         -> $OUT/dist-*/ (ddp on NCCL x1 and gloo x2, amp, profile)
#   bench/h200.sh sweep WORKLOAD                      -> $OUT/sweep/ (the compile-settings sweep on the GPU)
#   bench/h200.sh walls                               -> $OUT/walls.txt (issue 45: the sandbox's --check, what
#                                                        /dev holds inside one and CUDA working there, the hostile
#                                                        head's attacks on CUDA without the demo)
#   bench/h200.sh sandboxed                           -> $OUT/sandboxed/ (issue 40: the ddp and fsdp probes'
#                                                        torchrun ranks in the default sandbox under inductor,
#                                                        default config and caches, NCCL x1; every variant's outcome)
#   bench/h200.sh fsdp                                -> $OUT/fsdp-*/ (the fsdp probe: A/A on the built-in
#                                                        LLaMA decoders with NCCL x1 and gloo x2, and the test
#                                                        decoder with a planted per-layer branch and unwrapped layer)
# Packages the image lacks (pydantic and its needs, perfcheck itself) travel as wheels in .whl/.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$OUT/gpu-$1.txt" 2>&1
python3 -c 'import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)' >> "$OUT/gpu-$1.txt"
case "$1" in
  processes)
    [ "$5" = a ] && timeout 60 python3 bench/device_trace.py --workload mlp --steps 3 --out "$OUT/device-pass"
    timeout "${TIMEOUT:-560}" python3 bench/processes.py run --device cuda --models "$2" --pairs "$3" \
      --seconds "$4" --out "$OUT/trust-$5.json" > "$OUT/trust-$5.md"
    echo "processes: exit code $?"
    if [ -n "${6:-}" ]; then
      timeout 200 python3 bench/processes.py run --device cuda --models llama --switch "$6" \
        --out "$OUT/switch-$5.json" > "$OUT/switch-$5.md"
      echo "switch: exit code $?"
    fi
    cat "$OUT"/*.md
    ;;
  suite)
    # The default GPU suite, base and head the same tree (A/A), as a runner reviews it; then, in
    # the time left, more Llama process pairs (bench/h200.sh processes) into $OUT/trust-TAG.json.
    mkdir -p /tmp/tree
    start=$(date +%s)
    timeout "${SUITE_TIMEOUT:-400}" python3 -m perfcheck review --base /tmp/tree --head /tmp/tree \
      --config "$PWD/bench/gpu-suite.yml" --device cuda --jobs "${2:-4}" --out /tmp/suite \
      2> "$OUT/suite-progress.log" > /dev/null
    echo "suite: exit code $? · wall $(( $(date +%s) - start )) s"
    grep "^\[" "$OUT/suite-progress.log" | tail -24
    cp /tmp/suite/result.json "$OUT/suite-result.json"; cp /tmp/suite/comment.md "$OUT/suite-comment.md"
    if [ -n "${3:-}" ]; then
      timeout "${TIMEOUT:-200}" python3 bench/processes.py run --device cuda --models llama --pairs 30 \
        --seconds "$4" --out "$OUT/trust-$3.json" > "$OUT/trust-$3.md"
      echo "processes: exit code $?"
      cat "$OUT/trust-$3.md"
    fi
    ;;
  reuse)
    # Issue 41: the default GPU suite A/A with base's structural results reused, as a PR's review
    # reuses the default branch's records. DEVICE and CONFIG only for trying the script elsewhere.
    mkdir -p /tmp/tree /tmp/store
    # The packed compile caches (*.cache.tar) travel with their records: without them base compiles afresh.
    if [ -z "$(ls -A /tmp/store)" ] && [ -d bench-store ]; then cp bench-store/* /tmp/store/; fi
    begin=$(date +%s)
    call_s=${CALL_S:-570}
    suite=(python3 -m perfcheck review --base /tmp/tree --head /tmp/tree --config "$PWD/${CONFIG:-bench/gpu-suite.yml}"
           --device "${DEVICE:-cuda}" --jobs "${3:-4}")
    if [ -z "$(ls -A /tmp/store)" ]; then
      start=$(date +%s)
      # RECORD_PROBES (e.g. compile,export,amp): record base's structural results only, as the
      # default branch's run records them, without its timing; the records are the same (a
      # record's key holds the probe's spec, not the review's other probes).
      timeout $(( call_s - 30 )) "${suite[@]}" ${RECORD_PROBES:+--probes "$RECORD_PROBES"} --out /tmp/reuse-record \
        --record-base /tmp/store 2> "$OUT/reuse-record.log" > /dev/null
      echo "record (A/A${RECORD_PROBES:+, --probes $RECORD_PROBES}, --record-base): exit code $? · wall $(( $(date +%s) - start )) s · $(ls /tmp/store/*.json | wc -l) records"
      grep "^record:" "$OUT/reuse-record.log" | head -20
      cp /tmp/reuse-record/result.json "$OUT/reuse-record.json" 2>/dev/null
    fi
    n=0
    # Another reused review only where one has the 300 s it is to take, and a margin.
    while [ $n -lt "${2:-5}" ] && [ $(( call_s - ($(date +%s) - begin) )) -ge "${RUN_S:-320}" ]; do
      n=$((n + 1)); start=$(date +%s)
      timeout $(( call_s - ($(date +%s) - begin) )) "${suite[@]}" --out "/tmp/reuse-$n" --reuse-base /tmp/store \
        2> "$OUT/reuse-$n.log" > /dev/null
      echo "reused A/A $n: exit code $? · wall $(( $(date +%s) - start )) s"
      grep -E "^reuse:|^Base reused|Time:|compile latency" "$OUT/reuse-$n.log" | head -24
      cp "/tmp/reuse-$n/result.json" "$OUT/reuse-$n.json" 2>/dev/null
      cp "/tmp/reuse-$n/comment.md" "$OUT/reuse-$n-comment.md" 2>/dev/null
    done
    mkdir -p "$OUT/store"; cp /tmp/store/*.json "$OUT/store/" 2>/dev/null
    ;;
  ttv)
    # Time to verdict (issue 28): each case one whole `perfcheck review` with the default config.
    for c in $2; do
      python3 bench/time_to_verdict.py "$c" --device cuda ${3:+--jobs "$3"} --timeout "${TIMEOUT:-540}" \
        --out "$OUT/ttv.json" --keep "$OUT/ttv"
      echo "ttv $c: exit code $?"
      grep -h "^+[0-9.]* \(\[\|plan\)" "$OUT"/ttv/"$c"-*-progress.log | tail -40
    done
    tar czf "$OUT/ttv.tgz" -C "$OUT" ttv
    ;;
  final)
    # One call for what the lease has left: GPU clocks and power sampled in the background, the
    # host-vs-device check on compiled ResNet-50, then the structural half of the suite, timed.
    nvidia-smi dmon -s pc -d 1 > "$OUT/dmon.txt" 2>&1 &
    [ "${3:-}" = "suite-only" ] || python3 bench/trust.py --device cuda --workloads resnet50 --modes compiled \
      --seconds 15 --conditions 0,2 --out "$OUT/trust-d.json"
    mkdir -p /tmp/tree
    start=$(date +%s)
    timeout "${2:-330}" python3 -m perfcheck review --base /tmp/tree --head /tmp/tree \
      --config "$PWD/bench/gpu-suite.yml" --device cuda --jobs 4 --probes compile,export --out "$OUT/suite" \
      2> "$OUT/suite-progress.log" > /dev/null
    echo "suite structural probes: exit code $? · wall $(( $(date +%s) - start )) s"
    grep "^\[" "$OUT/suite-progress.log" | tail -20
    cp "$OUT/suite/result.json" "$OUT/suite-result.json" 2>/dev/null
    kill %1 2>/dev/null
    ;;
  compile-latency)
    # Compile latency on the GPU (issue 20): `auto` measures wall-clock seconds here (callgrind
    # cannot follow CUDA), compile.runs fresh-cache compiles per side, interleaved. Two A/A
    # reviews of torchvision's ResNet-18 (inference, Inductor), then ResNet-18 against ResNet-34
    # (the same blocks, twice as deep), each `--probes compile`, each timed; CL_RUNS="NAME:HEAD ..."
    # picks which (a ResNet-18 cold compile is ~35-40 s here, so one review is ~5 min at 3 runs).
    for arch in resnet18 resnet34; do
      mkdir -p "/tmp/cl/$arch"
      printf 'import torch\nimport torchvision\n\n\ndef build(device):\n    model = torchvision.models.%s().to(device).eval()\n    return model, (torch.randn(32, 3, 224, 224, device=device),)\n' \
        "$arch" > "/tmp/cl/$arch/model.py"
    done
    printf 'workloads: [{name: resnet, entry: model.py:build, timeout_s: 1200}]\ncompile: {measure: %s, runs: %s}\n' \
      "${2:-wall}" "${3:-3}" > /tmp/cl/perfcheck.yml
    for run in ${CL_RUNS:-aa-1:resnet18 aa-2:resnet18 deeper:resnet34}; do
      name=${run%%:*}; head=${run#*:}; start=$(date +%s)
      timeout "${TIMEOUT:-280}" python3 -m perfcheck review --base /tmp/cl/resnet18 --head "/tmp/cl/$head" \
        --config /tmp/cl/perfcheck.yml --device cuda --probes compile --out "$OUT/cl-$name" \
        > "$OUT/cl-$name.md" 2> "$OUT/cl-$name.log"
      echo "compile-latency $name: exit code $? · wall $(( $(date +%s) - start )) s"
      grep -E "cold compile|compile latency|first compile|instructions|seconds|dynamo|AOT|inductor|Inconclusive|straddle" \
        "$OUT/cl-$name.md" | head -12
    done
    ;;
  walls)
    {
      python3 -m perfcheck.runner.process.sandbox --check; echo "--check: exit code $?"
      view='{"scratch":"/tmp/walls-scratch","writable":[],"hidden":[],"visible":[]}'
      python3 -m perfcheck.runner.process.sandbox "$view" -- python3 -c 'import os, torch, socket
print("dev:", " ".join(sorted(os.listdir("/dev"))))
print("run:", os.listdir("/run"))
x = torch.randn(1024, 1024, device="cuda"); print("cuda matmul ok:", float((x @ x).sum()) == float((x @ x).sum()))
print("device:", torch.cuda.get_device_name(), "count", torch.cuda.device_count())
for gone in ("/dev/kmsg", "/dev/kvm", "/dev/mem"):
    print(gone, "present" if os.path.exists(gone) else "absent")'
      echo "a CUDA process in a sandbox: exit code $?"
    } > "$OUT/walls.txt" 2>&1
    timeout "${TIMEOUT:-300}" python3 bench/sandbox.py --device cuda --no-demo --out /tmp/sandbox > "$OUT/sandbox.json"
    echo "attacks: exit code $?" >> "$OUT/walls.txt"
    cat "$OUT/walls.txt" "$OUT/sandbox.json"
    ;;
  sandbox)
    timeout "${TIMEOUT:-560}" python3 bench/sandbox.py --device cuda --out /tmp/sandbox > "$OUT/sandbox.json"
    echo "sandbox: exit code $?"
    cat "$OUT/sandbox.json"
    tail -5 /tmp/sandbox/*-progress.log
    ;;
  demo)
    python3 -m perfcheck review --base examples/demo/base --head examples/demo/head --device cuda --jobs 4 \
      --out "$OUT/demo"
    echo "exit code $?"
    ;;
  cuda-fork)
    # Which import initializes CUDA's driver, each way of counting devices, and whether a child forked
    # after the fork server's imports can use CUDA (bench/cuda_fork.py).
    timeout 300 python3 bench/cuda_fork.py > "$OUT/cuda-fork.jsonl" 2>&1
    echo "cuda-fork: exit code $?"
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("nvml_check", r["nvml_check"], "refusal", r["result"].get("refusal"), "child exit", r["result"].get("forked_child_exit"),
          [(s["step"][:40], s["driver_initialized"]) for s in r["result"].get("steps", [])])' "$OUT/cuda-fork.jsonl"
    ;;
  forkserver)
    # Per-side probes forked from a pre-imported server (perfcheck/runner/process/forkserver.py) on the GPU: whether the
    # server serves there (CUDA's driver must not be loaded by its imports), then the demo's per-side
    # probes on CUDA forked and fresh, each timed; the comments must agree.
    python3 - <<'PY' > "$OUT/forkserver-serves.txt" 2>&1
from perfcheck.runner.process.forkserver_warmup import cuda_driver_initialized, preimport
print("refusal after the server's imports:", preimport())
import torch
torch.cuda.init()
print("driver initialized after torch.cuda.init():", cuda_driver_initialized())
PY
    cat "$OUT/forkserver-serves.txt"
    sed 's/measure: wall/measure: "off"/' examples/demo/base/perfcheck.yml > /tmp/fs.yml
    for fs in 1 0; do
      start=$(date +%s.%N)
      PERFCHECK_FORKSERVER=$fs python3 -m perfcheck review --base examples/demo/base --head examples/demo/head \
        --config /tmp/fs.yml --device cuda --probes compile,export,amp --out "/tmp/fs-$fs" \
        > /dev/null 2> "$OUT/fs-$fs.log"
      echo "forkserver=$fs: exit code $? · wall $(python3 -c "import time; print(round(time.time() - $start, 1))") s"
      cp "/tmp/fs-$fs/comment.md" "$OUT/fs-$fs-comment.md"
    done
    ls /tmp/fs-1/probes/ | grep forkserver; cat /tmp/fs-1/probes/forkserver-*.log | tail -5
    diff <(grep -v "cold compile" "$OUT/fs-1-comment.md") <(grep -v "cold compile" "$OUT/fs-0-comment.md") \
      && echo "comments agree (but for the cold-compile row)"
    ;;
  action)
    # The example workflow's probe job on the GPU: action/run.sh in probe mode (install: false,
    # device: cuda), one shard per "runner", then the publish workflow's report step on the shards.
    repo=$PWD
    for i in 1 2; do
      ws=/tmp/ws-$i
      rm -rf "$ws" && mkdir -p "$ws" && cp -r examples/demo/base "$ws/base" && cp -r examples/demo/head "$ws/head"
      printf 'workloads:\n  - {name: classifier, entry: model.py:build, train: true}\n  - {name: mlp, entry: mlp}\n' \
        > "$ws/base/perfcheck.yml"
      start=$(date +%s)
      (cd "$ws" && env GITHUB_ACTION_PATH="$repo" GITHUB_OUTPUT="$OUT/output-$i" PERFCHECK_MODE=probe \
        PERFCHECK_BASE=base PERFCHECK_HEAD=head PERFCHECK_OUT=perfcheck-out PERFCHECK_DEVICE=cuda \
        PERFCHECK_SHARD="$i/2" PERFCHECK_INSTALL=false PERFCHECK_PYTHON=python3 bash "$repo/action/run.sh") \
        2> "$OUT/probe-$i.log"
      echo "shard $i/2: exit code $? · wall $(( $(date +%s) - start )) s"
      tail -4 "$OUT/probe-$i.log"
    done
    python3 -m perfcheck report /tmp/ws-1/perfcheck-out /tmp/ws-2/perfcheck-out --config /tmp/ws-1/base/perfcheck.yml \
      --out "$OUT/action" > /dev/null
    echo "report: exit code $?"
    cp /tmp/ws-1/perfcheck-out/probes.json "$OUT/action/probes-1.json"
    cp /tmp/ws-2/perfcheck-out/probes.json "$OUT/action/probes-2.json"
    ;;
  distributed)
    # The demo (head: a graph break and GELU) and the built-in MLP under the opt-in probes on the
    # GPU: DDP with NCCL on the one GPU, then two gloo ranks sharing it; AMP in bf16 and fp16; the
    # profile pass and its CUDA-trace diff.
    for run in ${RUNS:-nccl1 gloo2}; do
      rm -rf /tmp/d && mkdir -p /tmp/d && cp -r examples/demo/base /tmp/d/base && cp -r examples/demo/head /tmp/d/head
      if [ $run = nccl1 ]; then ddp="{world_size: 1, backend: nccl}"; else ddp="{world_size: 2, backend: gloo}"; fi
      cat > /tmp/d/perfcheck.yml <<EOF2
workloads:
  - {name: classifier, entry: model.py:build, train: true, amp: bf16, probes: [${PROBES:-ddp,amp}]}
  - {name: mlp, entry: mlp, train: true, amp: fp16, probes: [${PROBES:-ddp,amp}]}
ddp: $ddp
EOF2
      start=$(date +%s)
      python3 -m perfcheck probe --base /tmp/d/base --head /tmp/d/head --config /tmp/d/perfcheck.yml --device cuda \
        --out "$OUT/dist-$run" 2> "$OUT/dist-$run.log"
      echo "$run probe: exit code $? · wall $(( $(date +%s) - start )) s"
      grep "^\[" "$OUT/dist-$run.log" | tail -8
      python3 -m perfcheck report "$OUT/dist-$run" --config /tmp/d/perfcheck.yml --out "$OUT/dist-$run" > /dev/null
      echo "$run report: exit code $?"
      # The profile pass's CUDA traces, diffed as a user would (`perfcheck trace diff`).
      for wl in classifier mlp; do
        b=$(ls "$OUT/dist-$run/probes/base-$wl-profile".*trace* 2>/dev/null | head -1)
        h=$(ls "$OUT/dist-$run/probes/head-$wl-profile".*trace* 2>/dev/null | head -1)
        [ -n "$b" ] && [ -n "$h" ] && python3 -m perfcheck trace diff "$b" "$h" --top 12 > "$OUT/dist-$run/trace-diff-$wl.txt"
      done
      find "$OUT/dist-$run/probes" -type f ! -name '*.log' -delete
    done
    # One archive: the device tool brings back only a few files per call.
    tar czf "$OUT/distributed.tgz" -C "$OUT" $(cd "$OUT" && ls -d dist-*) && rm -rf "$OUT"/dist-*
    ;;
  sweep)
    printf 'workloads:\n  - {name: %s, entry: %s, train: true}\nsweep: {steps: 30, timeout_s: 240}\n' "$2" "$2" \
      > /tmp/sweep.yml
    start=$(date +%s)
    python3 -m perfcheck sweep "$2" --config /tmp/sweep.yml --device cuda --out "$OUT/sweep" 2> "$OUT/sweep.log"
    echo "sweep: exit code $? · wall $(( $(date +%s) - start )) s"
    tail -8 "$OUT/sweep.log"
    ;;
  fsdp)
    # The fsdp probe with Inductor: an A/A of the built-in LLaMA decoders (bf16 parameters, fp32
    # reductions) on NCCL with one rank, llama-tiny on two gloo ranks sharing the GPU, then the
    # CPU tests' decoder with two planted changes (a per-layer branch, a layer left out of the wrap).
    mkdir -p /tmp/tree
    run() {  # NAME BASE HEAD CONFIG
      start=$(date +%s)
      timeout "${TIMEOUT:-240}" python3 -m perfcheck review --base "$2" --head "$3" --config "$4" --device cuda \
        --probes fsdp --jobs 2 --out "$OUT/fsdp-$1" 2> "$OUT/fsdp-$1.log" > /dev/null
      echo "fsdp $1: exit code $? · wall $(( $(date +%s) - start )) s"
      grep "^\[" "$OUT/fsdp-$1.log" | tail -4
      find "$OUT/fsdp-$1/probes" -type f ! -name '*.log' -delete 2>/dev/null
    }
    printf '%s\n' 'workloads:' '  - {name: llama-7b-layers, entry: llama-7b-layers, train: true}' \
      '  - {name: llama-tiny, entry: llama-tiny, train: true}' \
      'fsdp: {world_size: 1, backend: nccl, param_dtype: bfloat16, reduce_dtype: float32}' > /tmp/fsdp-nccl.yml
    run nccl1 /tmp/tree /tmp/tree /tmp/fsdp-nccl.yml
    printf '%s\n' 'workloads: [{name: llama-tiny, entry: llama-tiny, train: true}]' \
      'fsdp: {world_size: 2, backend: gloo, variants: [eager, compiled_layers]}' > /tmp/fsdp-gloo.yml
    run gloo2 /tmp/tree /tmp/tree /tmp/fsdp-gloo.yml
    python3 bench/fsdp_trees.py /tmp/fp
    printf '%s\n' 'workloads: [{name: decoder, entry: model.py:build}]' \
      'fsdp: {world_size: 1, backend: nccl, wrap: [Block]}' > /tmp/fsdp-planted.yml
    run planted /tmp/fp/base /tmp/fp/head /tmp/fsdp-planted.yml
    tar czf "$OUT/fsdp.tgz" -C "$OUT" $(cd "$OUT" && ls -d fsdp-*) && rm -rf "$OUT"/fsdp-*
    ;;
  sandboxed)
    # The demo's classifier under ddp and the built-in tiny LLaMA under fsdp, one rank each (one
    # GPU, NCCL), as a user's review runs them: the default config but for the probes and the world
    # size, the sandbox on, the default caches, inductor.
    rm -rf /tmp/s && mkdir -p /tmp/s && cp -r examples/demo/base /tmp/s/base && cp -r examples/demo/head /tmp/s/head
    printf '%s\n' 'workloads:' '  - {name: classifier, entry: model.py:build, train: true, probes: [ddp]}' \
      '  - {name: llama-tiny, entry: llama-tiny, train: true, probes: [fsdp]}' \
      'ddp: {world_size: 1}' 'fsdp: {world_size: 1}' > /tmp/s/perfcheck.yml
    start=$(date +%s)
    python3 -m perfcheck review --base /tmp/s/base --head /tmp/s/head --config /tmp/s/perfcheck.yml \
      --device cuda --out "$OUT/sandboxed" 2> "$OUT/sandboxed.log" > /dev/null
    echo "sandboxed: exit code $? · wall $(( $(date +%s) - start )) s"
    cat "$OUT/sandboxed.log"
    python3 bench/variants.py "$OUT/sandboxed"
    find "$OUT/sandboxed/probes" -type f ! -name '*.log' ! -name '*.spec.json' -delete 2>/dev/null
    tar czf "$OUT/sandboxed.tgz" -C "$OUT" sandboxed && rm -rf "$OUT/sandboxed"
    ;;
  *) echo "usage: bench/h200.sh processes|suite|demo|action|distributed|sweep|fsdp|sandboxed ..." >&2; exit 2 ;;
esac
