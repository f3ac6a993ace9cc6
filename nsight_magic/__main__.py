"""``python -m nsight_magic compare RUN_A RUN_B`` / ``summary RUN``: see ``nsight_magic.cli``."""

from .cli import main

raise SystemExit(main())
