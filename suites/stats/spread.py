"""The between-process spread of a case, estimated from few processes by borrowing from the
run's other cases.

A case measured in R processes (``suites/harness/rounds.py``) has R process medians; their spread
is what a re-run in other processes meets (the host's speed for launch work changes from
process to process: see the README's "Reproducibility"), but R - 1 degrees of freedom
make a poor variance estimate and a huge t quantile. The many cases of one run share
the host, so each case's variance is moderated towards a prior fitted to all of them:
the empirical Bayes estimator of Smyth (2004), "Linear models and empirical Bayes methods
for assessing differential expression in microarray experiments", Stat. Appl. Genet. Mol.
Biol. 3(1), section 6, as limma's ``squeezeVar`` computes it. The case's own variance s²
(d degrees of freedom) and the prior s0² (d0) combine to (d0 s0² + d s²) / (d0 + d) with
d0 + d degrees of freedom; d0 is estimated from how much the cases' variances differ
beyond what d degrees of freedom explain, so a run whose cases share one spread lends
each case many degrees of freedom, and a run whose cases differ lends few.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used, not here: this module is on the import path of every
# `python -m suites` start and every worker (through the harness), and scipy.stats alone
# took about 2.5 of a runner's 3.2 s of imports on a 2-core host, paid even by runs that
# never fit a prior.


@dataclass(frozen=True)
class Prior:
    variance: float      # s0²
    df: float            # d0 (math.inf: the cases' variances differ by sampling alone)
    cases: int


NO_PRIOR = Prior(variance=0.0, df=0.0, cases=0)


def _trigamma_inverse(value: float) -> float:
    """y with trigamma(y) = value, by Newton's method from Smyth's starting point
    (limma's ``trigammaInverse``)."""
    if value > 1e7:
        return 1.0 / math.sqrt(value)
    if value < 1e-6:
        return 1.0 / value
    from scipy import special
    y = 0.5 + 1.0 / value
    for _ in range(50):
        tri = float(special.polygamma(1, y))
        step = tri * (1.0 - tri / value) / float(special.polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def fit_prior(variances: Sequence[float], df: int) -> Prior:
    """The prior (s0², d0) of the cases' variances, each with ``df`` degrees of freedom,
    by the method of moments on log variances (Smyth 2004, section 6.2). Fewer than three
    cases, or all variances zero, give no prior (``NO_PRIOR``)."""
    values = np.asarray([v for v in variances if v is not None and math.isfinite(v)],
                        dtype=np.float64)
    if len(values) < 3 or df < 1 or not np.any(values > 0):
        return NO_PRIOR
    from scipy import special
    # A zero variance (identical medians) has no logarithm; limma offsets it likewise.
    values = np.maximum(values, 1e-5 * float(np.median(values[values > 0])))
    half = df / 2.0
    logs = np.log(values) - float(special.digamma(half)) + math.log(half)
    mean = float(logs.mean())
    excess = float(logs.var(ddof=1)) - float(special.polygamma(1, half))
    if excess <= 0:
        return Prior(variance=math.exp(mean), df=math.inf, cases=len(values))
    prior_df = 2.0 * _trigamma_inverse(excess)
    return Prior(variance=math.exp(mean + float(special.digamma(prior_df / 2))
                                   - math.log(prior_df / 2)),
                 df=prior_df, cases=len(values))


def moderated(variance: float, df: int, prior: Prior) -> tuple[float, float]:
    """(variance, degrees of freedom) of one case after borrowing from the prior."""
    if prior.df == math.inf:
        return prior.variance, math.inf
    total = prior.df + df
    if total <= 0:
        return variance, 0.0
    return (prior.df * prior.variance + df * variance) / total, total


def t_975(df: float) -> float:
    """The two-sided 95% Student t quantile for (possibly fractional) df."""
    if df == math.inf:
        return 1.959964
    from scipy import stats
    return float(stats.t.ppf(0.975, df))
