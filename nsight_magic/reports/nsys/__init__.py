"""Nsight Systems data path: exports (``.sqlite`` / parquet dir) -> pandas frames.

``tables`` has one loader per exporter table, ``report.NsysReport`` caches them and adds the
summaries, ``export`` builds the ``nsys export`` argv for a ``.nsys-rep``."""
