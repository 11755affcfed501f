"""Which k entries torch.topk picks on CPU when some scores tie (pruning masks depend on it).

aten's CPU topk (ATen/native/TopKImpl.h) pairs each value with its index and runs libstdc++'s std::partial_sort
when k * 64 <= n, else std::nth_element, comparing values only; the k pairs left in front are the result. Among
equal values neither algorithm is stable, so which of the tied indices survive depends on their swaps: all-ones
[4] with k=2 smallest gives indices {2, 3}, but column 0-norms [3, 3, 3, 3] with k=3 largest give {0, 2, 3}.
A stable argsort (earlier index first) disagreed with torch's masks whenever ties straddled the cut.

Scores without such a tie have one answer, found with numpy. Otherwise the two algorithms are replayed:
introselect's Hoare partitions are computed with numpy (each one is a pairing of the scan stops, below), the
rest (median of three, the final insertion sort, the heap of heap_select) in Python on few elements.
"""
import numpy as np


def _keys(scores, largest):
    """Keys ordered as torch's comparator orders the scores, so that it is always `key[x] < key[y]`: the scores
    themselves, negated for largest; with a NaN, integer ranks instead, NaN above everything (it counts as the
    largest, and as the last when looking for the smallest)."""
    keys = np.array(scores, dtype=np.float64).reshape(-1)
    nan = np.isnan(keys)
    if nan.any():
        ranks = np.zeros(keys.size, dtype=np.int64)
        if not nan.all():
            ranks[~nan] = np.unique(keys[~nan], return_inverse=True)[1].reshape(-1)
            ranks[nan] = ranks[~nan].max() + 1
        keys = ranks
    return -keys if largest else keys


def topk_indices(scores, k, largest):
    """The indices (into the flattened `scores`) that torch.topk(scores, k, largest=largest) returns, as a set
    (in no particular order)."""
    keys = _keys(scores, largest)
    n = keys.size
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n:
        return np.arange(n)
    kth = np.partition(keys, k - 1)[k - 1]
    below = np.flatnonzero(keys < kth)
    tied = np.flatnonzero(keys == kth)
    if below.size + tied.size == k:  # no tie across the cut: the set is the same whatever the algorithm
        return np.sort(np.concatenate([below, tied]))
    order = np.arange(n)
    if k * 64 <= n:
        _heap_select(keys, order, 0, k, n)
    else:
        _introselect(keys, order, k - 1, n)
    return np.sort(order[:k])


def _swap(keys, order, i, j):
    keys[i], keys[j] = keys[j], keys[i]
    order[i], order[j] = order[j], order[i]


def _move_median_to_first(keys, order, result, a, b, c):
    ka, kb, kc = keys[a], keys[b], keys[c]
    if ka < kb:
        pick = b if kb < kc else (c if ka < kc else a)
    else:
        pick = a if ka < kc else (c if kb < kc else b)
    _swap(keys, order, result, pick)


def _unguarded_partition(keys, order, first, last):
    """std::__unguarded_partition over [first + 1, last) around keys[first]. Its left scan stops at keys >= the
    pivot and its right scan at keys <= it; every swap puts both elements behind the scans, so the stops are
    those of the untouched array, paired in order (i-th from the left with i-th from the right) until they
    cross. The cut is where the crossing left scan stops: its next stop, or the last right stop if that comes
    first (the element swapped there stops it)."""
    pivot = keys[first]
    seg = keys[first + 1:last]
    lefts = np.flatnonzero(seg >= pivot) + first + 1
    rights = (np.flatnonzero(seg <= pivot) + first + 1)[::-1]
    m = min(lefts.size, rights.size)
    crossed = np.flatnonzero(lefts[:m] >= rights[:m])
    m = int(crossed[0]) if crossed.size else m
    if m:
        lo, hi = lefts[:m], rights[:m]
        keys[lo], keys[hi] = keys[hi], keys[lo].copy()
        order[lo], order[hi] = order[hi], order[lo].copy()
    cut = int(lefts[m]) if m < lefts.size else last
    return min(cut, int(rights[m - 1])) if m else cut


def _introselect(keys, order, nth, n):
    """std::nth_element (libstdc++'s __introselect) on [0, n)."""
    first, last = 0, n
    depth = 2 * (n.bit_length() - 1)
    while last - first > 3:
        if depth == 0:
            _heap_select(keys, order, first, nth + 1, last)
            _swap(keys, order, first, nth)
            return
        depth -= 1
        mid = first + (last - first) // 2
        _move_median_to_first(keys, order, first, first + 1, mid, last - 1)
        cut = _unguarded_partition(keys, order, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    for i in range(first + 1, last):  # std::__insertion_sort
        val, idx = keys[i], order[i]
        if val < keys[first]:
            keys[first + 1:i + 1], order[first + 1:i + 1] = keys[first:i].copy(), order[first:i].copy()
            keys[first], order[first] = val, idx
        else:
            j = i
            while val < keys[j - 1]:
                keys[j], order[j] = keys[j - 1], order[j - 1]
                j -= 1
            keys[j], order[j] = val, idx


def _heap_select(keys, order, first, middle, last):
    """std::__heap_select: a max-heap of [first, middle), and every later element below its top replaces the
    top (std::__pop_heap). The later elements that get in are found with numpy, a window at a time."""
    heap = [(keys[i], int(order[i])) for i in range(first, middle)]
    size = len(heap)
    for parent in range((size - 2) // 2, -1, -1):
        _adjust_heap(heap, parent, size, heap[parent])
    i = middle
    while i < last and size:
        window = keys[i:min(last, i + 4096)]
        hits = np.flatnonzero(window < heap[0][0])
        if not hits.size:
            i += window.size
            continue
        i += int(hits[0])
        value = (keys[i], int(order[i]))
        keys[i], order[i] = heap[0]
        _adjust_heap(heap, 0, size, value)
        i += 1
    for j, (key, idx) in enumerate(heap):
        keys[first + j], order[first + j] = key, idx


def _adjust_heap(heap, hole, size, value):
    """std::__adjust_heap followed by std::__push_heap, on (key, index) pairs compared by key."""
    top = hole
    child = hole
    while child < (size - 1) // 2:
        child = 2 * (child + 1)
        if heap[child][0] < heap[child - 1][0]:
            child -= 1
        heap[hole] = heap[child]
        hole = child
    if size % 2 == 0 and child == (size - 2) // 2:
        child = 2 * (child + 1)
        heap[hole] = heap[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and heap[parent][0] < value[0]:
        heap[hole] = heap[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap[hole] = value
