"""The timing processes' compile caches: each side's own, where its compile probe compiled;
after the first pair, base's files copied over head's once. Base's cache never gets a file of
head's."""

from __future__ import annotations

from pathlib import Path

from perfcheck.runner.process.sides import MERGED_MARK, merge_caches, pair_caches, side_caches


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cold_first_pair_compiles_into_each_sides_own_cache(tmp_path: Path) -> None:
    caches = pair_caches(tmp_path, "mlp", first=True)
    assert caches == side_caches(tmp_path, "mlp")
    assert caches["base"] != caches["head"]
    assert not (caches["head"] / MERGED_MARK).exists()


def test_later_pairs_find_bases_kernels_in_heads_cache_and_base_gets_nothing_of_heads(tmp_path: Path) -> None:
    own = side_caches(tmp_path, "mlp")
    _write(own["base"] / "inductor/ab/cabc.best_config", '{"XBLOCK": 64}')
    _write(own["head"] / "inductor/ab/cabc.best_config", '{"XBLOCK": 128}')
    _write(own["head"] / "inductor/cd/chead_only.py", "head's own kernel")
    _write(own["base"] / "triton/k1/kernel.cubin", "base cubin")

    caches = pair_caches(tmp_path, "mlp", first=False)

    head, base = caches["head"], caches["base"]
    assert caches == own  # where they were compiled: cache entries name their folder
    assert (head / "inductor/ab/cabc.best_config").read_text() == '{"XBLOCK": 64}'
    assert (head / "inductor/cd/chead_only.py").read_text() == "head's own kernel"
    assert (head / "triton/k1/kernel.cubin").read_text() == "base cubin"
    # Base's processes read nothing head's code wrote, not even a file only head has.
    assert not (base / "inductor/cd/chead_only.py").exists()
    # Head's code writing into its copy in place (not by rename, as Inductor would) changes no
    # file of base's: the copy shares no inode with base's cache.
    with (head / "triton/k1/kernel.cubin").open("w") as f:
        f.write("poisoned")
    assert (base / "triton/k1/kernel.cubin").read_text() == "base cubin"
    # The copy is made once: a later batch of pairs keeps what earlier ones wrote.
    assert pair_caches(tmp_path, "mlp", first=False)["head"] == head
    assert (head / "triton/k1/kernel.cubin").read_text() == "poisoned"


def test_merging_nothing_still_gives_a_cache_to_fill(tmp_path: Path) -> None:
    caches = pair_caches(tmp_path, "mlp", first=False)
    assert caches["head"].is_dir()
    merge_caches(tmp_path / "into", [tmp_path / "missing"])
    assert not (tmp_path / "into").exists()
