"""Pure analyses: DataFrame in, DataFrame out. No I/O, no widgets, no profiler calls.

Each module has one job: kernel summary (``kernels``), NVTX projection and attribution
(``nvtx_projection``, ``attribution``, ``nvtx_nesting``), statement order (``statements``),
range specs (``range_spec``), PyTorch ops (``torch_ops``), gaps, memory, timeline, processes,
roofline points and bounds (``roofline``, ``roofline_bounds``), HFU/MFU (``mfu``, ``range_mfu``,
``model_flops``, ``gpu_peaks``), strings built per row (``text``), run comparison
(``compare``), short kernel names (``names``); import the function you need from its module."""
