"""The timing processes' compile caches: each side's own for the cold pair, one merged after."""

from __future__ import annotations

import os
from pathlib import Path

from perfcheck.runner.orchestrate import merge_caches, side_caches, timing_cache
from perfcheck.runner.timing import pair_caches


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cold_first_pair_compiles_into_each_sides_own_cache(tmp_path: Path) -> None:
    caches = pair_caches(tmp_path, "mlp", first=True)
    assert caches == side_caches(tmp_path, "mlp")
    assert caches["base"] != caches["head"]
    assert not timing_cache(tmp_path, "mlp").exists()


def test_later_pairs_share_one_cache_where_base_wins_on_identical_kernels(tmp_path: Path) -> None:
    own = side_caches(tmp_path, "mlp")
    _write(own["base"] / "inductor/ab/cabc.best_config", '{"XBLOCK": 64}')
    _write(own["head"] / "inductor/ab/cabc.best_config", '{"XBLOCK": 128}')
    _write(own["head"] / "inductor/cd/chead_only.py", "head's own kernel")
    _write(own["base"] / "triton/k1/kernel.cubin", "base cubin")

    caches = pair_caches(tmp_path, "mlp", first=False)

    shared = timing_cache(tmp_path, "mlp")
    assert caches == {"base": shared, "head": shared}
    assert (shared / "inductor/ab/cabc.best_config").read_text() == '{"XBLOCK": 64}'
    assert (shared / "inductor/cd/chead_only.py").read_text() == "head's own kernel"
    assert (shared / "triton/k1/kernel.cubin").read_text() == "base cubin"
    # Replacing a file by rename, as Inductor and Triton write, leaves the sides' caches as they were.
    tmp = shared / "inductor/ab/new"
    tmp.write_text('{"XBLOCK": 32}')
    os.replace(tmp, shared / "inductor/ab/cabc.best_config")
    assert (own["base"] / "inductor/ab/cabc.best_config").read_text() == '{"XBLOCK": 64}'
    # The merge happens once: a later batch of pairs keeps what earlier ones wrote.
    assert pair_caches(tmp_path, "mlp", first=False)["head"] == shared
    assert (shared / "inductor/ab/cabc.best_config").read_text() == '{"XBLOCK": 32}'


def test_merging_nothing_still_gives_a_cache_to_fill(tmp_path: Path) -> None:
    caches = pair_caches(tmp_path, "mlp", first=False)
    assert caches["base"].is_dir()
    merge_caches(tmp_path / "into", [tmp_path / "missing"])
    assert not (tmp_path / "into").exists()
