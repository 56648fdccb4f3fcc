"""The first answer of a comparison: `platform-run compare JOB` of a local 8-rank job, and the
first `%dist_compare` table in a fresh kernel, each beside MLflow's own client reading the same
points (`MlflowClient().get_metric_history` per rank). Writes the `compare` section of
docs/benchmarks.md.

    .venv/bin/python bench/compare.py --rounds 5 --steps 500

The job: 8 ranks, `--steps` points each of `loss` and `samples_per_s`, written by the real
tracker and delivered by the real forwarder into a SQLite store. CLI: a fresh process per run,
until it exits (the CLI's answer; the tables are logged to the run by a process of its own
afterwards). Kernel: a fresh ipykernel per run with the extension loaded (what a notebook's first
cell does), timed from the execute request to the first display message of the cell (the table)
and to the cell's end; the MLflow side is the same client calls in a fresh kernel, to the cell's
end. The sides alternate every round (benchdoc.alternate).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdoc import alternate, load_text, spread, write_section  # noqa: E402  (bench/benchdoc.py)

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent
sys.path.insert(0, str(REPO))


def make_job(folder: Path, steps: int) -> tuple[str, dict[str, str]]:
    """(job id, rank label -> run id) of a delivered 8-rank job in `folder`."""
    from platform_plugin.tracking.job.handle import JobTracking
    from platform_plugin.tracking.rank.identity import RankIdentity
    from platform_plugin.tracking.rank.tracker import Tracker
    from platform_plugin.tracking.shared.state import StreamState
    from tests.tracking.helpers import make_plan

    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    plan = make_plan(folder, 8)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    for rank in range(8):
        t = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"],
                    RankIdentity.from_env({**plan.ranks[rank].env, **env}))
        for step in range(steps):
            t.log_metric("loss", 1.0 / (step + 1) + 0.01 * rank, step=step)
            t.log_metric("samples_per_s", 400.0 + rank, step=step)
        t.close()
    jt.start()

    class Ok:
        ok, status = True, "succeeded"
    report = jt.finish(Ok())
    assert report.pending == 0, report
    report.wait_ended()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])
    return plan.job_id, {str(r): StreamState.load(spool, f"rank_{r}").run_id for r in range(8)}


def env_for(folder: Path) -> dict:
    """Both sides with Python's bytecode caches, as a user has them (pip compiles an install's,
    a checkout writes its own on the first run), kept in the bench's folder: the warm-up run
    writes them. Without (PYTHONDONTWRITEBYTECODE=1) every run would compile every module of
    the package it imports, which no user's run does."""
    skip = ("PLATFORM_", "RANK_", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(skip)},
            "PYTHONPATH": str(REPO), "PLATFORM_LOG_DIR": str(folder / "platform_logs"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
            "PYTHONPYCACHEPREFIX": str(folder / "bytecode")}


def mlflow_code(folder: Path, run_ids: dict[str, str]) -> str:
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    return ("from mlflow import MlflowClient\n"
            f"c = MlflowClient({uri!r})\n"
            f"series = {{lb: c.get_metric_history(rid, 'loss') for lb, rid in {run_ids!r}.items()}}\n"
            "assert all(len(s) > 0 for s in series.values())\n")


