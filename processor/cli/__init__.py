"""The `cfp` command: its group (`main`, each command imported when named), the pieces the
commands share (`common`), and the commands by concern: `run` (a host), `read` (the feed as JSON
lines), `admin` (status, pause, lease moves, reset), `spark` (the tables' tools and a Spark
Connect server) and `emulate_command`.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.cli.entry import main

__getattr__ = exports(__name__)
__all__ = ["main"]
