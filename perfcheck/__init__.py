"""perfcheck: performance and IR review of pull requests that touch PyTorch compiler paths."""

from pathlib import Path

__version__ = "0.1.0"

# Installed, bot/, runner/ and templates/ are subpackages of perfcheck (pyproject's package-dir).
# Run from a source checkout (`python -m perfcheck` in the repo root) this folder is found first
# and has no such subfolders: let the subpackages resolve to the checkout's top-level folders.
_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "bot" / "compare.py").is_file():
    __path__.append(str(_checkout))
