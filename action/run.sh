#!/usr/bin/env bash
# The action's one step. Inputs arrive as PERFCHECK_* environment variables (set by action.yml's
# `env:`), so nothing from an event is ever spliced into this script's text.
set -euo pipefail

mode="${PERFCHECK_MODE:-}"
python="${PERFCHECK_PYTHON:-python3}"

case "$mode" in
  plan | probe | report | publish) ;;
  *)
    echo "::error title=perfcheck::mode must be plan, probe, report or publish (got '${mode}')"
    exit 2
    ;;
esac

# Before any Python starts (the venv's, perfcheck's own): an interpreter imports sitecustomize.py,
# .pth files and its standard library from these variables at its start, so a folder of the pull
# request's tree there runs the PR's code here, before any wall is up. Named, not echoed: the
# value is the workflow's and is never put into a workflow command.
if [[ "$mode" == "probe" && -n "${PERFCHECK_HEAD:-}" ]]; then
  head_dir="$(realpath -m -- "$PERFCHECK_HEAD")"
  for name in PYTHONPATH PYTHONHOME PYTHONUSERBASE PYTHONSTARTUP PYTHONPYCACHEPREFIX; do
    IFS=: read -r -a entries <<< "${!name:-}"
    for entry in "${entries[@]}"; do
      [[ -n "$entry" ]] || continue
      resolved="$(realpath -m -- "$entry")"
      if [[ "$resolved" == "$head_dir" || "$resolved" == "$head_dir"/* ]]; then
        echo "::error title=perfcheck::$name names a folder of the pull request's tree (head): its code would run in perfcheck's own process, outside the sandbox. Put what the probes import outside both trees, or install it."
        exit 2
      fi
    done
  done
fi

if [[ "${PERFCHECK_INSTALL:-true}" == "true" ]]; then
  # A venv, so the runner's python stays untouched (and PEP 668 images accept it); system site
  # packages stay visible so that probe mode uses the torch the GPU image already has.
  venv="${RUNNER_TEMP:-/tmp}/perfcheck-venv"
  torch="${PERFCHECK_TORCH:-}"
  if [[ -n "$torch" && ! "$torch" =~ ^[0-9][0-9A-Za-z.+]*$ ]]; then
    echo "::error title=perfcheck::torch must be a version such as 2.13.0"
    exit 2
  fi
  if [[ ! -x "$venv/bin/perfcheck" ]]; then
    echo "::group::install perfcheck"
    "$python" -m venv --system-site-packages "$venv"
    if [[ "$mode" == "probe" && -n "$torch" ]]; then
      # First and pinned, from its own index: a bare `torch` requirement would pull a multi-GB
      # CUDA build onto a CPU runner.
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$torch" \
        --index-url "${PERFCHECK_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
    fi
    # The versions CI tested (constraints.txt), not whatever is newest on the day.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      -c "$GITHUB_ACTION_PATH/constraints.txt" "$GITHUB_ACTION_PATH"
    echo "::endgroup::"
  fi
  perfcheck=("$venv/bin/perfcheck")
else
  perfcheck=("$python" -m perfcheck)
fi

args=("$mode")
config=()
if [[ -n "${PERFCHECK_CONFIG:-}" ]]; then
  config=(--config "$PERFCHECK_CONFIG")
fi

case "$mode" in
  plan)
    args+=(--event-name "$GITHUB_EVENT_NAME" --event-path "$GITHUB_EVENT_PATH" --out "$PERFCHECK_OUT"
      "${config[@]}")
    if [[ "${PERFCHECK_RESPOND:-false}" == "true" ]]; then
      args+=(--respond)
    fi
    ;;
  probe)
    if [[ -n "${GITHUB_TOKEN:-}" ]]; then
      echo "::error title=perfcheck::probe mode runs pull-request code: do not give it a token"
      exit 2
    fi
    args+=(--base "$PERFCHECK_BASE" --head "$PERFCHECK_HEAD" --out "$PERFCHECK_OUT"
      --device "$PERFCHECK_DEVICE" --shard "$PERFCHECK_SHARD" "${config[@]}")
    if [[ -n "${PERFCHECK_WORKLOADS:-}" ]]; then args+=(--workloads "$PERFCHECK_WORKLOADS"); fi
    if [[ -n "${PERFCHECK_PROBES:-}" ]]; then args+=(--probes "$PERFCHECK_PROBES"); fi
    if [[ -n "${PERFCHECK_SHA:-}" ]]; then args+=(--head-sha "$PERFCHECK_SHA"); fi
    args+=(--bisect "${PERFCHECK_BISECT:-never}")
    if [[ -n "${PERFCHECK_BASE_SHA:-}" ]]; then args+=(--base-sha "$PERFCHECK_BASE_SHA"); fi
    if [[ -n "${PERFCHECK_RECORD_BASE:-}" ]]; then args+=(--record-base "$PERFCHECK_RECORD_BASE"); fi
    if [[ -n "${PERFCHECK_REUSE_BASE:-}" ]]; then
      if [[ -d "$PERFCHECK_REUSE_BASE" ]]; then
        args+=(--reuse-base "$PERFCHECK_REUSE_BASE")
      else
        # No store restored (a first run, an evicted cache): base is probed, as without reuse.
        echo "::notice title=perfcheck::no records to reuse (reuse-base folder not there); probing base"
      fi
    fi
    ;;
  report)
    mapfile -t results < <(printf '%s\n' "${PERFCHECK_PROBE_RESULTS:-}" | sed '/^[[:space:]]*$/d')
    if [[ ${#results[@]} -eq 0 ]]; then
      echo "::error title=perfcheck::report mode needs probe-results (probes.json files or folders)"
      exit 2
    fi
    args+=("${results[@]}" --out "$PERFCHECK_OUT" "${config[@]}")
    if [[ -n "${PERFCHECK_PLAN_FILE:-}" ]]; then args+=(--plan-file "$PERFCHECK_PLAN_FILE"); fi
    ;;
  publish)
    if [[ -z "${PERFCHECK_SHA:-}" && -z "${PERFCHECK_PLAN_FILE:-}" ]]; then
      echo "::error title=perfcheck::publish mode needs sha or plan-file"
      exit 2
    fi
    args+=(--report "$PERFCHECK_OUT" "${config[@]}")
    if [[ -n "${PERFCHECK_SHA:-}" ]]; then args+=(--sha "$PERFCHECK_SHA"); fi
    if [[ -n "${PERFCHECK_PLAN_FILE:-}" ]]; then args+=(--plan-file "$PERFCHECK_PLAN_FILE"); fi
    if [[ -n "${PERFCHECK_PR:-}" ]]; then args+=(--pr "$PERFCHECK_PR"); fi
    if [[ -n "${PERFCHECK_PLANNED_BY:-}" ]]; then args+=(--planned-by "$PERFCHECK_PLANNED_BY"); fi
    ;;
esac

rc=0
"${perfcheck[@]}" "${args[@]}" || rc=$?
if [[ "$mode" == "report" && ( $rc -eq 1 || $rc -eq 3 ) && "${PERFCHECK_FAIL_ON_VERDICT:-false}" != "true" ]]; then
  # The verdict is the check run's job; the step only fails on errors unless asked otherwise.
  rc=0
fi
exit "$rc"
