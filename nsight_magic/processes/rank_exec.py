"""Run one rank of a torchrun job under a profiler and the others bare.

    python -m torch.distributed.run --nproc-per-node N -m nsight_magic.processes.rank_exec \\
        --rank R --prefix PREFIX.json -- script.py status.json

Each rank torchrun starts runs this module: rank R replaces itself with the profiler command in
PREFIX.json (e.g. ``ncu … -o report``) followed by ``python script.py …``; every other rank
replaces itself with ``python script.py …``. So ncu serialises and replays only rank R's kernels
while the peers run at full speed. Stdlib only (it runs in the profiled interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nsight_magic.processes.rank_exec")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--prefix", required=True, help="JSON list: the profiler argv prefix")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    python = [sys.executable, *command]
    if int(os.environ.get("RANK", "0")) == args.rank:
        with open(args.prefix) as f:
            prefix = [str(a) for a in json.load(f)]
        os.execv(prefix[0], prefix + python)
    os.execv(sys.executable, python)


if __name__ == "__main__":
    main()
