"""Pure analyses: DataFrame in, DataFrame out. No I/O, no widgets, no profiler calls.

Each module has one job (kernel summary, NVTX projection, gaps, memory, timeline, roofline,
MFU); import the function you need from its module."""
