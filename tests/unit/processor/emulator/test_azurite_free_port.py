"""Ports for the servers the tests, the demo and the benchmarks start: below the kernel's
ephemeral range, where no outgoing connection can take one between its pick and its bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from processor.emulator import azurite
from processor.emulator.azurite import free_port


def test_a_free_port_lies_below_the_ephemeral_range_and_binds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    monkeypatch.setattr(azurite, "EPHEMERAL_RANGE", ranges)
    ports = {free_port() for _ in range(20)}
    assert all(40000 - azurite.EPHEMERAL_MARGIN <= p < 40000 for p in ports), ports
    assert len(ports) > 1  # picked at random: two test workers rarely pick the same
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_without_the_kernels_range_linuxs_default_is_assumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(azurite, "EPHEMERAL_RANGE", tmp_path / "missing")
    assert free_port() < 32768
