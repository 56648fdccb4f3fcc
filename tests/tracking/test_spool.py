"""Spool, batching, identity and sink choice: the in-rank half of tracking (no sink needed)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from platform_plugin.errors import ConfigError
from platform_plugin.tracking.rank import tracker as tracker_mod
from platform_plugin.tracking.delivery.forwarder import batches
from platform_plugin.tracking.rank.identity import RankIdentity, run_name
from platform_plugin.tracking.shared.job_folders import find_spool_dirs
from platform_plugin.tracking.delivery.offsets import any_spooled, count_pending
from platform_plugin.tracking.sinks import choose, choose_layout
from platform_plugin.tracking.rank.spool import SpoolWriter, encode, encode_metric, read_complete
from platform_plugin.tracking.rank.tracker import NullTracker, Tracker


finite_or_not = st.floats(allow_nan=True, allow_infinity=True)


@settings(deadline=None, max_examples=60)
@given(name=st.text(min_size=1, max_size=20), value=finite_or_not, step=st.integers(0, 2**40))
def test_metric_line_round_trips(name, value, step):
    record = json.loads(encode_metric(json.dumps(name), value, step, 1700000000123))
    assert record[:2] == ["m", name] and record[3:] == [step, 1700000000123]
    assert (math.isnan(record[2]) and math.isnan(value)) or record[2] == value


def test_any_spooled_sees_a_ranks_first_record_only_and_answers_as_told_when_unreadable(tmp_path):
    """The launcher (on_error=False) and the helper (True) ask the same question of a spool."""
    spool = tmp_path / "tracking"
    assert any_spooled(spool, on_error=False) is False and any_spooled(spool, on_error=True) is True
    spool.mkdir()
    (spool / "rank_0.jsonl").write_bytes(b"")  # opened by a rank, nothing written yet
    (spool / "rank_1.jsonl.quarantine").write_bytes(b"x\n")
    (spool / "sink.json").write_bytes(b"{}")
    assert not any_spooled(spool, on_error=True)
    (spool / "rank_0.jsonl").write_bytes(encode("p", "lr", "0.1").encode())
    assert any_spooled(spool, on_error=False)


def test_reader_takes_complete_lines_only_and_skips_garbage(tmp_path):
    path = tmp_path / "rank_0.jsonl"
    path.write_bytes(encode("p", "lr", "0.1").encode() + b'{"not": "a record"}\n'
                     + encode_metric('"loss"', 0.5, 1, 5).encode() + b'["m","loss",0.4')
    chunk = read_complete(path, 0)
    assert [r for r, _ in chunk.records] == [["p", "lr", "0.1"], ["m", "loss", 0.5, 1, 5]]
    assert chunk.bad_lines == 1 and chunk.partial_tail
    assert chunk.end == path.stat().st_size - len(b'["m","loss",0.4')
    assert count_pending(path, chunk.end) == (0, True)


@settings(deadline=None, max_examples=80)
@given(st.lists(st.sampled_from([
    encode_metric('"loss"', 0.5, 1, 5).encode(), encode("p", "lr", "0.1").encode(), b"\n", b"1,2\n",
    b'["m","loss",0.4\n', b'["m","a]b",\n', b'0.5,1,2]\n', b'["m","x",1]\n', b"\xff\xfe\n"]), max_size=12))
def test_one_decode_per_chunk_reads_exactly_what_line_by_line_decoding_reads(tmp_path_factory, lines):
    """Chunks are decoded with one json.loads of the joined lines; fragments and garbage that
    could merge across lines fall back to line by line: the same records, offsets, bad lines."""
    path = tmp_path_factory.mktemp("spool") / "rank_0.jsonl"
    path.write_bytes(b"".join(lines))
    chunk = read_complete(path, 0)
    expected, bad, position = [], [], 0
    for line in lines:
        position += len(line)
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        valid = isinstance(record, list) and record and record[0] in ("m", "p") and len(record) == (
            5 if record[0] == "m" else 3)
        (expected.append((record, position)) if valid else bad.append(position))
    assert chunk.records == expected and chunk.bad_ends == bad and chunk.end == position


def test_writer_reopening_after_a_killed_writer_terminates_the_fragment(tmp_path):
    path = tmp_path / "rank_0.jsonl"
    path.write_bytes(b'["m","loss",0.4')  # what a SIGKILL mid-write leaves
    writer = SpoolWriter(path)
    writer.append(encode("t", "phase", "resumed"))
    writer.close()
    chunk = read_complete(path, 0)
    assert [r for r, _ in chunk.records] == [["t", "phase", "resumed"]]
    assert chunk.bad_lines == 1 and not chunk.partial_tail


def test_a_full_disk_never_raises_into_the_rank_and_loses_nothing_that_fits(tmp_path, monkeypatch):
    """/dev/full answers every write with ENOSPC (a full disk, no mount needed): the writer's
    descriptor is pointed at it (dup2; the writer itself opens regular files only); once it
    points at the real file again the kept records are written, in order."""
    from platform_plugin.tracking.rank import spool
    real = tmp_path / "rank_0.jsonl"
    writer = SpoolWriter(real)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, writer._fd)  # the disk is full
    os.close(full)
    with pytest.warns(UserWarning, match="No space left on device"):
        for step in range(3 * spool.FLUSH_LINES):  # full buffers: writes from append itself
            writer.append(encode_metric('"loss"', 1.0, step, 1))
        writer.flush()  # the tracker's timer thread
    assert isinstance(writer.error, OSError)
    monkeypatch.setattr(spool, "MAX_UNWRITTEN_BYTES", len(writer._unwritten))
    writer.append(encode_metric('"loss"', 1.0, -1, 1))  # over the bound: dropped, counted
    assert writer.dropped == 1
    fd = os.open(real, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, writer._fd)  # the disk has space again
    os.close(fd)
    writer.flush()  # the timer's next tick
    assert writer.error is None
    writer.append(encode_metric('"loss"', 1.0, 3 * spool.FLUSH_LINES, 1))
    writer.close()
    steps = [record[3] for record, _ in read_complete(real, 0).records]
    assert steps == list(range(3 * spool.FLUSH_LINES + 1))


record_strategy = st.one_of(
    st.tuples(st.just("m"), st.sampled_from(["loss", "acc"]), st.floats(0, 1), st.integers(0, 9), st.just(1)),
    st.tuples(st.just("p"), st.sampled_from(["lr", "bs", "opt"]), st.just("v")),
    st.tuples(st.just("t"), st.sampled_from(["a", "b"]), st.just("v")),
)


@settings(deadline=None, max_examples=80)
@given(records=st.lists(record_strategy, max_size=400),
       limits=st.fixed_dictionaries({"m": st.integers(1, 50), "p": st.integers(1, 5), "t": st.integers(1, 5),
                                     "a": st.just(1), "total": st.integers(1, 60)}))
def test_batches_respect_sink_limits_and_keep_order(records, limits):
    items = [(list(r), i + 1) for i, r in enumerate(records)]
    out = list(batches(items, limits))
    assert [x for b in out for x in b] == items
    for batch in out:
        assert 1 <= len(batch) <= limits["total"]
        for kind in ("m", "p", "t"):
            assert sum(r[0] == kind for r, _ in batch) <= limits[kind]
        keyed = [(r[0], r[1]) for r, _ in batch if r[0] in ("p", "t")]
        assert len(keyed) == len(set(keyed)), "a param/tag key twice in one MLflow batch is refused"


def test_tracker_writes_every_call_with_per_key_steps(tmp_path):
    ident = RankIdentity("3", "7", "job-1", "train", "10.0.0.1", "host")
    t = Tracker(tmp_path, ident)
    t.log_params({"lr": 0.1, "bs": 32})
    t.log_metric("loss", 1.5)
    t.log_metrics({"loss": 1.0, "acc": 0.5})
    t.log_metric("loss", 0.5, step=10)
    t.set_tag("phase", "warmup")
    (tmp_path / "model.ckpt").write_bytes(b"weights")
    t.log_artifact(tmp_path / "model.ckpt", "ckpt")
    t.close()
    lines = [json.loads(x) for x in (tmp_path / "rank_3.jsonl").read_text().splitlines()]
    assert [x[:3] if x[0] != "m" else x[:4] for x in lines] == [
        ["p", "lr", "0.1"], ["p", "bs", "32"], ["m", "loss", 1.5, 0], ["m", "loss", 1.0, 1],
        ["m", "acc", 0.5, 0], ["m", "loss", 0.5, 10], ["t", "phase", "warmup"],
        ["a", f"artifacts/rank_3/{os.getpid()}-1/model.ckpt", "ckpt"]]
    assert (tmp_path / lines[-1][1]).read_bytes() == b"weights"  # a copy in the spool folder


def test_an_overlong_metric_name_is_refused_every_time_and_warned_once(tmp_path):
    t = Tracker(tmp_path, RankIdentity("0", None, "j", "n", "s", "h"))
    with pytest.warns(UserWarning) as caught:
        for value in (1.0, 2.0):  # the second call takes the key cache's refused mark
            t.log_metric("m" * 251, value)
    t.log_metric("loss", 0.5)
    t.close()
    lines = [json.loads(x) for x in (tmp_path / "rank_0.jsonl").read_text().splitlines()]
    assert [x[0] for x in lines] == ["r", "r", "m"] and lines[2][:3] == ["m", "loss", 0.5]
    assert len(caught) == 1


def test_identity_without_rank_is_no_rank_as_the_platform_docs(clean_environ):
    ident = RankIdentity.from_env({"JOB_ID": "j"})
    assert ident.label == "no-rank" and ident.stream == "rank_no-rank" and ident.job_id == "j"
    ident = RankIdentity.from_env({"RANK_ID": "12", "DEVICE_ID": "4", "PLATFORM_SERVER_ID": "10.0.0.2"})
    assert (ident.label, ident.device_id, ident.server_id) == ("12", "4", "10.0.0.2")
    assert ident.job_id.startswith(ident.job_name + "-")
    assert [run_name(x) for x in ("0", "7", "12", "no-rank")] == ["rank-00", "rank-07", "rank-12", "rank-no-rank"]


def test_sink_choice_explicit_env_and_auto(tracking_env, request):
    assert choose("mlflow", {}) == "mlflow"
    assert choose("none", {}) is None
    assert choose("auto", {"PLATFORM_TRACKING": "none"}) is None
    assert choose(None, {"PLATFORM_TRACKING": "WFLOGGER"}) == "wflogger"
    assert choose(None, {}) == "mlflow"  # no platform SDK here
    request.getfixturevalue("wflogger_standin")  # the STAND-IN makes the SDK importable
    assert choose(None, {}) == "wflogger"
    assert choose(None, {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}) == "mlflow"
    with pytest.raises(ConfigError, match="use one of"):
        choose("tensorboard", {})
    with pytest.raises(ConfigError, match="flat"):
        choose_layout("nested", {})


def test_tracking_none_gives_a_null_tracker(tracking_env, tmp_path):
    tracking_env.setenv("PLATFORM_TRACKING", "none")
    t = tracker_mod._create()
    assert isinstance(t, NullTracker)
    t.log_metric("loss", 1.0)
    t.log_params({"a": 1})
    assert not (tmp_path / "platform_logs").exists()


def test_unknown_job_is_a_config_error(tracking_env, tmp_path):
    with pytest.raises(ConfigError, match="no tracked jobs"):
        find_spool_dirs(None)
    with pytest.raises(ConfigError, match="no tracked job 'nope'"):
        find_spool_dirs("nope")


def test_forked_child_does_not_repeat_the_parents_buffer(tmp_path):
    """A DataLoader-style fork: the child's copy of the unflushed buffer must not be written."""
    script = f"""
import os
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.rank.tracker import Tracker
t = Tracker({str(tmp_path)!r}, RankIdentity("0", None, "j", "n", "s", "h"), flush_interval=60)
os.register_at_fork(after_in_child=t._after_fork_in_child)
t.log_metric("parent", 1.0)
pid = os.fork()
if pid == 0:
    t.log_metric("child", 2.0)
    t.close()
    os._exit(0)
os.waitpid(pid, 0)
t.close()
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    names = [json.loads(x)[1] for x in (tmp_path / "rank_0.jsonl").read_text().splitlines()]
    assert sorted(names) == ["child", "parent"]


def test_sigkilled_writer_loses_at_most_the_last_flush_interval(tmp_path):
    """A real rank process killed with SIGKILL: everything flushed before is intact and readable."""
    script = f"""
import os, signal, time
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.rank.tracker import Tracker
t = Tracker({str(tmp_path)!r}, RankIdentity("1", None, "j", "n", "s", "h"), flush_interval=0.05)
for i in range(500):
    t.log_metric("loss", 1.0 / (i + 1))
# no flush() call: the timer must write them. Poll (bounded) instead of a fixed sleep that a
# loaded machine can outlast before the timer thread runs.
deadline = time.monotonic() + 30
while t.spool_path.read_bytes().count(b"\\n") < 500 and time.monotonic() < deadline:
    time.sleep(0.02)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    chunk = read_complete(tmp_path / "rank_1.jsonl", 0)
    assert [r[3] for r, _ in chunk.records] == list(range(500)) and chunk.bad_lines == 0
