"""A review's findings grouped by what caused them: one change, one headline.

A head that switches attention to its eager path makes one structural change (the exported IR
loses ``scaled_dot_product_attention``) and several measured effects (slower steps, more peak
memory, a slower compile, more launches). Listed one by one they read as four regressions; read
against the same workload's structural findings (``explain``) they are one cause and its effects.
Here the findings are grouped so: each cause heads a group with the effects it likely explains,
one cause met in several workloads (a break in a helper two workloads call) is one group with the
workloads listed, and a finding with no cause in the review stands alone. Pure: findings in,
groups out; the findings themselves are left as they are (``result.json`` keeps both).

Which categories are causes and which effects, and which cause an effect is read against, are each
category's matrix entry's (``role``, ``because`` and ``rules``): a plugin's categories group too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from perfcheck.core.matrix import because, figure, known, matches, title
from perfcheck.schema import CauseGroup, Finding, Review

_RANK = {"error": 0, "warning": 1, "info": 2}
# A group's state for the headline: its worst finding no acknowledgement covers, else acknowledged.
State = Literal["error", "warning", "info", "acknowledged"]
HEADLINE_PHRASE = 160  # characters of a cause's phrase in a one-line headline


def _role(f: Finding) -> str:
    entry = known().get(f.category)
    return entry.role if entry is not None else "neither"


def _pick(effect: Finding, candidates: list[tuple[str, list[int]]], findings: Sequence[Finding]) -> int:
    """Which of the workload's causes (phrase, leads) ``effect`` goes under: the one its matrix
    entry's first matching rule names (a slower step's rules try "sdpa lost", then "graph break",
    ...: the order in which its likely cause is chosen), else the worst cause, first listed."""
    entry = known().get(effect.category)
    for rule in entry.for_probe(effect.probe).rules if entry is not None else []:
        named = rule.when.get("explained_by")
        if named is None or not matches(rule.when, effect.evidence):
            continue
        for n, (phrase, _) in enumerate(candidates):
            if matches({"phrase": named}, {"phrase": phrase}):
                return n
    return min(
        range(len(candidates)),
        key=lambda n: (min(_RANK[findings[i].severity] for i in candidates[n][1]), n),
    )


def by_cause(findings: Sequence[Finding]) -> list[CauseGroup]:
    """``findings`` (a review's, in its order) grouped: every finding in exactly one group, causes
    heading the effects of their workload, groups worst first."""
    # Each cause's phrase, made once: a finding whose category is a cause and that names itself.
    phrases = [because(f) if _role(f) == "cause" else None for f in findings]
    # (category, phrase, n) -> the cause, once per workload it was met in; n tells apart causes
    # of one workload that read the same (two breaks Dynamo gave no line).
    leads: dict[tuple[str, str, int], list[int]] = {}
    for i, (f, phrase) in enumerate(zip(findings, phrases, strict=True)):
        if not phrase:
            continue
        n = 0
        while any(findings[j].workload == f.workload for j in leads.get((f.category, phrase, n), [])):
            n += 1
        leads.setdefault((f.category, phrase, n), []).append(i)
    effects: dict[tuple[str, str, int], list[int]] = {key: [] for key in leads}
    alone: list[int] = []
    for i, (f, phrase) in enumerate(zip(findings, phrases, strict=True)):
        if phrase:
            continue
        here = [(k, idx) for k, idx in leads.items() if any(findings[j].workload == f.workload for j in idx)]
        if _role(f) != "effect" or not here:
            alone.append(i)
            continue
        n = _pick(f, [(key[1], idx) for key, idx in here], findings)
        effects[here[n][0]].append(i)
    groups = [
        CauseGroup(title=key[1], caused=True, leads=idx, effects=effects[key]) for key, idx in leads.items()
    ]
    groups += [CauseGroup(title=title(findings[i].category), caused=False, leads=[i]) for i in alone]

    def order(g: CauseGroup) -> tuple[int, int]:
        members = [*g.leads, *g.effects]
        return min(_RANK[findings[i].severity] for i in members), min(members)

    return sorted(groups, key=order)


def groups_of(review: Review) -> list[CauseGroup]:
    """The review's groups: as written (version 4), or made now from its findings (an earlier
    version's document, which had none)."""
    causes = review.causes
    # A review copied with other findings (model_copy does not validate) has groups of another list.
    if causes is None or sorted(i for g in causes for i in (*g.leads, *g.effects)) != list(
        range(len(review.findings))
    ):
        return by_cause(review.findings)
    return causes


@dataclass(frozen=True)
class Grouped:
    """A group read against its review's findings, as the reports show it."""

    group: CauseGroup
    leads: list[Finding]
    effects: list[Finding]

    @property
    def members(self) -> list[Finding]:
        return [*self.leads, *self.effects]

    @property
    def state(self) -> State:
        """Its worst finding no acknowledgement covers; acknowledged where every one is covered."""
        open_ = [f.severity for f in self.members if f.ack is None]
        return min(open_, key=_RANK.__getitem__) if open_ else "acknowledged"

    @property
    def workloads(self) -> list[str]:
        return list(dict.fromkeys(f.workload for f in self.members))

    @property
    def figures(self) -> list[str]:
        """Its effects in a few words each ("step +29.9 %"), one per effect and workload where
        the figures differ, in the group's order."""
        several = len(self.workloads) > 1
        words = []
        for f in self.effects:
            said = figure(f) or title(f.category).lower()
            words.append(f"{said} ({f.workload})" if several else said)
        return list(dict.fromkeys(words))

    @property
    def accepted_cause(self) -> bool:
        """Its cause accepted (every lead acknowledged) while some of its effects are not: what
        fails is those effects, from a cause the team accepted."""
        return (
            self.group.caused
            and all(f.ack is not None for f in self.leads)
            and any(f.ack is None for f in self.effects)
        )

    def summary(self, limit: int = HEADLINE_PHRASE) -> str:
        """One line: the cause's phrase (or the lone finding's title and figure) and its effects;
        where the cause is accepted and its effects are not, those effects, from the accepted cause."""
        if self.accepted_cause:
            phrase = self.group.title.removeprefix("the ")
            phrase = phrase if len(phrase) <= limit else phrase[: limit - 1] + "…"
            open_ = Grouped(self.group, self.leads, [f for f in self.effects if f.ack is None])
            return f"{', '.join(open_.figures)} · from the accepted {phrase}"
        if self.group.caused:
            phrase = self.group.title.removeprefix("the ")
            phrase = phrase if len(phrase) <= limit else phrase[: limit - 1] + "…"
            return f"{phrase} — {', '.join(self.figures)}" if self.figures else phrase
        lone = self.leads[0]
        said = figure(lone)
        words = self.group.title[:1].lower() + self.group.title[1:]
        return words + (f" — {said}" if said else "")


def grouped(review: Review) -> list[Grouped]:
    return [
        Grouped(g, [review.findings[i] for i in g.leads], [review.findings[i] for i in g.effects])
        for g in groups_of(review)
    ]
