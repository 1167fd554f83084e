"""When to stop warming up and when to stop sampling. Pure functions of samples and elapsed time."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from mpsup.stats import median_ci


@dataclass(frozen=True)
class SamplingPolicy:
    budget_s: float = 1.0  # per workload and environment, warmup included
    target_rel_ci: float = 0.01  # stop once the median's 95% CI is within +-1%
    target_sample_s: float = 0.01  # one sample: long against clock resolution and sync cost
    min_samples: int = 10
    max_samples: int = 2000
    warmup_window: int = 3
    warmup_tolerance: float = 0.02
    warmup_share: float = 0.3  # of the budget, at most
    batch: int = 5

    def warmup_settled(self, samples: list[float], elapsed_s: float) -> bool:
        """Settled when the median of the last window is within tolerance of the window before it."""
        w = self.warmup_window
        if elapsed_s >= self.warmup_share * self.budget_s:
            return True
        if len(samples) < 2 * w:
            return False
        last = median(samples[-w:])
        before = median(samples[-2 * w : -w])
        return abs(last - before) <= self.warmup_tolerance * before

    def should_stop(self, samples: list[float], elapsed_s: float) -> tuple[bool, str]:
        n = len(samples)
        if n >= self.max_samples:
            return True, "max-samples"
        if n >= self.min_samples and median_ci(samples).rel_half_width <= self.target_rel_ci:
            return True, "converged"
        # Even a tiny budget yields six samples: the fewest with a bounded 95% interval of the median.
        if elapsed_s >= self.budget_s and n >= min(self.min_samples, 6):
            return True, "budget"
        return False, ""
