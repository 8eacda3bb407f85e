"""The course of training (headwatch/sweep/course.py, protocol §7 and §7b) on hand-made curves:
where a run arrives on and leaves its plateau (and one that never leaves, one with no plateau), when
its previous-token head forms, and the verdict of a gap that holds, one that narrows and one that
flips (with its crossover step)."""
import numpy as np
import pandas as pd
import pytest

from headwatch.settings.sweep import course_errors, course_sweeps
from headwatch.sweep import course
from headwatch.sweep.summary import SummaryError

BOOT = dict(resamples=2000, seed=0, level=0.95)
STEPS = np.arange(30, 630, 30)          # the laptop run's evaluations: every 30 of 600 steps


def curve(leave: int | None, plateau: float = 2.52, start: float = 3.4, slope: float = 0.0015) -> np.ndarray:
    """A laptop-like validation curve: a fast fall from ``start`` to the plateau by step 60, a slow
    drift on it, then from ``leave`` (if any) a fall of ``slope`` per step."""
    loss = plateau + (start - plateau) * np.exp(-(STEPS - 30) / 12.0) - 0.00005 * STEPS
    if leave is not None:
        loss = loss - slope * np.clip(STEPS - leave, 0, None)
    return loss


def test_a_run_arrives_on_its_plateau_after_the_early_fall_and_leaves_it_by_the_margin():
    loss = curve(leave=210)
    ev = course.plateau_events(STEPS, loss, margin=0.05, start=np.log(64))
    # Not at step 30 or 60: the early fall (3.4 -> 2.6) is still more than the margin per evaluation.
    assert ev["plateau_step"] == 90 and ev["plateau_loss"] == pytest.approx(loss[2])
    first_below = STEPS[2 + np.flatnonzero(loss[2:] <= loss[2] - 0.05)[0]]
    assert ev["leave_step"] == first_below and 210 < ev["leave_step"] <= 270
    # A larger margin: the arrival may come earlier (a larger fall per evaluation counts as flat),
    # the leaving is still the first evaluation that far below the level.
    wide = course.plateau_events(STEPS, loss, 0.1, np.log(64))
    i, j = (list(STEPS).index(wide[k]) for k in ("plateau_step", "leave_step"))
    assert loss[j] <= wide["plateau_loss"] - 0.1 < loss[j - 1] and i < j and wide["leave_step"] >= ev["leave_step"]
    assert course.plateau_events(STEPS, loss, 0.05) == ev           # the start unknown: the same here


#: The 1-head runs of the laptop-long sweep (evaluations every 60 steps, warm-up 120; `make laptop-long`'s
#: metrics): seed 1 on its plateau at its first evaluation, leaving it from step 120 on; seed 0 passing
#: it between steps 60 and 180, its fall slowest from 120 to 180 (0.059, between 0.084 and 0.092).
LONG_STEPS = np.arange(60, 900, 60)
LONG_H1 = np.array([2.6307, 2.5899, 2.5169, 2.4065, 2.2962, 2.2188, 2.1640, 2.1304, 2.0970, 2.0649, 2.0164,
                    2.0080, 1.9790, 1.9539])
LONG_H1_SEED0 = np.array([2.6477, 2.5637, 2.5045, 2.4133, 2.3032, 2.2164, 2.1654, 2.1412, 2.0955, 2.0623, 2.0321,
                          1.9999, 1.9852, 1.9727])


def test_a_run_already_on_its_plateau_at_its_first_evaluation_is_read_there_not_at_a_later_slow_stretch():
    """The rule with the warm-up gate and the margin alone took these runs' first slow stretch after the
    warm-up (2.16 at step 420) for their plateau; the runs sat on the common plateau (~2.6) at their
    first evaluations and left it at step 180, before the 4- and 32-head runs (protocol §7b)."""
    ev = course.plateau_events(LONG_STEPS, LONG_H1, 0.05, start=np.log(64))
    assert ev == dict(plateau_step=60, plateau_loss=pytest.approx(2.6307), leave_step=180)
    # passed between two evaluations: read at its flattest evaluation, where the fall speeds up again
    ev = course.plateau_events(LONG_STEPS, LONG_H1_SEED0, 0.05, start=np.log(64))
    assert ev == dict(plateau_step=120, plateau_loss=pytest.approx(2.5637), leave_step=180)
    # Without the untrained model's loss the first evaluation cannot be the arrival, and the rule falls
    # back on the later slow stretch: so the course passes each run's ln V.
    assert course.plateau_events(LONG_STEPS, LONG_H1, 0.05)["plateau_step"] == 420


def test_a_slow_start_in_the_warm_up_is_not_the_plateau():
    """While the learning rate warms up the loss may fall slowly, then faster: that start is no
    plateau (its fall speeds up next); the flat stretch after the fast fall is."""
    steps = np.arange(0, 420, 20)
    loss = 2.5 + 0.97 / (1 + np.exp((steps - 120) / 8.0))        # 3.47 flat at first, falls fast at ~120, flat
    ev = course.plateau_events(steps, loss, 0.05, start=3.47)
    assert ev["plateau_step"] >= 140 and ev["plateau_loss"] == pytest.approx(2.5, abs=0.1)
    assert ev["leave_step"] is None


