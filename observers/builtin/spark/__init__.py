"""The Spark observer: change events into Delta Lake tables through a Spark session: a change
log written by every host, and a current state (with its history) kept by one host's state job.

`observer` is what `--observer spark` loads. Its parts: `session` (which Spark a host writes
through, with which jars, into which output), `changelog` (the fenced, exactly-once appends of
many leases' batches), `state` (the current-state and history tables, and the job that keeps
them), and at this level the tables under the output (`tables`), Delta's commit refusals told
apart (`commits`), Spark SQL quoting (`sql`), Arrow tables handed to Spark (`handover`) and how
a wait is logged (`waits`). Its modules load pyarrow, the Azure SDK and, when a session opens,
PySpark: import them by name, as the host does once the observer is chosen.
"""
