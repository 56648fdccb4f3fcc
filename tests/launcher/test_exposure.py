"""Nothing of a single-server job listens beyond loopback (`ss -ltnp` while the job runs)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.launcher.helpers import ASSETS, PY, job_processes, log_text, start_cli, wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not shutil.which("ss"), reason="needs ss (iproute2)")]
PROBE = str(ASSETS / "listen_probe.py")
LOOPBACK = ("127.", "[::1]", "::1")


def listening(pids: set[int]) -> list[tuple[str, int]]:
    """(local address, pid) of every TCP listening socket owned by `pids`."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((fields[3], pid))
    return found


@pytest.mark.parametrize("backend, framework, helper", [("torch", "torch", "store"),
                                                        ("ms-cluster", "mindspore", "sched")])
def test_a_single_server_job_listens_on_loopback_only(tmp_path, backend, framework, helper):
    """torch: the launcher's store helper + gloo; ms-cluster: MindSpore's scheduler + workers."""
    release = tmp_path / "release"
    proc = start_cli(["--nproc", "2", "--backend", backend, "--timeout", "200", "--", PY, PROBE,
                      framework, str(release)], tmp_path / "logs")
    try:
        job_dir = wait_for(lambda: next((str(d) for d in (tmp_path / "logs").glob("*")
                                         if d.is_dir()), None), 60, what="the job folder")
        wait_for(lambda: all("READY" in log_text(job_dir, r) for r in ("0", "1")), 180,
                 what="both ranks past init_process_group")
        sockets = listening(set(job_processes(job_dir)))
        release.write_text("go")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    assert sockets, "the job's store and gloo sockets were expected to show up"
    exposed = [s for s in sockets if not s[0].startswith(LOOPBACK)]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert any(pid for _, pid in sockets), "no listening socket of the job was found"
    if helper == "store":
        assert "rendezvous store listening on 127.0.0.1" in log_text(job_dir, "store")
