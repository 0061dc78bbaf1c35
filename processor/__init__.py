"""cfp, the change feed processor host. Its folders, bottom first: `changefeed` (the feed, read
and decoded), `reading` (one lease's share of it), `plugins` (finding and calling observers),
`host` (one host process), `admin` (an operator's plans and reports), `emulator` (a feed on
Azurite), `streaming` (the feed as a Spark source) and `cli` (the `cfp` command). The modules
at this level are the plumbing every folder shares: storage connections, logs, secrets kept out
of them, the clock, waiting, faults for the tests and process-wide runtime settings. The leases
are the package `leases`, the observer contract the package `observers`.
"""
