"""refine_to_target (mmdcs.selection.budget): the measured corrections of a predicted budget,
with a made-up predictor whose answers measure ``skew`` times what was asked (a table that
under- or over-predicts the region the export picks). No timing: measurements are functions."""
import pytest

from mmdcs.selection.budget import BudgetError, refine_to_target
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


def predictor(skew, floor=0.0):
    """ask(r) -> r (the answer is what was asked for; BudgetError below ``floor``) and a
    measure that finds ``skew(answer)`` times it."""
    asked = []

    def ask(r):
        asked.append(r)
        if r <= floor:
            raise BudgetError(f'{r} is below the floor {floor}')
        return r

    def measure(answer):
        return answer * skew(answer)
    return ask, measure, asked


def test_no_tries_measures_the_answer_once():
    ask, measure, asked = predictor(lambda a: 1.1)
    tries, best = refine_to_target(0.7, measure, ask, 0.7, tries=0)
    assert best == 0 and len(tries) == 1 and not asked
    assert tries[0].asked == 0.7 and tries[0].answer == 0.7
    assert_close_scaled(tries[0].measured, 0.77)


def test_a_constant_under_prediction_is_corrected_in_one_step():
    """Measured 1.1× what the predictor says: the second request asks for 0.7 · 0.7 / 0.77 and
    measures the target exactly; the corrections stop there (within the tolerance)."""
    ask, measure, asked = predictor(lambda a: 1.1)
    tries, best = refine_to_target(0.7, measure, ask, 0.7, tries=5)
    assert len(tries) == 2 and best == 1 and len(asked) == 1
    assert_close_scaled(tries[1].asked, 0.7 * 0.7 / 0.77)
    assert_close_scaled(tries[1].measured, 0.7)


def test_each_request_corrects_the_last_measurement():
    """A skew that grows as the answers shrink: several steps, each asking for asked · target
    / measured of the try before, closer every time."""
    ask, measure, _ = predictor(lambda a: 1.0 + 0.5 * (0.8 - a) ** 0.5 if a < 0.8 else 1.0)
    tries, best = refine_to_target(0.7, measure, ask, 0.7, tries=4, tolerance=1e-9)
    assert len(tries) == 5
    for prev, nxt in zip(tries, tries[1:]):
        assert_close_scaled(nxt.asked, prev.asked * 0.7 / prev.measured)
    misses = [abs(t.measured - 0.7) for t in tries]
    assert misses[best] == min(misses) and misses[-1] < misses[0] / 10


def test_the_closest_try_is_kept_not_the_last():
    """Noisy measurements (scripted: 0.80, 0.71, 0.66): the second try is the closest and is
    returned; the third request corrects the second measurement, not the best."""
    ask, _, asked = predictor(lambda a: 1.0)
    script = iter([0.80, 0.71, 0.66])
    tries, best = refine_to_target(0.7, lambda a: next(script), ask, 0.7, tries=2)
    assert best == 1 and [t.measured for t in tries] == [0.80, 0.71, 0.66]
    assert_close_scaled(asked[1], 0.7 * 0.7 / 0.80 * 0.7 / 0.71)


def test_a_request_below_the_floor_ends_the_corrections():
    """Measured 1.3× the prediction with a floor at 0.6: the second request (0.7 · 0.7 / 0.91 =
    0.538) is refused by the predictor; the first answer is all there is."""
    ask, measure, asked = predictor(lambda a: 1.3, floor=0.6)
    tries, best = refine_to_target(0.7, measure, ask, 0.7, tries=3)
    assert len(tries) == 1 and best == 0 and len(asked) == 1 and asked[0] < 0.6


def test_an_answer_within_the_tolerance_is_not_corrected():
    ask, measure, asked = predictor(lambda a: 1.01)
    tries, best = refine_to_target(0.7, measure, ask, 0.7, tries=3, tolerance=0.01)
    assert len(tries) == 1 and not asked


def test_measurements_may_carry_more_than_the_ratio():
    """``ratio`` reads the ratio out of a richer measurement (a dict of the timings)."""
    ask, _, _ = predictor(lambda a: 1.1)
    tries, best = refine_to_target(0.7, lambda a: dict(ratio=a * 1.1, ms=a), ask, 0.7, tries=2,
                                   ratio=lambda m: m['ratio'])
    assert best == 1 and tries[1].measured['ms'] == tries[1].answer


@pytest.mark.parametrize('tries', [-1, 1.5, True])
def test_bad_tries_are_refused(tries):
    ask, measure, _ = predictor(lambda a: 1.0)
    with pytest.raises(ValueError, match='tries'):
        refine_to_target(0.7, measure, ask, 0.7, tries=tries)
