"""Statistics every table needs: a 95% Wilson interval for a success rate, a normal interval for a mean
(SPL, Kendall tau, a paired difference), the exact McNemar test for two planners on the same episodes,
and Holm's adjustment for the many such tests one table makes. They live in core so envs, pipelines and
the viewer share one copy."""
from __future__ import annotations

import math
from typing import Sequence

from groundplan.core.errors import InvalidInputError


def _wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score bounds of proportion ``p`` at sample size ``n`` (an effective, possibly fractional,
    n for clustered data), clipped to [0, 1]."""
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (Wilson 1927; Brown, Cai & DasGupta 2001):

        centre = (p̂ + z²/2n) / (1 + z²/n),   half = z·sqrt(p̂(1-p̂)/n + z²/4n²) / (1 + z²/n)

    with p̂ = successes/n. Unlike p̂ ± z·sqrt(p̂(1-p̂)/n) it stays inside [0, 1] and is not zero-width at
    0 or n successes (0 of 10 gives [0, 0.28], not [0, 0]). ``n = 0`` gives the uninformative [0, 1].
    """
    if n < 0 or successes < 0 or successes > n:
        raise InvalidInputError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if z <= 0:
        raise InvalidInputError(f"z must be positive, got {z}")
    if n == 0:
        return 0.0, 1.0
    lo, hi = _wilson_bounds(successes / n, n, z)
    if successes == 0:
        lo = 0.0
    if successes == n:
        hi = 1.0
    return lo, hi


def clustered_wilson(clusters: Sequence[tuple[int, int]], z: float = 1.96) -> tuple[float, float, float]:
    """(p̂, lo, hi) for a success rate over episodes that come in clusters (the seeds of one task, tasks
    sharing an instruction): the Wilson interval at the effective sample size n / deff, where the design
    effect deff compares the cluster-robust variance of the ratio estimator p̂ = Σy_i / Σm_i,

        v = k / (k - 1) · Σ (y_i - p̂ m_i)² / (Σm_i)²,   n_eff = p̂(1 - p̂) / v   (capped at n),

    with the binomial one (Kish 1965; Donner & Klar 2000, ch. 6). ``clusters`` is (successes, episodes) per
    cluster. When p̂ is 0 or 1, or there is one cluster, v says nothing, and n_eff is the number of clusters:
    the interval then counts each cluster once, as the most correlated reading would. When the successes
    (or the failures) all lie in one cluster, v rests on that one cluster and cannot tell a correlated
    cluster from chance, so n_eff is at most the number of clusters (one success in 114 episodes of 8
    clusters would otherwise get the interval of 114 independent episodes, narrower than no success's)."""
    if any(m <= 0 or y < 0 or y > m for y, m in clusters):
        raise InvalidInputError("every cluster needs 0 <= successes <= episodes and at least one episode")
    k = len(clusters)
    n = sum(m for _, m in clusters)
    if n == 0:
        return 0.0, 0.0, 1.0
    p = sum(y for y, _ in clusters) / n
    v = (k / (k - 1)) * sum((y - p * m) ** 2 for y, m in clusters) / n ** 2 if k > 1 else 0.0
    informative = min(sum(1 for y, _ in clusters if y > 0), sum(1 for y, m in clusters if y < m))
    if v <= 0 or p in (0.0, 1.0):
        n_eff = float(k)
    else:
        n_eff = min(float(n) if informative > 1 else float(k), p * (1 - p) / v)
    if n_eff <= 0:
        return p, 0.0, 1.0
    lo, hi = _wilson_bounds(p, n_eff, z)
    return p, (0.0 if p == 0 else lo), (1.0 if p == 1 else hi)


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """The mean and its standard error, sample standard deviation / sqrt(n) (0 for one value; nan for
    none)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    m = sum(values) / n
    if n == 1:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) / math.sqrt(n)


def mean_interval(values: Sequence[float], z: float = 1.96) -> tuple[float, float, float]:
    """The mean with its normal-approximation interval, mean ± z·SE (95% by default); zero-width for one
    value."""
    m, se = mean_se(values)
    return m, m - z * se, m + z * se


def clustered_mean_interval(clusters: Sequence[Sequence[float]], z: float = 1.96) -> tuple[float, float, float]:
    """(mean, lo, hi) of a measure over episodes that come in clusters (the programs of one task name, the
    seeds of one house): the ratio estimator ȳ = Σ_c S_c / n with its cluster-robust (CR1) variance

        v = k / (k - 1) · Σ_c (S_c - ȳ m_c)² / n²,

    S_c and m_c the cluster's sum and size, k clusters, n episodes (Donner & Klar 2000, ch. 6), and the
    normal interval ȳ ± z·√v. With one episode a cluster it is :func:`mean_interval`'s interval; with one
    cluster it has no spread to stand on and is zero-width, as :func:`mean_interval`'s is for one value."""
    groups = [list(c) for c in clusters]
    if any(not c for c in groups):
        raise InvalidInputError("every cluster needs at least one value")
    k, n = len(groups), sum(len(c) for c in groups)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = sum(sum(c) for c in groups) / n
    v = (k / (k - 1)) * sum((sum(c) - mean * len(c)) ** 2 for c in groups) / n ** 2 if k > 1 else 0.0
    half = z * math.sqrt(v)
    return mean, mean - half, mean + half


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes (McNemar 1947, exact form): under the
    null of equal success rates each discordant pair (one planner succeeds, the other fails) is a fair
    coin, so p = min(1, 2·P[X <= min(a_only, b_only)]) with X ~ Binomial(a_only + b_only, 1/2). Pairs where
    both succeed or both fail carry no information about the difference. No discordant pairs: p = 1."""
    if a_only < 0 or b_only < 0:
        raise InvalidInputError(f"discordant counts must be non-negative, got {a_only}, {b_only}")
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (Holm 1979), in the order given.

    With the m p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted value of the i-th is

        p̃_(i) = max_{j <= i} min(1, (m - j + 1) · p_(j))

    and rejecting every hypothesis with p̃ <= α keeps the family-wise error rate at α for any dependence
    between the tests: twelve McNemar tests at 0.05 each would otherwise find a difference by chance
    about half the time. Ties keep their input order; an empty family gives []."""
    ps = [float(p) for p in p_values]
    if any(not 0.0 <= p <= 1.0 for p in ps):
        raise InvalidInputError(f"p-values must lie in [0, 1], got {ps}")
    m = len(ps)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: ps[k])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted
