"""The commands around the Spark observer's tables: `cfp verify`, `cfp sql` and `cfp optimize`
(`table_commands`), and `cfp spark-connect`, a Spark Connect server with this install's jars.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.cli.spark.spark_connect_command import spark_connect_command
    from processor.cli.spark.table_commands import optimize_command, sql_command, verify_command

__getattr__ = exports(__name__)
__all__ = ["optimize_command", "spark_connect_command", "sql_command", "verify_command"]
