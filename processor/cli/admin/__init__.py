"""The operator's commands: `cfp status`, `cfp pause` and `cfp resume`, `cfp lease move` and
`cfp lease resume`, and `cfp processor reset` (with the job it runs, `reset_job`).
"""
