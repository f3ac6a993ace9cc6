"""End-to-end runs on a GPU machine with nsys/ncu (``pytest -m gpu -s tests/gpu``)."""
