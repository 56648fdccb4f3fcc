"""The process of a background or detached job: the same launcher as a cell's or a terminal's,
in a process of its own, run as `python -m platform_plugin.launcher.jobs.child`.

Its starter (background.py) writes one JSON document to its stdin: {"command": [...],
"options": {...}, "how": "background"|"detached"}. Until the job folder is the launcher's, its
stdout is a pipe to the starter, which shows what comes (the launcher's notes); then one line
`READY_MARK {"job_id": ..., "job_dir": ...}` and fds 1 and 2 become `<job_dir>/launcher.out`
(the launcher's own output: the notes, the result table), so the starter's pipe ends and the
starter returns. A refusal before that (bad options, a busy device): one line `REFUSED_MARK
{"problems": [[code, message, path], ...]}`, exit 2, nothing created.

Stopping: SIGINT (`platform-run stop`, `%dist_stop`: as Ctrl-C in a terminal), SIGTERM and
SIGHUP (the kernel's lifeline when the kernel dies) stop the job as the stop button does.
Exit status: 0 succeeded, 1 failed, 130 interrupted, 2 refused.
"""
from __future__ import annotations

import json
import os
import signal
import sys

from platform_plugin.errors import ConfigError, PlatformPluginError
from platform_plugin.launcher.api import run
from platform_plugin.launcher.jobs.background import READY_MARK, REFUSED_MARK
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning.plan import LaunchPlan
from platform_plugin.launcher.processes import jobfile
from platform_plugin.util.stops import INTERRUPTED_EXIT, is_interruption, raise_interrupt

OUTPUT_NAME = "launcher.out"  # (not *.log: a restart moves the logs into attempt-N/)


def main() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (a starter may ignore it)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupt)
    spec = json.load(sys.stdin)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    jobfile.launched_as(spec["how"])
    ready = []

    def on_job(plan: LaunchPlan) -> None:
        sys.stdout.write(f"{READY_MARK} " + json.dumps({"job_id": plan.job_id,
                                                         "job_dir": plan.job_dir}) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(os.path.join(plan.job_dir, OUTPUT_NAME),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        os.dup2(fd, 1)  # the starter's pipe ends here: it returns with the job id
        os.dup2(fd, 2)
        os.close(fd)
        ready.append(plan.job_id)

    try:
        options = LaunchOptions(**spec["options"])
        result = run(spec["command"], options, on_job=on_job)
    except ConfigError as exc:
        if not ready:
            sys.stdout.write(f"{REFUSED_MARK} " + json.dumps(
                {"problems": [[p.code, p.message, p.path] for p in exc.problems]}) + "\n")
        else:
            print(f"platform-run: configuration error\n{exc}", file=sys.stderr)
        return exc.exit_code
    except PlatformPluginError as exc:
        print(f"platform-run: {exc}", file=sys.stderr)
        return exc.exit_code
    except BaseException as exc:  # before the ranks started
        if not is_interruption(exc):
            raise
        print("[launcher] stopped before the job started", file=sys.stderr)
        return INTERRUPTED_EXIT
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a stop racing the end: one result
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if result.status == "interrupted":
        return INTERRUPTED_EXIT
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
