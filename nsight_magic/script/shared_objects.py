"""The worker's side of the notebook's shared GPU memory: keep a re-run from changing it twice.

What the worker received from the notebook is ``session/state/worker_side.py``'s (its table of
received objects is ``ns[TABLE]``: key -> object; the notebook's CUDA storages it maps are
recorded in ``ns[MAPPED]``).

``preserved(ns, names)`` is for a run whose effects the notebook already has: a drill-down's
re-run of a cell, its warm-up runs, a replay of an earlier profiled cell into a new worker. All
the CUDA memory this worker maps, its CPU tensors and the received objects' Python-side state
(optimizer state, modules' flags) are saved before and put back after, whatever the cell's text
hides in a call, so an optimizer step is applied to the notebook's model once, by the run that
the notebook asked for.

A real module pasted into the script by ``build_script`` before the runtime. Standard library
only at import time; torch is imported by pickle (the handles' rebuild functions) or when a
worker has shared CUDA memory to keep.
"""

import contextlib
import dataclasses
import functools
import pickle
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# --- module only: nothing of the header is used here; the script pastes the rest as it is ---
# --- end module only ---

TABLE = "__nsight_magic_shared__"  # the worker's received objects, by key
MAPPED = "__nsight_magic_mapped__"  # data pointers of the notebook's storages it opened
WALK_DEPTH = 4  # how deep preserved() looks through plain objects for tensors


def _cuda_storages(obj: Any, out: dict[int, Any], depth: int, seen: set[int]) -> None:
    """CUDA storages reachable from ``obj`` (tensors, modules, optimizers, containers and
    plain objects' attributes, ``depth`` levels deep), by data pointer."""
    if id(obj) in seen or depth < 0:
        return
    seen.add(id(obj))
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            storage = obj.untyped_storage()
            out.setdefault(storage.data_ptr(), storage)
        return
    if isinstance(obj, torch.nn.Module):
        for t in (*obj.parameters(), *obj.buffers()):
            _cuda_storages(t, out, depth, seen)
        return
    if isinstance(obj, torch.optim.Optimizer):
        for group in obj.param_groups:
            for p in group["params"]:
                _cuda_storages(p, out, depth, seen)
        for state in obj.state.values():
            _cuda_storages(state, out, depth, seen)
        return
    items: Any = ()
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, list | tuple | set | frozenset):
        items = obj
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = vars(obj).values()
    for item in items:
        _cuda_storages(item, out, depth - 1, seen)


def storages_of(objects: Iterable[Any]) -> dict[int, Any]:
    """The CUDA storages reachable from ``objects`` (``_cuda_storages``), by data pointer."""
    out: dict[int, Any] = {}
    _cuda_storages(list(objects), out, WALK_DEPTH, set())
    return out


def module_buffers(objects: Iterable[Any]) -> list[Any]:
    """The buffers of the modules among ``objects``: what a re-run keeps whatever the cell's
    text names (a forward in training mode updates batch-norm statistics)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    return [b for obj in objects if isinstance(obj, torch.nn.Module) for b in obj.buffers()]


def shared_storages(ns: dict[str, Any]) -> dict[int, Any]:
    """The CUDA storages of what this worker received (the notebook's, mapped, and what its
    cells allocated into those objects since), by data pointer."""
    return storages_of(ns.get(TABLE, {}).values())


def mapped_storages(ns: dict[str, Any]) -> dict[int, Any]:
    """The notebook's CUDA memory this worker maps (opened by IPC handle), by data pointer."""
    mapped = ns.get(MAPPED, set())
    return {ptr: s for ptr, s in shared_storages(ns).items() if ptr in mapped}


def mapped_bytes(ns: dict[str, Any]) -> int:
    return sum(int(s.nbytes()) for s in mapped_storages(ns).values())


def mapped_segments(ns: dict[str, Any]) -> list[list[int]]:
    """``[device, data pointer, bytes]`` of each notebook storage this worker maps: nsys records
    a mapping as device memory of the process that opens it, so the run's memory summary
    tells the notebook's memory from the worker's own by these (a worker mapping a 43 GB
    training state showed a 63.2 GB start, issue 41)."""
    return [[int(s.device.index or 0), int(ptr), int(s.nbytes())]
            for ptr, s in sorted(mapped_storages(ns).items())]  # fmt: skip


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
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


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


def _tracked_tensors(torch: Any, table: dict[Any, Any]) -> list[Any]:
    """Every tensor the table's objects hold: plain tensors, modules' parameters, buffers and
    gradients, optimizers' state and tensor hyper-parameters."""
    out: list[Any] = []
    for obj in table.values():
        if isinstance(obj, torch.Tensor):
            out.append(obj)
        elif isinstance(obj, torch.nn.Module):
            out += [*obj.parameters(), *obj.buffers()]
        elif isinstance(obj, torch.optim.Optimizer):
            for group in obj.param_groups:
                out += [v for v in group.values() if isinstance(v, torch.Tensor)]
                out += group["params"]
            for state in obj.state.values():
                out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    # gradients are the worker's own memory, yet part of what a re-run changes
    out += [t.grad for t in out if t.is_leaf and t.grad is not None]
    return out


