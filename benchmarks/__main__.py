"""``python -m benchmarks [ingest|weight|view|gpu|session|tracing|host|sweep|two-ranks|all]``.

ingest (P1), weight (P2) and view (P10: what displaying a result costs) run anywhere; gpu (P3,
P4), session (P5, P6), tracing (P7), host (P9) and sweep (P16: a sweep and top-N) need a GPU
with nsys and ncu (session, tracing and sweep also transformers); two-ranks (P8) needs 2 GPUs.
``all`` runs ingest and weight, and the one-GPU ones when nsys and ncu are on PATH.
"""

from __future__ import annotations

import platform
import shutil
import sys
from datetime import datetime, timezone


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    rest = sys.argv[2:]
    print(
        f"nsight_magic benchmarks, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()}, {platform.processor() or platform.machine()}"
    )
    if what in ("ingest", "all"):
        from . import ingest

        ingest.main(rest if what == "ingest" else [])
    if what in ("weight", "all"):
        from . import weight

        weight.main(rest if what == "weight" else [])
    on_gpu = what == "all" and shutil.which("nsys") and shutil.which("ncu")
    if what == "gpu" or on_gpu:
        from . import gpu

        gpu.main(rest if what == "gpu" else [])
    if what == "session" or on_gpu:
        from . import session

        session.main(rest if what == "session" else [])
    if what == "tracing" or on_gpu:
        from . import tracing

        tracing.main(rest if what == "tracing" else [])
    if what == "host" or on_gpu:
        from . import host

        host.main(rest if what == "host" else [])
    if what == "sweep" or on_gpu:  # P16
        from . import sweep

        sweep.main(rest if what == "sweep" else [])
    if what == "view":  # P10, CPU: the display's foreground cost
        from . import view

        view.main(rest)
    if what == "two-ranks":  # needs 2 GPUs: never part of "all"
        from . import two_ranks

        two_ranks.main(rest)


if __name__ == "__main__":
    main()
