"""Output without processes: what the display shows for chunks fed to it, and the logs."""
from __future__ import annotations

from platform_plugin.launcher.display.output import Output
from platform_plugin.launcher.display.chatter import CHATTER

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


def _stdout_over(monkeypatch, encoding: str):
    import io
    import sys
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="replace")
    monkeypatch.setattr(sys, "stdout", stdout)
    return stdout


def test_the_cli_display_writes_the_ranks_bytes_after_what_was_printed_before(tmp_path, monkeypatch):
    """A UTF-8 sys.stdout with a byte layer (the CLI's terminal, file or pipe) gets the ranks'
    bytes prefixed, never decoded: what the rank wrote, even bytes that are not UTF-8 (as `cat`
    shows them); text printed before the job stays before it."""
    stdout = _stdout_over(monkeypatch, "utf-8")
    print("before the job")
    output = Output("all")
    output.open("0", str(tmp_path / "rank_0.log"))
    output.feed("0", b"a\n\xff\xfe b\nc\rd\n")
    output.note("a note")
    output.close()
    assert stdout.buffer.getvalue() == (b"before the job\n[rank 0] a\n[rank 0] \xff\xfe b\n"
                                        b"[rank 0] d\n[launcher] a note\n")


def test_a_stdout_of_another_encoding_gets_decoded_text(tmp_path, monkeypatch):
    stdout = _stdout_over(monkeypatch, "latin-1")
    output = Output("all")
    output.open("0", str(tmp_path / "rank_0.log"))
    output.feed("0", "\u00e9t\u00e9 \u4e2d\n".encode())
    output.close()
    assert stdout.buffer.getvalue() == "[rank 0] \u00e9t\u00e9 ?\n".encode("latin-1")


