"""The current-state table (`state_table`: one row per blob, kept by a MERGE of the change log),
its history (`history`, `history_run`: one row per version of each blob), and the state job that
brings both up to the change log, one run at a time on one host (`state_job`).
"""
