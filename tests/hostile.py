"""The corpus of hostile inputs: what anyone who can write a job, cache, spool or checkpoint
folder may leave there, on purpose or by accident. Every reader of such a folder is checked
against all of it (tests/util/test_hostile_readers.py); a new reader is added to that test's
READERS, a new kind of trap here.

Each entry is something that once hung, crashed or fooled a reader: a FIFO (open() blocks until
a writer comes), a link to /etc/passwd or to a folder outside, 200,000 nested brackets (json's
recursion), a device that never ends, a file far over any size a reader needs.
"""
from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

DEEP = 200_000
PASSWD = "/etc/passwd"

# Raw spool lines no sink can take -> how the forwarder counts the line once set aside: a line
# that is JSON is a refused record ("rejected"), any other an unreadable line ("skipped").
SPOOL_LINES = {
    "a value that is no number": (b'["m","loss","abc",5,1]\n', "rejected"),
    "a step that is no integer": (b'["m","loss",1.0,"5",1]\n', "rejected"),
    "a boolean value": (b'["m","loss",true,5,1]\n', "rejected"),
    "a name that is no text": (b'["p",5,"x"]\n', "rejected"),
    "a lone surrogate": (b'["t","a\\ud800","x"]\n', "rejected"),
    "too few fields": (b'["m","loss",1.0]\n', "rejected"),
    "a 401-digit value": (b'["m","loss",' + b"9" * 401 + b',5,1]\n', "rejected"),
    "a step beyond int64": (b'["m","loss",1.0,' + b"9" * 30 + b',1]\n', "rejected"),
    "an object": (b'{"m": 1}\n', "rejected"),
    "200,000 [": (b"[" * DEEP + b"\n", "skipped"),
    # (half as deep: a line over tracking/rank/spool.py's MAX_LINE_BYTES is quarantined whole)
    "100,000 nested objects": (b'{"a":' * (DEEP // 2) + b"1" + b"}" * (DEEP // 2) + b"\n", "skipped"),
    "deep inside a record": (b'["p","k",' + b"[" * DEEP + b"]" * DEEP + b"]\n", "skipped"),
    "not UTF-8": (b'["t","k","\xff\xfe"]\n', "skipped"),
    "not JSON": (b"abc\n", "skipped"),
    "a NUL": (b"\x00\n", "skipped"),
}

# What can stand where a reader expects a small regular file.
FILE_KINDS = ("fifo", "link to /etc/passwd", "link to a device", "socket", "folder",
              "200,000-deep JSON", "200,000-deep object", "not UTF-8", "huge")


def plant(kind: str, path: Path) -> None:
    """Put a trap of `kind` at `path` (its folder exists; nothing is there yet)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /etc/passwd":
        path.symlink_to(PASSWD)
    elif kind == "link to a device":
        path.symlink_to("/dev/zero")
    elif kind == "socket":
        # bound in a short folder and moved into place: a socket's path has a 108-byte limit
        with tempfile.TemporaryDirectory(dir="/tmp") as short, \
                socket.socket(socket.AF_UNIX) as bound:
            bound.bind(os.path.join(short, "s"))
            os.rename(os.path.join(short, "s"), path)  # the socket file stays
    elif kind == "folder":
        path.mkdir()
    elif kind == "200,000-deep JSON":
        path.write_bytes(b"[" * DEEP)
    elif kind == "200,000-deep object":
        path.write_bytes(b'{"a":' * DEEP + b"1" + b"}" * DEEP)
    elif kind == "not UTF-8":
        path.write_bytes(b'{"step": "\xff\xfe"}')
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(1 << 30)  # 1 GiB, sparse: no reader needs a tenth of it
    else:
        raise ValueError(kind)


def link_step_folder_out(checkpoints: Path, step_name: str, outside: Path) -> None:
    """A step folder that is a link to a folder outside the checkpoint folder (which holds a
    checkpoint that would be complete)."""
    (checkpoints / step_name).symlink_to(outside, target_is_directory=True)


def passwd_size() -> int:
    return os.stat(PASSWD).st_size
