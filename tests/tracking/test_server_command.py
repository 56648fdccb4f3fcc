"""`platform-run server` as a user runs it: a real PostgreSQL cluster and a real `mlflow server`,
started by the command, both gone when the command is gone - SIGKILLed included - and the
cluster shut down cleanly either way (it starts again on the same folder without recovery);
nobody in without credentials (MLflow's basic-auth app), requests made with urllib as curl would;
a job, `sync` and `compare` without the right credentials say what to fix (TRACKING_AUTH)."""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests

from platform_plugin.util.procfs import alive
from tests.helpers import ASSETS, clean_env, process_tree, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir():
    from platform_plugin.tracking.server.postgres import missing_reason
    why = missing_reason()
    if why:
        pytest.skip(why)
    root = tempfile.mkdtemp(prefix="platform-server-")  # /tmp: the postgres user can reach it
    os.chmod(root, 0o755)
    yield Path(root) / "data"
    subprocess.run(["pkill", "-KILL", "-f", root])  # what a failed test left (postgres -D, mlflow)
    shutil.rmtree(root, ignore_errors=True)


class ServerCommand:
    """`platform-run server` in a session of its own; `url` once it printed its URI line,
    `env_lines` the .env lines it printed (`auth`: the admin's name and password)."""

    def __init__(self, data: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "platform_plugin", "server", "--port", "0", "--workers", "1",
             "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=clean_env(), start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(self._env_printed, timeout=240, interval=0.2, what="the .env lines")
        self.env_lines = [x.strip() for x in self.lines if x.startswith("MLFLOW_TRACKING_")]
        values = dict(line.split("=", 1) for line in self.env_lines)
        self.url = values["MLFLOW_TRACKING_URI"]
        self.auth = (values.get("MLFLOW_TRACKING_USERNAME"), values.get("MLFLOW_TRACKING_PASSWORD"))
        self.tree = process_tree(self.proc.pid)  # the command, MLflow and its workers
        self.postmaster = int((data / "pgdata" / "postmaster.pid").read_text().split()[0])

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def _env_printed(self):
        if self.proc.poll() is not None:
            raise AssertionError("platform-run server ended early:\n" + "".join(self.lines))
        return any(x.startswith("MLFLOW_TRACKING_PASSWORD=") for x in self.lines)

    def all_gone(self) -> bool:
        return not any(alive(pid) for pid in [*self.tree, self.postmaster])


def _log_since(path: Path, offset: int) -> str:
    return path.read_text(errors="replace")[offset:]


def test_sigkilled_server_command_takes_mlflow_and_postgres_down_cleanly(data_dir):
    first = ServerCommand(data_dir)
    assert requests.get(f"{first.url}/health", timeout=10).ok
    assert len(first.tree) >= 2, first.tree  # the command and MLflow's server at least
    pg_log = data_dir / "postgres.log"
    before_kill = len(pg_log.read_text(errors="replace"))

    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    wait_for(first.all_gone, timeout=60, what="MLflow and PostgreSQL stopped after the SIGKILL")
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()
    stopped = _log_since(pg_log, before_kill)
    assert "received smart shutdown request" in stopped and "database system is shut down" in stopped, stopped
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{first.url}/health", timeout=5)

    # the same folder starts again, from a clean shutdown (no crash recovery), and SIGTERM stops it
    before_start = len(pg_log.read_text(errors="replace"))
    second = ServerCommand(data_dir)
    started = _log_since(pg_log, before_start)
    assert "database system was shut down at" in started and "not properly shut down" not in started, started
    assert requests.get(f"{second.url}/health", timeout=10).ok
    os.kill(second.proc.pid, signal.SIGTERM)
    assert second.proc.wait(timeout=60) == 0, "".join(second.lines)
    wait_for(second.all_gone, timeout=30, what="everything stopped after SIGTERM")


def _migration_of(server_pid: int) -> int | None:
    """The schema migration `platform-run server` runs as a child (python -c ...)."""
    for pid in process_tree(server_pid)[1:]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"initialize_backend_stores" in fh.read():
                    return pid
        except OSError:
            continue
    return None


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds `text` (the data folder: postgres -D, initdb)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if text.encode() in fh.read() and alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_sigkilled_mid_migration_the_server_command_leaves_no_process(data_dir):
    """The migration child shared the command's process group and nobody watched it: SIGKILLed
    while migrating, the command left it (parent 1) retrying the stopped database for more than
    80 s. Now every child is handed to the lifeline before it is waited for."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "platform_plugin", "server", "--port", "0", "--workers", "1",
         "--data-dir", str(data_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=clean_env(), start_new_session=True)
    try:
        migration = wait_for(lambda: proc.poll() is None and _migration_of(proc.pid),
                             timeout=240, interval=0.05, what="the schema migration to start")
        postmaster = int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(migration, signal.SIGSTOP)  # held mid-migration: the kill below finds it there
        tree = process_tree(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert alive(migration), "the migration ended before the command was killed"
        os.kill(migration, signal.SIGCONT)
        wait_for(lambda: not any(alive(pid) for pid in [*tree, postmaster])
                 and not _processes_naming(str(data_dir)), timeout=60,
                 what=f"no process of the killed command left (migration {migration})")
    finally:
        proc.kill()
        proc.wait()


def test_a_second_server_on_the_same_data_dir_is_refused_and_the_first_keeps_serving(data_dir):
    """Before: the second `platform-run server --data-dir SAME` failed to start PostgreSQL
    ("another server might be running", exit 1) and its clean-up stopped the FIRST server's
    cluster: the first MLflow still answered /health but every store request failed."""
    first = ServerCommand(data_dir)
    second = subprocess.run(
        [sys.executable, "-m", "platform_plugin", "server", "--port", "0", "--workers", "1",
         "--data-dir", str(data_dir)], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert second.returncode == 2, second.stderr
    assert "[SERVER_DATA_DIR_BUSY]" in second.stderr and f"pid {first.proc.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    created = requests.post(f"{first.url}/api/2.0/mlflow/experiments/create",
                            json={"name": "still-served"}, auth=first.auth, timeout=30)
    assert created.ok, created.text  # the first server's database is still there
    os.kill(first.proc.pid, signal.SIGTERM)
    assert first.proc.wait(timeout=60) == 0, "".join(first.lines)
    wait_for(first.all_gone, timeout=30, what="everything stopped after SIGTERM")


def call(url: str, path: str, body=None, auth=None, method=None) -> tuple[int, str]:
    """(HTTP status, body text) of one request, as curl would make it."""
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    request = urllib.request.Request(url + path, headers=headers, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


BULK = "/platform/api/metrics/bulk"


def _add_user(data: Path, name: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-m", "platform_plugin", "server", "add-user", name,
                           "--data-dir", str(data)], capture_output=True, text=True,
                          env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return values["MLFLOW_TRACKING_USERNAME"], values["MLFLOW_TRACKING_PASSWORD"]


def test_without_credentials_the_team_server_answers_401_and_the_bulk_route_checks_edit(data_dir):
    server = ServerCommand(data_dir)
    admin, url = server.auth, server.url
    assert admin[0] and admin[1], server.env_lines
    assert (data_dir / "mlflow-auth.json").stat().st_mode & 0o777 == 0o600
    status, body = call(url, "/api/2.0/mlflow/experiments/create", {"name": "team"}, admin)
    assert status == 200, body
    experiment = json.loads(body)["experiment_id"]
    status, body = call(url, "/api/2.0/mlflow/runs/create", {"experiment_id": experiment}, admin)
    run = json.loads(body)["run"]["info"]["run_id"]
    point = {"runs": [{"run_id": run, "metrics": [["loss", 0.5, 1, 1700000000000]]}]}

    # nobody in: the REST API (the issue's `runs/delete`), the bulk route, the UI
    for path, body in [("/api/2.0/mlflow/runs/delete", {"run_id": run}), (BULK, point),
                       ("/api/2.0/mlflow/experiments/search", {"max_results": 1})]:
        assert call(url, path, body)[0] == 401, path
        assert call(url, path, body, (admin[0], "wrong-password"))[0] == 401, path
    for path in ["/", BULK, f"/api/2.0/mlflow/runs/get?run_id={run}",
                 "/ajax-api/2.0/mlflow/experiments/search?max_results=1"]:
        assert call(url, path)[0] == 401, path
    assert call(url, f"/api/2.0/mlflow/runs/get?run_id={run}", auth=admin)[0] == 200

    # a team member's own user: reads everything, writes where MLflow's permission model lets
    # them (READ by default on an experiment they did not create, EDIT once granted) - on the
    # bulk route as on log_batch
    alice = _add_user(data_dir, "alice")
    assert call(url, f"/api/2.0/mlflow/runs/get?run_id={run}", auth=alice)[0] == 200
    status, body = call(url, BULK, point, alice)
    assert status == 403 and "PERMISSION_DENIED" in body, (status, body)
    batch = {"run_id": run, "metrics": [{"key": "loss", "value": 0.25, "step": 2,
                                         "timestamp": 1700000000001}]}
    assert call(url, "/api/2.0/mlflow/runs/log-batch", batch, alice)[0] == 403  # the same rule
    unknown = {"runs": [{"run_id": "0" * 32, "metrics": [["loss", 1.0, 1, 1]]}]}
    assert call(url, BULK, unknown, alice)[0] == 403  # as log_batch: no oracle of run ids
    status, body = call(url, f"/api/2.0/mlflow/metrics/get-history?run_id={run}&metric_key=loss",
                        auth=admin)
    assert json.loads(body) == {}, body  # nothing of alice's was stored
    status, body = call(url, "/api/3.0/mlflow/users/permissions/grant",
                        {"username": "alice", "resource_type": "experiment",
                         "resource_id": experiment, "permission": "EDIT"}, admin)
    assert status == 200, body
    status, body = call(url, BULK, point, alice)
    assert status == 200 and json.loads(body) == {"stored": 1}, (status, body)
    later = {"runs": [{"run_id": run, "metrics": [["loss", 0.25, 2, 1700000000001]]}]}
    assert call(url, BULK, later, admin)[0] == 200  # the admin may write anywhere
    os.kill(server.proc.pid, signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0, "".join(server.lines)
    wait_for(server.all_gone, timeout=30, what="everything stopped after SIGTERM")
    for log in ["mlflow-server.log", "postgres.log"]:  # the admin's password: printed once only
        assert admin[1] not in (data_dir / log).read_text(errors="replace"), log


def test_a_job_with_the_printed_env_lines_is_tracked_one_without_them_is_told_what_to_fix(data_dir, tmp_path):
    server = ServerCommand(data_dir)
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text("\n".join(server.env_lines + ["MLFLOW_EXPERIMENT_NAME=authjob"])
                                  + "\n")
    job = subprocess.run(
        [sys.executable, "-m", "platform_plugin", "launch", "--log-dir", str(tmp_path / "logs"),
         "--tracking", "mlflow", "--nproc", "2", "--backend", "plain", "--show", "none", "--",
         sys.executable, str(ASSETS / "launch" / "server_rank.py"), "train", "20"],
        cwd=str(project), env=clean_env(), capture_output=True, text=True, timeout=240)
    assert job.returncode == 0, job.stdout + job.stderr

    wait_for(lambda: _loss_histories(server, "authjob") == [20, 20], timeout=120, interval=1,
             what="both ranks' 20 points in the team server")
    # commands run by hand later find the credentials in the same .env (nothing in the shell)
    for command in (["sync", "--wait", "30"], ["compare", "--metric", "loss"]):
        done = subprocess.run([sys.executable, "-m", "platform_plugin", *command, "--log-dir",
                               str(tmp_path / "logs")], cwd=str(project), env=clean_env(),
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
    assert "rank" in done.stdout and "401" not in done.stdout + done.stderr, done.stdout
    _without_the_right_credentials(server, data_dir, tmp_path / "other")
    os.kill(server.proc.pid, signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0, "".join(server.lines)
    wait_for(server.all_gone, timeout=30, what="everything stopped after SIGTERM")


def _platform_run(project: Path, command: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_plugin", command, "--log-dir",
                           str(project / "logs"), *args], cwd=str(project), env=clean_env(),
                          capture_output=True, text=True, timeout=240)


def _without_the_right_credentials(server: ServerCommand, data: Path, project: Path) -> None:
    """A job whose .env lacks the credentials, or whose user may not write into the
    experiment: the job succeeds and its report says what to fix (the helper stops asking);
    `sync` and `compare` refuse with TRACKING_AUTH naming the variables, no traceback; with
    the printed lines in the .env, `sync` delivers every point."""
    project.mkdir()
    env_file = project / ".env"
    alice = _add_user(data, "alice")  # READ on "authjob", which the admin's job created
    cases = [([f"MLFLOW_TRACKING_URI={server.url}", "MLFLOW_EXPERIMENT_NAME=later"],
              "requires credentials (HTTP 401) and MLFLOW_TRACKING_USERNAME is not set"),
             ([f"MLFLOW_TRACKING_URI={server.url}", "MLFLOW_TRACKING_USERNAME=alice",
               f"MLFLOW_TRACKING_PASSWORD={alice[1]}", "MLFLOW_EXPERIMENT_NAME=authjob"],
              "refused user 'alice' (HTTP 403 PERMISSION_DENIED)")]
    for lines, what in cases:
        env_file.write_text("\n".join(lines) + "\n")
        returncode, out = _launch_told_early(project, what)
        assert returncode == 0 and "Traceback" not in out, out
        assert "0 records delivered" in out and what in out and "platform-run sync" in out, out
        helper = json.loads(next((project / "logs").rglob("helper.json")).read_text())
        assert helper["phase"] == "done" and what in helper["error"], helper
        shutil.rmtree(project / "logs")
    env_file.write_text("\n".join(cases[0][0]) + "\n")  # the job of the first case, anew
    job = _platform_run(project, "launch", "--tracking", "mlflow", "--nproc", "2", "--backend",
                        "plain", "--show", "none", "--", sys.executable,
                        str(ASSETS / "launch" / "server_rank.py"), "train", "20")
    assert job.returncode == 0, job.stdout + job.stderr
    for extra, what in [([], "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"),
                        (["MLFLOW_TRACKING_USERNAME=admin", "MLFLOW_TRACKING_PASSWORD=not-it-4711"],
                         "refused the credentials of user 'admin' (HTTP 401")]:
        env_file.write_text("\n".join(cases[0][0] + extra) + "\n")
        for command in (["sync"], ["compare", "job-of-another-server"]):
            done = _platform_run(project, *command)
            out = done.stdout + done.stderr
            assert done.returncode == 2 and "[TRACKING_AUTH]" in out and what in out, (command, out)
            assert "Traceback" not in out and "not-it-4711" not in out, out
    env_file.write_text("\n".join(server.env_lines + ["MLFLOW_EXPERIMENT_NAME=later"]) + "\n")
    done = _platform_run(project, "sync")
    assert done.returncode == 0 and "pending 0" in done.stdout, done.stdout + done.stderr
    assert _loss_histories(server, "later") == [20, 20]


def _launch_told_early(project: Path, what: str) -> tuple[int, str]:
    """A job whose ranks wait for a file the test makes only once the launcher said `what` (the
    store's refusal, checked at the start): said while the job runs, not when it ends."""
    go = project / "go"
    go.unlink(missing_ok=True)
    job = subprocess.Popen([sys.executable, "-m", "platform_plugin", "launch", "--log-dir",
                            str(project / "logs"), "--tracking", "mlflow", "--nproc", "2",
                            "--backend", "plain", "--show", "none", "--", sys.executable,
                            str(ASSETS / "launch" / "server_rank.py"), "until", str(go)],
                           cwd=str(project), env=clean_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    said = []
    for line in job.stdout:  # the ranks wait (up to 120 s) for `go`: the job has not ended
        said.append(line)
        if "The job goes on" in line:
            assert what in line and "platform-run sync" in line, line
            break
    go.touch()
    said.extend(job.stdout)
    return job.wait(timeout=240), "".join(said)


def test_the_store_check_tells_each_refusal_apart(data_dir):
    """What the launcher checks at a job's start, against the real team server: a wrong
    password, a user who may only read the experiment, the admin (nothing to say)."""
    from platform_plugin.tracking.job.store_check import store_problem
    server = ServerCommand(data_dir)
    admin, url = server.auth, server.url
    assert call(url, "/api/2.0/mlflow/experiments/create", {"name": "theirs"}, admin)[0] == 200
    alice = _add_user(data_dir, "alice")
    env = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": "not-it-4711"}
    assert "refused the credentials of user 'admin' (HTTP 401" in store_problem(url, "theirs", env)
    env = {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": alice[1]}
    assert "refused user 'alice' (HTTP 403 PERMISSION_DENIED)" in store_problem(url, "theirs", env)
    assert store_problem(url, "hers-to-create", env) == ""  # a new experiment: hers
    env = {"MLFLOW_TRACKING_USERNAME": admin[0], "MLFLOW_TRACKING_PASSWORD": admin[1]}
    assert store_problem(url, "theirs", env) == ""
    os.kill(server.proc.pid, signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0, "".join(server.lines)
    wait_for(server.all_gone, timeout=30, what="everything stopped after SIGTERM")


def _loss_histories(server: ServerCommand, experiment_name: str) -> list[int] | None:
    """The number of `loss` points of each rank's run of the experiment (None: no experiment)."""
    status, body = call(server.url, "/api/2.0/mlflow/experiments/get-by-name?experiment_name="
                        f"{experiment_name}", auth=server.auth)
    if status != 200:
        return None
    experiment = json.loads(body)["experiment"]["experiment_id"]
    runs = json.loads(call(server.url, "/api/2.0/mlflow/runs/search",
                           {"experiment_ids": [experiment], "filter": "tags.rank_id != ''"},
                           server.auth)[1]).get("runs", [])
    return sorted(len(json.loads(call(server.url, "/api/2.0/mlflow/metrics/get-history?run_id="
                                      f"{r['info']['run_id']}&metric_key=loss",
                                      auth=server.auth)[1]).get("metrics", [])) for r in runs)
