"""Fixtures and checks for the launcher tests (real processes, no mocks)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ASSETS as ASSETS_ROOT
from tests.helpers import processes, terminal_sigint
from tests.helpers import wait_for  # noqa: F401  (the tests' one wait_for, re-exported)

ASSETS = ASSETS_ROOT / "launch"
BEHAVE = str(ASSETS / "behave.py")
PY = sys.executable


def job_processes(job_dir: str) -> list[int]:
    """Live processes (any depth: grandchildren inherit the env) of the job in `job_dir`."""
    marker = f"PLATFORM_JOB_DIR={job_dir}".encode()
    return [pid for pid, env, stat in processes("environ")
            if marker in env and stat[0] not in ("Z", "X")]


NO_PROCESSES_POLL_S = 0.05  # between two scans of /proc: a scan reads every process's environ


def wait_no_processes(job_dir: str, timeout: float = 15.0) -> list[int]:
    """The job's processes still alive after `timeout` ([] as soon as none is left)."""
    deadline = time.monotonic() + timeout
    while True:
        left = job_processes(job_dir)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(NO_PROCESSES_POLL_S)


def kill_job(job_dir: str) -> None:
    """Test cleanup: whatever a failing test left behind."""
    for pid in job_processes(job_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def kill_jobs(log_dirs) -> None:
    """Clean-up of multi-server tests: every job of these log folders, whatever its state."""
    for log_dir in log_dirs:
        for job_dir in Path(log_dir).iterdir():
            kill_job(str(job_dir))


def private_table(ranktables: Path, name: str, tmp_path: Path) -> Path:
    """A copy of a sample table whose server ids are unique to this test: the stale-rank check
    looks at every process of this user, and other test runs on this machine may be running
    ranks of the sample tables (same devices, same server ids) right now."""
    tag = f"{os.getpid() % 250}.{abs(hash(str(tmp_path))) % 250}"
    text = (ranktables / name).read_text().replace('"10.0.0.', f'"10.{tag}.')
    path = tmp_path / name
    path.write_text(text)
    return path


def loopback_table(tmp_path: Path, servers: int, devices: int) -> Path:
    """A rank table (v1.0) of `servers` servers with `devices` devices each whose server ids are
    loopback addresses unique to this test (127.x.y.N: all of 127/8 is this machine), so that the
    table's first server hosts the launchers' job link here and the stale-rank check never sees
    another test's ranks. Server I's first rank is I * devices (its RANK_START)."""
    tag = f"{os.getpid() % 250}.{abs(hash(str(tmp_path))) % 250}"
    table = {"version": "1.0", "server_count": str(servers), "status": "completed",
             "server_list": [
                 {"server_id": f"127.{tag}.{s + 1}", "host_nic_ip": "reserve",
                  "device": [{"device_id": str(d), "device_ip": f"192.168.{d}.{s + 1}",
                              "rank_id": str(s * devices + d)} for d in range(devices)]}
                 for s in range(servers)]}
    path = tmp_path / f"hccl_{servers}s_{servers * devices}p.json"
    path.write_text(json.dumps(table, indent=1))
    return path


def job_folder(log_dir: Path, timeout: float = 60) -> str:
    """The folder of the job a running launcher writes into `log_dir` (waits for it).

    Hidden entries are not job folders: just before it makes the job folder, the launcher's
    preflight makes and removes `.platform-probe-*` in `log_dir` (util/folders.py: does the
    folder take new entries?). A test that took the first entry it saw caught that probe now
    and then on a loaded machine and then waited 60 s for rank logs in a folder that was gone."""
    return wait_for(lambda: next((str(d) for d in log_dir.iterdir()
                                  if not d.name.startswith(".")), None),
                    timeout, what=f"a job folder in {log_dir}")


def log_text(job_dir: str, name: str) -> str:
    path = Path(job_dir) / (f"{name}.log" if name in ("sched", "store") else f"rank_{name}.log")
    return path.read_text(errors="replace") if path.exists() else ""


def read_job(job_dir: str) -> dict:
    return json.loads((Path(job_dir) / "job.json").read_text())


def start_cli(args: list[str], log_dir: Path, **kw) -> subprocess.Popen:
    """`platform-run launch` as a real child process (its own session so signals are targeted,
    SIGINT as a terminal gives it: tests/helpers.terminal_sigint)."""
    return subprocess.Popen([PY, "-m", "platform_plugin", "launch", "--log-dir", str(log_dir),
                             "--tracking", "none", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=terminal_sigint, **kw)


def results(job_dir: str, names) -> dict:
    """The `RESULT {...}` line each rank printed."""
    out = {}
    for name in names:
        for line in log_text(job_dir, name).splitlines():
            if line.startswith("RESULT "):
                out[name] = json.loads(line[len("RESULT "):])
    return out


def finish_all(procs, timeout: float = 90) -> list[tuple[int, str]]:
    """(exit code, stdout + stderr) of every launcher, in order; kills what is still running.
    One still running after `timeout` fails the test with what every launcher printed (the
    cause is in another launcher's output as often as in its own)."""
    outs = []
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stacks = [stack_of(other) for other in procs if other.poll() is None]
                for other in procs:
                    other.kill()
                said = outs + [(other.wait(), "".join(other.communicate()))
                               for other in procs[len(outs):]]
                raise AssertionError(f"launcher {len(outs)} still ran after {timeout:g}s; "
                                     "what each said:\n" + "\n".join(
                                         f"{n} (exit {code}): {text[-3000:]}"
                                         for n, (code, text) in enumerate(said))
                                     + "\nwhere the running ones were:\n" + "\n".join(stacks)
                                     ) from None
            outs.append((proc.returncode, out + err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return outs


def stack_of(proc: subprocess.Popen) -> str:
    """py-spy's dump of a process still running (where a launcher hangs), or why there is none."""
    from platform_plugin.launcher.processes.stacks import py_spy
    tool = py_spy()
    if tool is None:
        return f"pid {proc.pid}: no py-spy here"
    try:
        with open(f"/proc/{proc.pid}/status") as f:  # a signal blocked or ignored is seen here
            masks = [line for line in f.read().splitlines() if line.startswith("Sig")]
        return " ".join(masks) + "\n" + subprocess.run(
            [tool, "dump", "--pid", str(proc.pid)], capture_output=True, text=True,
            timeout=30).stdout[-4000:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pid {proc.pid}: py-spy failed: {exc}"


def free_port_pair() -> int:
    """A --master-port for a multi-server job on loopback: it and the launchers' control port
    (the next one) are free now, both outside the ephemeral range (util/ports.free_port)."""
    import socket
    from platform_plugin.util.ports import free_port
    while True:
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def planned(command, settings, options, host=None, **attempt):
    """An attempt's plan as a Job makes it: this server's place (`job_place`), then
    `build_plan` at that place. `attempt`: build_plan's keywords (job_id, attempt, ...)."""
    from platform_plugin.launcher.planning.plan import Host, build_plan, job_place
    host = host or Host()
    return build_plan(job_place(command, settings, options, host), settings, options, host,
                      **attempt)
