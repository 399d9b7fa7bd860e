"""Temporary files and folders inside a given folder, named by process, thread and a counter and
created exclusively (`O_EXCL`, `mkdir`): what `tempfile` gives without its random draw, and
without importing `tempfile`, `random` and `shutil` into every lane command's start-up. A name
left by a killed process of the same pid is stepped over."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from typing import Iterator

_SERIAL = itertools.count()
_TRIES = 100


def _name(folder: str, prefix: str) -> str:
    return os.path.join(folder, f"{prefix}{os.getpid()}_{threading.get_ident()}_{next(_SERIAL)}")


def new_file(folder: str, prefix: str, mode: int = 0o600) -> tuple[int, str]:
    """(fd open for writing, path) of a new file in `folder`, which is made when missing."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TRIES):
        path = _name(folder, prefix)
        try:
            return os.open(path, flags, mode), path
        except FileNotFoundError:
            make_folders(folder)
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: no free temporary name for {prefix}")


@contextlib.contextmanager
def new_dir(folder: str, prefix: str) -> Iterator[str]:
    """A new empty folder in `folder` for the block, removed after it with what it holds."""
    for _ in range(_TRIES):
        path = _name(folder, prefix)
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"{folder}: no free temporary name for {prefix}")
    try:
        yield path
    finally:
        _remove(path)


def _remove(path: str) -> None:
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        inner = os.path.join(path, name)
        if os.path.isdir(inner) and not os.path.islink(inner):
            import shutil   # not what a temporary index folder holds

            shutil.rmtree(inner, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(inner)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def make_folders(folder: str) -> None:
    """`os.makedirs(folder, exist_ok=True)` that holds against a concurrent removal of empty folders on
    the way (another lane's removal takes the slug's folder once it is empty, between this makedirs'
    check of a parent and its `mkdir` of the child): made again, up to a hundred times."""
    for _ in range(_TRIES):
        try:
            os.makedirs(folder, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    os.makedirs(folder, exist_ok=True)


def copy_file(src: str, dst: str) -> None:
    """`src`'s bytes into a new file `dst`."""
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)
