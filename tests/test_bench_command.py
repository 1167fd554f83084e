"""bench's command core: option parsing that the CLI relies on, and the model forward estimate."""

from __future__ import annotations

import pytest

from mpsup.bench.command import parse_resolution
from mpsup.bench.figures import model_forward_estimate
from mpsup.errors import UserError


def test_resolution_parses_a_side_or_width_by_height() -> None:
    assert parse_resolution(None) is None
    assert parse_resolution("1024") == 1024
    assert parse_resolution("832x480") == (832, 480)


@pytest.mark.parametrize("bad", ["", "big", "0", "1x2x3", "-5", "99999", "12.5"])
def test_bad_resolution_is_one_line(bad: str) -> None:
    with pytest.raises(UserError, match="--resolution"):
        parse_resolution(bad)


def _workload(name: str, median: float, tags: tuple[str, ...] = ()) -> dict:
    return {
        "name": name,
        "count": 2,
        "tags": list(tags),
        "envs": {"baseline": {"median": median, "ci_low": median * 0.9, "ci_high": median * 1.1}},
    }


def test_forward_estimate_does_not_count_an_alternative_path_twice() -> None:
    record = {
        "model": {"path": "m"},
        "workloads": [
            _workload("linear/bf16", 1e-3),
            _workload("fp8/upcast", 2e-4),
            _workload("fp8/scaled_mm", 5e-4, ("fp8", "alternative")),
        ],
    }
    est = model_forward_estimate(record, "baseline")
    assert est is not None
    assert est["estimate"] == pytest.approx(2 * (1e-3 + 2e-4))
    assert est["low"] == pytest.approx(0.9 * est["estimate"])
