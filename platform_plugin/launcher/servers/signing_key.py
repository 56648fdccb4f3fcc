"""The key that signs the job link's messages on the `--nnodes` route (wire.py): whoever holds
it is one of the job's launchers. The rank-table route derives its own from the table's bytes
(`rank_table_key`) and passes it through `signing_key` as `derived`.

1. `--job-key` / `PLATFORM_JOB_KEY`: the key itself, or `@FILE`: a file only its owner may
   read (0600, as ssh and Jupyter's connection files), the same on every server;
2. else the job id when one is given (`--job-id` / `PLATFORM_JOB_ID`): it keeps another job's
   launchers (or a stray one) out, but anyone who knows the id can sign;
3. else None: the channel is unauthenticated, as torchrun's TCP store is (docs/launch.md says
   who can then stop or start the job).
The key is never printed nor written anywhere.
"""
from __future__ import annotations

import hashlib
import os
import stat

from platform_plugin.errors import ConfigError, Problem

DEFAULT_SILENCE_S = 60.0  # --heartbeat-timeout / PLATFORM_HEARTBEAT_TIMEOUT when unset


def signing_key(job_key: str | None, job_id: str | None, derived: bytes | None = None
             ) -> bytes | None:
    """The HMAC key of a job's link (see the module doc), None when the job has none."""
    if job_key:
        secret = _read(job_key[1:]) if job_key.startswith("@") else job_key.encode()
    elif derived is not None:
        return derived
    elif job_id:
        secret = b"job-id\0" + job_id.encode()
    else:
        return None
    return hashlib.sha256(b"platform-plugin job link\0" + secret).digest()


def rank_table_key(table_path: str, job_id: str | None) -> bytes:
    """The key that authenticates the job link's messages on the rank-table route: the table's
    bytes (every server of the job has the same file, an outsider does not) mixed with the job id
    when one is given (`signing_key` takes it unless --job-key gives another)."""
    digest = hashlib.sha256(b"platform_plugin job link\0")
    with open(table_path, "rb") as fh:
        digest.update(fh.read())
    if job_id:
        digest.update(b"\0job_id=" + job_id.encode())
    return digest.digest()


def _read(path: str) -> bytes:
    def refuse(why: str) -> ConfigError:
        return ConfigError([Problem("LAUNCH_JOB_KEY", f"--job-key @{path[:200]}: {why}",
                                    "--job-key")])
    try:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise refuse(f"cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    info = os.fstat(fd)  # before fdopen, which refuses a folder with IsADirectoryError
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise refuse("is a folder, not a file" if stat.S_ISDIR(info.st_mode) else
                     "is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        if info.st_mode & 0o077:
            raise refuse(f"other users may read it (mode {stat.S_IMODE(info.st_mode):o}): "
                         "chmod 600 it, a key others can read signs for them too")
        secret = fh.read(4096).strip()
    if not secret:
        raise refuse("is empty")
    return secret
