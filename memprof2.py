import asyncio, threading, time, os, ctypes, gc
from bench.read_throughput import measure_ours, WORKDIR
from processor.emulator.azurite import Azurite
from processor.logs import configure_logging
configure_logging(level="WARNING")
def cur_rss():
    with open(f"/proc/{os.getpid()}/status") as f:
        for l in f:
            if l.startswith("VmRSS"): return int(l.split()[1])//1024
peak=[0]; stop=False
def sampler():
    while not stop:
        peak[0]=max(peak[0], cur_rss()); time.sleep(0.02)
az = Azurite(WORKDIR / "azurite-small").start()
try:
    import polars
    print("before", cur_rss())
    th=threading.Thread(target=sampler, daemon=True); th.start()
    r = asyncio.run(measure_ours(az.connection_string))
    stop=True; th.join()
    print(f"{r.per_s:,.0f}/s peak {peak[0]}")
    gc.collect(); print("after gc", cur_rss())
    ctypes.CDLL("libc.so.6").malloc_trim(0); print("after malloc_trim", cur_rss())
finally:
    az.stop()
