"""`platform-run compare` logs its tables (and `--plot`'s chart) to the job's run under
compare/. For a job read from its spools that is the only part that needs MLflow, whose import
alone takes seconds: the command prints its answer and hands the logging to a process of its own
(`python -m platform_plugin.comparison.report_log REQUEST`), which writes what it did, and any
refusal of the store, to `<spool folder>/compare.log`. One such process at a time per job (an
flock): two compares in a row log their tables one after the other."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from platform_plugin.util.regular_file import read_json

LOG_FILE = "compare.log"
MAX_REQUEST_BYTES = 64 << 20  # compare's tables of every rank, as JSON: a bound for its reader
LOCK_FILE = "compare.lock"


def log_report(client, run_id: str, tables: dict[str, dict], png: str | None) -> list[str]:
    """Log the tables (artifact path -> columns) and the chart; a note per refusal (logging
    the report to the run is a bonus: a refusing store is a note, not a failure)."""
    notes = []
    for where, data in tables.items():
        notes += _attempt(lambda: _log_table(client, run_id, data, where), where, run_id)
    if png:
        notes += _attempt(lambda: client.log_artifact(run_id, png, "compare"),
                          f"compare/{Path(png).name}", run_id)
    return notes


def log_in_background(spool_dir: Path, uri: str, run_id: str, tables: dict[str, dict],
                      png: str | None) -> Path:
    """Start the process that logs the report; returns the request file it works from (it
    removes the file when done)."""
    request = spool_dir / f".compare-{os.getpid()}-{time.monotonic_ns()}.json"
    # the columns in the table's order (state.write_json_atomic sorts keys)
    request.write_text(json.dumps({"uri": uri, "run_id": run_id, "tables": tables, "png": png}),
                       encoding="utf-8")
    with open(spool_dir / LOG_FILE, "ab") as log:
        subprocess.Popen([sys.executable, "-m", "platform_plugin.comparison.report_log",
                          str(request)], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    return request


def _log_table(client, run_id: str, data: dict, where: str) -> None:
    """MLflow's log_table the first time (it tags the run, so the UI lists the table). When the
    table is there (compare run again), log_table would download it and append this one: every
    row once more per compare. Then, and where log_table's pandas conversion fails (a pandas
    release it does not know), the same table in the same JSON layout (pandas' "split")
    replaces the file through log_dict."""
    folder = where.rsplit("/", 1)[0] if "/" in where else None
    if where not in {a.path for a in client.list_artifacts(run_id, folder)}:
        try:
            client.log_table(run_id, data=data, artifact_file=where)
            return
        except Exception:  # noqa: BLE001 - MLflow wraps the pandas error in its own exception
            pass
    client.log_dict(run_id, {"columns": list(data), "data": [list(r) for r in zip(*data.values())]},
                    where)


def _attempt(call, where: str, run_id: str) -> list[str]:
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        return [f"note: could not log {where} to run {run_id}: {type(exc).__name__}: {exc}"]
    return []


def main(argv: list[str]) -> int:
    request = Path(argv[0])
    with open(request.parent / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_json(str(request), MAX_REQUEST_BYTES, within=str(request.parent))
        from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink  # MLflow: this process's work

        client = MlflowSink().client(data["uri"])
        notes = log_report(client, data["run_id"], data["tables"], data["png"])
        request.unlink()
    for note in notes:
        print(note)
    print(f"compare: logged {', '.join(data['tables'])} to run {data['run_id']}"
          f"{' with the chart' if data['png'] else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
