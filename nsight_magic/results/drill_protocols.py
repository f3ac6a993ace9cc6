"""What results need from the layers above them, as Protocols: results never import the session.

A run that can be drilled into gets a ``DrillRunner`` handed in (the notebook's session
manager): what re-runs the run's cell under ncu (a drill-down). The picker's Profile button and
the NVTX tab's "profile this range" call it. ("Profiler" in this package names only Nsight
Systems / Nsight Compute themselves.)"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..analysis.range_spec import NvtxRange
    from ..profilers.drill_request import DrillRequest


class DrillRunner(Protocol):
    def profile_kernel(
        self,
        parent: Any,
        request: DrillRequest,
        *,
        progress: Any = None,
        output: Any = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        """ncu on the launches of ``request.kernel`` in the cell ``parent`` ran -> ``NcuRun``."""
        ...

    def profile_top(
        self,
        parent: Any,
        kernels: Sequence[str],
        request: DrillRequest,
        *,
        progress: Any = None,
        output: Any = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        """ncu on the first launch of each of ``kernels`` in one re-run of that cell ->
        ``NcuRun``."""
        ...

    def profile_range(
        self,
        parent: Any,
        nvtx: NvtxRange,
        request: DrillRequest | None = None,
        *,
        progress: Any = None,
        output: Any = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        """ncu on the kernels inside the NVTX range ``nvtx`` of that cell -> ``NcuRun``."""
        ...


class ParentRun(Protocol):
    """What an ``NcuRun`` needs of the nsys run it was drilled from (``NsysRun``): the real-clock
    kernel times, the NVTX projection and the kernels in a range, for HFU/MFU per range."""

    def kernels(self) -> Any: ...

    def kernel_summary(self) -> Any: ...

    def nvtx_gpu_projection(self) -> Any: ...

    def kernels_in_range(self, domain: str, range: str) -> Any: ...
