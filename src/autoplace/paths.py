"""Longest paths through a graph's CSR arrays (numba): the critical path and each op's earliest start.

Graph algorithms the IR and the bounds share; compiled once and cached like the simulator's kernel.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["longest_path", "earliest_starts"]


def njit_on_first_call(fn):
    """``fn`` compiled by numba (``njit``, cached on disk) at its first call: numba's import (0.3 s here) is
    paid by the work that needs it, not by ``import autoplace``."""
    compiled = None

    @functools.wraps(fn)
    def call(*args):
        nonlocal compiled
        if compiled is None:
            from numba import njit

            compiled = njit(cache=True)(fn)
        return compiled(*args)

    return call


@njit_on_first_call
def longest_path(order, in_ptr, in_pair, pair_tensor, tensor_src, weight):
    """Longest node-weighted path through the DAG (the critical path with free transfers)."""
    n = order.shape[0]
    done = np.zeros(n, np.float64)
    best = 0.0
    for j in range(n):
        i = order[j]
        s = 0.0
        for q in range(in_ptr[i], in_ptr[i + 1]):
            p = tensor_src[pair_tensor[in_pair[q]]]
            if done[p] > s:
                s = done[p]
        done[i] = s + weight[i]
        if done[i] > best:
            best = done[i]
    return best


@njit_on_first_call
def earliest_starts(order, in_ptr, in_pair, pair_tensor, tensor_src, weight, pair_delay):
    """Each op's earliest start when op ``i`` takes ``weight[i]`` and the input pair ``q`` arrives
    ``pair_delay[q]`` after its producer ends (longest path to the op, exclusive)."""
    n = order.shape[0]
    start = np.zeros(n, np.float64)
    for j in range(n):
        i = order[j]
        s = 0.0
        for q in range(in_ptr[i], in_ptr[i + 1]):
            p = tensor_src[pair_tensor[in_pair[q]]]
            a = start[p] + weight[p] + pair_delay[in_pair[q]]
            if a > s:
                s = a
        start[i] = s
    return start
