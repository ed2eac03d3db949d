"""Untrusted text (break reasons, error messages, source lines) must render inert."""

from __future__ import annotations

from perfcheck.bot import markdown


def test_mentions_are_neutralised() -> None:
    out = markdown.text("ping @org/team and @someone")
    assert "@org" not in out.replace("@<!-- -->", "")
    assert out.count("@<!-- -->") == 2


def test_html_is_escaped() -> None:
    out = markdown.text('<img src=x onerror="alert(1)"> & <details>')
    assert "<" not in out.replace("<!-- -->", "") and ">" not in out
    assert "&lt;img" in out and "&amp;" in out


def test_markup_cannot_form() -> None:
    out = markdown.cell("[click](https://evil) *bold* `code` | pipe")
    assert "\\[click\\](https://evil)" in out
    assert "\\*bold\\*" in out and "\\`code\\`" in out and "\\|" in out


def test_block_markup_at_a_paragraph_start_is_escaped() -> None:
    assert markdown.text("# not a heading") == "\\# not a heading"
    assert markdown.text("1. not a list") == "1\\. not a list"
    assert markdown.text("> not a quote").startswith("&gt;")


def test_code_span_survives_backticks_and_pipes() -> None:
    assert markdown.code("a `b` c") == "``a `b` c``"
    assert markdown.code("`edge`") == "`` `edge` ``"
    assert markdown.code("x | y", in_table=True) == "`x \\| y`"


def test_fenced_block_cannot_be_closed_from_inside() -> None:
    out = markdown.block("before\n```\n@team <b>\n````")
    fence = out.splitlines()[0]
    assert fence == "`````"
    assert out.endswith("\n`````")


def test_cap_cuts_at_a_line_and_closes_what_is_open() -> None:
    body = "head\n<details><summary>x</summary>\n\n```\n" + "line\n" * 5000
    out = markdown.cap(body, 1000, "Full report: artifact.")
    assert len(out) <= 1000
    assert out.endswith("Full report: artifact.")
    assert out.count("```") % 2 == 0
    assert out.count("<details>") == out.count("</details>")


def test_cap_leaves_short_bodies_alone() -> None:
    assert markdown.cap("short", 100, "pointer") == "short"
