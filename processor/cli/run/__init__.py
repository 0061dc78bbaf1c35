"""`cfp run`: its options grouped by concern (`run_options`), the pure step from them to a
`HostConfig` (`host_settings`), and what runs once they are checked (`serve`).
"""
