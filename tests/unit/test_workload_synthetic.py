"""Seeded chat-like workloads: lognormal lengths, gamma (bursty) arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from abtui.errors import UsageError
from abtui.sim.engine import count_prompt_tokens
from abtui.workload.synthetic import ChatShape, chat_items, gamma_offsets, lognormal_lengths


def test_same_seed_same_items_other_seed_other_items():
    a, b = chat_items(200, 5.0, seed=3), chat_items(200, 5.0, seed=3)
    assert a == b
    c = chat_items(200, 5.0, seed=4)
    assert [i.n_input for i in a] != [i.n_input for i in c]
    assert len({i.prompt.split(" ", 1)[0] for i in a}) == 200  # distinct prefixes


def test_lengths_are_lognormal_around_the_median_and_clamped():
    shape = ChatShape(input_median=400, input_sigma=0.8, output_median=120, output_sigma=0.5)
    items = chat_items(4000, 10.0, seed=0, shape=shape)
    n_in = np.array([i.n_input for i in items])
    n_out = np.array([i.max_tokens for i in items])
    assert np.median(n_in) == pytest.approx(400, rel=0.06)
    assert np.median(n_out) == pytest.approx(120, rel=0.06)
    # the log-space spread is sigma: P90/P50 = exp(1.2816 sigma)
    assert np.percentile(n_in, 90) / np.median(n_in) == pytest.approx(np.exp(1.2816 * 0.8), rel=0.1)
    assert n_in.min() >= 16 and n_in.max() <= 8192 and n_out.min() >= 8 and n_out.max() <= 1024
    # prompts are as long as they say (the sim counts whitespace words)
    assert all(count_prompt_tokens(i.prompt) == i.n_input for i in items[:300])
    rng = np.random.default_rng(1)
    assert set(lognormal_lengths(500, 100, 3.0, 50, 60, rng)) <= set(range(50, 61))


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_arrivals_have_the_rate_and_burstiness(cv):
    off = np.array(gamma_offsets(20000, 8.0, cv, np.random.default_rng(5)))
    assert off[0] == 0 and (np.diff(off) >= 0).all()
    gaps = np.diff(off)
    assert 1 / gaps.mean() == pytest.approx(8.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_bad_parameters_are_usage_errors():
    with pytest.raises(UsageError):
        gamma_offsets(10, 0.0, 1.0, np.random.default_rng(0))
    with pytest.raises(UsageError):
        gamma_offsets(10, 1.0, 0.0, np.random.default_rng(0))
    with pytest.raises(UsageError):
        lognormal_lengths(10, 0, 1.0, 1, 10, np.random.default_rng(0))
    assert gamma_offsets(0, 1.0, 1.0, np.random.default_rng(0)) == []
