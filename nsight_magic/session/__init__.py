"""Running a cell under a profiler: a warm worker per profiler kept between cells, or a fresh
process per cell. Kept import-light: the worker module runs inside the profiled interpreter."""
