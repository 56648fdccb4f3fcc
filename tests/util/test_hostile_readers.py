"""Every reader of a file others can write, against every trap of the corpus (tests/hostile.py):
it answers within seconds (a FIFO never blocks it), never returns what a link points to outside
its folder, and either reads nothing or refuses with an OSError/ValueError (a ConfigError for
the commands' state files) - never a RecursionError, never a hang. A new reader of a job,
spool, cache or checkpoint folder is added to READERS."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from platform_plugin.checkpoint.manifest import complete
from platform_plugin.cleanup.run import load_categories
from platform_plugin.doctor.processes import last_job_rows
from platform_plugin.errors import ConfigError
from platform_plugin.launcher.processes.jobfile import read as read_job_file
from platform_plugin.launcher.resume import highest_checkpoint_step
from platform_plugin.tracking.delivery.artifacts import StagedArtifacts
from platform_plugin.tracking.delivery.offsets import count_pending
from platform_plugin.tracking.delivery.reading import set_aside_records
from platform_plugin.tracking.rank.spool import read_complete
from platform_plugin.tracking.shared.jupyter_session import jupyter_servers
from platform_plugin.tracking.shared.state import SinkConfig
from platform_plugin.util.regular_file import read_json
from tests import hostile

ANSWER_S = 60  # a loaded machine counts a sparse 1 GiB file for long; one blocked on a FIFO never answers
STEP = "step-0000000001"
ARTIFACT = "artifacts/rank_0/1-1/model.bin"

# name -> (where the trap goes, relative to the folder; how the reader reads the folder)
READERS = {
    "util.regular_file.read_json": ("f.json", lambda d: read_json(str(d / "f.json"), 1 << 20, within=str(d))),
    "checkpoint manifest": (f"{STEP}/manifest.json", lambda d: complete(str(d / STEP))),
    "checkpoint steps of an attempt": (f"{STEP}/manifest.json", lambda d: highest_checkpoint_step(str(d), 0)),
    "job.json": ("job.json", lambda d: read_job_file(str(d))),
    "the doctor's last job": ("logs/job-1/job.json", lambda d: last_job_rows(str(d / "logs"))),
    "tracking state file": ("sink.json", lambda d: SinkConfig.load(d)),
    "spool": ("rank_0.jsonl", lambda d: read_complete(d / "rank_0.jsonl", 0)),
    "pending lines": ("rank_0.jsonl", lambda d: count_pending(d / "rank_0.jsonl", 0)),
    "set aside records": ("rank_0.jsonl.rejected", lambda d: set_aside_records(d, "rank_0")),
    "an artifact record's file": (f"{ARTIFACT}", lambda d: _staged(d)),
    "cleanup rule file": ("rules/planted.toml", lambda d: load_categories(d / "rules")),
    "Jupyter runtime file": ("runtime/jpserver-1.json",
                             lambda d: jupyter_servers({"JUPYTER_RUNTIME_DIR": str(d / "runtime")})),
}


def _staged(folder: Path) -> list:
    """What delivery makes of an artifact record naming the trap: refused, or (a regular file,
    the 1 GiB one) a link to its checked descriptor, never read here."""
    with StagedArtifacts(folder) as staged:
        sendable, refused = staged.stage([["a", ARTIFACT, None]])
        return refused or [Path(record[1]).name for record in sendable]


def answer(read, folder: Path):
    """(value, exception) of `read(folder)`, or fails when it does not answer in time."""
    got: list = []

    def run() -> None:
        try:
            got.append((read(folder), None))
        except BaseException as exc:  # noqa: BLE001 - judged by the test
            got.append((None, exc))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(ANSWER_S)
    assert got, f"no answer in {ANSWER_S} s: blocked"
    return got[0]


@pytest.mark.parametrize("kind", hostile.FILE_KINDS)
@pytest.mark.parametrize("reader", READERS)
def test_no_reader_hangs_crashes_or_follows_a_link_on_a_planted_file(tmp_path, reader, kind):
    where, read = READERS[reader]
    trap = tmp_path / where
    trap.parent.mkdir(parents=True, exist_ok=True)
    hostile.plant(kind, trap)
    value, error = answer(read, tmp_path)
    assert error is None or isinstance(error, (OSError, ValueError, ConfigError)), repr(error)
    assert "root:x:0:0" not in repr(value)  # nothing of /etc/passwd came through a link


def test_a_link_out_of_the_folder_is_refused_with_a_one_line_reason(tmp_path):
    (tmp_path / "f.json").symlink_to(hostile.PASSWD)
    with pytest.raises(OSError) as refused:
        read_json(str(tmp_path / "f.json"), 1 << 20, within=str(tmp_path))
    assert "is a link" in str(refused.value) and "\n" not in str(refused.value)


def test_compare_reads_past_a_spool_it_cannot_read(tmp_path):
    from platform_plugin.comparison.spools import read_points
    hostile.plant("fifo", tmp_path / "rank_0.jsonl")
    (tmp_path / "rank_1.jsonl").write_text('["m","loss",0.5,1,5]\n')
    value, error = answer(lambda d: read_points(d, ["0", "1"]), tmp_path)
    assert error is None, repr(error)
    assert value.series("loss")["1"][0].value == 0.5 and "not a regular file" in value.unreadable["0"]
