"""Share a partition budget by weight, and cut a weighted run into spans of equal weight.

Both partitioners plan the same way: a budget of partitions is shared among
groups (the ``_id`` brackets, the runs of same-shard chunks, the chunks of a
sample) by their weight, and each group's ordered items (ranges, chunks) are
cut into that many contiguous spans of about equal weight. Both steps live
here, once, with one tie-break rule: **on a tie, the earlier one wins** — the
group listed first gets the part, and a cut that lies exactly halfway between
two item boundaries takes the earlier boundary. The result is the same on
every run and every machine, and no group or span is favoured beyond a tie.

Pure: no database, no values of documents (only weights and counts).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Sequence

__all__ = ["allocate", "equal_weight_spans"]


def allocate(weights: Sequence[float], budget: int, *, capacities: Sequence[int]) -> list[int]:
    """Share ``budget`` parts among groups: one each, the rest by weight, none past its capacity.

    Highest averages with Adams' divisors: each extra part goes to the group
    whose weight per part it already holds (weight / current parts) is largest,
    so a heavy group is cut before a light one; on equal weight per part, the
    earlier group. Every group gets one part even when
    ``budget`` is smaller than their number; fewer than ``budget`` parts in
    all when the capacities run out.

    :param weights: each group's weight (expected documents, chunks).
    :param capacities: the most parts each group can be cut into (its items).
    """
    parts = [1] * len(capacities)
    heap = [(-weight, index) for index, weight in enumerate(weights) if capacities[index] > 1]
    heapq.heapify(heap)
    extra = budget - len(parts)
    while extra > 0 and heap:
        _, index = heapq.heappop(heap)
        parts[index] += 1
        extra -= 1
        if parts[index] < capacities[index]:
            heapq.heappush(heap, (-weights[index] / parts[index], index))
    return parts


def equal_weight_spans(weights: Sequence[float], parts: int) -> list[tuple[int, int]]:
    """Cut items of ``weights`` into ``parts`` non-empty contiguous spans of about equal weight.

    Returns ``[start, end)`` index pairs, in order, covering every item once.
    Each cut is the item boundary nearest its ideal place (``j / parts`` of
    the total weight), the earlier boundary when two are as near, then moved
    as little as keeps every span non-empty. ``parts`` is held between 1 and
    the number of items; items that all weigh nothing count alike.
    """
    count = len(weights)
    parts = max(1, min(parts, count))
    if sum(weights) <= 0:
        weights = [1.0] * count
    prefix = list(itertools.accumulate(weights))
    total = prefix[-1] if prefix else 0.0
    cuts = [0]
    for index in range(1, parts):
        target = total * index / parts
        # The smallest prefix reaching the target, or the one just before it if as near.
        reach = bisect.bisect_left(prefix, target) + 1
        if reach > 1 and target - prefix[reach - 2] <= prefix[min(reach, count) - 1] - target:
            reach -= 1
        cut = min(max(reach, cuts[-1] + 1), count - (parts - index))
        cuts.append(cut)
    cuts.append(count)
    return list(itertools.pairwise(cuts))
