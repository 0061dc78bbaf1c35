"""What a plugin may declare beyond the observer contract: its options, and what it is told of
the host that loads it.

An observer class, or a factory, with an `Options` attribute that is a dataclass takes options.
The host makes one `Options` from `cfp run --observer-option KEY=VALUE` (repeated; or
`CFP_OBSERVER_OPTIONS`, pairs separated by whitespace), each value converted to its field's type
(str, int, float, bool, `Path`, an `Enum`, `X | None`, `tuple[X, ...]`), and refuses an unknown
key, a missing required field or a value of the wrong type before any lease is taken, with an
error naming the option. A field's `metadata={"help": ...}` says what it is for. Then:

- an observer class is called `Name(options)`, once per lease, where it would be called
  `Name()`;
- any other factory is called `Name(options, host)` once per host, `host` a `PluginHost`, and
  returns the host's factory of observers (called once per lease; it may be an async context
  manager, entered once per host). It may name a local folder for the batches
  `--on-observer-error dead-letter` sets aside: `dead_letter_dir`.

`StorageAccess` is how a plugin that writes to Azure Storage reaches an account: its name and
key or SAS (neither: Entra ID), and its endpoint when it is an emulator on loopback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class StorageAccess:
    """How to reach an account: its name, a key or a SAS (neither: Entra ID), and the blob
    endpoint when it is an emulator on loopback (`emulator_endpoint`, http://HOST:PORT/ACCOUNT)."""

    account: str
    key: str | None = None
    sas: str | None = None
    emulator_endpoint: str | None = None

    def __repr__(self) -> str:  # never a key or SAS in a log line or a traceback
        return (
            f"StorageAccess(account={self.account!r}, auth={self.auth}, "
            f"emulator={self.emulator_endpoint!r})"
        )

    @property
    def auth(self) -> str:
        return "key" if self.key else "sas" if self.sas else "entra-id"


@dataclass(frozen=True, slots=True)
class PluginHost:
    """What a host tells a factory that takes options, when it makes it."""

    host_name: str
    processor_name: str
    # the feed's storage account, for a plugin that writes beside it: a secret, never log it
    connection_string: str = field(repr=False)
    wall: Callable[[], datetime] = field(repr=False)  # the host's wall clock
    # how to reach the account a connection string names (None: the feed's), its key or SAS
    # kept out of the host's logs from then on
    storage: Callable[[str | None], StorageAccess] = field(repr=False)
