"""`cfp read`: the whole feed (or part of it) as JSON lines, resumable with a continuation
token: the command, the job it runs (`read_job`), and the lines it writes (`lines`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.cli.read.read_command import read_command

__getattr__ = exports(__name__)
__all__ = ["read_command"]
