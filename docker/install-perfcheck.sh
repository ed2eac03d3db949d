#!/bin/sh
# Install perfcheck from a source folder into a Python and check the result. The Dockerfile runs it
# for both images; .ci/check-install runs it in fresh venvs, so the images' install steps are
# tested on every CI run even where no Docker engine exists.
#
#   PYTHON=python3 sh docker/install-perfcheck.sh runner|bot SRC
set -eu
kind="${1:?runner or bot}"
src="${2:?source folder}"
python="${PYTHON:-python3}"

torch_version() {
  "$python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || echo none
}

before="$(torch_version)"
if [ "$kind" = runner ] && [ "$before" = none ]; then
  echo "install-perfcheck: the runner image must start from an image with a CUDA build of torch" >&2
  exit 1
fi
# The versions CI tested: constraints.txt pins every dependency (it installs nothing itself).
"$python" -m pip install --no-cache-dir --disable-pip-version-check -c "$src/constraints.txt" "$src"

case "$kind" in
  runner)
    # perfcheck does not depend on torch: the base image's CUDA build must be the one left.
    after="$(torch_version)"
    if [ "$after" != "$before" ]; then
      echo "install-perfcheck: torch changed from $before to $after" >&2
      exit 1
    fi
    # torch warns "Failed to initialize NumPy" in every probe log without it; an image's own numpy stays.
    if ! "$python" -c 'import numpy' 2>/dev/null; then
      "$python" -m pip install --no-cache-dir --disable-pip-version-check -c "$src/constraints.txt" numpy
    fi
    "$python" -c 'import torch, perfcheck.runner.process.worker, perfcheck.runner.timing.worker'
    ;;
  bot)
    # The bot image holds the write token and must never need torch.
    "$python" -c 'import sys; sys.modules["torch"] = None
import perfcheck.cli.main, perfcheck.bot.gateway, perfcheck.bot.app, perfcheck.bot.publish'
    ;;
  *)
    echo "install-perfcheck: kind must be runner or bot, not $kind" >&2
    exit 2
    ;;
esac
"$python" -m perfcheck --version
