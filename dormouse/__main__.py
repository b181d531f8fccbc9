"""``python -m dormouse`` (and ``torchrun -m dormouse``) runs the CLI."""

from dormouse.cli import main

main()
