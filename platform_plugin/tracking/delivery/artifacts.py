"""An artifact record's file, handed to a sink only once it is known to be the rank's copy.

A spool is a file anyone who can write the job folder can append to, and the forwarding helper
or `sync` runs as the launcher's user: a planted `["a", "~/.ssh/id_rsa", null]` must not make
it upload what that user can read. The tracker copies each artifact under the spool folder's
`artifacts/` when it is logged and the record names the copy relative to the spool folder
(tracking/rank/spool.py refuses any other name as a bad line). Here the file itself is checked:
opened through util/regular_file.py beneath the spool folder (no link followed, a regular file
only: a FIFO never blocks) and with one name only (a hard link to a file elsewhere is not the
tracker's copy). A record that fails is set aside with the reason, never shipped.

The sink is given no path it would open again (a link swapped in after the check would be
followed): it gets a link, in a folder of this process's own (0700), to the descriptor that
was checked (`/proc/<pid>/fd/<n>`), named as the file is (MLflow names the artifact by it).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from platform_plugin.tracking.rank.spool import artifact_refusal
from platform_plugin.util.regular_file import open_regular, reason


class StagedArtifacts:
    """The artifact records of one batch, staged for a sink; `close()` (or the `with` block's
    end) closes the descriptors and removes the links."""

    def __init__(self, spool_dir: str | os.PathLike[str]) -> None:
        self.spool_dir = os.fspath(spool_dir)
        self._folder: str | None = None
        self._fds: list[int] = []
        self._originals: dict[int, list] = {}  # id(staged record) -> the spool's record

    def __enter__(self) -> "StagedArtifacts":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def stage(self, records: list[list]) -> tuple[list[list], list[tuple[list, str]]]:
        """(the records for the sink, artifact records staged; (record, why) of those refused)."""
        sendable: list[list] = []
        refused: list[tuple[list, str]] = []
        for record in records:
            if record[0] != "a":
                sendable.append(record)
                continue
            try:
                staged = [record[0], self._link(record[1]), record[2]]
            except (OSError, ValueError) as exc:
                refused.append((record, f"artifact not shipped: {reason(exc)}"[:500]))
                continue
            self._originals[id(staged)] = record
            sendable.append(staged)
        return sendable, refused

    def original(self, record: list) -> list:
        """The spool's record of a record `stage` gave (itself when it was not staged)."""
        return self._originals.get(id(record), record)

    def _link(self, copy: str) -> str:
        why = artifact_refusal(copy, None)
        if why:
            raise ValueError(why)
        fd = open_regular(os.path.join(self.spool_dir, copy), within=self.spool_dir)
        self._fds.append(fd)
        links = os.fstat(fd).st_nlink
        if links != 1:
            raise ValueError(f"{copy} has {links} names (a hard link): not the copy the tracker made")
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="platform-artifacts-")  # 0700, this user's
        folder = os.path.join(self._folder, str(fd))  # one folder per file: names may repeat
        os.mkdir(folder, 0o700)
        link = os.path.join(folder, os.path.basename(copy))
        os.symlink(f"/proc/{os.getpid()}/fd/{fd}", link)
        return link

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
