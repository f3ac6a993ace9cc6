"""The IPython front: the cell magics, their options and their help."""
