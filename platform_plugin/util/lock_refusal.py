"""The words of a lock's refusal (util/code_lock.py): imported only when a lock is refused, so a
job's start, which takes its locks without a word, does not compile them."""
from __future__ import annotations

import os

from platform_plugin.errors import ConfigError


def busy(kind: str, root: str | os.PathLike, what: str, holder: str,
         exclusive: bool) -> ConfigError:
    """CLEAN_ROOT_BUSY: `what` may not work in `root` while `holder` (the last to write the lock
    file, maybe "") holds its `kind` lock (`exclusive`: we asked for it alone)."""
    last = f" (the last to start there: {holder}{_ended(holder)})" if holder else ""
    if kind == "tree":  # a job works in the folder, our cleanup below it
        text = (f"{what} would remove files in {root}, the working folder of a running job or "
                f"notebook run{last}. Wait for them to end (or stop them), then retry")
    elif kind == "below":  # a cleanup works below the folder, we in all of it
        text = (f"a folder in {root} is being cleaned by {holder or 'a cleanup'}, and {what} "
                "would work there too. Retry when that cleanup has ended")
    elif exclusive:
        text = (f"{root} is in use by a job, a notebook run or a cleanup{last}: a cleanup there "
                "would remove files they are writing. Wait for them to end (or stop them), "
                "then retry")
    else:
        text = (f"{root} is being cleaned by {holder or 'a cleanup'}: it would remove the files "
                f"{what} works on. Retry when the cleanup has ended")
    return ConfigError(text, code="CLEAN_ROOT_BUSY")


def unavailable(root: str | os.PathLike, problem: str) -> ConfigError:
    """CLEAN_LOCK_UNAVAILABLE: a cleanup that cannot take its lock file could not see a job."""
    return ConfigError(f"cannot use the lock of {root}: {problem}. Without it a cleanup could "
                       "remove files a running job writes, so nothing was removed",
                       code="CLEAN_LOCK_UNAVAILABLE")


def _ended(holder: str) -> str:
    """Shared holders rewrite the name, so the one named may have ended while others go on."""
    try:
        os.kill(int(holder.rsplit("(pid ", 1)[1].rstrip(")")), 0)
    except ProcessLookupError:
        return ", which has ended since: another one is still there"
    except (IndexError, ValueError, OSError):
        pass  # no pid in it; alive (EPERM: another user's)
    return ""
