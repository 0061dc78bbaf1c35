"""Which Spark a host writes through, and where to: the session, embedded local Spark or Spark
Connect (`session`), the jars every session loads (`jars`), which PySpark this install has
(`install`), the output's location and how Spark and delta-rs reach it (`output`), and the
output's container made before Spark writes into it (`container`).
"""
