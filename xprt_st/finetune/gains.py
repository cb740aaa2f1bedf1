"""finetune-compare's arithmetic: per-domain means, the gains of pre-training, their intervals and flags (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xprt_st.evaluation.bootstrap import LOSS, Interval, paired_interval, retrieval_items
from xprt_st.finetune.folds import NO_DOMAIN

ROLES = ("base", "pretrained", "base+ft", "pretrained+ft")
"""The four models of the comparison, in table order."""

OVERALL = "overall"
"""The row of all test queries together."""


def domain_means(per_query: Mapping[str, float], domains: Mapping[str, str]) -> dict[str, float]:
    """Mean per-query score overall and per sub-domain (none when ``domains`` is empty); only queries
    present in ``per_query`` count."""
    groups: dict[str, list[float]] = {OVERALL: []}
    for qid, value in per_query.items():
        groups[OVERALL].append(value)
        if domains:
            groups.setdefault(domains.get(qid, NO_DOMAIN), []).append(value)
    return {name: sum(values) / len(values) for name, values in groups.items() if values}


def domain_counts(query_ids: Sequence[str], domains: Mapping[str, str]) -> dict[str, int]:
    """Number of queries overall and per sub-domain (none when ``domains`` is empty)."""
    counts = {OVERALL: len(query_ids)}
    for qid in query_ids if domains else []:
        name = domains.get(qid, NO_DOMAIN)
        counts[name] = counts.get(name, 0) + 1
    return counts


@dataclass
class GainRow:
    """Scores of the four models on one sub-domain and the gains of pre-training.

    ``gain_before`` = pretrained - base; ``gain_after`` = (pretrained+ft) - (base+ft);
    ``flag`` names where pre-training loses by more than the tolerance, and says so when the loss's
    95% interval includes 0. ``*_low`` / ``*_high`` bound each gain's paired bootstrap 95% interval
    over the sub-domain's test queries and ``verdict_*`` reads it (gain, loss, no clear difference);
    NaN and ``""`` when there is no interval (no per-query scores, or a single query).
    """

    domain: str
    n_queries: int
    base: float
    pretrained: float
    base_ft: float
    pretrained_ft: float
    gain_before: float
    gain_after: float
    flag: str
    before_low: float = math.nan
    before_high: float = math.nan
    after_low: float = math.nan
    after_high: float = math.nan
    verdict_before: str = ""
    verdict_after: str = ""


def gain_intervals(
    per_query: Mapping[str, Mapping[str, float]], domains: Mapping[str, str] | None = None
) -> dict[str, tuple[Interval | None, Interval | None]]:
    """Paired bootstrap 95% intervals of the gain before and after fine-tuning, overall and per sub-domain.

    Both gains are means of per-query nDCG@10 differences on the same test queries
    (pretrained - base; pretrained+ft - base+ft), so the queries of each sub-domain are resampled with
    :func:`xprt_st.evaluation.bootstrap.paired_interval`. A sub-domain with one query has no interval (None).

    Args:
        per_query: role (:data:`ROLES`) -> query id -> nDCG@10, the same queries for every role.
        domains: query id -> sub-domain; None or empty: overall only.
    """
    groups: dict[str, list[str]] = {OVERALL: sorted(per_query["base"])}
    for qid in groups[OVERALL] if domains else []:
        groups.setdefault(domains.get(qid, NO_DOMAIN), []).append(qid)
    intervals = {}
    for name, ids in groups.items():
        pair = []
        for model, reference in (("pretrained", "base"), ("pretrained+ft", "base+ft")):
            if len(ids) < 2:
                pair.append(None)
                continue
            items = retrieval_items({q: per_query[model][q] for q in ids}, {q: per_query[reference][q] for q in ids})
            pair.append(paired_interval(items))
        intervals[name] = (pair[0], pair[1])
    return intervals


def compare_gains(
    scores: Mapping[str, Mapping[str, float]],
    counts: Mapping[str, int] | None = None,
    *,
    tolerance: float = 0.0,
    intervals: Mapping[str, tuple[Interval | None, Interval | None]] | None = None,
) -> list[GainRow]:
    """Gain rows, overall first then sub-domains by name, from role -> domain -> score.

    Args:
        scores: for each role in :data:`ROLES`, a mapping domain -> mean score.
        counts: domain -> number of test queries (for the table).
        tolerance: a gain below ``-tolerance`` is flagged as a loss.
        intervals: domain -> (interval of the gain before, after) fine-tuning (:func:`gain_intervals`).
    """
    missing = [role for role in ROLES if role not in scores]
    if missing:
        raise KeyError(f"scores lack role(s) {missing}; need all of {list(ROLES)}")
    domains = sorted(set().union(*(set(scores[role]) for role in ROLES)) - {OVERALL})
    rows = []
    for domain in ([OVERALL] if OVERALL in scores["base"] else []) + domains:
        values = {role: scores[role].get(domain, math.nan) for role in ROLES}
        before = values["pretrained"] - values["base"]
        after = values["pretrained+ft"] - values["base+ft"]
        pair = (intervals or {}).get(domain, (None, None))
        # A loss whose interval includes 0 is still named (the point estimate lost) but marked as such.
        losses = [
            name + (" (95% CI includes 0)" if interval is not None and interval.verdict != LOSS else "")
            for name, gain, interval in (("before", before, pair[0]), ("after", after, pair[1]))
            if gain < -tolerance
        ]
        flag = f"loses {' and '.join(losses)} fine-tuning" if losses else ""
        bounds = [(i.low, i.high, i.verdict) if i is not None else (math.nan, math.nan, "") for i in pair]
        rows.append(
            GainRow(
                domain=domain,
                n_queries=int((counts or {}).get(domain, 0)),
                base=values["base"],
                pretrained=values["pretrained"],
                base_ft=values["base+ft"],
                pretrained_ft=values["pretrained+ft"],
                gain_before=before,
                gain_after=after,
                flag=flag,
                before_low=bounds[0][0],
                before_high=bounds[0][1],
                after_low=bounds[1][0],
                after_high=bounds[1][1],
                verdict_before=bounds[0][2],
                verdict_after=bounds[1][2],
            )
        )
    return rows