def test_a_run_that_never_leaves_and_one_with_no_plateau():
    never = course.plateau_events(STEPS, curve(leave=None), margin=0.05, start=np.log(64))
    assert never["plateau_step"] == 90 and never["leave_step"] is None
    steep = 4.0 - 0.004 * STEPS                   # falls 0.12 per evaluation throughout: never flat
    assert course.plateau_events(STEPS, steep, 0.05, np.log(64)) == dict(plateau_step=None, plateau_loss=None,
                                                                         leave_step=None)
    with pytest.raises(ValueError, match="increasing"):
        course.plateau_events(STEPS[::-1], steep, 0.05)


def records(prev_by_step: dict[int, list[float]]) -> pd.DataFrame:
    """heads.parquet rows: per step one row per head with the given prev scores (others 0)."""
    return pd.DataFrame([dict(step=s, layer=0, head=h, sink=0.0, prev=p, self=0.0, induction=0.0,
                              induction_text=0.0) for s, ps in prev_by_step.items() for h, p in enumerate(ps)])


def test_the_previous_token_head_forms_when_the_best_head_reaches_the_threshold():
    heads = records({int(s): [0.04, min(0.9, 0.002 * max(0, s - 150))] for s in STEPS})
    metrics = pd.DataFrame(dict(step=STEPS, val_loss=curve(leave=210)))
    ev = course.run_events(metrics, heads, margin=0.05, threshold=0.3, start=np.log(64))
    assert ev["prev_step"] == 300                         # 0.002 × (300 − 150) = 0.3
    assert ev["lag"] == ev["prev_step"] - ev["leave_step"]
    assert ev["prev_at_leave"] == pytest.approx(0.002 * (ev["leave_step"] - 150))
    weak = records({int(s): [0.04, 0.1] for s in STEPS})
    ev = course.run_events(metrics, weak, 0.05, 0.3, np.log(64))
    assert ev["prev_step"] is None and ev["lag"] is None
    # the run read both ways: a loss that bottoms out and rises again (protocol §7, "Two readings")
    bent = metrics.assign(val_loss=np.where(metrics["step"] > STEPS[-3], metrics["val_loss"] + 0.3, metrics["val_loss"]))
    ev = course.run_events(bent, heads, 0.05, 0.3, np.log(64))
    low = int(np.argmin(bent["val_loss"]))
    assert (ev["best_step"], ev["best_loss"]) == (int(STEPS[low]), pytest.approx(bent["val_loss"].iloc[low]))
    assert ev["rise"] == pytest.approx(bent["val_loss"].iloc[-1] - bent["val_loss"].iloc[low]) and ev["rise"] > 0.2


def runs_of(shape: str, seeds, make) -> list[dict]:
    return [dict(sweep="s", shape=shape, width=256, heads=int(shape.split("-h")[1]), seed=seed,
                 metrics=pd.DataFrame(dict(step=STEPS, val_loss=make(seed))),
                 records=records({int(s): [0.5 if s >= 300 else 0.1] for s in STEPS})) for seed in seeds]


def noise(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.002, len(STEPS))


SEEDS = (0, 1, 2, 3, 4)


def sweep_curves() -> list[dict]:
    """A reference arm (h1) and three arms: one whose gap holds (a steady 0.1 above the reference), one
    that narrows (0.2 at step 300, 0.05 at the end), one that flips (above until ~step 390, below at
    the end); every seed shares the reference's shift (the data order), plus its own small noise."""
    base = lambda seed: curve(leave=210) + 0.02 * seed + noise(seed)
    bump = np.exp(-((STEPS - 300) / 120.0) ** 2)
    shapes = {
        "w256-h1": base,
        "w256-h4": lambda seed: base(seed) + 0.1 + noise(seed + 10),
        "w256-h8": lambda seed: base(seed) + 0.05 + 0.15 * bump + noise(seed + 20),
        "w256-h32": lambda seed: base(seed) + 0.13 - 0.0004 * STEPS + noise(seed + 30),
    }
    return [r for shape, make in shapes.items() for r in runs_of(shape, SEEDS, make)]


def test_the_coincidence_sentence_says_in_how_many_runs_the_two_events_meet():
    """Leaving the plateau against the head forming: every run within one interval, some, none."""
    def events(pairs):
        e = pd.DataFrame(pairs, columns=["leave_step", "prev_step"], dtype=float)
        return e.assign(lag=e["prev_step"] - e["leave_step"])

    every = course.coincidence(events([(120, 150), (180, 180)]), 60)
    assert "in 2 of them the two events fall within one evaluation interval" in every
    assert every.endswith("**Leaving the plateau coincides with the previous-token head forming** in every run.")
    some = course.coincidence(events([(120, 150), (180, 600), (120, None)]), 60)
    assert "the head formed earlier in 0 and later in 1" in some and "1 left the plateau without forming one" in some
    assert some.endswith("**Leaving the plateau coincides with the previous-token head forming in 1 of 3 runs, "
                         "not in every one.**")
    none = course.coincidence(events([(120, 360), (180, 420)]), 60)
    assert none.endswith("**In no run does leaving the plateau coincide with the previous-token head forming.**")