def test_the_tail_is_the_last_lines_of_however_many_chunks_hold_them(tmp_path):
    """Short chunks, a chunk of many short lines, lines longer than the window looked at first."""
    from platform_plugin.launcher.display.output import TAIL_LINES
    from platform_plugin.launcher.display.screen_tail import LINE_BYTES
    output = Output("none")
    output.open("0", str(tmp_path / "rank_0.log"))
    for i in range(3 * TAIL_LINES):  # one line a chunk: every chunk of the tail is kept
        output.feed("0", b"%d\n" % i)
    assert output.tail("0") == [str(i) for i in range(2 * TAIL_LINES, 3 * TAIL_LINES)]
    output.feed("0", b"".join(b"line %d\n" % i for i in range(1000)))  # one chunk holds it all
    assert output.tail("0") == ["line %d" % i for i in range(1000 - TAIL_LINES, 1000)]
    output.feed("0", b"x" * 5000 + b"\nlast")  # a long line, and a partial one at the end
    long_line = "x" * (LINE_BYTES // 2) + " … " + "x" * (LINE_BYTES // 2)  # its start and end
    assert output.tail("0") == ["line %d" % i for i in range(1002 - TAIL_LINES, 1000)] + [
        long_line, "last"]
    output.feed("0", b"\n" + b"".join(b"%04d" % i + b"y" * 996 + b"\n" for i in range(30)))
    assert output.tail("0") == ["%04d" % i + "y" * 996 for i in range(30 - TAIL_LINES, 30)]
    output.close()


def test_the_failure_quote_shows_a_progress_bar_once_in_its_last_state(tmp_path, monkeypatch):
    """The CLI's quote (Output.tail) is the terminal's last screen (ScreenTail, as the board's):
    a bar the display showed at every flush of a quiet partial line was quoted once per state,
    a colour code was quoted as stray escapes, a 200 KB line as 4 lines (display pieces)."""
    from platform_plugin.launcher.display import output as output_module
    monkeypatch.setattr(output_module, "PARTIAL_FLUSH_S", 0.0)  # every flush shows the partial
    shown: list[str] = []
    output = Output("all", write=shown.append)
    output.open("0", str(tmp_path / "rank_0.log"))
    for percent in (10, 50, 90):
        output.feed("0", b"\rtrain: %3d%%|####" % percent)
        output.flush()
    output.feed("0", b"\n\x1b[31mValueError: bad batch\x1b[0m\n")
    output.feed("0", b"y" * 200_000 + b" the end\n")
    output.close()
    assert [line for line in "".join(shown).splitlines() if "train" in line] == [
        "[rank 0] train:  10%|####", "[rank 0] train:  50%|####", "[rank 0] train:  90%|####"]
    tail = output.tail("0")
    assert tail[:2] == ["train:  90%|####", "ValueError: bad batch"]
    assert len(tail) == 3 and tail[2].endswith("y the end"), [len(line) for line in tail]


class _CountingChatter:
    """CHATTER that records how many bytes each `search` scanned."""

    def __init__(self) -> None:
        self.scanned: list[int] = []

    def search(self, chunk: bytes) -> bool:
        self.scanned.append(len(chunk))
        return CHATTER.search(chunk)

    def match(self, line: bytes) -> bool:
        return CHATTER.match(line)


def test_the_chatter_test_scans_each_byte_of_a_chunk_once(tmp_path):
    """The chatter test (two substring searches over every byte: ~40 us per 64 KiB of text with
    a "[" in it) is shared by the display and the failure quote's tail: it ran twice a chunk."""
    hide = _CountingChatter()
    output = Output("all", write=lambda text: None, hide=hide)
    output.open("0", str(tmp_path / "rank_0.log"))
    chunk = b"".join(b"[rank 0] step %07d loss [0.5]\n" % i for i in range(2000))
    output.feed("0", chunk)  # whole lines
    output.feed("0", chunk + b"[rank 0] step")  # and a line being written
    output.feed("0", b" 2001\n" + chunk)  # that line's end
    whole_scans = [n for n in hide.scanned if n > 4096]
    assert len(whole_scans) == 3, hide.scanned
    assert sum(hide.scanned) < 3 * len(chunk) + 3 * 4096, hide.scanned
    output.close()


def test_a_chatter_line_cut_anywhere_between_two_chunks_stays_hidden(tmp_path):
    """Its mark may be in the held part, in the next chunk, or cut in two."""
    line = CHATTY.split(b"\n")[0] + b"\n"
    for cut in range(1, len(line)):
        shown: list[str] = []
        output = Output("all", write=shown.append, hide=CHATTER)
        output.open("0", str(tmp_path / "rank_0.log"))
        output.feed("0", b"before\n" + line[:cut])
        output.feed("0", line[cut:] + b"after\n")
        output.close()
        assert "".join(shown).splitlines() == ["[rank 0] before", "[rank 0] after"], cut
        assert output.tail("0") == ["before", "after"], cut
        assert output.hidden() == 1, cut


def test_only_the_redrawn_lines_of_a_chunk_change_in_the_display(tmp_path):
    """Progress bars among ordinary lines (tqdm between log lines): each bar in its last state,
    a `\\r\\n` line end dropped, the lines between shown as written; the log keeps every byte."""
    chunk = (b"first\n\rbar  10%\rbar  20%\rbar 30%\nlog 1\nlog 2\r\n\r\r\nlog 3\n"
             b"\rbar 40%\rbar 50%\n" + b"".join(b"line %d\n" % i for i in range(100)) +
             b"last\rlast!\n")
    shown: list[str] = []
    output = Output("all", write=shown.append)
    output.open("0", str(tmp_path / "rank_0.log"))
    output.feed("0", chunk[:7])  # a chunk ending exactly before a bar
    output.feed("0", chunk[7:])
    output.close()
    expected = ["first", "bar 30%", "log 1", "log 2", "", "log 3", "bar 50%",
                *("line %d" % i for i in range(100)), "last!"]
    assert "".join(shown).splitlines() == ["[rank 0] " + line for line in expected]
    assert (tmp_path / "rank_0.log").read_bytes() == chunk


def test_the_rank_logs_are_written_in_batches_in_order_and_at_the_displays_tick(tmp_path,
                                                                               monkeypatch):
    """A rank's chunks are held and written together (one writev: half the kernel's CPU of
    64 KiB writes); the launcher's own text (a stack dump) lands after what the rank wrote
    before it; the display's tick writes what was held for LOG_DELAY_S."""
    from platform_plugin.launcher.display import output as output_module
    log = tmp_path / "rank_0.log"
    output = Output("none")
    output.open("0", str(log))
    output.feed("0", b"one\n")
    output.feed("0", b"two, no newline yet")
    assert log.read_bytes() == b""  # held: less than LOG_BATCH, younger than LOG_DELAY_S
    output.log_only("0", b"-- stack --\n")
    assert log.read_bytes() == b"one\ntwo, no newline yet-- stack --\n"
    output.feed("0", b"x" * output_module.LOG_BATCH)  # a batch's worth: written at once
    assert log.stat().st_size == 35 + output_module.LOG_BATCH
    output.feed("0", b"three\n")
    monkeypatch.setattr(output_module, "LOG_DELAY_S", 0.0)
    output.flush()
    assert log.read_bytes() == (b"one\ntwo, no newline yet-- stack --\n" +
                                b"x" * output_module.LOG_BATCH + b"three\n")
    output.close()


def test_a_tail_made_from_the_held_chunks_is_the_tail_fed_every_chunk(tmp_path, monkeypatch):
    """The tail is brought up to date only when asked for or after TAIL_HELD bytes, and then
    skips the chunks a later one scrolls out: the same lines as ScreenTail fed chunk by chunk,
    for random chunks of ordinary lines, bars, chatter, long lines, escapes, `\\r\\n`."""
    import random
    from platform_plugin.launcher.display import output as output_module
    from platform_plugin.launcher.display.screen_tail import ScreenTail
    rng = random.Random(7)
    kinds = [b"line %d", b"\rbar 10%%\rbar %d%%", CHATTY.split(b"\n")[0] + b" %d",
             b"[INFO] ME(1): [mindspore/ccsrc/x/collective/y] %d", b"x" * 5000 + b" %d", b"%d",
             b"\x1b[31mred %d\x1b[0m", b"step [%d] (loss)"]
    for trial in range(60):
        monkeypatch.setattr(output_module, "TAIL_HELD", rng.choice([1, 100, 5000, 1 << 20]))
        hide, size = rng.choice([None, CHATTER]), rng.choice([1, 4, 20])
        output = Output("none", hide=hide)
        output.tail_lines = size
        output.open("0", str(tmp_path / "rank_0.log"))
        fed = ScreenTail(size, hide)
        text = b"".join(rng.choice(kinds) % i + rng.choice([b"\n", b"\n", b"\r\n", b""])
                        for i in range(rng.randint(1, 300)))
        start = 0
        while start < len(text):
            chunk = text[start:start + rng.choice([1, 7, 100, 3000, 20000])]
            start += len(chunk)
            output.feed("0", chunk)
            fed.feed(chunk)
            if rng.random() < 0.1:
                assert output.tail("0") == fed.shown(), trial
        assert output.tail("0") == fed.shown(), trial
        output.close()


def test_the_chatter_test_finds_a_chatter_line_among_any_number_of_parentheses():
    """The cheap answer looks at the byte before each of a chunk's first `(`s (a chatter line's
    module name ends there); a chunk with more falls back to the substring searches."""
    line = CHATTY.split(b"\n")[0]
    for before in (0, 5, 31, 32, 33, 200):
        chunk = b"".join(b"[INFO] step %d (loss %d)\n" % (i, i) for i in range(before))
        assert CHATTER.search(chunk + line + b"\n" + chunk), before
        assert not CHATTER.search(chunk + b"[INFO] step (DISTRIBUTED) x\n" + chunk), before
    collective = b"[WARNING] HCCL_ADPT(1,7f):2026 [mindspore/ccsrc/a/collective/b.cc:1] init\n"
    assert CHATTER.search(b"(" + collective) and CHATTER.match(collective)


def test_a_line_torch_prefixed_with_the_rank_is_not_prefixed_again(tmp_path):
    """torch writes a rank's uncaught exception as `[rank1]: ...`: shown once, as it is; a line
    of another rank's prefix, or one that only quotes it, keeps ours."""
    shown: list[str] = []
    output = Output("all", write=shown.append)
    output.open("1", str(tmp_path / "rank_1.log"))
    output.feed("1", b"epoch 1\n[rank1]: Traceback (most recent call last):\n[rank1]: Runtime")
    output.feed("1", b"Error: boom\nsaid [rank1]: x\n[ran")
    output.feed("1", b"k1]: split\n[rank2]: from elsewhere\n")
    output.close()
    assert "".join(shown).splitlines() == [
        "[rank 1] epoch 1", "[rank1]: Traceback (most recent call last):",
        "[rank1]: RuntimeError: boom", "[rank 1] said [rank1]: x", "[rank1]: split",
        "[rank 1] [rank2]: from elsewhere"]
    assert (tmp_path / "rank_1.log").read_bytes().count(b"[rank1]:") == 4  # the log: unchanged
