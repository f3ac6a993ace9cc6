"""One copy of the notebook's state, two ways (issue 56): the model both sides share (each
object's key, its shallow description and checksum, ``graph.py``; how a message is applied in
place, ``apply.py``; definitions made from their source, ``definitions.py``; the random
streams, ``rng.py``; the process's own state, ``process.py``) and each side's half: the
notebook's record of what it shares with one worker (``notebook_side.py``) and the worker's
(``worker_side.py``). Standard library at import time: the worker imports it."""
