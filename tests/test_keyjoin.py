"""analysis.keyjoin: the pair join used by the nsys loaders and the NVTX projection gives what a
plain dictionary lookup gives (first reference row per pair, -1 when none)."""

from __future__ import annotations

import numpy as np
import pytest

from nsight_magic.analysis.keyjoin import first_match, pack_pairs, take_matched


def reference(ref_a, ref_b, query_a, query_b) -> np.ndarray:
    first: dict[tuple[int, int], int] = {}
    for j, pair in enumerate(zip(ref_a.tolist(), ref_b.tolist(), strict=True)):
        first.setdefault(pair, j)
    pairs = zip(query_a.tolist(), query_b.tolist(), strict=True)
    return np.array([first.get(p, -1) for p in pairs], dtype=np.int64)


@pytest.mark.parametrize("seed", range(20))
def test_first_match_equals_a_dict_lookup(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_ref, n_query = rng.integers(0, 300, 2)
    a_hi, b_hi = rng.integers(1, 40, 2)
    ref_a, ref_b = rng.integers(-1, a_hi, n_ref), rng.integers(-1, b_hi, n_ref)
    query_a, query_b = rng.integers(-2, a_hi + 2, n_query), rng.integers(-2, b_hi + 2, n_query)
    if seed % 2:  # sorted references take the no-sort path
        order = np.lexsort((ref_b, ref_a))
        ref_a, ref_b = ref_a[order], ref_b[order]
    got = first_match(ref_a, ref_b, query_a, query_b)
    np.testing.assert_array_equal(got, reference(ref_a, ref_b, query_a, query_b))
    assert got.dtype == np.int64


def test_ids_too_wide_to_pack_use_the_general_join() -> None:
    huge = np.array([-(1 << 62), 1 << 62, 5, 5])
    ref_b = np.array([1, 2, 3, 3])
    assert pack_pairs(huge, ref_b) is None
    query_a, query_b = np.array([5, 1 << 62, 7, -(1 << 62)]), np.array([3, 2, 3, 2])
    got = first_match(huge, ref_b, query_a, query_b)
    np.testing.assert_array_equal(got, [2, 1, -1, -1])


def test_pack_pairs_is_one_scale_for_all_pairs() -> None:
    keys = pack_pairs(np.array([1, 2]), np.array([-1, 7]), (np.array([2, 1]), np.array([7, -1])))
    assert keys is not None
    ref, query = keys
    np.testing.assert_array_equal(ref, query[::-1])
    assert len(set(ref.tolist())) == 2


def test_empty_inputs() -> None:
    empty = np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(first_match(empty, empty, np.array([1]), np.array([2])), [-1])
    assert first_match(np.array([1]), np.array([2]), empty, empty).shape == (0,)


def test_take_matched_fills_the_unmatched() -> None:
    tids = np.array([10, 20, 30])
    rows = first_match(
        np.array([1, 1, 2]), np.array([5, 6, 5]), np.array([1, 9, 2]), np.array([6, 9, 5])
    )
    got = take_matched(tids, rows)
    np.testing.assert_array_equal(got, [20, -1, 30])
    assert got.dtype == np.int64
    # no reference rows at all (a report without CUDA API calls): every query is unmatched
    none = first_match(np.zeros(0), np.zeros(0), np.array([1, 2]), np.array([5, 6]))
    np.testing.assert_array_equal(take_matched(np.zeros(0, dtype=np.int64), none), [-1, -1])
