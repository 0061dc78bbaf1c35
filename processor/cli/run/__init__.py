"""`cfp run`: its options grouped by concern (`run_options`), the pure step from them to a
`HostConfig` (`host_settings`), and what runs once they are checked (`serve`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.cli.run.run_command import run_command

__getattr__ = exports(__name__)
__all__ = ["run_command"]
