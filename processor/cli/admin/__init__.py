"""The operator's commands: `cfp status`, `cfp pause` and `cfp resume`, `cfp lease move` and
`cfp lease resume`, and `cfp processor reset` (with the job it runs, `reset_job`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.cli.admin.lease_commands import lease_group
    from processor.cli.admin.pause_commands import pause_command, resume_command
    from processor.cli.admin.processor_group import processor_group
    from processor.cli.admin.status_command import status_command

__getattr__ = exports(__name__)
__all__ = ["lease_group", "pause_command", "processor_group", "resume_command", "status_command"]
