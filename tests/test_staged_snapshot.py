"""The staged host snapshot's bookkeeping (issue 41 item 5: a whole-state save beside 34 GB):
storages laid end to end in the host pool, cut at the staging buffers' size, copied out and back
through two slots. Run on the CPU with real tensors and a small slot size, so pieces cross
window ends often; the copies are plain ``copy_`` where the worker's are CUDA copies on a side
stream, and ``mark``/``wait`` record the order the worker's events would enforce."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from nsight_magic.script.cuda_save import (  # noqa: E402
    StageCopies,
    stage_in,
    stage_out,
    staged_windows,
)

SLOT = 64


def _sources(sizes: list[int], seed: int) -> list[object]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=gen, dtype=torch.uint8) for n in sizes]


def test_windows_never_cross_a_slot_end_and_cover_every_byte_once() -> None:
    sources = _sources([10, 200, 1, 54, 64, 3], seed=1)
    windows = staged_windows(sources, start=128, size=SLOT)
    spans = [(at, at + int(src.numel())) for _, _, pieces in windows for src, at in pieces]
    assert spans[0][0] == 128 and spans[-1][1] == 128 + 332
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # end to end
    for lo, hi, pieces in windows:
        assert lo // SLOT == (hi - 1) // SLOT  # one window each
        assert (lo, hi) == (pieces[0][1], pieces[-1][1] + int(pieces[-1][0].numel()))
    assert [w[0] // SLOT for w in windows] == sorted({w[0] // SLOT for w in windows})


@pytest.mark.parametrize("sizes", [[1], [64], [65, 3, 200], [7] * 40, [1000, 1, 1000]])
def test_out_and_back_through_two_slots_is_bit_identical(sizes: list[int]) -> None:
    first, second = _sources(sizes, seed=2), _sources(sizes[::-1], seed=3)
    expected = [s.clone() for s in first + second]
    # two devices: the second's sources start on a window of their own, as _save_cuda lays them
    start2 = -(-sum(sizes) // SLOT) * SLOT
    plans = [staged_windows(first, 0, SLOT), staged_windows(second, start2, SLOT)]
    host = torch.zeros(start2 * 2 + SLOT, dtype=torch.uint8)
    slots = [torch.full((SLOT,), 7, dtype=torch.uint8) for _ in range(2)]
    order: list[tuple[str, int]] = []

    def dma(dst: object, src: object) -> None:
        dst.copy_(src)  # type: ignore[attr-defined]

    copies = StageCopies(slots, dma, lambda s: order.append(("mark", s)),
                         lambda s: order.append(("wait", s)))  # fmt: skip
    for windows in plans:
        stage_out(windows, host, copies)
    for src in first + second:
        src.zero_()
    for windows in plans:
        stage_in(windows, host, copies)
    assert all(torch.equal(a, b) for a, b in zip(first + second, expected, strict=True))
    # a slot is waited on only after its copies were marked, and the two alternate
    marked: set[int] = set()
    for what, slot in order:
        if what == "mark":
            marked.add(slot)
        else:
            assert slot in marked


def test_the_host_pool_holds_each_source_at_its_offset() -> None:
    sources = _sources([100, 30], seed=4)
    windows = staged_windows(sources, 0, SLOT)
    host = torch.zeros(192, dtype=torch.uint8)
    slots = [torch.empty(SLOT, dtype=torch.uint8) for _ in range(2)]
    stage_out(windows, host, StageCopies(slots, lambda d, s: d.copy_(s), lambda s: None,
                                         lambda s: None))  # fmt: skip
    assert torch.equal(host[:100], sources[0]) and torch.equal(host[100:130], sources[1])
    assert not bool(host[130:].any())  # nothing beyond the last source is written
