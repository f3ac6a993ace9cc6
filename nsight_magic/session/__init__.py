"""Running a cell under a profiler: a warm worker per profiler kept between cells, or a fresh
process per cell. ``manager.py`` is what the magics call; ``runs/`` how a cell runs,
``state/`` what crosses to a worker and back, ``workers/`` which workers live; the modules
beside them (``spec``, ``history``, ``backends``, ``run_context``, ``variables``) are the
ground all three stand on."""
