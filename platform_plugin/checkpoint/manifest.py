"""The job's checkpoint folder and the one rule that says which checkpoint is complete.

Every rank of a launched job gets PLATFORM_CHECKPOINT_DIR: one folder per job that outlives its
restarts (docs/launch.md, "Resuming after a restart"). A checkpoint is a sub-folder
`step-<step:010d>/` holding data files and `manifest.json`, written LAST:

    {"step": int, "epoch": int|null, "attempt_number": int, "rank": int,
     "files": {"<name>": <size in bytes>}, "time": float}

`attempt_number` is the attempt that wrote it, counted as everywhere else: 1 for the first
attempt, 2 for the first restart. Manifests of earlier versions hold `"attempt"` counted from 0
instead; they are read as well (attempt + 1).

Each file is written under a temporary name and renamed (os.replace is atomic on one file
system), the manifest too, after the data. A checkpoint is complete when its manifest parses,
names its own step and every file it lists exists with the listed size; anything else (no
manifest: the rank died before it; a temporary name; a size that differs) is never chosen.

The launcher (node 0) reads `newest_complete` before each attempt and gives every rank, on
every server, the step it chose as PLATFORM_RESUME_STEP; a rank calls `resume_point()`, which
takes that word alone: the ranks of one attempt start at different moments, and a rank that
looked for itself could see a checkpoint a faster rank of the same attempt had just written.

A checkpoint folder is written by every rank and read by the launcher: a manifest is read as
any file others can write (util/regular_file.py: a regular file only, no link followed beneath
the checkpoint folder, at most MAX_MANIFEST_BYTES, nested at most a few levels), and a data file
counts only as a regular file of its own (a link, even to a file of the listed size, does not):
a FIFO, a 200,000-deep manifest, a step folder linked to one outside or a data file linked to
/etc/passwd is never a complete checkpoint, nor is a step folder, manifest or data file another
user owns (the launcher refuses a checkpoint folder another user owns before the job starts).

Rank side: Python 3.7 code and the stdlib only (docs/compat.md), so the variables are read
with os.environ (their declarations are in variables.py).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import time
from typing import Any, Dict, Iterable, Optional

from platform_plugin.util.regular_file import read_json

MANIFEST = "manifest.json"
STEP_FOLDER = re.compile(r"step-([0-9]{10})")
PARTIAL = ".partial-"  # in the name of a file still being written
DIR_VARIABLE = "PLATFORM_CHECKPOINT_DIR"
RESUME_VARIABLE = "PLATFORM_RESUME_STEP"
ATTEMPT_VARIABLE = "PLATFORM_ATTEMPT_NUMBER"  # 1, 2, ... (variables.py)
# A manifest lists file names and sizes: far less than this, however many files
MAX_MANIFEST_BYTES = 1 << 20
MANIFEST_DEPTH = 2  # {"files": {...}}


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """A complete checkpoint: its step, its epoch (None when the writer gave none), its folder
    and the attempt that wrote it (1 for the first attempt, 2 for the first restart, ...; 0
    when no launcher started the process that wrote it)."""

    step: int
    epoch: Optional[int]
    path: str
    attempt: int


class CheckpointUnavailable(SystemExit):
    """The checkpoint folder is not there (never set, removed while the job ran, or not on this
    server). A rank cannot go on without it: uncaught, the rank exits with status 1 and this
    message alone, no traceback (the failure table shows the message)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def removed_message(folder: str) -> str:
    return (f"the checkpoint folder {folder} ({DIR_VARIABLE}) does not exist: it was removed "
            "while the job ran (by a user or a cleanup), or it is not on this server. Its "
            "checkpoints are gone; start the job again, or give --checkpoint-dir a folder every "
            "server sees (a shared mount)")


def checkpoint_dir() -> str:
    """PLATFORM_CHECKPOINT_DIR, which must exist (the launcher creates it before the first
    attempt and never removes it while the job runs)."""
    folder = os.environ.get(DIR_VARIABLE, "").strip()
    if not folder:
        raise CheckpointUnavailable(
            f"{DIR_VARIABLE} is not set: this process was not started by the launcher "
            "(platform-run launch, %dist_run, launch()); set it to a folder to keep checkpoints "
            "in when running on your own")
    if not os.path.isdir(folder):
        raise CheckpointUnavailable(removed_message(folder))
    return folder


