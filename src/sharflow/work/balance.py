"""Bin-packing of work units onto parts or ranks: greedy longest-processing-time-first (LPT)."""

import heapq
from collections.abc import Hashable, Mapping


def lpt_assign(costs: Mapping[Hashable, float], bins: int) -> list[list[Hashable]]:
    """Assign every unit to one of `bins` bins so that the largest bin load stays small.

    Units are taken by cost, largest first (ties by key), each onto the currently least-loaded
    bin (ties by bin index), which is within 4/3 of the optimum. Deterministic: the same costs
    give the same assignment. Each bin's units are returned sorted by key.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    heap = [(0.0, b) for b in range(bins)]
    out: list[list[Hashable]] = [[] for _ in range(bins)]
    for key in sorted(costs, key=lambda k: (-costs[k], k)):
        load, b = heapq.heappop(heap)
        out[b].append(key)
        heapq.heappush(heap, (load + costs[key], b))
    return [sorted(units) for units in out]


def loads(assignment: list[list[Hashable]], costs: Mapping[Hashable, float]) -> list[float]:
    """Total cost per bin."""
    return [float(sum(costs[k] for k in units)) for units in assignment]


def imbalance(bin_loads: list[float]) -> float:
    """max load / mean load (1.0 is perfect balance)."""
    mean = sum(bin_loads) / len(bin_loads)
    return max(bin_loads) / mean if mean > 0 else 1.0
