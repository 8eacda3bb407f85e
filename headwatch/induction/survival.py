"""Time to an event with every run counted (protocol §7c): a run that has not had its event when it
stops — it reached the cap still on the plateau, or a control — is *censored* at the step it stopped,
never dropped, so the slowest runs weigh in. Tables only, no torch; the estimators are scipy's and
statsmodels', none written here.

* :func:`km_curve` — the Kaplan–Meier estimate of the share of runs still without the event at each
  step, with its pointwise 95 % interval (``scipy.stats.ecdf`` on ``CensoredData``, the log-log
  interval: within 0 and 1; where the share reaches 0 its upper bound is the previous step's);
* :func:`km_median` — the median step to the event and its interval, read off that band (the steps
  where the lower and the upper curve first reach one half; *not reached* past the last step seen);
* :func:`cox` — the Cox proportional-hazards regression of the event on several covariates together
  (``statsmodels`` ``PHReg``, Efron's ties: evaluations fall on a grid, so many runs share a step):
  each covariate's hazard ratio with its 95 % interval and Wald p, and the proportional-hazards check:
  each covariate's Schoenfeld residuals against the rank of the event step (Pearson), whose p below
  0.05 says the ratio changes over the run and the estimate is an average of it. A fit that does not
  converge, or whose ratio runs off to 0 or infinity (every event on one side of a covariate:
  *separation*), or whose covariates move together (every run of one width: log2 heads and log2
  head size sum to a constant, so neither is told apart from the other), is reported as not estimable
  rather than as a number.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

LEVEL = 0.95
SEPARATION_SE = 5.0
"""A log hazard ratio whose standard error passes this is not estimable: the data put every event on
one side (a ratio of e^±10 and beyond; a resolved ratio of two values of a covariate rarely has a
standard error above 1)."""


def km_curve(times, observed, level: float = LEVEL) -> pd.DataFrame:
    """``step, survival, lo, hi, at_risk, events``: the Kaplan–Meier share still without the event just
    after each step where the estimate moves (from step 0, survival 1), with its pointwise interval
    (log-log; where the share reaches 0 that interval's upper bound is undefined and the previous step's
    is kept: the band does not narrow at the last event); ``times`` the step of each run's
    event or of its censoring, ``observed`` whether the event happened. With no event at all the share
    stays 1 to the last step."""
    from scipy.stats import CensoredData, ecdf

    times = np.asarray(times, dtype=float)
    observed = np.asarray(observed, dtype=bool)
    if not len(times):
        raise ValueError("km_curve: no runs")
    rows = [dict(step=0.0, survival=1.0, lo=1.0, hi=1.0, at_risk=len(times), events=0)]
    if observed.any():
        import warnings

        res = ecdf(CensoredData(uncensored=times[observed], right=times[~observed]))
        with warnings.catch_warnings():     # where the share reaches 0 the log-log interval is undefined (NaN)
            warnings.simplefilter("ignore", RuntimeWarning)
            ci = res.sf.confidence_interval(level, method="log-log")
        for q, p, lo, hi in zip(res.sf.quantiles, res.sf.probabilities, ci.low.probabilities, ci.high.probabilities):
            rows.append(dict(step=float(q), survival=float(p), lo=0.0 if p == 0 else float(lo),
                             hi=rows[-1]["hi"] if p == 0 else float(hi), at_risk=int((times >= q).sum()),
                             events=int(((times == q) & observed).sum())))
    last = float(times.max())
    if rows[-1]["step"] < last:
        rows.append(dict(rows[-1], step=last, at_risk=int((times >= last).sum()),
                         events=int(((times == last) & observed).sum())))
    return pd.DataFrame(rows)


def km_median(curve: pd.DataFrame) -> tuple[float | None, float | None, float | None]:
    """(median step, its lower, its upper bound) from :func:`km_curve`: the first step where the
    survival, the lower and the upper curve reach one half; None where a curve never does (the median
    or its bound lies past the last step seen)."""
    def first(col):
        hit = curve[curve[col] <= 0.5]
        return None if hit.empty else float(hit["step"].iloc[0])
    return first("survival"), first("lo"), first("hi")


def cox(table: pd.DataFrame, covariates: list[str], time: str = "time", event: str = "observed",
        combinations: dict | None = None) -> pd.DataFrame:
    """One row per covariate of the Cox regression of ``event`` at ``time`` on ``covariates`` together:
    ``coef`` (log hazard ratio per unit), ``se``, ``hr``, ``hr_lo``, ``hr_hi`` (95 %), ``p``, ``ph_p``
    (the Schoenfeld check's p), ``estimable`` and ``why`` (module docstring); ``events`` and ``runs``.
    ``combinations``: ``{name: {covariate: weight}}``, a row each for a linear combination of the
    coefficients (its standard error from their covariance; its Wald p; no Schoenfeld check of its own)."""
    from scipy.stats import pearsonr, rankdata
    from statsmodels.duration.hazard_regression import PHReg

    t = table[time].to_numpy(dtype=float)
    d = table[event].to_numpy(dtype=bool)
    X = table[covariates].to_numpy(dtype=float)
    base = dict(runs=len(t), events=int(d.sum()))
    names = list(covariates) + list(combinations or {})
    empty = [dict(base, covariate=c, coef=math.nan, se=math.nan, hr=math.nan, hr_lo=math.nan, hr_hi=math.nan,
                  p=math.nan, ph_p=math.nan, estimable=False) for c in names]
    flat = [c for c, col in zip(covariates, X.T) if np.ptp(col) == 0]
    together = not flat and np.linalg.matrix_rank(X - X.mean(axis=0)) < len(covariates)
    if d.sum() < len(covariates) + 1 or flat or together:
        why = (f"{', '.join(flat)} does not vary" if flat else
               f"{' and '.join(covariates)} move together (one is a function of the others): neither is told "
               "apart" if together else f"{int(d.sum())} events for {len(covariates)} covariates")
        return pd.DataFrame([dict(r, why=why) for r in empty])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # statsmodels' convergence warnings: judged below
        fit = PHReg(t, X, status=d.astype(int), ties="efron").fit()
    params, se = np.asarray(fit.params), np.asarray(fit.bse)
    z = 1.959963984540054
    converged = bool(getattr(fit, "mle_retvals", {}).get("converged", True))
    resid = np.asarray(fit.schoenfeld_residuals)
    rows = []
    for j, c in enumerate(covariates):
        ok = converged and math.isfinite(se[j]) and se[j] < SEPARATION_SE
        why = ("" if ok else "the fit did not converge" if not converged else
               f"standard error {se[j]:.3g}: every event on one side of it (separation)")
        r = resid[:, j]
        keep = np.isfinite(r)
        ph = (float(pearsonr(r[keep], rankdata(t[keep])).pvalue)
              if keep.sum() > 2 and np.ptp(r[keep]) > 0 and np.ptp(t[keep]) > 0 else math.nan)
        rows.append(dict(base, covariate=c, coef=float(params[j]), se=float(se[j]), hr=_exp(params[j]),
                         hr_lo=_exp(params[j] - z * se[j]), hr_hi=_exp(params[j] + z * se[j]),
                         p=float(fit.pvalues[j]), ph_p=ph, estimable=ok, why=why))
    if combinations:
        from scipy.stats import norm

        cov = np.asarray(fit.cov_params())
        for name, weights in combinations.items():
            w = np.array([float(weights.get(c, 0.0)) for c in covariates])
            coef, se_c = float(w @ params), float(math.sqrt(max(w @ cov @ w, 0.0)))
            used = [rows[j] for j in range(len(covariates)) if w[j]]
            ok = all(r["estimable"] for r in used) and math.isfinite(se_c) and se_c < SEPARATION_SE
            rows.append(dict(base, covariate=name, coef=coef, se=se_c, hr=_exp(coef), hr_lo=_exp(coef - z * se_c),
                             hr_hi=_exp(coef + z * se_c), p=float(2 * norm.sf(abs(coef) / se_c)) if se_c else math.nan,
                             ph_p=math.nan, estimable=ok,
                             why="" if ok else "a coefficient it combines is not estimable"))
    return pd.DataFrame(rows)


def _exp(x: float) -> float:
    """e^x, infinite past float's range (a separated fit's bound); NaN stays NaN (missing, not infinite)."""
    if math.isnan(x):
        return math.nan
    return math.exp(x) if x < 709 else math.inf


def ratio_verdict(row, faster: str, slower: str) -> str:
    """A hazard ratio's verdict, fixed before the data: ``faster`` when its interval lies above 1
    (the event comes sooner), ``slower`` below 1, *not resolved* when it holds 1, *not estimable*
    when the fit could not say."""
    if not row["estimable"]:
        return "not estimable"
    if row["hr_lo"] > 1:
        return faster
    if row["hr_hi"] < 1:
        return slower
    return "not resolved"
