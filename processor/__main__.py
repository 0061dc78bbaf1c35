"""`python -m processor` is the `cfp` command."""

from processor.cli.entry import main

main()
