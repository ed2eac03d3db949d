#!/usr/bin/env bash
# Render the recorded demo review as the HTML report and take a headless Chromium screenshot of it,
# to check the report by eye. Installs Debian's chromium when it is missing (needs root for apt).
#
#   bench/report_screenshot.sh [OUT.png]        default: docs/report-screenshot.png
#   PYTHON=/path/to/python bench/report_screenshot.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(realpath -m "${1:-$root/docs/report-screenshot.png}")"
python="${PYTHON:-python3}"

if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y chromium
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# What `perfcheck html RESULT --out FILE` does, without depending on the subcommand being wired.
"$python" - "$root/tests/data/demo-result.json" "$work/report.html" <<'PY'
import sys
from pathlib import Path

from perfcheck.core.reports import render_html
from perfcheck.schema import load_review

Path(sys.argv[2]).write_text(render_html(load_review(Path(sys.argv[1]))), encoding="utf-8")
PY

mkdir -p "$(dirname "$out")"
# Every network feature off: the report must render from the file alone.
chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run \
    --user-data-dir="$work/profile" --screenshot="$out" --window-size=1280,2000 \
    "file://$work/report.html"
echo "wrote $out"
