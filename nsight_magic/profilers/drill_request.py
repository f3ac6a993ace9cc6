"""What one drill-down asks of ncu: which launches of a cell the session ran (a kernel's
``instance``/``count``, or a range the caller names), the ``NcuOptions`` a drill-down may set (the
fields declared ``drill=True``: set, sections, metrics, and any added later) and how it runs
(``fresh``, ``timeout``, ``rank``). ``NsysRun.profile_kernel`` / ``profile_range`` build one, the
session (``session/runs/drill.py``) turns it into the child run's ``NcuOptions`` without naming a
single option, so an option declared drill-able reaches the child's ncu argv by itself.

Standard library and ``profilers/ncu.py`` only: results build it, the session reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import BadArgumentError
from .ncu import NcuOptions
from .options import drill_fields, spec_of

DRILL_OPTIONS = drill_fields(NcuOptions)


def drill_options(**ncu: Any) -> NcuOptions:
    """``NcuOptions`` with only drill-able fields given; TypeError naming the drill-able ones
    for any other name (a filter is the drill-down's own, an unknown name is a typo)."""
    unknown = sorted(set(ncu) - set(DRILL_OPTIONS))
    if unknown:
        raise BadArgumentError(
            f"a drill-down does not take {', '.join(unknown)}; the ncu options it sets are "
            f"{', '.join(DRILL_OPTIONS)}"
        )
    return NcuOptions(**{name: _field_value(name, value) for name, value in ncu.items()})


def _field_value(name: str, value: Any) -> Any:
    """Text read as the magic's flag reads it (``set="none"``, ``metrics="m1,m2"``, one
    section), a list as the tuple the field holds."""
    field = next(f for f in dataclasses.fields(NcuOptions) if f.name == name)
    spec = spec_of(field)
    if isinstance(value, str):
        return (value,) if spec.repeat else spec.parse(value) if spec.parse else value
    return tuple(value) if isinstance(field.default, tuple) and value is not None else value


@dataclass(frozen=True, kw_only=True)
class DrillRequest:
    """ncu on launch ``instance`` (0-based, within the cell) and the ``count - 1`` after it of
    the kernel named exactly ``kernel`` (None: the launches a range selects, ``profile_range``),
    collecting what ``ncu`` says (only its drill-able fields count: ``DRILL_OPTIONS``).
    ``fresh``: a cold re-run of the saved script, not the warm ncu worker; ``timeout``:
    seconds; ``rank``: the rank ncu profiles when the cell ran as several."""

    kernel: str | None = None
    instance: int = 0
    count: int = 1
    ncu: NcuOptions = NcuOptions()  # noqa: RUF009  (frozen: one shared default is safe)
    fresh: bool = False
    timeout: float | None = None
    rank: int = 0

    def __post_init__(self) -> None:
        if self.kernel is not None and (
            not isinstance(self.kernel, str) or not self.kernel or "\x00" in self.kernel
        ):
            raise BadArgumentError(
                f"the kernel to profile is {self.kernel!r}; pass its full name as a string (the "
                "'name' column of kernel_summary())."
            )
        for name in ("instance", "count", "rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadArgumentError(f"{name} is {value!r}; pass a whole number.")
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout < float("inf")
        ):
            raise BadArgumentError(f"timeout is {timeout!r}; pass seconds > 0, or None.")
        if self.instance < 0 or self.count < 1 or self.rank < 0:
            raise BadArgumentError(
                f"instance {self.instance}, count {self.count}, rank {self.rank}: instance and "
                "rank must be >= 0, count >= 1"
            )
        default = NcuOptions()
        others = [f.name for f in dataclasses.fields(NcuOptions)
                  if f.name not in DRILL_OPTIONS
                  and getattr(self.ncu, f.name) != getattr(default, f.name)]  # fmt: skip
        if others:
            raise BadArgumentError(
                f"a drill-down sets its own {', '.join(others)}; the ncu options it takes are "
                f"{', '.join(DRILL_OPTIONS)}"
            )

    @classmethod
    def create(
        cls,
        kernel: str | None = None,
        *,
        instance: int = 0,
        count: int = 1,
        fresh: bool = False,
        timeout: float | None = None,
        rank: int = 0,
        **ncu: Any,
    ) -> DrillRequest:
        """A request whose ncu options are given by name (``set="full"``): TypeError for a name
        that is not a drill-able ncu option."""
        return cls(kernel=kernel, instance=instance, count=count, ncu=drill_options(**ncu),
                   fresh=fresh, timeout=timeout, rank=rank)  # fmt: skip

    def collect(self) -> dict[str, Any]:
        """The drill-able ncu options by name, as this request sets them."""
        return {name: getattr(self.ncu, name) for name in DRILL_OPTIONS}

    def ncu_options(self, **filters: Any) -> NcuOptions:
        """The child run's options: what this request collects plus the drill-down's own
        filters (``kernel_exact``, ``launch_skip``, ``nvtx_include``, ...)."""
        return dataclasses.replace(self.ncu, **filters)
