"""The live workers of one notebook: which are kept (``pool.py``), what each has
(``warm_session.py``), and when the notebook is busy profiling (``activity.py``)."""
