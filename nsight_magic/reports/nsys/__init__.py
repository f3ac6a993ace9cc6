"""Nsight Systems data path: exports (``.sqlite`` / parquet dir) -> pandas frames.

``source`` opens an export and reads typed columns (SQLite via ADBC/sqlite3, or parquet);
``strings`` resolves StringIds; ``cupti``, ``nvtx_events`` and ``target`` hold one loader per
exporter table; ``report.NsysReport`` caches the frames and adds the summaries; ``export`` builds
the ``nsys export`` argv for a ``.nsys-rep``."""
