"""The torch-free review core: results in, findings, verdicts, tables and reports out.

Imports neither torch nor the GitHub side (perfcheck/bot/); tests/test_boundaries.py holds it to that."""
