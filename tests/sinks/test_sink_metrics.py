"""Metric functions on hand-computed cases and on values produced by TCPDBench's own code."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shiftwatch.sinks.metrics import (
    accuracy_matrix,
    average_accuracy,
    covering,
    detection_summary,
    evaluation_triples,
    f_measure,
    forgetting,
    prequential_accuracy,
    true_positives,
)

# --------------------------------------------------------------------------------------
# TCPDBench F1
# --------------------------------------------------------------------------------------


def test_true_positives_match_each_change_once():
    # TCPDBench's doctests
    assert true_positives({1, 10, 20, 23}, {3, 8, 20}) == {1, 10, 20}
    assert true_positives({1, 10, 20, 23}, {1, 3, 8, 20}) == {1, 10, 20}
    assert true_positives({1, 10, 20, 23}, {1, 3, 5, 8, 20}) == {1, 10, 20}
    assert true_positives(set(), {1, 2, 3}) == set()
    assert true_positives({1, 2, 3}, set()) == set()
    # one prediction between two true points serves the earlier one only
    assert true_positives({10, 12}, {11}) == {10}
    # equidistant predictions: the earlier is taken, the later stays for the next point
    assert true_positives({10, 16}, {9, 11}) == {10, 16}
    assert true_positives({10}, {15}, margin=5) == {10}
    assert true_positives({10}, {16}, margin=5) == set()


F1_CASES = [
    # (annotations, predictions, (F, P, R)), computed by hand
    # union {0,10,12,20}: 0-0, 10-11; 12 finds 11 taken. P = 2/2. R = (2/3 + 2/2) / 2 = 5/6.
    ({"a": [10, 20], "b": [12]}, [11], (10 / 11, 1.0, 5 / 6)),
    # predictions at 0 and duplicates count once: X = {0, 50}
    ({"a": [50]}, [0, 0, 50], (1.0, 1.0, 1.0)),
    # two predictions within the margin of one change: one is a false positive
    ({"a": [10]}, [9, 11], (0.8, 2 / 3, 1.0)),
    # the "zero" method: only index 0. P = 1, R = (1/2 + 1/3) / 2 = 5/12
    ({"a": [10], "b": [10, 30]}, [], (10 / 17, 1.0, 5 / 12)),
    # margin boundary: distance 5 matches, 6 does not
    ({"a": [10]}, [15], (1.0, 1.0, 1.0)),
    ({"a": [10]}, [16], (0.5, 0.5, 0.5)),
    # an annotator who marks nothing has recall 1 from index 0 alone
    ({"a": [], "b": [40]}, [40], (1.0, 1.0, 1.0)),
    # an annotation at 0 is the same as none
    ({"a": [0, 40]}, [40], (1.0, 1.0, 1.0)),
]


@pytest.mark.parametrize("annotations, predictions, expected", F1_CASES)
def test_f_measure_hand_cases(annotations, predictions, expected):
    got = f_measure(annotations, predictions, return_PR=True)
    assert got == pytest.approx(expected, rel=1e-12)
    assert f_measure(annotations, predictions) == pytest.approx(expected[0], rel=1e-12)


def test_f_measure_tcpdbench_doctests():
    assert f_measure({1: [10, 20], 2: [11, 20], 3: [10], 4: [0, 5]}, [10, 20]) == 1.0
    assert f_measure({1: [], 2: [10], 3: [50]}, [10]) == pytest.approx(0.9090909090909091)
    assert f_measure({1: [], 2: [10], 3: [50]}, []) == pytest.approx(0.8)


def test_match_order_follows_tcpdbench_sets():
    # TCPDBench's set {22, 26, 36} + {0} iterates 0, 26, 36, 22: 26 claims prediction 22
    # (tied with 30, the earlier wins) and 22 is left unmatched. TCPDBench itself gives
    # (4/7, 2/3, 1/2) here; visiting in increasing order gives (6/7, 1, 3/4).
    ann = {"a": [22, 26, 36]}
    assert list({22, 26, 36} | {0}) == [0, 26, 36, 22]  # CPython's set order
    assert f_measure(ann, [22, 30], return_PR=True) == pytest.approx((4 / 7, 2 / 3, 1 / 2))
    assert f_measure(ann, [22, 30], return_PR=True, match_order="ascending") == pytest.approx(
        (6 / 7, 1.0, 3 / 4)
    )
    with pytest.raises(ValueError, match="match_order"):
        f_measure(ann, [22], match_order="random")


def test_f_measure_one_list_is_one_annotator():
    assert f_measure([10, 30], [12, 50], return_PR=True) == f_measure(
        {"x": [10, 30]}, [12, 50], return_PR=True
    )


def test_f_measure_rejects_bad_input():
    with pytest.raises(ValueError, match="margin"):
        f_measure({"a": [1]}, [1], margin=-1)
    with pytest.raises(ValueError, match="at least one annotator"):
        f_measure({}, [1])
    with pytest.raises(ValueError, match="integer positions"):
        f_measure({"a": [1.5]}, [1])


# Outputs of TCPDBench's analysis/scripts/metrics.py (commit 1709f406) on seeded random
# cases: (annotations, predictions, n_obs, (F, P, R), cover).
TCPDBENCH_CASES = [
    (
        {"1": [19], "2": [14, 20, 175]},
        [10, 18, 22, 164, 175],
        215,
        (0.9090909090909091, 0.8333333333333334, 1.0),
        0.8055813953488372,
    ),
    ({"1": [83]}, [46, 143], 163, (0.4, 0.3333333333333333, 0.5), 0.5338996381941167),
    (
        {"1": [49], "2": [51], "3": [56], "4": [53], "5": [55]},
        [53, 101],
        102,
        (0.8, 0.6666666666666666, 1.0),
        0.9485190302536107,
    ),
    ({"1": [], "2": []}, [126, 134], 142, (0.5, 0.3333333333333333, 1.0), 0.8873239436619719),
    (
        {"1": [25, 161], "2": [26, 157], "3": [24, 161], "4": [26, 157]},
        [30, 147, 153, 154, 165],
        225,
        (0.7719298245614035, 0.6666666666666666, 0.9166666666666666),
        0.8812222222222222,
    ),
    (
        {"1": [374], "2": [199, 370], "3": [200, 373], "4": [205, 374]},
        [142, 202, 281, 361],
        398,
        (0.4878048780487805, 0.4, 0.6249999999999999),
        0.5510152111910906,
    ),
    (
        {"1": [41, 63, 248], "2": [39, 68, 251], "3": [68]},
        [36, 49, 68, 254],
        262,
        (0.854368932038835, 0.8, 0.9166666666666666),
        0.883971175880918,
    ),
    (
        {"1": [], "2": [], "3": [], "4": []},
        [34],
        296,
        (0.6666666666666666, 0.5, 1.0),
        0.8851351351351351,
    ),
    (
        {"1": [29], "2": [31], "3": [34], "4": [30]},
        [38, 64, 88],
        156,
        (0.5555555555555556, 0.5, 0.625),
        0.5985998650472335,
    ),
    (
        {"1": [], "2": [53, 65], "3": [50], "4": [57, 63], "5": [55]},
        [48],
        164,
        (0.8235294117647058, 1.0, 0.7000000000000001),
        0.8493166526492851,
    ),
]


@pytest.mark.parametrize("annotations, predictions, n_obs, f1, cover", TCPDBENCH_CASES)
def test_agrees_with_tcpdbench(annotations, predictions, n_obs, f1, cover):
    assert f_measure(annotations, predictions, return_PR=True) == pytest.approx(f1, rel=1e-12)
    assert covering(annotations, predictions, n_obs) == pytest.approx(cover, rel=1e-12)


# --------------------------------------------------------------------------------------
# TCPDBench covering
# --------------------------------------------------------------------------------------

COVER_CASES = [
    ({"a": [5]}, [5], 10, 1.0),
    # two halves, each covered by the whole series with Jaccard 1/2
    ([5], [], 10, 0.5),
    # annotator a: [0,10) best matched by a half (J = 1/2); b: exact. Mean 3/4.
    ({"a": [], "b": [5]}, [5], 10, 0.75),
    # change points at or beyond n_obs, and at 0, cut nothing
    ([0, 5, 10, 12], [5], 10, 1.0),
    # segments 3, 2, 3 against the whole series: (9 + 4 + 9) / 64
    ([3, 5], [], 8, 22 / 64),
    # predicted [0,4),[4,8) vs truth [0,3),[3,5),[5,8): (3 * 3/4 + 2 * 1/5 + 3 * 3/4) / 8
    ([3, 5], [4], 8, 4.9 / 8),
    # TCPDBench's doctests
    ({1: [10, 20], 2: [10], 3: [0, 5]}, [10, 20], 45, 0.7962962962962963),
    ({1: [], 2: [10], 3: [40]}, [10], 45, 0.7954144620811286),
    ({1: [], 2: [10], 3: [40]}, [], 45, 0.8189300411522634),
]


@pytest.mark.parametrize("annotations, predictions, n_obs, expected", COVER_CASES)
def test_covering_hand_cases(annotations, predictions, n_obs, expected):
    assert covering(annotations, predictions, n_obs) == pytest.approx(expected, rel=1e-12)


def test_covering_rejects_bad_input():
    with pytest.raises(ValueError, match=">= 0"):
        covering({"a": [-1, 5]}, [5], 10)
    with pytest.raises(ValueError, match="n_obs"):
        covering({"a": [1]}, [1], 0)


# --------------------------------------------------------------------------------------
# Detection delays, false alarms, average run length
# --------------------------------------------------------------------------------------


def test_detection_summary_two_changes():
    s = detection_summary([30, 104, 112, 180], change_points=[100, 200], n=300)
    assert s["detections"] == [104, None]
    assert s["delays"] == [4, None]
    assert s["false_alarms"] == [30, 112, 180]
    assert (s["n_detected"], s["n_missed"], s["n_false_alarms"]) == (1, 1, 3)
    assert s["mean_delay"] == 4.0
    # pending: 100..104 (5 samples) and the whole missed regime 200..299 (100)
    assert s["no_change_samples"] == 195
    assert s["average_run_length"] == 65.0
    assert s["first_alarm"] == 30


def test_detection_summary_no_change_points():
    s = detection_summary([10, 20], [], 100)
    assert s["false_alarms"] == [10, 20]
    assert s["average_run_length"] == 50.0
    assert s["delays"] == [] and s["mean_delay"] is None


def test_detection_summary_no_alarms():
    s = detection_summary([], [], 100)
    assert s["average_run_length"] == math.inf
    assert s["first_alarm"] is None and s["n_false_alarms"] == 0


def test_detection_summary_alarm_at_change_and_just_before():
    s = detection_summary([49, 50], [50], 100)
    assert s["delays"] == [0] and s["false_alarms"] == [49]
    assert s["no_change_samples"] == 99 and s["average_run_length"] == 99.0


def test_detection_summary_alarm_in_next_regime_does_not_detect_previous_change():
    s = detection_summary([65], [50, 60], 100)
    assert s["detections"] == [None, 65] and s["delays"] == [None, 5]
    # pending: the whole missed regime 50..59 (10) and 60..65 (6)
    assert s["no_change_samples"] == 84
    assert s["average_run_length"] == math.inf


def test_detection_summary_second_alarm_in_regime_is_false():
    s = detection_summary([52, 53, 70], [50], 100)
    assert s["delays"] == [2] and s["false_alarms"] == [53, 70]
    assert s["average_run_length"] == (100 - 3) / 2


def test_detection_summary_ignores_change_point_zero_and_checks_range():
    assert detection_summary([5], [0], 10)["change_points"] == []
    with pytest.raises(ValueError, match="alarms"):
        detection_summary([10], [], 10)
    with pytest.raises(ValueError, match="change points"):
        detection_summary([], [12], 10)


# --------------------------------------------------------------------------------------
# Learners
# --------------------------------------------------------------------------------------


def test_prequential_accuracy_cumulative_and_window():
    y = [1, 0, 1, 1, 0]
    p = [1, 1, 1, 0, 0]
    assert prequential_accuracy(y, p).tolist() == pytest.approx([1, 1 / 2, 2 / 3, 2 / 4, 3 / 5])
    assert prequential_accuracy(y, p, window=2).tolist() == pytest.approx(
        [1, 1 / 2, 1 / 2, 1 / 2, 1 / 2]
    )
    assert prequential_accuracy(y, p, window=10).tolist() == pytest.approx(
        prequential_accuracy(y, p).tolist()
    )
    assert prequential_accuracy([], []).tolist() == []


def test_prequential_accuracy_labels_of_any_kind():
    y = ["cat", np.int64(2), np.array([1, 0]), None]
    p = ["cat", 2.0, np.array([1, 1]), None]
    assert prequential_accuracy(y, p).tolist() == pytest.approx([1, 1, 2 / 3, 2 / 4])


def test_prequential_accuracy_rejects_bad_input():
    with pytest.raises(ValueError, match="length"):
        prequential_accuracy([1], [1, 2])
    with pytest.raises(ValueError, match="window"):
        prequential_accuracy([1], [1], window=0)


def test_accuracy_matrix_from_triples():
    triples = [
        ("A", "A", True),
        ("A", "A", False),
        ("B", "A", False),
        ("B", "B", True),
        ("B", "A", True),
        ("C", "C", True),
    ]
    m = accuracy_matrix(triples)
    assert m.tasks == ["A", "B", "C"]
    np.testing.assert_array_equal(m.counts, [[2, 0, 0], [2, 1, 0], [0, 0, 1]])
    np.testing.assert_array_equal(
        m.R, [[0.5, np.nan, np.nan], [0.5, 1.0, np.nan], [np.nan, np.nan, 1.0]]
    )
    # an explicit order; tasks outside it are left out
    m = accuracy_matrix(triples, tasks=["B", "A"])
    np.testing.assert_array_equal(m.R, [[1.0, 0.5], [np.nan, 0.5]])


def test_accuracy_matrix_from_a_stream():
    stream = [
        {"task": 0, "y": 1, "y_pred": 1},
        {"task": 0, "y": 1, "y_pred": 0},
        {"task": 0, "y": None, "y_pred": 0},  # unlabelled: skipped
        {"y": 1, "y_pred": 1},  # no task: skipped
        {"task": 1, "y": 0, "y_pred": 0},
        {"task": 0, "y": 1, "y_pred": 1, "train": False},  # evaluated after training task 1
        {"task": 0, "y": 1, "y_pred": 0, "train": False},
        {"task": 1, "correct": True, "trained_through": 0},  # explicit row
    ]
    assert evaluation_triples(stream) == [
        (0, 0, True),
        (0, 0, False),
        (1, 1, True),
        (1, 0, True),
        (1, 0, False),
        (0, 1, True),
    ]
    m = accuracy_matrix(stream)
    assert m.tasks == [0, 1]
    np.testing.assert_array_equal(m.R, [[0.5, 1.0], [0.5, 1.0]])
    np.testing.assert_array_equal(m.counts, [[2, 1], [2, 1]])


def test_forgetting_and_average_accuracy_hand_matrix():
    R = [[0.9, None, None], [0.5, 0.8, None], [0.6, 0.7, 0.95]]
    # f_0 = max(0.9, 0.5) - 0.6 = 0.3; f_1 = 0.8 - 0.7 = 0.1
    assert forgetting(R) == pytest.approx(0.2)
    assert average_accuracy(R) == pytest.approx(0.75)
    # a task measured before it was trained does not count
    assert forgetting([[0.5, 1.0], [0.5, 0.6]]) == pytest.approx(0.0)
    # improving on an old task gives negative forgetting (backward transfer)
    assert forgetting(np.array([[0.5, np.nan], [0.7, 0.9]])) == pytest.approx(-0.2)


def test_forgetting_undefined_cases():
    assert math.isnan(forgetting([[0.9]]))
    assert math.isnan(forgetting([[0.9, None], [None, 0.8]]))
    assert math.isnan(average_accuracy([[None]]))
    assert average_accuracy(accuracy_matrix([("A", "A", True)])) == 1.0
    with pytest.raises(ValueError, match="square"):
        forgetting([[1.0, 0.5]])