def _storages(tensors: list[Any], cuda: bool) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for t in tensors:
        if t.is_cuda == cuda and (cuda or t.device.type == "cpu"):
            storage = t.untyped_storage()
            if storage.nbytes():
                out.setdefault(storage.data_ptr(), storage)
    return out


def _saved_python_state(
    torch: Any, table: dict[Any, Any], tensors: list[Any]
) -> Callable[[], None]:
    """Snapshot what a re-run changes in the table's objects besides their tensors' bytes;
    returns what puts it back. Optimizers: their state mapping (entries a re-run adds are
    dropped, each entry's dict as it was) and ``param_groups``' values but the parameters;
    modules and their submodules: plain attribute values (``training``) and which tensors and
    submodules they hold; every tensor: its ``grad`` (shallow copies, nothing deep-copied)."""
    undo: list[Callable[[], None]] = []

    def keep_dict(d: dict[Any, Any], owner: Any = None, attr: str = "") -> None:
        """``d``'s items as they are now, back in the same dict (and that dict back in
        ``owner.attr``: a re-run may rebind it, as ``load_state_dict`` does)."""
        items = dict(d)

        def back() -> None:
            d.clear()
            d.update(items)
            if owner is not None:
                owner.__dict__[attr] = d

        undo.append(back)

    def keep_plain(obj: Any) -> None:
        plain = {k: v for k, v in vars(obj).items() if type(v) in _PLAIN}
        undo.append(lambda: obj.__dict__.update(plain))

    for obj in table.values():
        if isinstance(obj, torch.nn.Module):
            for m in obj.modules():
                keep_plain(m)
                for attr in ("_parameters", "_buffers", "_modules"):
                    keep_dict(getattr(m, attr), m, attr)
        elif isinstance(obj, torch.optim.Optimizer):
            keep_plain(obj)
            for inner in obj.state.values():
                keep_dict(inner)
            keep_dict(obj.state, obj, "state")
            groups = obj.param_groups
            listed = list(groups)
            for group in listed:
                values = dict(group)  # in its order; its "params" stay what they are then

                def back(group: dict[str, Any] = group, values: dict[str, Any] = values) -> None:
                    params = group["params"]
                    group.clear()
                    group.update(values)
                    group["params"] = params

                undo.append(back)

            def back_groups(
                opt: Any = obj, groups: list[Any] = groups, listed: list[Any] = listed
            ) -> None:
                groups[:] = listed
                opt.__dict__["param_groups"] = groups

            undo.append(back_groups)
    grads = [(t, t.grad) for t in tensors if t.is_leaf and t.requires_grad]

    def back_grads() -> None:
        for t, grad in grads:
            t.grad = grad

    undo.append(back_grads)

    def restore() -> None:
        for step in reversed(undo):
            step()

    return restore


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


def named_objects(ns: dict[str, Any], names: Iterable[str]) -> list[Any]:
    """The objects the notebook's ``names`` are in this worker: bound in ``ns``, else in the
    globals of a function it received (cloudpickle sends a notebook function with the globals
    its code reads in a dict of its own: ``train_step()``'s optimizer need not be bound here),
    through the functions and classes those globals hold in turn. A name found nowhere is not
    in this worker: no run here can change it."""
    found, missing = [], set()
    for name in names:
        if name in ns:
            found.append(ns[name])
        else:
            missing.add(name)
    todo = [v for v in (*ns.values(), *ns.get(TABLE, {}).values()) if _has_code(v)]
    seen: set[int] = set()
    while todo and missing:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        functions = list(vars(item).values()) if isinstance(item, type) else [item]
        for fn in functions:
            scope = getattr(getattr(fn, "func", fn), "__globals__", None)
            if not isinstance(scope, dict):
                continue
            for name in [n for n in missing if n in scope]:
                found.append(scope[name])
                missing.discard(name)
            todo += [v for v in scope.values() if _has_code(v) and id(v) not in seen]
    return found


def _has_code(value: Any) -> bool:
    """A function, a partial of one or a class the notebook defined (sent by value): what
    carries globals of its own (a library's code is not walked: its globals are its own)."""
    while isinstance(value, functools.partial):
        value = value.func
    module = getattr(value, "__module__", None)
    return isinstance(value, (types.FunctionType, type)) and module in ("__main__", None)


