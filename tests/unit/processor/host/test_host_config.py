"""A host's default identity in the lease table."""

from __future__ import annotations

from unittest.mock import patch

from processor.host.host_config import default_host_name


def test_containers_on_the_host_network_all_pid_1_get_different_default_names() -> None:
    """They share the host's name, and each runs cfp as pid 1 (seen with podman here)."""
    with patch("socket.gethostname", return_value="vm"), patch("os.getpid", return_value=1):
        names = {default_host_name() for _ in range(50)}
    assert len(names) == 50 and all(name.startswith("vm-1-") for name in names)
