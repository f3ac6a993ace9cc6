"""A render helper (``render_pool``): Vega-Lite specs in on stdin, PNGs out on stdout, one at a
time, until stdin ends (its kernel closed it or died). Run by path (``runpy.run_path``, see
``render_pool``), it imports only the standard library and vl-convert: never the user's
``__main__`` (what a spawned ``multiprocessing`` child would re-run) and never this package's
modules named like the standard library's (``html``).

Frames: a request is a JSON line ``{"id", "scale", "n"}`` and ``n`` bytes of spec JSON; an answer
is ``{"id", "n"}`` (+ ``"error"``) and ``n`` bytes of PNG."""

from __future__ import annotations

import json
import sys

_TINY = {"data": {"values": [{"a": 1}]}, "mark": "bar", "encoding": {"x": {"field": "a"}}}


def main() -> None:
    import vl_convert as vlc

    vlc.vegalite_to_png(_TINY)  # start the JavaScript runtime before the first real chart
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while line := requests.readline():
        request = json.loads(line)
        spec = requests.read(int(request["n"]))
        answer: dict[str, object] = {"id": request["id"]}
        try:
            png = bytes(vlc.vegalite_to_png(json.loads(spec), scale=float(request["scale"])))
        except Exception as exc:  # one bad spec: say so, keep serving
            png, answer["error"] = b"", f"{type(exc).__name__}: {exc}"[:2000]
        answer["n"] = len(png)
        answers.write(json.dumps(answer).encode() + b"\n" + png)
        answers.flush()


if __name__ == "__main__":
    main()
