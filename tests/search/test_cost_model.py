"""Pairwise ranking accuracy, as ``bench/tune.py``'s model quality uses it: which pairs count
and how ties and failed programs are scored."""
import pytest

from metasched.search import pairwise_accuracy


def test_tied_predictions_count_as_wrong():
    assert pairwise_accuracy([1, 2], [5, 5]) == 0.0
    assert pairwise_accuracy([1, 2, 3], [1, 1, 3]) == pytest.approx(2 / 3)


def test_failed_programs_rank_last_and_tie_with_each_other():
    # Throughputs: two failed programs (0) and two that ran.
    truth = [0.0, 0.0, 2.0, 1.0]
    assert pairwise_accuracy(truth, [0.1, 0.2, 0.9, 0.5]) == 1.0  # the 0-0 pair is left out
    assert pairwise_accuracy(truth, [0.6, 0.2, 0.9, 0.5]) == pytest.approx(4 / 5)
