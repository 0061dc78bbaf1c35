"""A TCP proxy on loopback between the hosts and Azurite, which the chaos runner breaks on cue.

`drop(seconds)` cuts every open connection and refuses new ones for a while (a network
partition); `delay(each_s, seconds)` holds every chunk of bytes in both directions for `each_s`
(a slow network: requests time out, renewals come late). Hosts see only the proxy's port.

It counts what the faults did to Spark's ABFS driver (the Delta tables' reads and writes, told
apart by its User-Agent), so that a run shows its faults reached the tables and not only the
feed and the lease table.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from processor.emulator.azurite import free_port

CHUNK = 64 * 1024
ABFS_AGENT = b"Azure Blob FS"  # in the User-Agent of every request of hadoop-azure's ABFS driver


class FaultyProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._refuse_until = 0.0
        self._delay_s = 0.0
        self._delay_until = 0.0
        self._abfs: set[asyncio.StreamWriter] = set()  # client connections ABFS opened
        self.abfs_cut = 0  # open ABFS connections cut by `drop`
        self.abfs_delayed = 0  # chunks of ABFS requests or answers held by `delay`

    async def start(self) -> FaultyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def close(self) -> None:
        self._cut_all()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def drop(self, seconds: float) -> None:
        self._refuse_until = time.monotonic() + seconds
        self._cut_all()

    def delay(self, each_s: float, seconds: float) -> None:
        self._delay_s, self._delay_until = each_s, time.monotonic() + seconds

    def heal(self) -> None:
        self._refuse_until = self._delay_until = 0.0

    def _cut_all(self) -> None:
        self.abfs_cut += len(self._abfs & self._open)
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self._refuse_until:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()  # Azurite is down: the host sees a dropped connection
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, client=writer),
                self._pipe(up_reader, writer, client=writer),
            )
        finally:
            self._abfs.discard(writer)
            for w in (writer, up_writer):
                self._open.discard(w)
                w.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        client: asyncio.StreamWriter,
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while data := await reader.read(CHUNK):
                if ABFS_AGENT in data and writer is not client:
                    self._abfs.add(client)
                if time.monotonic() < self._delay_until:
                    self.abfs_delayed += client in self._abfs
                    await asyncio.sleep(self._delay_s)
                if time.monotonic() < self._refuse_until:
                    return
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.write_eof()  # the other side finished sending: pass the half-close on
