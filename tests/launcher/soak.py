"""The soak: failure cycles of real jobs, counting the processes each one leaves behind.

Every cycle starts `platform-run launch` (or `%dist_run` in a real kernel) with ranks that
misbehave (tests/assets/launch/behave.py), makes the job fail or stops it the way a user
would, and then looks for any process that still carries the job's folder in its environment
(at any depth: grandchildren, setsid daemons, double forks). Expected: 0, every cycle.

    python tests/launcher/soak.py --cycles 100      # `make soak`
The suite runs a small sample (tests/launcher/test_soak.py).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.launcher.helpers import (BEHAVE, PY, job_folder, job_processes, kill_job, log_text,  # noqa: E402
    start_cli, wait_for, wait_no_processes)

# name -> (behave.py mode and args, how the cycle ends: "fails" or a signal to the launcher)
CLI_SCENARIOS = {
    "crash": (["crash"], "fails"),
    "segv": (["segv"], "fails"),
    "term-ignoring-grandchild": (["grandchild"], "fails"),
    "setsid-grandchild": (["escape", "crash"], "fails"),
    "double-fork": (["doublefork"], "fails"),
    "cli-sigint": (["grandchild", "nofail"], signal.SIGINT),
    "cli-sigterm": (["grandchild", "nofail"], signal.SIGTERM),
    "cli-sigkill": (["escape", "hang"], signal.SIGKILL),
}
SCENARIOS = [*CLI_SCENARIOS, "kernel-interrupt"]
# the launcher's exit: a failed job 1, Ctrl-C or SIGTERM an interrupt (130), SIGKILL its signal
EXIT = {"fails": 1, signal.SIGINT: 130, signal.SIGTERM: 130, signal.SIGKILL: -signal.SIGKILL}
# what a rank prints once the process the scenario is about runs and ignores SIGTERM
# (behave.py prints it only then): without it, a cycle would pass without testing anything
STRAY_MARKERS = {"grandchild": "GRANDCHILD", "escape": "ESCAPED", "doublefork": "DAEMON"}


def strays_up(job_dir: str, marker: str | None) -> list[int] | None:
    """Every rank's stray process (its pid from the marker line), alive and ignoring SIGTERM;
    None while one is not there yet."""
    if marker is None:
        return []
    pids = []
    for rank in ("0", "1"):
        lines = [line for line in log_text(job_dir, rank).splitlines() if line.startswith(marker)]
        if not lines:
            return None
        pid = int(lines[0].split()[1])
        if not ignores_term(pid):
            return None
        pids.append(pid)
    return pids


def ignores_term(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            mask = next(line for line in fh if line.startswith("SigIgn:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


def cli_cycle(name: str, root: Path) -> tuple[list[int], str]:
    """One launcher run; returns (processes left after the end, what happened)."""
    args, end = CLI_SCENARIOS[name]
    marker = STRAY_MARKERS.get(args[0])
    log_dir = root / "logs"
    log_dir.mkdir(parents=True)
    proc = start_cli(["--nproc", "2", "--grace", "1", "--", PY, BEHAVE, *args], log_dir)
    job_dir = ""
    try:
        job_dir = job_folder(log_dir)
        if end != "fails":
            wait_for(lambda: all("READY" in log_text(job_dir, r) for r in ("0", "1")), 60,
                     what="ranks running")
            wait_for(lambda: strays_up(job_dir, marker) is not None, 60,
                     what=f"every rank's {marker} process up, ignoring SIGTERM")
            proc.send_signal(end)
        proc.communicate(timeout=90)
        left = wait_no_processes(job_dir, timeout=15)
        # rank 1, which fails, prints the marker before it does (rank 0 may be stopped sooner)
        if marker is not None and marker not in log_text(job_dir, "1"):
            raise AssertionError(f"rank 1 never started its {marker} process: nothing was tested")
        if proc.returncode != EXIT[end]:
            raise AssertionError(f"launcher exit {proc.returncode}, expected {EXIT[end]}")
        return left, f"launcher exit {proc.returncode}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if job_dir:
            kill_job(job_dir)


def kernel_cycle(root: Path, kernel=None) -> tuple[list[int], str]:
    """`%dist_run` in a real IPython kernel, interrupted while the ranks run."""
    from jupyter_client.manager import start_new_kernel

    from tests.helpers import clean_env

    own = kernel is None
    km, kc = kernel or start_new_kernel(kernel_name="python3", cwd=str(root), env=clean_env())
    log_dir = root / "logs"
    job_dir = ""
    try:
        msg_id = kc.execute(f"%load_ext platform_plugin\n%dist_run --nproc 2 --grace 1 "
                            f"--tracking none --log-dir {log_dir} python {BEHAVE} grandchild nofail")
        wait_for(log_dir.exists, 60, what="the log folder")
        job_dir = job_folder(log_dir)
        wait_for(lambda: all("child up" in log_text(job_dir, r) for r in ("0", "1")), 60,
                 what="ranks and their children up")
        km.interrupt_kernel()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            reply = kc.get_shell_msg(timeout=max(1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        return wait_no_processes(job_dir, timeout=15), f"cell {reply['content'].get('ename')}"
    finally:
        if job_dir:
            kill_job(job_dir)
        if own:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def run(cycles: int, only: list[str] | None = None, out=sys.stdout) -> dict[str, int]:
    """`cycles` cycles round-robin over the scenarios; returns processes left per scenario."""
    names = only or SCENARIOS
    left: dict[str, int] = {n: 0 for n in names}
    errors: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="platform-soak-") as tmp:
        for i in range(cycles):
            name = names[i % len(names)]
            root = Path(tmp) / f"cycle{i}"
            root.mkdir()
            t0 = time.monotonic()
            try:
                pids, what = (kernel_cycle(root) if name == "kernel-interrupt"
                              else cli_cycle(name, root))
            except Exception as exc:  # noqa: BLE001 - a broken cycle is reported, the soak goes on
                pids, what = [], f"ERROR {type(exc).__name__}: {exc} {_listing(root)}"
                errors.append(f"cycle {i + 1} {name}: {what}")
            left[name] += len(pids)
            print(f"cycle {i + 1:3}/{cycles} {name:26} {what:22} left {len(pids)} "
                  f"({time.monotonic() - t0:.1f}s)", file=out, flush=True)
    total = sum(left.values())
    print(f"{cycles} cycles in {time.monotonic() - started:.0f}s: {total} process(es) left "
          f"{left if total else ''}; {len(errors)} cycle(s) could not run", file=out, flush=True)
    if errors:
        left["errors"] = len(errors)
    return left


def _listing(root: Path) -> str:
    """What the job folder held when a cycle broke (for the report)."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    heads = {p.name: p.read_text(errors="replace")[:80] for p in root.rglob("*.log")}
    return f"files={files[:12]} logs={heads}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--only", nargs="*", choices=SCENARIOS, help="scenarios (default: all)")
    args = parser.parse_args(argv)
    os.environ.pop("PLATFORM_LOG_DIR", None)
    return 0 if sum(run(args.cycles, args.only).values()) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
