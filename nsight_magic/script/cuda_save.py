"""A CUDA snapshot of the memory a re-run may change, and putting it back: on its device when
there is room beside it, else in host memory through two page-locked staging buffers (a pool of
ordinary huge-page memory, faulted in once and kept for the cell's runs). ``shared_objects.
preserved`` decides what to keep; this module keeps it (``_save_cuda``) and records each
snapshot in ``KEPT``.

A real module pasted into the script by ``build_script`` before ``shared_objects``. Standard
library only at import time; torch is imported when a worker has CUDA memory to keep.
"""

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# --- module only: nothing of the header is used here; the script pastes the rest as it is ---
# --- end module only ---

# a device-side snapshot needs this much room left beside it (the larger of the two), so the
# run it protects still has memory to work in
SNAPSHOT_MARGIN_BYTES = 1 << 30
SNAPSHOT_MARGIN_SHARE = 0.05
# of the host memory available, what a staged snapshot may take (its pool stays faulted in
# while the worker works: taking it all would starve the notebook's process)
HOST_SHARE = 0.75
# A snapshot that does not fit on its device goes to ordinary host memory on huge pages, faulted
# in once (the pool, kept for the cell's runs: its warm-up and its re-run) and filled and read
# back through two page-locked STAGE_CHUNK buffers, registered only while copying: DMA into one
# while the CPU copies the other. Page-locked memory alive while ncu replays a kernel is backed
# up with the device memory: a 36.5 GB pinned snapshot made one GEMM's replay take 45 s instead
# of 3.9 s, and pinning it took 6.8-16 s; staged, the pool faults in in 1.2-1.3 s and copies go
# at 20-27 GB/s (1.44 s out, 1.36 s back; under ncu 1.84 + 2.16 s), the GEMM's replay 4.45 s
# (``tools/fixtures/probes/ncu_replay_probe.py``, the lent H100, 2026-11-28).
STAGE_CHUNK = 256 << 20
# [(mapping, its bytes as a uint8 tensor)]: at most one, replaced by a larger one when a
# snapshot needs more; handed back when the worker goes idle (``release_host_buffers``): an
# idle nsys worker that kept a 34 GB pool left ncu's own backup of a drill-down's memory too
# little host memory, and the ncu worker was killed (the H100, 2026-11-28)
_HOST_POOL: list[tuple[Any, Any]] = []
_STAGE: list[tuple[Any, Any]] = []  # the two staging buffers' mapping and tensor, kept
# each CUDA snapshot of the cell's runs (warm-up, re-run): where it went, its bytes and the
# seconds its save and its restore took (the run's status ``kept``: what repeating it cost)
KEPT: list[dict[str, Any]] = []


def snapshot_place(
    need: int, free: int, total: int, host_available: int | None, replayed: bool = False
) -> str:
    """Where a snapshot of ``need`` bytes of one device's memory goes: "device" when that
    device has room for it and a margin (1 GiB or 5 % of it, the larger) and, under ncu's
    kernel replay (``replayed``), room left for ncu's own backup of every allocation, the
    snapshot's included (else ncu backs device memory up in system memory: a drill-down
    beside 56 GB took 66 s instead of 3), else "staged" (the host pool, ``STAGE_CHUNK``; its
    own bytes counted in ``host_available``) when that takes at most ``HOST_SHARE`` of the
    host's available memory (None: unknown), else "host" (a host tensor per storage, faulted
    in by the copies: slower, but nothing is held beyond the snapshot itself)."""
    margin = max(SNAPSHOT_MARGIN_BYTES, int(total * SNAPSHOT_MARGIN_SHARE))
    replay_room = (total - free) + need if replayed else 0
    if free >= need + margin + replay_room:
        return "device"
    if host_available is None or need <= host_available * HOST_SHARE:
        return "staged"
    return "host"