def step_path(directory: str, step: int) -> str:
    return os.path.join(directory, "step-%010d" % step)


def step_folder(step: int, directory: Optional[str] = None) -> str:
    """The folder of the checkpoint of `step` (created): where its data files and manifest go."""
    folder = step_path(directory if directory is not None else checkpoint_dir(), _step(step))
    try:
        if stat.S_ISLNK(os.lstat(folder).st_mode):  # planted: never written through
            os.unlink(folder)
    except FileNotFoundError:
        pass
    try:
        os.mkdir(folder)
    except FileExistsError:
        pass
    except FileNotFoundError:  # the checkpoint folder itself is gone
        raise CheckpointUnavailable(removed_message(os.path.dirname(folder))) from None
    return folder


def temporary_path(folder: str, name: str) -> str:
    """Where to write file `name` of a checkpoint before `os.replace` gives it its name: never
    taken for a complete file."""
    return os.path.join(folder, "%s%s%d" % (_file_name(name), PARTIAL, os.getpid()))


def write_file(folder: str, name: str, data: bytes) -> None:
    """Write `data` as `folder/name`, atomically (a temporary name, flushed to disk, renamed)."""
    _write(folder, _file_name(name), data)


def _write(folder: str, name: str, data: bytes) -> None:
    temporary = os.path.join(folder, "%s%s%d" % (name, PARTIAL, os.getpid()))
    try:  # never through a link planted under the temporary name
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(temporary, os.path.join(folder, name))


def write_manifest(folder: str, step: int, epoch: Optional[int], files: Iterable[str]) -> str:
    """Record the checkpoint in `folder` as complete: call it after every data file in `files`
    (names in `folder`) has its final name. Returns the manifest's path."""
    sizes = {}  # type: Dict[str, int]
    for name in files:
        sizes[_file_name(name)] = os.stat(os.path.join(folder, name)).st_size
    if epoch is not None and (type(epoch) is not int or epoch < 0):
        raise ValueError("epoch must be a whole number >= 0 or None, not %r" % (epoch,))
    record = {"step": _step(step), "epoch": epoch, "attempt_number": _environ_int(ATTEMPT_VARIABLE),
              "rank": _environ_int("RANK_ID", _environ_int("RANK")), "files": sizes,
              "time": time.time()}
    _write(folder, MANIFEST, json.dumps(record, sort_keys=True).encode("utf-8"))
    return os.path.join(folder, MANIFEST)


def write_checkpoint(step: int, data: Dict[str, bytes], epoch: Optional[int] = None,
                     directory: Optional[str] = None) -> ResumePoint:
    """A whole checkpoint from bytes (a plain script's state): every file, then the manifest."""
    for name in data:
        _file_name(name)  # refused before anything is written
    folder = step_folder(step, directory)
    for name, content in data.items():
        write_file(folder, name, content)
    write_manifest(folder, step, epoch, list(data))
    return ResumePoint(step, epoch, folder, _environ_int(ATTEMPT_VARIABLE))


def complete(folder: str) -> Optional[ResumePoint]:
    """The checkpoint in `folder` if it is complete, else None."""
    match = STEP_FOLDER.fullmatch(os.path.basename(folder))
    record = read_record(folder)
    attempt = written_by(record)
    if (match is None or attempt is None or not _valid(record)
            or record["step"] != int(match.group(1))):
        return None
    owners = _owners(folder)
    if not (_own(folder, stat.S_ISDIR, owners) and _own(os.path.join(folder, MANIFEST), stat.S_ISREG, owners)):
        return None
    for name, size in record["files"].items():
        try:  # lstat: a link is no data file of this checkpoint, whatever its target's size
            found = os.lstat(os.path.join(folder, name))
        except OSError:
            return None
        if not stat.S_ISREG(found.st_mode) or found.st_size != size or found.st_uid not in owners:
            return None
    return ResumePoint(record["step"], record["epoch"], folder, attempt)


def _owners(step_folder: str) -> Any:
    """Who may own a checkpoint's files: this user, and the checkpoint folder's owner (the
    launcher refuses one of another user's; on a network mount exported with root_squash what
    root writes belongs to `nobody`, the folder too)."""
    owners = {os.geteuid()}
    try:
        owners.add(os.stat(os.path.dirname(os.path.abspath(step_folder))).st_uid)
    except OSError:
        pass
    return owners


