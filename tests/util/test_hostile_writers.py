"""Every writer of a file in a folder others can write (a rank's spool, the output parser's
progress file), against what can be planted where it writes: it answers within seconds (a FIFO
never blocks its open), never writes through a link (the file a link names keeps its bytes),
and either writes its own regular file or refuses with an OSError."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from platform_plugin.tracking.job.parse_process import PROGRESS_FILE, Parser
from platform_plugin.tracking.rank.spool import SpoolWriter
from tests import hostile
from tests.util.test_hostile_readers import answer

OUTSIDE = b"a file outside the folder\n"  # what a link points to: must stay as it is


def _spool(folder: Path) -> None:
    writer = SpoolWriter(folder / "rank_0.jsonl")
    writer.append('["m","loss",1.0,0,1]\n')
    writer.close()


def _progress(folder: Path) -> None:
    os.close(Parser({"pattern": None, "spool_dir": str(folder), "labels": ["0"]}).progress)


# name -> (the file it writes, relative to the folder; the write)
WRITERS = {"a rank's spool": ("rank_0.jsonl", _spool),
           "the output parser's progress": (PROGRESS_FILE, _progress)}
KINDS = ("fifo", "link to a file outside", "link to a device", "socket", "folder")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("writer", WRITERS)
def test_no_writer_hangs_or_writes_through_a_link_on_a_planted_file(tmp_path, writer, kind):
    where, write = WRITERS[writer]
    folder = tmp_path / "spool"
    folder.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(OUTSIDE)
    if kind == "link to a file outside":
        (folder / where).symlink_to(outside)
    else:
        hostile.plant(kind, folder / where)
    _, error = answer(write, folder)
    assert error is not None and isinstance(error, OSError), repr(error)
    assert "\n" not in str(error), str(error)  # a one-line reason
    assert outside.read_bytes() == OUTSIDE  # neither appended to nor truncated


@pytest.mark.parametrize("writer", WRITERS)
def test_each_writer_writes_its_own_file_when_nothing_is_planted(tmp_path, writer):
    where, write = WRITERS[writer]
    _, error = answer(write, tmp_path)
    assert error is None, repr(error)
    assert (tmp_path / where).is_file() and not (tmp_path / where).is_symlink()
