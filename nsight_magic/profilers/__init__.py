"""argv lists for the Nsight command lines (``nsys`` and ``ncu``), names escaped for them."""
