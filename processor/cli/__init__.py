"""The `cfp` command: its group (`main`, each command imported when named), the pieces the
commands share (`common`), and the commands by concern: `run` (a host), `read` (the feed as JSON
lines), `admin` (status, pause, lease moves, reset), `spark` (the tables' tools and a Spark
Connect server) and `emulate_command`. Its entry point is `processor.cli.entry:main` (the
`cfp` script); `cfp` is used as a command, so this folder exports no names.
"""
