"""What a profile gives back: run objects holding a report, its run folder and metadata, that
display themselves as widgets plus a static form (``NsysRun``, ``NcuRun``), and ``Comparison``."""

from .drill_protocols import DrillRunner
from .loading import load_run
from .nsys_run import WIDGET_MIME, NcuRun, NsysRun, in_kernel

__all__ = ["WIDGET_MIME", "DrillRunner", "NcuRun", "NsysRun", "in_kernel", "load_run"]
