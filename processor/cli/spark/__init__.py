"""The commands around the Spark observer's tables: `cfp verify`, `cfp sql` and `cfp optimize`
(`table_commands`), and `cfp spark-connect`, a Spark Connect server with this install's jars.
"""