def _host_available() -> int | None:
    """Bytes the host can still give (MemAvailable) plus the pool's, None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    pool = sum(int(host.numel()) for _, host in _HOST_POOL)
                    return int(line.split()[1]) * 1024 + pool
    except (OSError, ValueError, IndexError):
        return None
    return None


def _storage_bytes(torch: Any, storage: Any) -> Any:
    """A storage as a flat uint8 tensor over its memory (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _huge_page_memory(torch: Any, size: int) -> tuple[Any, Any]:
    """``size`` bytes of anonymous host memory advised to use huge pages: (mapping, tensor)."""
    import mmap

    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        area.madvise(mmap.MADV_HUGEPAGE)
    return area, torch.frombuffer(area, dtype=torch.uint8)


def _host_pool(torch: Any, need: int) -> Any:
    """The pool, at least ``need`` bytes, every page faulted in: a copy into fresh pages went
    at 1.3 GB/s (36.5 GB in 27 s), into faulted-in ones at 25 GB/s."""
    if _HOST_POOL and _HOST_POOL[0][1].numel() >= need:
        return _HOST_POOL[0][1]
    _close_host_memory(_HOST_POOL)
    area, host = _huge_page_memory(torch, -(-need // STAGE_CHUNK) * STAGE_CHUNK)
    host.zero_()  # on torch's threads
    _HOST_POOL.append((area, host))
    return host


def _close_host_memory(*held: list[tuple[Any, Any]]) -> None:
    """Unmap what the lists in ``held`` hold (once no view of it is left: views a finished
    run's closures held go with one garbage collection)."""
    import gc

    if not any(held):
        return
    for mappings in held:
        mappings.clear()
    gc.collect()


@contextlib.contextmanager
def _staging(torch: Any) -> Iterator[list[Any] | None]:
    """The two staging buffers, page-locked for one save or restore, then unlocked again (see
    ``STAGE_CHUNK``); None where CUDA refuses to register them (the copies then go straight
    to pageable memory, as fast as the driver's own staging: 7.9 GB/s back on the H100)."""
    if not _STAGE:
        _STAGE.append(_huge_page_memory(torch, 2 * STAGE_CHUNK))
    buffers = _STAGE[0][1]
    base = int(buffers.data_ptr())
    cudart = torch.cuda.cudart()
    registered: list[int] = []
    try:
        with contextlib.suppress(Exception):  # no registration here: straight copies
            for i in range(2):
                if int(cudart.cudaHostRegister(base + i * STAGE_CHUNK, STAGE_CHUNK, 0)):
                    break
                registered.append(i)
        slots = [buffers[:STAGE_CHUNK], buffers[STAGE_CHUNK:]]
        yield slots if len(registered) == 2 else None
    finally:
        for i in registered:
            cudart.cudaHostUnregister(base + i * STAGE_CHUNK)


Piece = tuple[Any, int]  # (a flat uint8 view of device memory, its offset in the host pool)
Window = tuple[int, int, list[Piece]]  # host bytes [lo, hi) of one STAGE_CHUNK window, pieces


def staged_windows(sources: list[Any], start: int, size: int = STAGE_CHUNK) -> list[Window]:
    """``sources`` (flat uint8 tensors) laid end to end in host memory from offset ``start``,
    cut so that no piece crosses a multiple of ``size``, grouped by the window they fall in."""
    windows: list[Window] = []
    at = start
    for src in sources:
        done = 0
        while done < src.numel():
            take = min(int(src.numel()) - done, size - at % size)
            if windows and windows[-1][1] == at and (at - 1) // size == at // size:
                lo, _, pieces = windows[-1]
                windows[-1] = (lo, at + take, pieces)
            else:
                windows.append((at, at + take, []))
            windows[-1][2].append((src[done : done + take], at))
            done, at = done + take, at + take
    return windows


@dataclasses.dataclass(frozen=True)
class StageCopies:
    """How staged copies move bytes: two staging ``slots`` of one size, ``dma(dst, src)`` an
    asynchronous copy (the side stream's), ``mark(slot)`` records the end of the copies queued
    for a slot, ``wait(slot)`` waits for them."""

    slots: list[Any]
    dma: Callable[[Any, Any], None]
    mark: Callable[[int], None]
    wait: Callable[[int], None]


def stage_out(windows: list[Window], host: Any, copies: StageCopies) -> None:
    """Device -> host through the two slots: each window's pieces are copied into a slot, and
    the slot is copied into ``host`` by the CPU (once its copies are done) while the other
    slot's copies run."""
    slots, dma, mark, wait = copies.slots, copies.dma, copies.mark, copies.wait
    size = int(slots[0].numel())
    held: list[tuple[int, int] | None] = [None, None]

    def drain(slot: int) -> None:
        if held[slot] is not None:
            lo, hi = held[slot]  # type: ignore[misc]
            wait(slot)
            base = lo - lo % size
            host[lo:hi].copy_(slots[slot][lo - base : hi - base])
            held[slot] = None

    for i, (lo, hi, pieces) in enumerate(windows):
        slot = i % 2
        drain(slot)
        base = lo - lo % size
        for src, at in pieces:
            dma(slots[slot][at - base : at - base + src.numel()], src)
        mark(slot)
        held[slot] = (lo, hi)
    last = (len(windows) - 1) % 2
    drain(1 - last)
    drain(last)


def stage_in(windows: list[Window], host: Any, copies: StageCopies) -> None:
    """Host -> device, the other way: the CPU fills a slot with a window (once the slot's
    earlier copies are done) while the other slot's copies to the device run. The caller
    waits for the last copies."""
    slots, dma, mark, wait = copies.slots, copies.dma, copies.mark, copies.wait
    size = int(slots[0].numel())
    used = [False, False]
    for i, (lo, hi, pieces) in enumerate(windows):
        slot = i % 2
        if used[slot]:
            wait(slot)
        base = lo - lo % size
        slots[slot][lo - base : hi - base].copy_(host[lo:hi])
        for dst, at in pieces:
            dma(dst, slots[slot][at - base : at - base + dst.numel()])
        mark(slot)
        used[slot] = True


def release_host_buffers() -> int:
    """The host pool and the staging buffers handed back to the system (the worker is idle:
    ``worker.serve``); returns the pool's bytes."""
    held = sum(int(host.numel()) for _, host in _HOST_POOL)
    _close_host_memory(_HOST_POOL, _STAGE)
    torch = sys.modules.get("torch")
    empty_host_cache = getattr(torch._C, "_host_emptyCache", None) if torch else None
    if empty_host_cache is not None:
        with contextlib.suppress(Exception):
            empty_host_cache()
    return held


def bytes_by_device(torch: Any, storages: Iterable[Any]) -> dict[Any, list[Any]]:
    """Each storage as flat bytes (``_storage_bytes``), grouped by its device: what a copy aside
    takes per device (the worker's ``_save_cuda``, the notebook's ``notebook_snapshot.take``)."""
    by_device: dict[Any, list[Any]] = {}
    for storage in storages:
        by_device.setdefault(storage.device, []).append(_storage_bytes(torch, storage))
    return by_device


def _save_cuda(torch: Any, storages: dict[int, Any], replayed: bool) -> Callable[[], None]:
    """Copy the storages aside (on their device when it has room, else the host pool through
    the staging buffers, else a host tensor each), on one side stream per device; returns what
    copies them back. Both wait for the device to be idle before and after (the cell's
    kernels, then ours)."""
    by_device = bytes_by_device(torch, storages.values())
    torch.cuda.synchronize()
    t0 = time.perf_counter()  # the copies' own time, not the cell's kernels before them
    record: dict[str, Any] = {"bytes": 0, "place": ""}
    plans = []  # (device, its sources, their bytes, place)
    for device, sources in by_device.items():
        need = sum(int(s.numel()) for s in sources)
        free, total = torch.cuda.mem_get_info(device)
        place = snapshot_place(need, free, total, _host_available(), replayed)
        plans.append((device, sources, need, place))
        record["bytes"] += need
    places = {place for *_, place in plans}
    staged: list[tuple[Any, Any, list[Window]]] = []  # (device, stream, windows)
    at = 0  # each device's sources start on a window of their own
    for device, sources, need, place in plans:
        if place == "staged":
            staged.append((device, torch.cuda.Stream(device), staged_windows(sources, at)))
            at += -(-need // STAGE_CHUNK) * STAGE_CHUNK
    host = None
    if staged:
        t_pool = time.perf_counter()
        host = _host_pool(torch, at)
        record["pool_s"] = round(time.perf_counter() - t_pool, 4)  # its growth, else ~0
    pairs: list[tuple[Any, Any, Any]] = []  # (stream, the memory, its copy): device/host places
    for device, sources, _, place in plans:
        if place == "staged":
            continue
        stream = torch.cuda.Stream(device)
        where = device if place == "device" else "cpu"
        with torch.cuda.device(device), torch.cuda.stream(stream):
            for src in sources:
                dst = torch.empty(src.numel(), dtype=torch.uint8, device=where)
                dst.copy_(src, non_blocking=True)
                pairs.append((stream, src, dst))
        stream.synchronize()
    for device, stream, windows in staged:
        _through_staging(torch, device, stream, windows, host, stage_out)
    record.update(place="+".join(sorted(places)), save_s=round(time.perf_counter() - t0, 4))
    KEPT.append(record)

    def restore() -> None:
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        for stream, src, dst in pairs:
            with torch.cuda.stream(stream):
                src.copy_(dst, non_blocking=True)
        for device, stream, windows in staged:
            _through_staging(torch, device, stream, windows, host, stage_in)
        torch.cuda.synchronize()
        pairs.clear()
        staged.clear()
        if "device" in places:
            # the device-side copies go back to the GPU, not to this worker's cache: the
            # notebook shares the GPU and would run out of memory beside a cached snapshot
            torch.cuda.empty_cache()
        record["restore_s"] = round(time.perf_counter() - t1, 4)

    return restore


def _through_staging(
    torch: Any, device: Any, stream: Any, windows: list[Window], host: Any, copy: Any
) -> None:
    """One device's windows out to (``stage_out``) or back from (``stage_in``) the host pool,
    on ``stream``, through the staging buffers (straight, without them)."""
    with torch.cuda.device(device), torch.cuda.stream(stream), _staging(torch) as slots:
        if slots is None:  # pageable copies: synchronous, the driver stages them
            for _, _, pieces in windows:
                for src, at in pieces:
                    span = host[at : at + src.numel()]
                    if copy is stage_out:
                        span.copy_(src)
                    else:
                        src.copy_(span)
            return
        events = [torch.cuda.Event(), torch.cuda.Event()]
        copy(windows, host, StageCopies(slots,
                                        lambda dst, src: dst.copy_(src, non_blocking=True),
                                        lambda slot: events[slot].record(stream),
                                        lambda slot: events[slot].synchronize()))  # fmt: skip
        stream.synchronize()  # the slots are unlocked next
