"""``python -m tests.falsification``: run the falsification record (see runner.py)."""

from __future__ import annotations

import sys

from .runner import main

sys.exit(main())
