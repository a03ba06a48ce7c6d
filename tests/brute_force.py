"""Brute-force references shared by the statistics tests."""

import itertools

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
