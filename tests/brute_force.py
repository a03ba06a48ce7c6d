"""Brute-force references shared by the statistics tests."""

import itertools
import math

import numpy as np


def permutation_p(a, b, delta=0.0):
    """The case permutation test of "B - A = delta" by enumerating every split of the cases."""
    pooled = list(a) + [x - delta for x in b]
    observed = abs(np.mean(b) - delta - np.mean(a))
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        side_a = [pooled[i] for i in chosen]
        side_b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += abs(np.mean(side_b) - np.mean(side_a)) >= observed - 1e-12
        total += 1
    return hits / total


def corrected_score_bounds(x, n, z=1.959963984540054):
    """Wilson's interval with continuity correction solved from its defining equation,
    |x/n - p| - 1/(2n) = z·sqrt(p(1-p)/n), by root finding (not the closed form under test)."""
    from scipy.optimize import brentq

    def gap(p):
        return abs(x / n - p) - 1 / (2 * n) - z * math.sqrt(p * (1 - p) / n)

    low = 0.0 if x == 0 else brentq(gap, 1e-12, x / n - 1 / (2 * n) + 1e-12 if x / n > 1 / (2 * n) else x / n)
    high = 1.0 if x == n else brentq(gap, min(1 - 1e-12, x / n + 1 / (2 * n)), 1 - 1e-12)
    return low, high
