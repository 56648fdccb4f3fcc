"""Multi-server jobs simulated on this machine: one launcher per "server", each with its own log
folder, all on loopback. Real launcher processes; the ranks are small Python scripts (the
framework runs are in test_frameworks.py and tests/tracking/test_multiserver_tracking.py).
The rank-table route uses hccl_standin.py as the HCCL stand-in (no NPU or HCCL here)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.helpers import wait_for
from tests.launcher.helpers import (ASSETS, PY, finish_all, free_port_pair, kill_job, kill_jobs,
                                    log_text, loopback_table, read_job, stack_of, start_cli)

RANK = str(ASSETS / "server_rank.py")
STANDIN = str(ASSETS / "hccl_standin.py")
pytestmark = pytest.mark.slow


def start_servers(tmp_path, nnodes, args, *, order=None, delay=0.0, nproc=2, extra=()):
    """One `platform-run launch` per simulated server, all at the same instant unless `delay`
    (seconds between starts, in `order`)."""
    port = free_port_pair()
    procs = {}
    for node in order or range(nnodes):
        log_dir = tmp_path / f"server{node}"
        log_dir.mkdir(exist_ok=True)
        procs[node] = start_cli(["--nproc", str(nproc), "--nnodes", str(nnodes), "--node-rank",
                                 str(node), "--master-port", str(port), "--backend", "plain",
                                 "--show", "none", *extra, "--", PY, RANK, *args], log_dir,
                                cwd=str(tmp_path))
        time.sleep(delay)
    return [procs[n] for n in range(nnodes)]


def start_node(tmp_path, folder, port, nnodes, node, args, *, nproc=1, extra=(), env=None):
    """One launcher of a job on `port`, its log folder tmp_path/folder."""
    log_dir = tmp_path / folder
    log_dir.mkdir(exist_ok=True)
    return start_cli(["--nproc", str(nproc), "--nnodes", str(nnodes), "--node-rank", str(node),
                      "--master-port", str(port), "--backend", "plain", "--show", "none", *extra,
                      "--", PY, RANK, *args], log_dir, cwd=str(tmp_path), env=env)


def joined(proc, port):
    """The launcher `proc` holds a connection to node 0's control port (it sends its join on
    the same call that connects), and node 0 has had a moment to read the join."""
    def connected():
        try:
            conns = psutil.Process(proc.pid).net_connections("tcp")
        except psutil.NoSuchProcess:
            raise AssertionError("the launcher ended while it should wait for the others")
        return any(c.raddr and c.raddr.port == port + 1 and c.status == "ESTABLISHED"
                   for c in conns)
    wait_for(connected, timeout=60, what="the launcher connected to node 0")
    time.sleep(1)


def wait_running(procs, predicate, what: str, timeout: float = 120) -> None:
    """wait_for `predicate` while every launcher runs. A launcher that ended meanwhile, or the
    timeout, fails the test with what each launcher printed and where the running ones were
    (stack_of, taken before they are killed), not a bare 'timed out' that leaves nothing to
    find the cause with."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline or any(proc.poll() is not None for proc in procs):
            stacks = [stack_of(proc) for proc in procs if proc.poll() is None]
            for proc in procs:
                proc.kill()
            said = [f"launcher {n} (exit {proc.wait()}): {''.join(proc.communicate())[-3000:]}"
                    for n, proc in enumerate(procs)]
            raise AssertionError(f"no {what}:\n" + "\n".join(said + stacks))
        time.sleep(0.1)


def kill_jobs_of(tmp_path, nnodes) -> None:
    """Kill whatever the jobs in every server's folder left running (a test that failed early)."""
    for node in range(nnodes):
        for job_dir in (tmp_path / f"server{node}").iterdir():
            kill_job(str(job_dir))


def job_dirs(tmp_path, nnodes):
    dirs = []
    for node in range(nnodes):
        found = [d for d in (tmp_path / f"server{node}").iterdir() if d.is_dir()]
        assert len(found) == 1, found
        dirs.append(str(found[0]))
    return dirs


