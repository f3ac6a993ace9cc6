"""What crosses between the notebook and a worker, the session's side: the one exchange per
cell or prewarm (``exchange.py``, over the model in ``nsight_magic/shared_state``), the setup
cells a worker replays because what they define could not be sent (``setup_replay.py``, after
``admission.py`` checked the GPU memory), and what a repeated run keeps as it was
(``repeat_changes.py``, ``notebook_snapshot.py``)."""