def _own(path: str, kind: Any, owners: Any) -> bool:
    """`path` is of that kind (not a link) and owned by one of `owners`: what another user wrote
    into a checkpoint folder (a step folder, a manifest, a data file) is no checkpoint of this
    job's."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return bool(kind(found.st_mode)) and found.st_uid in owners


def read_record(folder: str) -> Any:
    """The JSON value of the step folder's manifest, or None: missing, unreadable, no regular
    file, a link (the step folder or the manifest), too large or too deep, half a file, not
    UTF-8, not JSON."""
    folder = os.path.abspath(folder)
    try:
        return read_json(os.path.join(folder, MANIFEST), MAX_MANIFEST_BYTES,
                         within=os.path.dirname(folder), max_depth=MANIFEST_DEPTH)
    except (OSError, ValueError):
        return None


def newest_complete(directory: str) -> Optional[ResumePoint]:
    """The complete checkpoint of the highest step in `directory`, or None when there is none.
    A `directory` that is gone raises CheckpointUnavailable."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        raise CheckpointUnavailable(removed_message(directory)) from None
    steps = sorted((int(m.group(1)), m.group(0)) for m in map(STEP_FOLDER.fullmatch, names) if m)
    for _, name in reversed(steps):
        point = complete(os.path.join(directory, name))
        if point is not None:
            return point
    return None


def resume_point() -> Optional[ResumePoint]:
    """Where this rank resumes: the checkpoint node 0's launcher chose for the attempt
    (PLATFORM_RESUME_STEP, the same on every server and for every rank; unset: from the
    beginning, even if a faster rank of this attempt already wrote one). A process the
    launcher did not start (no PLATFORM_ATTEMPT_NUMBER) takes the newest complete checkpoint in
    PLATFORM_CHECKPOINT_DIR. None: start from the beginning."""
    directory = checkpoint_dir()
    chosen = os.environ.get(RESUME_VARIABLE, "").strip()
    if not chosen:
        if os.environ.get(ATTEMPT_VARIABLE, "").strip():  # launched: the launcher chose none
            return None
        return newest_complete(directory)
    if not chosen.isdigit():
        raise CheckpointUnavailable("%s=%r is not a step number" % (RESUME_VARIABLE, chosen))
    folder = step_path(directory, int(chosen))
    point = complete(folder)
    if point is None:
        raise CheckpointUnavailable(
            "the launcher resumes this job from step %s, but this server has no complete "
            "checkpoint %s: with several servers, give --checkpoint-dir a folder every server "
            "sees (a shared mount), or copy the checkpoint there" % (chosen, folder))
    return point


def written_by(record: object) -> Optional[int]:
    """The attempt (1, 2, ...) a manifest's record names; None when it names none. An earlier
    version's `"attempt"` counted from 0."""
    if not isinstance(record, dict):
        return None
    number = record.get("attempt_number")
    if _whole(number):
        return number
    old = record.get("attempt")
    return old + 1 if isinstance(old, int) and _whole(old) else None


def _valid(record: object) -> bool:
    if not isinstance(record, dict):
        return False
    files = record.get("files")
    return (_whole(record.get("step")) and written_by(record) is not None
            and _whole(record.get("rank")) and (record.get("epoch") is None
                                                or _whole(record.get("epoch")))
            and isinstance(files, dict) and all(_plain(n) and _whole(s) for n, s in files.items())
            and type(record.get("time")) in (int, float))


def _whole(value: object) -> bool:
    return type(value) is int and value >= 0


def _plain(name: object) -> bool:
    """A file name in the step folder itself (never a path out of it, never a temporary one)."""
    return (isinstance(name, str) and name not in ("", ".", "..", MANIFEST) and "/" not in name
            and os.sep not in name and PARTIAL not in name)


def _file_name(name: str) -> str:
    if not _plain(name):
        raise ValueError("a checkpoint file is a plain name in its step folder (no '/', not "
                         "%s, no '%s'), not %r" % (MANIFEST, PARTIAL, name))
    return name


def _step(step: int) -> int:
    if not _whole(step) or step >= 10 ** 10:
        raise ValueError("a checkpoint's step is a whole number from 0 to 9999999999, not %r"
                         % (step,))
    return step


def _environ_int(name: str, default: int = 0) -> int:
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() else default
