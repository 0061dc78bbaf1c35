"""`python -m processor.host.health.probe PATH`: exit 0 when this host's endpoint PATH answers 200.

For container health checks, which have no curl in a slim image: it asks
`http://127.0.0.1:$CFP_HTTP_PORT/PATH` (default port 8080) and prints the answer's body.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

# processor.host.host_config.DEFAULT_HTTP_PORT, not imported: a probe must start fast (a unit test
# keeps the two equal)
DEFAULT_HTTP_PORT = 8080


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else "/healthz"
    port = os.environ.get("CFP_HTTP_PORT") or str(DEFAULT_HTTP_PORT)
    url = f"http://127.0.0.1:{port}/{path.lstrip('/')}"
    try:
        with urllib.request.urlopen(url, timeout=4) as reply:  # loopback only
            print(reply.read().decode(errors="replace"))
            return 0
    except urllib.error.HTTPError as e:
        print(e.read().decode(errors="replace"), file=sys.stderr)
    except OSError as e:
        print(f"{url}: {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