@contextlib.contextmanager
def preserved(
    ns: dict[str, Any],
    names: list[str] | None,
    active: bool = True,
    replayed: bool = False,
    skip_mapped: bool = False,
) -> Iterator[None]:
    """Around a run whose effects the notebook already has: put back, after the block, every
    tensor's bytes of the objects this worker received (all the CUDA memory it maps from the
    notebook; its own copies of CPU tensors) and their Python-side state (optimizer state
    entries and hyper-parameters, modules' flags, gradients), whatever the block's text hides
    (``loss = train_step()``). ``names``: the names whose CUDA memory the block may change
    (``session/state/repeat_changes.changed_names``: ``["*"]``, all of it, when the text calls the
    notebook's own code; None: none, a block that only reads, say ``y = model(x)``); the
    Python-side state, CPU tensors and modules' buffers (a forward in training mode updates
    batch-norm statistics) are kept whatever ``names`` says. ``active`` False keeps nothing
    (the run the notebook asked for). ``replayed``: the block runs under ncu, whose kernel
    replay needs device memory of its own (``snapshot_place``). ``skip_mapped``: the notebook
    keeps the memory this worker maps itself (its own copy, outside ncu's replay: issue 41 item
    5); the CUDA memory kept here is then the worker's own only."""
    torch = sys.modules.get("torch")
    table = ns.get(TABLE)
    if not active or not table or torch is None:
        yield
        return
    tensors = _tracked_tensors(torch, table)
    restore_python = _saved_python_state(torch, table, tensors)
    cpu = {ptr: (s, s.clone()) for ptr, s in _storages(tensors, cuda=False).items()}
    if names and "*" in names:
        cuda = {**shared_storages(ns), **_storages(tensors, cuda=True)}
    else:
        buffers = module_buffers(table.values())
        reachable = storages_of(named_objects(ns, names or ()))
        grads = [t.grad for t in tensors if t.is_leaf and t.grad is not None]
        cuda = {**reachable, **_storages([*buffers, *grads], cuda=True)}
    if skip_mapped:
        for ptr in mapped_storages(ns):
            cuda.pop(ptr, None)
    restore_cuda = _save_cuda(torch, cuda, replayed) if cuda else None
    try:
        yield
    finally:
        if restore_cuda is not None:
            restore_cuda()
        elif skip_mapped and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the notebook writes its copy back once this reply is sent
        for storage, saved in cpu.values():
            storage.copy_(saved)
        restore_python()


# --- the received objects kept current (a saved script's receive; a warm worker's state goes
# both ways through session/state/, issue 56) ---


def _keeps_identity(obj: Any) -> bool:
    """Objects a snapshot of the namespace keeps by identity: the torch objects (their
    contents are ``preserved``'s to keep), modules, functions and classes."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(
        obj, torch.Tensor | torch.nn.Module | torch.optim.Optimizer
    ):
        return True
    return isinstance(obj, type | type(sys) | type(_keeps_identity))


class _SnapshotPickler(pickle.Pickler):
    def __init__(self, file: Any, kept: list[Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.kept = kept

    def persistent_id(self, obj: Any) -> Any:
        if _keeps_identity(obj):
            self.kept.append(obj)
            return len(self.kept) - 1
        return None


class _SnapshotUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, kept: list[Any]) -> None:
        super().__init__(file)
        self.kept = kept

    def persistent_load(self, pid: Any) -> Any:
        return self.kept[pid]


@contextlib.contextmanager
def names_kept(ns: dict[str, Any], active: bool) -> Iterator[None]:
    """A run that repeats work the notebook has (warm-ups, a re-run) leaves the namespace's
    plain values as they were: each name's value (lists, dicts, numbers, the user's objects,
    torch objects inside them by identity) is pickled before and put back after, and names
    the run bound are removed. A value that does not pickle is left as the run leaves it."""
    if not active:
        yield
        return
    import io

    saved: dict[str, tuple[bytes, list[Any]] | Any] = {}
    before = dict(ns)
    for name, value in ns.items():
        if name.startswith("__") or _keeps_identity(value):
            saved[name] = value
            continue
        kept: list[Any] = []
        buffer = io.BytesIO()
        try:
            _SnapshotPickler(buffer, kept).dump(value)
        except Exception:  # a lock, a generator: kept by identity, as the run leaves it
            saved[name] = value
            continue
        saved[name] = (buffer.getvalue(), kept)
    try:
        yield
    finally:
        for name in [n for n in ns if n not in saved and not n.startswith("__")]:
            del ns[name]
        for name, entry in saved.items():
            if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], bytes):
                value = _SnapshotUnpickler(io.BytesIO(entry[0]), entry[1]).load()
                ns[name] = in_place(before[name], value)
            else:
                ns[name] = entry


def in_place(old: Any, value: Any) -> Any:
    """``old`` given ``value``'s contents when it can take them in place (a function's globals
    and other objects hold it by identity), else ``value``."""
    if type(old) is not type(value):
        return value
    if isinstance(old, list):
        old[:] = value
    elif isinstance(old, dict | set):
        old.clear()
        old.update(value)
    elif hasattr(old, "__dict__") and not isinstance(old, type):
        try:
            vars(old).clear()
            vars(old).update(vars(value))
        except TypeError:  # a read-only __dict__ (a mappingproxy)
            return value
    else:
        return value
    return old
