"""`python -m advrag.cli`: the `advrag` command."""

from advrag.cli import main

main()
