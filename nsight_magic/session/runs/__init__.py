"""Every way a profiled cell runs: one pipeline (``pipeline.py``) through an executor, a warm
worker (``warm.py``) or a fresh process (``fresh.py``), a crash's retry (``fallback.py``);
what re-runs a cell (``drill.py``, ``saved_run.py``, ``sweep.py``); and the runs that start a
worker before a cell needs it (``prewarm.py``)."""