def rank_env(job_dir, rank):
    line = next(x for x in log_text(job_dir, str(rank)).splitlines() if x.startswith("ENV "))
    return json.loads(line[4:])


@pytest.mark.parametrize("nnodes, order, delay", [
    (2, None, 0.0),        # started at the same instant
    (2, [1, 0], 1.0),      # node 1 first: it waits for node 0
    (4, None, 0.0),
])
def test_servers_of_one_job_agree_on_its_id_rank_start_and_server_ids(tmp_path, nnodes, order,
                                                                      delay):
    outs = finish_all(start_servers(tmp_path, nnodes, ["env"], order=order, delay=delay))
    assert all(code == 0 for code, _ in outs), outs
    dirs = job_dirs(tmp_path, nnodes)
    assert len({os.path.basename(d) for d in dirs}) == 1  # one job id, nobody passed one
    for node, job_dir in enumerate(dirs):
        for local in range(2):
            env = rank_env(job_dir, 2 * node + local)
            assert env["JOB_ID"] == os.path.basename(job_dir)
            assert env["RANK_START"] == str(2 * node)
            assert env["PLATFORM_SERVER_ID"] == f"node{node}"
            assert env["RANK_SIZE"] == str(2 * nnodes)


def test_explicit_job_id_from_the_environment(tmp_path):
    log_dir = tmp_path / "logs"
    proc = subprocess.run([PY, "-m", "platform_plugin", "launch", "--log-dir", str(log_dir),
                           "--tracking", "none", "--nproc", "1", "--backend", "plain", "--",
                           PY, RANK, "env"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PLATFORM_JOB_ID": "team-run-7"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rank_env(str(log_dir / "team-run-7"), 0)["JOB_ID"] == "team-run-7"


def test_a_failed_rank_on_one_server_stops_the_other_servers(tmp_path):
    """Rank 5 (server 2 of 3) fails after 1 s; the ranks elsewhere would sleep 120 s (a
    collective would wait 30 minutes): every launcher stops its ranks and names the server."""
    procs = start_servers(tmp_path, 3, ["fail-on", "5"])
    outs = finish_all(procs, timeout=60)  # far below the 120 s the healthy ranks would sleep
    dirs = job_dirs(tmp_path, 3)
    try:
        assert [code for code, _ in outs] == [1, 1, 1], outs
        for node in (0, 1):
            result = read_job(dirs[node])["result"]
            assert "server node2" in result["reason"] and "rank 5" in result["reason"]
            assert all(f["stopped_by_launcher"] for f in result["failures"])
        assert read_job(dirs[2])["result"]["root_cause"]["rank_id"] == 5
    finally:
        for job_dir in dirs:
            kill_job(job_dir)


def test_max_restarts_starts_the_whole_job_again_on_every_server(tmp_path):
    outs = finish_all(start_servers(tmp_path, 2, ["fail-once"], extra=["--max-restarts", "1"]))
    assert [code for code, _ in outs] == [0, 0], outs
    dirs = job_dirs(tmp_path, 2)
    for node, job_dir in enumerate(dirs):
        job = read_job(job_dir)
        assert job["attempt"] == 2 and job["result"]["status"] == "succeeded"
        [first] = job["failed_attempts"]
        assert first["attempt"] == 1 and first["status"] == "failed"
        if node == 0:
            assert first["root_cause"]["rank_id"] == 0 and "exit 4" in first["table"]
        assert rank_env(job_dir, 2 * node)["PLATFORM_ATTEMPT_NUMBER"] == "2"
        assert os.path.isfile(os.path.join(job_dir, "attempt-1", f"rank_{2 * node}.log"))


def test_node_0_chooses_the_resume_step_for_every_server(tmp_path):
    """Each server keeps its checkpoints in its own job folder; only node 0's rank 0 wrote
    steps 10 and 20. Node 1's ranks still get PLATFORM_RESUME_STEP=20 (node 0's choice, sent
    with the attempt's start), and one that looks for that checkpoint on its own server is told
    to share the folder, not shown a traceback."""
    outs = finish_all(start_servers(tmp_path, 2, ["checkpoint-once"],
                                    extra=["--max-restarts", "1"]))
    assert [code for code, _ in outs] == [0, 0], outs
    dirs = job_dirs(tmp_path, 2)
    for node, job_dir in enumerate(dirs):
        for rank in (2 * node, 2 * node + 1):
            env = rank_env(job_dir, rank)
            assert env["PLATFORM_RESUME_STEP"] == "20"
            assert env["PLATFORM_CHECKPOINT_DIR"] == os.path.join(job_dir, "checkpoints")
        [first] = read_job(job_dir)["failed_attempts"]
        assert first["resumed"]["step"] == 20 and first["resumed"]["attempt"] == 2
    assert "RESUMED 20" in log_text(dirs[0], "0") and "RESUMED 20" in log_text(dirs[0], "1")
    said = log_text(dirs[1], "2")
    assert "UNAVAILABLE" in said and "--checkpoint-dir" in said and "shared mount" in said
    assert "Traceback" not in said
    assert "attempt 2 resumed from step 20 (checkpoint " in outs[0][1], outs[0][1]


def test_max_restarts_exhausted_shows_every_attempt(tmp_path):
    log_dir = tmp_path / "logs"
    proc = subprocess.run([PY, "-m", "platform_plugin", "launch", "--log-dir", str(log_dir),
                           "--tracking", "none", "--nproc", "2", "--backend", "plain",
                           "--max-restarts", "1", "--", PY, RANK, "fail-on", "1"],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 1
    assert "all 2 attempts failed" in proc.stdout and "| attempt 1 of 2 FAILED after" in proc.stdout
    # the table of the earlier attempt says what the launcher knows of the next one's start
    assert ("attempt 2 started; no platform checkpoint to resume from (the script may keep its "
            "own)") in " ".join(proc.stdout.split())  # wrapped to the terminal
    assert "steps lost" not in proc.stdout
    [job_dir] = [str(d) for d in log_dir.iterdir()]
    assert len(read_job(job_dir)["failed_attempts"]) == 1


def test_a_server_that_refuses_its_part_after_the_start_stops_the_others(tmp_path):
    """Node 1's `--show 0` names a rank of another server: a refusal that needs the plan, which
    exists only once node 0 sent the job's identity. Node 1 exits 2 naming the problem; node 0's
    ranks, which would sleep 120 s, stop at once and node 0 names node 1 (it would otherwise
    wait for node 1's ranks in vain)."""
    port = free_port_pair()
    node0 = start_node(tmp_path, "server0", port, 2, 0, ["fail-on", "99"])
    node1 = start_node(tmp_path, "server1", port, 2, 1, ["fail-on", "99"], extra=("--show", "0"))
    outs = finish_all([node0, node1], timeout=90)
    try:
        assert [code for code, _ in outs] == [1, 2], outs
    finally:
        kill_jobs_of(tmp_path, 1)
    assert "LAUNCH_BAD_SHOW" in outs[1][1], outs[1][1]
    assert "stopped because server node1: its launcher refused the job (LAUNCH_BAD_SHOW)" in \
        outs[0][1], outs[0][1]


def test_a_missing_program_is_refused_before_the_others_are_met(tmp_path):
    """A refusal that needs no plan comes before the job link: node 1 exits 2 at once, without
    waiting for node 0 (which is not even started)."""
    log_dir = tmp_path / "server1"
    proc = start_cli(["--nproc", "1", "--nnodes", "2", "--node-rank", "1", "--master-port",
                      str(free_port_pair()), "--backend", "plain", "--show", "none", "--", PY,
                      str(tmp_path / "no_such_script.py")], log_dir, cwd=str(tmp_path))
    [(code, out)] = finish_all([proc], timeout=60)  # far below the 300 s wait for node 0
    assert code == 2 and "LAUNCH_SCRIPT_MISSING" in out, out
    assert "waiting for node 0" not in out


def start_table_server(tmp_path, table, node, control_port, folder, args=(STANDIN,), *,
                       devices=2, extra=()):
    """One launcher of a rank-table job: it sees only the shared table, its RANK_START and the
    control port (PLATFORM_CONTROL_PORT: tests run side by side, the default would clash)."""
    log_dir = tmp_path / folder
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK_", "DEVICE_", "PLATFORM_", "MS_"))}
    env.update(RANK_TABLE_FILE=str(table), RANK_START=str(devices * node),
               PLATFORM_RUN_MODE="full", PLATFORM_CONTROL_PORT=str(control_port))
    return start_cli(["--backend", "rank-table", "--show", "none", *extra, "--", PY, *args],
                     log_dir, env=env, cwd=str(tmp_path))


def _table_job(tmp_path, table, tag, args=(STANDIN,), extra=()):
    port = free_port_pair()
    return finish_all([start_table_server(tmp_path, table, node, port, f"{tag}/server{node}",
                                          args, extra=extra) for node in (0, 1)])


def _job_ids(tmp_path, tag):
    return [os.path.basename(str(next((tmp_path / tag / f"server{n}").iterdir())))
            for n in (0, 1)]


def test_rank_table_servers_share_one_job_id_and_the_next_job_another(tmp_path):
    """HCCL stand-in ranks; each launcher sees only the shared table and its RANK_START; the
    table's first server hosts the job link and sends the id (rank_table_id.py's rule) to the other."""
    table = loopback_table(tmp_path, 2, 2)
    outs = _table_job(tmp_path, table, "job1")
    assert [code for code, _ in outs] == [0, 0], outs
    first = _job_ids(tmp_path, "job1")
    assert first[0] == first[1]
    os.utime(table, (time.time() + 5, time.time() + 5))  # the platform writes a new table per job
    outs = _table_job(tmp_path, table, "job2")
    assert [code for code, _ in outs] == [0, 0], outs
    second = _job_ids(tmp_path, "job2")
    assert second[0] == second[1] != first[0]


def test_rank_table_servers_stop_each_other_without_any_tracking_store(tmp_path):
    """Untracked: the stop travels over the job link the table's first server hosts, not through
    a tracking store. Rank 3 (the second server) fails after 1 s; the others would sleep 120 s."""
    table = loopback_table(tmp_path, 2, 2)
    outs = _table_job(tmp_path, table, "job", args=(RANK, "fail-on", "3"))
    try:
        assert [code for code, _ in outs] == [1, 1], outs
    finally:
        kill_jobs_of_tag(tmp_path, "job")
    servers = [s["server_id"] for s in json.loads(table.read_text())["server_list"]]
    assert f"stopped because server {servers[1]}: rank 3" in outs[0][1], outs[0][1]


def test_rank_table_servers_restart_together(tmp_path):
    """--max-restarts 1 on both servers: rank 0 fails the first attempt; both start attempt 2."""
    table = loopback_table(tmp_path, 2, 2)
    outs = _table_job(tmp_path, table, "job", args=(RANK, "fail-once"),
                      extra=("--max-restarts", "1"))
    assert [code for code, _ in outs] == [0, 0], outs
    for node in (0, 1):
        [job_dir] = list((tmp_path / "job" / f"server{node}").iterdir())
        assert (job_dir / "attempt-1").is_dir()
        assert rank_env(str(job_dir), 2 * node)["PLATFORM_ATTEMPT_NUMBER"] == "2"


def test_rank_table_servers_resume_from_node_0s_step_in_a_shared_folder(tmp_path):
    """The rank-table route, one --checkpoint-dir both servers see (a shared mount): every rank
    of attempt 2 resumes from step 20, which the first attempt's rank 0 wrote."""
    table = loopback_table(tmp_path, 2, 2)
    shared = tmp_path / "shared-checkpoints"
    outs = _table_job(tmp_path, table, "job", args=(RANK, "checkpoint-once"),
                      extra=("--max-restarts", "1", "--checkpoint-dir", str(shared)))
    assert [code for code, _ in outs] == [0, 0], outs
    assert sorted(p.name for p in shared.iterdir()) == ["step-0000000010", "step-0000000020"]
    for node in (0, 1):
        [job_dir] = list((tmp_path / "job" / f"server{node}").iterdir())
        for rank in (2 * node, 2 * node + 1):
            assert rank_env(str(job_dir), rank)["PLATFORM_RESUME_STEP"] == "20"
            assert "RESUMED 20" in log_text(str(job_dir), str(rank))


def test_rank_table_the_same_server_twice_is_refused(tmp_path):
    """A second launcher with the second server's RANK_START is refused by the first server's
    launcher in the route's words (the table's server and RANK_START: this route has no
    --node-rank); the job runs once."""
    table = loopback_table(tmp_path, 3, 1)
    port = free_port_pair()
    procs = [start_table_server(tmp_path, table, 0, port, "server0", devices=1),
             start_table_server(tmp_path, table, 1, port, "server1", devices=1)]
    wait_for(lambda: any(c.status == "ESTABLISHED" and c.raddr and c.raddr.port == port
                         for c in psutil.Process(procs[1].pid).net_connections("tcp")),
             timeout=60, what="the second server joined")
    twin = start_table_server(tmp_path, table, 1, port, "twin", devices=1)
    [(code, out)] = finish_all([twin], timeout=90)
    second = json.loads(table.read_text())["server_list"][1]["server_id"]
    assert code == 1 and "refused" in out, out
    assert f"already joined as the rank table's server {second}" in out, out
    assert "RANK_START" in out and "--node-rank" not in out, out
    procs.append(start_table_server(tmp_path, table, 2, port, "server2", devices=1))
    outs = finish_all(procs, timeout=90)
    assert [code for code, _ in outs] == [0, 0, 0], outs
    assert not list((tmp_path / "twin").iterdir())


def test_rank_table_another_program_on_the_control_port_is_refused(tmp_path):
    """A web server on the first server's control port: the first server's launcher cannot
    listen there, the second one is told it is not a launcher; both exit 2, nothing started."""
    table = loopback_table(tmp_path, 2, 2)
    first = json.loads(table.read_text())["server_list"][0]["server_id"]
    port = free_port_pair()
    web = subprocess.Popen([PY, "-m", "http.server", str(port), "--bind", first],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(c.laddr.port == port and c.status == "LISTEN"
                             for c in psutil.Process(web.pid).net_connections("tcp")),
                 timeout=60, what="the web server listens")
        outs = finish_all([start_table_server(tmp_path, table, node, port, f"server{node}")
                           for node in (0, 1)], timeout=90)
    finally:
        web.kill()
        web.wait()
    assert [code for code, _ in outs] == [2, 2], outs
    assert "LAUNCH_PORT_BUSY" in outs[0][1] and "--control-port" in outs[0][1], outs[0][1]
    assert "LAUNCH_PORT_BUSY" in outs[1][1] and "not the first server's launcher" in outs[1][1], outs[1][1]


@pytest.mark.parametrize("killed", [1, 0])
def test_rank_table_a_killed_server_is_named_by_the_other(tmp_path, killed):
    """One server's launcher is SIGKILLed while its ranks run (the second, or the first, which
    holds the job link): the other stops its own ranks (they would sleep 120 s) and names it
    by the table's server_id."""
    table = loopback_table(tmp_path, 2, 2)
    port = free_port_pair()
    procs = [start_table_server(tmp_path, table, node, port, f"server{node}",
                                (RANK, "fail-on", "99")) for node in (0, 1)]
    other = 1 - killed
    try:
        wait_for(lambda: all(any((tmp_path / f"server{n}").iterdir()) for n in (0, 1)),
                 timeout=60, what="both job folders")
        time.sleep(1)
        procs[killed].kill()
        [(code, out)] = finish_all([procs[other]], timeout=90)
    finally:
        kill_jobs_of_tag(tmp_path, "")
    # (the link names a server by the table's server_id it joined with)
    name = json.loads(table.read_text())["server_list"][killed]["server_id"]
    assert code == 1 and f"server {name}: its launcher is gone" in out, out


def kill_jobs_of_tag(tmp_path, tag) -> None:
    """What a failed assertion left running under tmp_path/tag/server*."""
    kill_jobs(p for p in (tmp_path / tag).glob("server*"))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_launcher_killed_while_it_waits_for_the_others_can_be_started_again(tmp_path, sig):
    """Node 1 joins, is SIGKILLed (or SIGTERMed: it ends cleanly, "interrupted before the job
    started") before node 2 came, so it started nothing; node 2 joins, then node 1 is started
    again: the job runs on all three servers. Node 0 kept the gone launcher's join: as soon as
    node 2 joined it started the job without node 1 - stopped at once as 'server node1: its
    launcher is gone' after SIGKILL, run to 'succeeded' without rank 1 after SIGTERM - and the
    new node 1 waited for a "go" already sent."""
    port = free_port_pair()
    node0 = start_node(tmp_path, "server0", port, 3, 0, ["env"])
    first = start_node(tmp_path, "server1-first", port, 3, 1, ["env"])
    joined(first, port)
    first.send_signal(sig)
    first.wait()
    node2 = start_node(tmp_path, "server2", port, 3, 2, ["env"])  # before node 1 is back
    joined(node2, port)
    again = start_node(tmp_path, "server1", port, 3, 1, ["env"])
    outs = finish_all([node0, again, node2], timeout=90)
    assert [code for code, _ in outs] == [0, 0, 0], outs
    dirs = job_dirs(tmp_path, 3)
    assert len({os.path.basename(d) for d in dirs}) == 1
    assert [rank_env(d, n)["RANK_START"] for n, d in enumerate(dirs)] == ["0", "1", "2"]


def test_the_same_node_rank_twice_is_refused(tmp_path):
    """A second launcher with --node-rank 1 is refused by node 0 (naming the flag) and starts
    nothing; the job runs once on nodes 0, 1, 2. Both node-1 launchers used to be told to go:
    rank 1 ran twice, with the same RANK_ID."""
    port = free_port_pair()
    node0 = start_node(tmp_path, "server0", port, 3, 0, ["env"])
    node1 = start_node(tmp_path, "server1", port, 3, 1, ["env"])
    joined(node1, port)
    twin = start_node(tmp_path, "twin", port, 3, 1, ["env"])
    code, out = finish_all([twin], timeout=90)[0]
    assert code == 1 and "--node-rank 1" in out and "refused" in out, out
    node2 = start_node(tmp_path, "server2", port, 3, 2, ["env"])
    outs = finish_all([node0, node1, node2], timeout=90)
    assert [code for code, _ in outs] == [0, 0, 0], outs
    assert not list((tmp_path / "twin").iterdir())  # no job folder: nothing ran there
    assert len(job_dirs(tmp_path, 3)) == 3


def test_a_launcher_killed_between_attempts_ends_the_restart_everywhere(tmp_path):
    """--max-restarts 1: rank 0 (node 0) fails; node 1's rank 3 ignores SIGTERM, so node 1's
    launcher is still stopping its ranks (--grace 60) when it is SIGKILLed. Node 0 must not
    start attempt 2 and wait for node 1 to join it (PLATFORM_RENDEZVOUS_TIMEOUT, 300 s): it
    ends, exit 1, naming node 1."""
    port = free_port_pair()
    extra = ["--max-restarts", "1", "--grace", "60"]
    procs = [start_node(tmp_path, f"server{n}", port, 2, n, ["stubborn", "3"], nproc=2,
                        extra=extra) for n in (0, 1)]
    try:
        wait_running(procs, lambda: any("GOT SIGTERM" in log_text(str(d), "3")
                                        for d in (tmp_path / "server1").iterdir()),
                     "GOT SIGTERM from node 1's rank 3", timeout=60)
        procs[1].send_signal(signal.SIGKILL)
        code, out = finish_all(procs[:1], timeout=90)[0]  # far below the 300 s join wait
        assert code == 1 and "node1" in out and "its launcher is gone" in out, out
    finally:
        for proc in procs:
            proc.kill()
        kill_jobs_of(tmp_path, 2)


@pytest.mark.parametrize("addr, why", [
    ("no-such-host.invalid", "does not resolve"),
    ("192.0.2.1", "is not an address of this server"),  # TEST-NET-1: EADDRNOTAVAIL on bind
])
def test_a_master_addr_node_0_cannot_listen_on_is_named(tmp_path, addr, why):
    """Node 0 cannot listen on a --master-addr that does not resolve, or that names another
    machine: LAUNCH_MASTER_ADDR naming the flag (it was LAUNCH_PORT_BUSY, 'choose another
    --master-port', which cannot help)."""
    proc = start_cli(["--nproc", "1", "--nnodes", "2", "--node-rank", "0", "--master-addr",
                      addr, "--master-port", str(free_port_pair()), "--backend",
                      "plain", "--show", "none", "--", PY, RANK, "env"], tmp_path / "server0",
                     cwd=str(tmp_path))
    [(code, out)] = finish_all([proc], timeout=60)
    assert code == 2 and "LAUNCH_MASTER_ADDR" in out and why in out, out
    assert not (tmp_path / "server0").exists()  # refused before any job folder was made
    assert "LAUNCH_PORT_BUSY" not in out


def test_node_0_interrupted_while_the_others_join_ends_them_at_once(tmp_path):
    """Ctrl-C on node 0 while it waits for node 2: node 1 was left waiting for a "go" for
    PLATFORM_RENDEZVOUS_TIMEOUT (300 s), then said 'node 0 did not start the job'."""
    port = free_port_pair()
    node0 = start_node(tmp_path, "server0", port, 3, 0, ["env"])
    node1 = start_node(tmp_path, "server1", port, 3, 1, ["env"])
    joined(node1, port)
    node0.send_signal(signal.SIGINT)
    outs = finish_all([node0, node1], timeout=90)  # far below the 300 s join wait
    assert [code for code, _ in outs] == [130, 1], outs  # node 0 stopped as asked, node 1 not
    assert "node 0's launcher ended without starting the job" in outs[1][1], outs[1][1]


def _interrupted_with_max_restarts(tmp_path, node: int, check) -> None:
    """2 servers with --max-restarts 1; Ctrl-C on `node` once the other's ranks run; both must
    end (130: stopped as asked; the other 1: stopped by the other's end) long before the
    other's 300 s wait for `node` to join attempt 2. `check(outs, dirs)` asserts what each
    said."""
    other = 1 - node
    procs = start_servers(tmp_path, 2, ["fail-on", "99"], extra=["--max-restarts", "1"])
    try:
        wait_running(procs, lambda: any("ENV " in log_text(str(d), str(2 * other))
                                        for d in (tmp_path / f"server{other}").iterdir()),
                     f"start of node {other}'s ranks")
        time.sleep(1)
        procs[node].send_signal(signal.SIGINT)
        outs = finish_all(procs, timeout=90)  # far below the 300 s join wait
        assert outs[node][0] == 130 and outs[other][0] == 1, outs
        check(outs, job_dirs(tmp_path, 2))
    finally:
        for proc in procs:
            proc.kill()
        kill_jobs_of(tmp_path, 2)


def test_node_0_interrupted_with_max_restarts_ends_every_server(tmp_path):
    """Ctrl-C never restarts: node 0 ends, interrupted. Node 1's own result is a failure
    ('stopped because server node0: interrupted'), so it went on to attempt 2 and waited 300 s
    for a node 0 that had left."""
    def check(outs, dirs):
        assert "node 0's launcher ended without starting attempt 2" in outs[1][1], outs[1][1]
        assert read_job(dirs[1])["result"]["status"] == "failed"
    _interrupted_with_max_restarts(tmp_path, 0, check)


def test_node_1_interrupted_with_max_restarts_ends_node_0(tmp_path):
    """The mirror case: Ctrl-C on node 1 ends it (no restart), node 0's result is a failure
    and it went on to attempt 2, waiting 300 s for node 1 to join."""
    def check(outs, dirs):
        assert "the launcher of node1 ended without starting attempt 2" in outs[0][1], outs[0][1]
    _interrupted_with_max_restarts(tmp_path, 1, check)


def test_a_second_node_0_names_the_node_rank(tmp_path):
    """A second launcher with --node-rank 0 cannot listen where the first does: its
    LAUNCH_PORT_BUSY says another node 0 may hold the port (it only said 'choose another
    --master-port', which would split the job)."""
    port = free_port_pair()
    first = start_node(tmp_path, "server0", port, 2, 0, ["env"])
    try:
        wait_for(lambda: any(c.laddr.port == port + 1 and c.status == "LISTEN"
                             for c in psutil.Process(first.pid).net_connections("tcp")),
                 timeout=60, what="node 0 listens")
        twin = start_node(tmp_path, "twin", port, 2, 0, ["env"])
        [(code, out)] = finish_all([twin], timeout=60)
        assert code == 2 and "LAUNCH_PORT_BUSY" in out and "--node-rank 0" in out, out
    finally:
        first.kill()
        first.wait()


def test_another_program_on_the_control_port_is_named_by_the_other_servers(tmp_path):
    """A web server on node 0's --master-port + 1: node 0 itself refuses to start there
    (LAUNCH_PORT_BUSY); node 1's launcher connected to the web server, sent its join and waited
    PLATFORM_RENDEZVOUS_TIMEOUT (300 s) for a "go". Now it misses node 0's greeting and says
    so within HELLO_S (15 s), exit 2, before its job exists."""
    port = free_port_pair()
    web = subprocess.Popen([PY, "-m", "http.server", str(port + 1), "--bind", "127.0.0.1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(c.laddr.port == port + 1 and c.status == "LISTEN"
                             for c in psutil.Process(web.pid).net_connections("tcp")),
                 timeout=60, what="the web server listens")
        node1 = start_node(tmp_path, "server1", port, 2, 1, ["env"])
        [(code, out)] = finish_all([node1], timeout=90)  # far below the 300 s join wait
    finally:
        web.kill()
        web.wait()
    assert code == 2 and "LAUNCH_PORT_BUSY" in out and "not node 0's launcher" in out, out
    assert not any((tmp_path / "server1").iterdir())


def test_a_launcher_that_waits_for_the_others_says_so(tmp_path):
    """Up to PLATFORM_RENDEZVOUS_TIMEOUT (300 s) of silence: a launcher waiting for node 0, or
    node 0 for the others, said nothing until it gave up. Each now says once, after 2 s, what
    it waits for (8 s here, then the usual refusal)."""
    env = {**os.environ, "PLATFORM_RENDEZVOUS_TIMEOUT": "8"}
    port = free_port_pair()
    alone = start_node(tmp_path, "alone", free_port_pair(), 2, 1, ["env"], env=env)
    node0 = start_node(tmp_path, "server0", port, 3, 0, ["env"], env=env)
    node1 = start_node(tmp_path, "server1", port, 3, 1, ["env"], env=env)
    outs = finish_all([alone, node0, node1], timeout=60)
    assert [code for code, _ in outs] == [1, 1, 1], outs
    assert outs[0][1].count("[launcher] waiting for node 0's launcher at 127.0.0.1:") == 1, outs
    assert "(Connection refused; up to 8s" in outs[0][1]
    assert outs[1][1].count(f"[launcher] waiting for node(s) [2] to join on 127.0.0.1:{port + 1}") \
        == 1, outs[1][1]
    assert outs[2][1].count("[launcher] joined node 0; waiting for it to start the job") == 1, \
        outs[2][1]
