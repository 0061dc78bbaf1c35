"""`python -m processor` is the `cfp` command."""

from processor.entry import main

main()
