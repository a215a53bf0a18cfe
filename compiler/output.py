"""Write a package atomically: everything goes into a temporary sibling
directory, which replaces the destination only once every file is written.
A failure leaves the destination exactly as it was (or absent)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from .emit import Artifact


def write_package(artifacts: Iterable[Artifact], out_dir: str | os.PathLike) -> list[Path]:
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    written: list[Path] = []
    try:
        for art in artifacts:
            target = tmp / art.relpath
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as f:
                for chunk in art.iter_bytes():
                    f.write(chunk)
            written.append(out / art.relpath)
        backup = None
        if out.exists():
            backup = out.parent / f".{out.name}.old-{os.getpid()}"
            os.rename(out, backup)
        os.rename(tmp, out)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return written
