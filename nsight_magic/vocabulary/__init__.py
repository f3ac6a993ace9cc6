"""Words every layer shares: columns, precisions, NVTX and magic names, checks."""