def test_the_verdicts_of_a_gap_that_holds_one_that_narrows_and_one_that_flips():
    tables = course.course(sweep_curves(), "w256-h1", margin=0.05, threshold=0.3, bootstrap=BOOT)
    v = tables["verdicts"].set_index("arm", drop=False)
    assert v.loc["w256-h4", "verdict"] == "holds"
    assert v.loc["w256-h8", "verdict"] == "narrows" and v.loc["w256-h8", "peak_step"] == 300
    assert v.loc["w256-h8", "end_hi"] < v.loc["w256-h8", "peak_lo"] and v.loc["w256-h8", "end_lo"] > 0
    flip = v.loc["w256-h32"]
    assert flip["verdict"] == "flips" and flip["end_hi"] < 0 and flip["direction"] == 1
    # Its order is set at step 30 (+0.118, resolved), where it also peaks, though the reversed gap
    # ends larger (−0.11); 0.13 − 0.0004 s < 0 from s = 325: the mean gap crosses at the next evaluation.
    assert flip["peak_step"] == 30 and flip["end_gap"] < -flip["peak_gap"] + 0.02
    assert flip["crossover_step"] == 330 and flip["crossover_lo"] <= 330 <= flip["crossover_hi"]
    assert flip["crossover_resamples"] > 0
    assert pd.isna(v.loc["w256-h4", "crossover_step"])
    g = tables["gaps"]
    assert len(g) == 3 * len(STEPS) and (g["gap_lo"] <= g["gap"] + 1e-12).all() and (g["gap"] <= g["gap_hi"] + 1e-12).all()
    h4 = g[g["arm"] == "w256-h4"]
    assert h4["gap"].to_numpy() == pytest.approx(0.1, abs=0.01)
    # Every run leaves the plateau and forms its previous-token head at 300 (the records above).
    s = tables["events_summary"].set_index("shape")
    assert (s["left"] == len(SEEDS)).all() and (s["formed"] == len(SEEDS)).all()
    assert (s["prev_step_mean"] == 300).all() and (s["prev_step_lo"] == 300).all()
    assert (s["leave_step_lo"] <= s["leave_step_mean"]).all() and (s["leave_step_mean"] <= s["leave_step_hi"]).all()
    assert "**flips**" in course.verdict_sentence(flip) and "crosses 0 at step 330" in course.verdict_sentence(flip)


def test_a_gap_that_the_seeds_cannot_resolve_and_the_verdict_rule_itself():
    assert course.gap_verdict((0.01, 0.05), (0.1, 0.2), 1) == "narrows"
    assert course.gap_verdict((0.12, 0.25), (0.1, 0.2), 1) == "holds"
    assert course.gap_verdict((-0.05, -0.01), (0.1, 0.2), 1) == "flips"
    assert course.gap_verdict((-0.02, 0.15), (0.1, 0.2), 1) == "not resolved"
    assert course.gap_verdict((-0.25, -0.12), (-0.2, -0.1), -1) == "holds"      # the arm ahead throughout
    assert course.gap_verdict((0.01, 0.05), (-0.2, -0.1), -1) == "flips"
    # The order: the first clear gap (interval off 0 and at least the margin), not the largest.
    means, lo, hi = (np.array(x) for x in ([0.01, 0.08, 0.02, -0.12], [0.005, 0.06, -0.01, -0.14],
                                           [0.015, 0.1, 0.05, -0.1]))
    assert course.order_and_peak(means, lo, hi, 0.05) == (1, 1)
    assert course.order_and_peak(means, lo, hi, 0.2) == (-1, 3)        # none clear: the largest


def test_a_gap_needs_the_same_seeds_in_both_arms():
    runs = sweep_curves()
    runs = [r for r in runs if not (r["shape"] == "w256-h4" and r["seed"] == 4)]
    with pytest.raises(SummaryError, match="share their seeds"):
        course.course(runs, "w256-h1", 0.05, 0.3, BOOT)


def test_course_settings_are_checked_before_any_job():
    sw = dict(sweeps=dict(a=dict(grid=[dict(width=8, heads=1), dict(width=8, heads=2)]),
                          b=dict(grid=[dict(width=8, heads=1)])), course=dict(sweeps=dict(a="w8-h4", b="w8-h1",
                                                                                          c="w8-h1")))
    errors = course_errors(sw)
    assert any("sweep.course.sweeps.a" in e and "'w8-h4' is not a shape" in e for e in errors)
    assert any("sweep.course.sweeps.b" in e and "no arm beside" in e for e in errors)
    assert any("sweep.course.sweeps.c" in e and "not a sweep" in e for e in errors)
    sw["course"]["sweeps"] = dict(a="w8-h1")
    assert course_errors(sw) == []
    assert course_sweeps(dict(sw, skip=["a"])) == {}
