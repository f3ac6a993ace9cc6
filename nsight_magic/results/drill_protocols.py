"""What results need from the layers above them, as Protocols: results never import the session.

A run that can be drilled into gets a ``DrillRunner`` handed in (the notebook's session
manager): what re-runs the run's cell under ncu (a drill-down). The picker's Profile button and
the NVTX tab's "profile this range" call it. ("Profiler" in this package names only Nsight
Systems / Nsight Compute themselves.)"""

from __future__ import annotations

from typing import Any, Protocol


class DrillRunner(Protocol):
    def profile_kernel(
        self, parent: Any, kernel: str, *, instance: int = 0, count: int = 1, **kwargs: Any
    ) -> Any:
        """ncu on launch ``instance`` of ``kernel`` in the cell ``parent`` ran -> ``NcuRun``."""
        ...

    def profile_range(
        self, parent: Any, domain: str, name: str, style: str = "PushPop", **kwargs: Any
    ) -> Any:
        """ncu on the kernels inside the NVTX range ``domain:name`` of that cell -> ``NcuRun``."""
        ...


class ParentRun(Protocol):
    """What an ``NcuRun`` needs of the nsys run it was drilled from (``NsysRun``): the real-clock
    kernel times, the NVTX projection and the kernels in a range, for HFU/MFU per range."""

    def kernels(self) -> Any: ...

    def nvtx_gpu_projection(self) -> Any: ...

    def kernels_in_range(self, domain: str, range: str) -> Any: ...
