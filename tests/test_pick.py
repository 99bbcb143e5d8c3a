"""Choosing the winner among re-timed leaders (tilecraft/autotune/pick.py)."""

from __future__ import annotations

import tilecraft as tc
from tilecraft.autotune.pick import MAX_MARGIN, MIN_MARGIN, margin, pick, relative, scores

A, B, C = (tc.Config(block_sizes=[s]) for s in (16, 32, 64))


def test_drift_between_rounds_cancels() -> None:
    # the GPU slows by 10% then 20% in later rounds: every leader alike
    samples = {A: [1.00, 1.10, 1.20], B: [0.95, 1.045, 1.14]}
    rel = relative(samples)
    assert all(abs(x - rel[A][0]) < 1e-9 for x in rel[A])
    assert scores(samples)[B] < scores(samples)[A]
    assert pick(samples, [A, B]) == B  # a steady 5% lead counts


def test_a_lead_within_the_noise_goes_to_the_search_ranking() -> None:
    samples = {A: [1.00, 1.03, 0.99, 1.02, 1.00], B: [1.01, 0.99, 1.00, 1.00, 0.99]}
    assert scores(samples)[B] < scores(samples)[A]
    assert pick(samples, [A, B]) == A  # B's lead is within the rounds' spread
    assert pick(samples, [B, A]) == B


def test_one_lucky_round_does_not_win() -> None:
    samples = {A: [1.0, 1.0, 1.0], B: [0.8, 1.05, 1.05], C: [1.1, 1.1, 1.1]}
    assert pick(samples, [C, B, A]) == A


def test_margin_is_bounded_and_nothing_timed_gives_none() -> None:
    assert margin({A: [1.0, 1.0], B: [2.0, 2.0]}) == MIN_MARGIN
    assert margin({A: [1.0, 2.0], B: [2.0, 1.0]}) == MAX_MARGIN
    assert pick({}, [A]) is None
    assert pick({A: [1.0], B: [0.9]}, [A, B]) == B  # one round: the fastest, beyond 0.5%
    assert pick({A: [1.0], B: [0.999]}, [A, B]) == A
