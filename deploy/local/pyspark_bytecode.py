"""Put byte code into the pyspark.zip that Spark gives its Python workers.

Spark starts each Python worker with `$SPARK_HOME/python/lib/pyspark.zip` first on its path, so
the worker imports PySpark from that zip, and a zip holds no byte code unless it was put there:
each worker compiled PySpark's modules again, 1.4-1.8 s of CPU against 0.6-0.7 s with byte code
(2 cores, 2026-11-28). A worker that plans a Python data source's read must connect back
within a fixed 10 s, which a loaded machine then missed. This adds a `.pyc` beside each `.py`
(unchecked hash-based: valid whatever the entries' times), once; a zip that has them is left.

    python deploy/local/pyspark_bytecode.py
"""

from __future__ import annotations

import compileall
import os
import py_compile
import tempfile
import zipfile
from pathlib import Path

import pyspark


def zip_path() -> Path:
    return Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"


def add_bytecode(path: Path) -> bool:
    """Rewrite the zip at `path` with byte code; False when it had some already."""
    with zipfile.ZipFile(path) as z:
        if any(name.endswith(".pyc") for name in z.namelist()):
            return False
        with tempfile.TemporaryDirectory() as tmp:
            z.extractall(tmp)
            ok = compileall.compile_dir(
                tmp,
                quiet=1,
                legacy=True,  # beside the source: what zipimport looks for
                workers=0,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
            if not ok:
                raise SystemExit(f"{path}: some modules did not compile")
            new = path.with_suffix(".zip.tmp")
            with zipfile.ZipFile(new, "w", zipfile.ZIP_DEFLATED) as out:
                for root, _, files in os.walk(tmp):
                    for name in sorted(files):
                        full = Path(root) / name
                        out.write(full, full.relative_to(tmp).as_posix())
            new.replace(path)
    return True


if __name__ == "__main__":
    target = zip_path()
    print(f"{target}: {'byte code added' if add_bytecode(target) else 'has byte code already'}")
