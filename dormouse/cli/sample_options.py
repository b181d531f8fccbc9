"""``dormouse sample``'s options and defaults, one owner; apart from the sampler so ``--help`` needs no torch."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class SampleOptions:
    """One sample request; these defaults are the CLI's (dormouse/cli/app.py reads them from here)."""

    prompt: str | bytes = "\n"  # a str is encoded as the command line's bytes were decoded (os.fsencode)
    n_bytes: int = 256
    temperature: float = 0.8
    top_k: int | None = None
    seed: int = 0
    num_samples: int = 1

    @property
    def prompt_bytes(self) -> bytes:
        """The prompt's bytes: a byte model conditions on any bytes, valid UTF-8 or not."""
        return self.prompt if isinstance(self.prompt, bytes) else os.fsencode(self.prompt)
