"""`cfp read`: the whole feed (or part of it) as JSON lines, resumable with a continuation
token: the command, the job it runs (`read_job`), and the lines it writes (`lines`).
"""
