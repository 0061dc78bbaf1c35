"""`python -m processor` is the `cfp` command."""

from processor.cli import main

main()
