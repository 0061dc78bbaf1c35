"""`cfp emulate`: real blob operations against Azurite, and the change feed the service would
write for them (Avro chunks, manifests, segments), for tests, benchmarks and the demo.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.emulator.azurite import Azurite
    from processor.emulator.emulator import Emulator, EmulatorConfig
    from processor.emulator.feed_writer import FeedWriter

__getattr__ = exports(__name__)
__all__ = ["Azurite", "Emulator", "EmulatorConfig", "FeedWriter"]