def cli_sides(folder: Path, job_id: str, run_ids: dict[str, str], cpu: dict) -> dict:
    """The two CLI sides; each run's CPU seconds (user + sys of the process: what a shared
    machine's load does not stretch as it stretches wall time) go into `cpu`."""
    env = env_for(folder)

    def ours():
        with cpu_of("platform-run compare: CPU (user+sys)", cpu):
            done = subprocess.run([str(VENV / "platform-run"), "compare", job_id], cwd=folder,
                                  env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "rank-07" in done.stdout, done.stderr
        return lambda: wait_logged(folder / "platform_logs" / job_id / "tracking")

    def theirs():
        with cpu_of("MlflowClient.get_metric_history x8: CPU (user+sys)", cpu):
            subprocess.run([sys.executable, "-c", mlflow_code(folder, run_ids)], cwd=folder,
                           env=env, check=True, timeout=300)

    return {"platform-run compare": ours, "MlflowClient.get_metric_history x8": theirs}


@contextlib.contextmanager
def cpu_of(name: str, cpu: dict):
    """The CPU seconds of the child processes waited for inside the block (the compare's own
    logging process runs in a session of its own and is not counted)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    yield
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cpu.setdefault(name, []).append(used)


def wait_logged(spool: Path) -> None:
    """Compare's logging process done before the next run (it shares the 2 cores)."""
    deadline = time.monotonic() + 300
    while list(spool.glob(".compare-*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)


def in_kernel(folder: Path, code: str) -> tuple[float, float]:
    """(seconds to the first display message, seconds to the cell's end) of `code` in a fresh
    kernel that loaded the extension first."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(folder), env=env_for(folder))
    try:
        kc.execute_interactive("%load_ext platform_plugin", timeout=120)
        first = []
        start = time.perf_counter()

        def output(msg):
            if msg["msg_type"] == "display_data" and not first:
                first.append(time.perf_counter() - start)

        reply = kc.execute_interactive(code, timeout=300, output_hook=output)
        end = time.perf_counter() - start
        assert reply["content"]["status"] == "ok", reply["content"]
        return (first[0] if first else end), end
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def kernel_sides(folder: Path, job_id: str, run_ids: dict[str, str], results: dict) -> dict:
    """Each side returns nothing timed by alternate() itself: the kernel's start is not the
    comparison's; the in-kernel timings are collected in `results`."""
    def ours():
        table, cell = in_kernel(folder, f"%dist_compare {job_id} --no-ui")
        results.setdefault("%dist_compare: table", []).append(table)
        results.setdefault("%dist_compare: cell (table + chart)", []).append(cell)

    def theirs():
        _first, cell = in_kernel(folder, mlflow_code(folder, run_ids))
        results.setdefault("MlflowClient.get_metric_history x8 in a kernel", []).append(cell)

    return {"ours": ours, "theirs": theirs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        folder = Path(tmp)
        job_id, run_ids = make_job(folder, args.steps)
        load_before = load_text()
        cpu: dict[str, list[float]] = {}
        cli = alternate(cli_sides(folder, job_id, run_ids, cpu), args.rounds)
        for values in cpu.values():
            del values[0]  # alternate's warm-up run of each side
        kernel: dict[str, list[float]] = {}
        alternate(kernel_sides(folder, job_id, run_ids, kernel), args.rounds)
        for values in kernel.values():
            del values[0]  # alternate's warm-up run of each side
        load_after = load_text()
    rows = [f"| {name} | {spread(values)} |" for name, values in {**cli, **cpu, **kernel}.items()]
    body = "\n".join([
        "## compare",
        "",
        f"`.venv/bin/python bench/compare.py --rounds {args.rounds} --steps {args.steps}`: a "
        f"local 8-rank job, {args.steps} points of `loss` and `samples_per_s` per rank, in a "
        "SQLite store. Each run a fresh process (CLI) or a fresh kernel with the extension "
        "loaded (kernel); the two sides alternated every round, one warm-up each not counted "
        "(it writes the bytecode caches every later run reads, as an installed package has "
        "them). Medians (min–max) of the rounds; the CPU rows are the CLI process's own user + "
        "sys seconds, which a shared machine's load stretches far less than wall time.",
        f"Load: {load_before} before, {load_after} after.",
        "",
        "| what | time |",
        "|---|---|",
        *rows,
        "",
        "Goals: `platform-run compare` of a local 8-rank job <= 0.5 s, the first `%dist_compare` "
        "table <= 1 s. Compare reads a local job from its spools (no MLflow import); MLflow's "
        "client pays its import and the store's opening first.",
    ])
    print(body)
    write_section("compare", body)


if __name__ == "__main__":
    main()
