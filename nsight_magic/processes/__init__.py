"""The profiler processes: find nsys/ncu, run and stop them, their output, GUIs."""
