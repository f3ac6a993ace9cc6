"""A profiling worker, both ends of its socket: the long-lived process that runs notebook cells
under a profiler (``serve.py``, started as ``python -m nsight_magic.worker.serve``), the messages
between it and the notebook (``messages.py``), and the notebook's end: the process and its
transport (``process.py``) and every request the notebook makes of it (``conversation.py``).
The session decides which workers live and what to ask them; this package knows how."""
