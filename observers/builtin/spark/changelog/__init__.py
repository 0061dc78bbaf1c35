"""The change log: each event exactly once for any Delta reader, by blind appends that only a
lease's owner can commit (`change_log`, `fence`): many leases' batches written together by one
sink per host (`sink`, `write_queue`, `delta_appends`), warmed up with made-up records
(`made_up_records`).
"""
