"""Output without processes: what the display shows for chunks fed to it, and the logs."""
from __future__ import annotations

from platform_plugin.launcher.output import Output
from platform_plugin.launcher.chatter import CHATTER

CHATTY = (b"[WARNING] DISTRIBUTED(1,7f,python):2026-11-30 [cluster_context.cc:1] connecting\n"
          b"step 1 [WARNING] DISTRIBUTED(1,7f,python): quoted inside a line\n"
          b"[INFO] DISTRIBUTED(1,7f,python): registered\n"
          b"[ERROR] DISTRIBUTED(1,7f,python): failed\n")


def test_chatter_is_hidden_only_at_the_start_of_a_line_and_logged_whole(tmp_path):
    shown: list[str] = []
    output = Output("all", write=shown.append, hide=CHATTER)
    output.open("0", str(tmp_path / "rank_0.log"))
    output.feed("0", CHATTY[:30])  # a chunk ending inside a chatter line
    output.feed("0", CHATTY[30:] + b"done\n")
    output.close()
    assert "".join(shown).splitlines() == [
        "[rank 0] step 1 [WARNING] DISTRIBUTED(1,7f,python): quoted inside a line",
        "[rank 0] [ERROR] DISTRIBUTED(1,7f,python): failed",
        "[rank 0] done"]
    assert output.hidden() == 2
    assert (tmp_path / "rank_0.log").read_bytes() == CHATTY + b"done\n"


def test_every_line_of_a_chunk_is_prefixed_and_decoded_once(tmp_path):
    shown: list[str] = []
    output = Output("all", write=shown.append)
    output.open("sched", str(tmp_path / "sched.log"))
    output.feed("sched", b"a\nb \xc3\xa9t\xc3\xa9\n\xff\xfe\nc\r")  # \r: a progress line
    output.feed("sched", b"d\n")
    output.close()
    assert "".join(shown) == "[sched] a\n[sched] b \u00e9t\u00e9\n[sched] \ufffd\ufffd\n[sched] d\n"
    assert output.tail("sched") == ["a", "b \u00e9t\u00e9", "\ufffd\ufffd", "d"]


def test_ranks_writing_faster_than_a_pass_drains_lose_nothing(tmp_path):
    """Each pass reads at most a pipe's worth per rank (so one rank cannot hold the loop); what
    is left is read on the next pass. 3 ranks, each making 24 writes of 1 MiB, keep them full."""
    from platform_plugin import launch
    from tests.launcher.helpers import PY
    writer = ("import hashlib,os,sys\nr=int(os.environ['RANK_ID'])\n"
              "block=b''.join(b'%d %07d ' % (r, i) + b'y' * 50 + b'\\n' for i in range(18000))\n"
              "for i in range(24): sys.stdout.buffer.write(block[:1 << 20])\n"
              "sys.stdout.buffer.flush()\n")
    shown: list[str] = []
    result = launch([PY, "-c", writer], nproc=3, backend="plain", tracking="none",
                    log_dir=str(tmp_path), write=shown.append)
    shown_lines = "".join(shown).splitlines()
    for rank in range(3):
        block = b"".join(b"%d %07d " % (rank, i) + b"y" * 50 + b"\n" for i in range(18000))
        log = (tmp_path / result.job_id / f"rank_{rank}.log").read_bytes()
        assert log == block[:1 << 20] * 24  # 1 MiB cuts a line: 23 lines are joined from 2 writes
        mine = [line for line in shown_lines if line.startswith(f"[rank {rank}] ")]
        assert len(mine) == log.count(b"\n") + 1  # every line shown; the last one has no newline
