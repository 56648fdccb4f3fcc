"""Node 0's link under a flood of connections, at a low descriptor limit: a Hub in a process of
its own (soft RLIMIT_NOFILE 256), 2,000 idle TCP connections from another process. libzmq
retries a failed accept in a loop at the limit, and the job's own pipes and files would fail:
the Hub's connection cap keeps the process below it."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.launcher.helpers import free_port_pair

pytestmark = pytest.mark.slow

HUB = textwrap.dedent("""
    import os, resource, subprocess, sys, threading, time
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from platform_plugin.launcher.servers.hub import Hub
    from platform_plugin.launcher.servers.spoke import Spoke
    port = int(sys.argv[1])
    hub = Hub("127.0.0.1", port, 2, key=None, silence_s=10)
    flood = subprocess.Popen([sys.executable, "-c", sys.argv[2], str(port)])
    failed_opens = 0
    for _ in range(40):  # while the 2,000 connections are held
        try:
            os.close(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            failed_opens += 1
        time.sleep(0.1)
    flood.wait()
    spoke = Spoke("127.0.0.1", port, 1, 2, "node1", key=None, silence_s=10)
    agreed = []
    joining = threading.Thread(target=lambda: agreed.append(hub.agree({"job_id": "j"}, 1)))
    joining.start()
    spoke.agree({"job_id": "x"}, 1)
    joining.join(30)
    spoke.close()
    hub.close()
    print("FAILED_OPENS", failed_opens, "AGREED", agreed, "SAID", hub.said)
""")
FLOOD = textwrap.dedent("""
    import resource, socket, sys, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    port = int(sys.argv[1])
    held, deadline = [], time.monotonic() + 30
    while len(held) < 2000 and time.monotonic() < deadline:
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            pass  # not taken (node 0's queue is full): a flood all the same
    time.sleep(3)
""")


def test_two_thousand_idle_connections_at_a_low_descriptor_limit():
    port = free_port_pair()
    done = subprocess.run([sys.executable, "-c", HUB, str(port), FLOOD], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED_OPENS 0 AGREED [{'job_id': 'j'}]" in done.stdout, done.stdout + done.stderr
    assert "too many connections" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
