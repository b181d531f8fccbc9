"""``python -m dormouse`` (and ``torchrun -m dormouse``) runs the CLI."""

from dormouse.cli.app import main

main()
