"""Change points in one figure's values over the nights (oldest first): where
the level moved and stayed moved, as opposed to one odd night.

The method is E-divisive with a Student's t-test in the shape MongoDB's and
Apache Otava's change-point detection use: binary segmentation, the best split
of a segment kept when a t-test between its two sides says the means differ,
then both sides searched again. Here the split's statistic is the pooled
two-sample t itself, its p-value from Student's t distribution multiplied by
the number of splits tried (Bonferroni: every split was tried), and a
segment's values are first clipped to its median +- `clip` robust sigmas
(1.4826 x MAD), so that one wild night cannot carry a split on its own.
A permutation test was tried first and dropped: with two nights after a
change, no permutation of twenty nights can reach p < 0.01.
Standard library only (the gate runs with the system interpreter; Apache
Otava itself would bring BigQuery, Postgres and Slack clients and pin an
older numpy than the venv's).
"""
import math
import statistics
from dataclasses import dataclass


@dataclass
class Change:
    index: int      # the first night of the new level
    before: float   # median of the segment before it
    after: float    # median of the segment from it on
    p: float        # the split's corrected p-value

    @property
    def ratio(self):
        return self.after / self.before if self.before else float("inf")

    @property
    def confidence(self):
        return 1.0 - self.p


def _beta_fraction(a, b, x):
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def t_two_sided_p(t, dof):
    """P(|T| >= |t|) for Student's t with `dof` degrees of freedom."""
    x = dof / (dof + t * t)
    if x >= 1.0 or x <= 0.0:  # t = 0, or so large that no tail is left
        return 1.0 if x >= 1.0 else 0.0
    a, b = dof / 2, 0.5
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def clipped(values, clip):
    """values limited to median +- clip x 1.4826 x MAD (unchanged when the MAD is 0)."""
    median = statistics.median(values)
    reach = clip * 1.4826 * statistics.median(abs(v - median) for v in values)
    if reach == 0:
        return list(values)
    return [min(max(v, median - reach), median + reach) for v in values]


def best_split(values, min_size):
    """(split index, |t|) of the split with the largest pooled two-sample t."""
    n, total, squares = len(values), sum(values), sum(v * v for v in values)
    best, where, left, left_sq = -1.0, None, 0.0, 0.0
    for tau in range(1, n - min_size + 1):
        left += values[tau - 1]
        left_sq += values[tau - 1] ** 2
        if tau < min_size:
            continue
        m = n - tau
        right, right_sq = total - left, squares - left_sq
        ss = (left_sq - left * left / tau) + (right_sq - right * right / m)
        pooled = max(ss, 0.0) / (n - 2)
        diff = abs(left / tau - right / m)
        t = diff / math.sqrt(pooled * (1 / tau + 1 / m)) if pooled > 0 else (math.inf if diff else 0.0)
        if t > best:
            best, where = t, tau
    return where, best


def detect(values, alpha=0.01, min_size=2, clip=5.0):
    """The change points of `values`, in order; each side of a change holds at
    least `min_size` nights."""
    found = []

    def search(lo, hi):
        if hi - lo < 2 * min_size or hi - lo < 3:
            return
        tau, t = best_split(clipped(values[lo:hi], clip), min_size)
        if tau is None or t <= 0:
            return
        tried = hi - lo - 2 * min_size + 1
        p = 0.0 if math.isinf(t) else min(1.0, tried * t_two_sided_p(t, hi - lo - 2))
        if p >= alpha:
            return
        found.append((lo + tau, p))
        search(lo, lo + tau)
        search(lo + tau, hi)

    search(0, len(values))
    found.sort()
    cuts = [0, *(i for i, _ in found), len(values)]
    return [Change(index, statistics.median(values[cuts[k]:index]), statistics.median(values[index:cuts[k + 2]]), p)
            for k, (index, p) in enumerate(found)]
