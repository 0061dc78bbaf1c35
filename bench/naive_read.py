"""The baseline of `bench/read_throughput.py`, as a user would write it: list the chunks,
download each whole, decode it with fastavro. `--json` also prints every record as a JSON
line (the work `cfp read` does with them). Reads CFP_CONNECTION_STRING; prints the count to
stderr."""

import io
import json
import os
import sys

import fastavro
from azure.storage.blob import ContainerClient

conn = os.environ["CFP_CONNECTION_STRING"]
feed = ContainerClient.from_connection_string(conn, "$blobchangefeed")
out, count = sys.stdout, 0
for blob in feed.list_blobs(name_starts_with="log/"):
    for record in fastavro.reader(io.BytesIO(feed.download_blob(blob.name).readall())):
        count += 1
        if "--json" in sys.argv:
            out.write(json.dumps(record, default=str) + "\n")
print(count, file=sys.stderr)
