"""benchmarks/optimizer.py's side-by-side timing: a rewritten program measured slower than
the corpus target is timed again over more rounds before it counts; a program with
nothing rewritten (the same work on both sides) never is."""
import pytest

from benchmarks import optimizer as bench
from benchmarks import timing
from tests.programs import all_programs


def _corpus_workload(name: str) -> tuple:
    return bench.corpus_workload(next(p for p in all_programs() if p.name == name))


@pytest.fixture
def rounds_timed(monkeypatch):
    """The rounds of every interleaved timing the benchmark makes (the real timing runs)."""
    rounds = []

    def recording(calls, count):
        rounds.append(count)
        return timing.interleaved_seconds(calls, count)

    monkeypatch.setattr(bench, "interleaved_seconds", recording)
    return rounds


# weak_init_f32: its rewrite (unrolled, ~5x faster) is always built, never a measured fallback,
# which would make it "the same program" on a noisy machine
def test_a_rewritten_program_measured_slower_is_timed_again_over_more_rounds(rounds_timed):
    # a threshold no measurement reaches, so that the first measurement always counts as slower
    row = bench._side_by_side(*_corpus_workload("weak_init_f32"), 0.95, 3, retime_below=1e9)
    assert not row["same program"]
    assert rounds_timed == [3, 3 * bench.RETIME_ROUNDS_FACTOR]
    assert row["first speed-up"] is not None and row["first speed-up"] > 0
    assert row["speed-up"] == pytest.approx(row["rules=() ms"] / row["default ms"])
    assert row["rounds"] == 3 * bench.RETIME_ROUNDS_FACTOR
    low, middle, high = row["round speed-up quartiles"]
    assert 0 < low <= middle <= high


def test_a_program_measured_fast_enough_is_timed_once(rounds_timed):
    row = bench._side_by_side(*_corpus_workload("weak_init_f32"), 0.95, 3, retime_below=0.0)
    assert rounds_timed == [3]
    assert row["first speed-up"] is None


def test_a_program_with_nothing_rewritten_is_never_timed_again(rounds_timed):
    row = bench._side_by_side(*_corpus_workload("newton_sqrt"), 0.95, 3, retime_below=1e9)
    assert row["same program"]
    assert rounds_timed == [3]
    assert row["first speed-up"] is None
