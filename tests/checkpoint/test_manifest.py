"""The checkpoint folder's one rule (checkpoint/manifest.py): only a checkpoint whose manifest
parses and whose listed files all exist with their listed sizes is ever chosen; a folder that is
gone is a clear message, not a traceback. Real files, and real rank processes where a rank dies
or exits."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from platform_plugin.checkpoint import manifest
from platform_plugin.checkpoint.manifest import (CheckpointUnavailable, ResumePoint, complete,
                                                 newest_complete, resume_point, write_checkpoint)
from tests import hostile
from tests.helpers import REPO, clean_env


@pytest.fixture
def checkpoints(tmp_path, clean_environ):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    clean_environ.setenv("PLATFORM_CHECKPOINT_DIR", str(folder))
    clean_environ.setenv("PLATFORM_ATTEMPT_NUMBER", "2")
    clean_environ.setenv("RANK_ID", "0")
    return folder


def test_a_complete_checkpoint_is_found_with_its_step_epoch_and_attempt(checkpoints):
    written = write_checkpoint(60, {"model.bin": b"x" * 1000, "state.json": b"{}"}, epoch=3)
    record = json.loads((checkpoints / "step-0000000060" / "manifest.json").read_text())
    assert record["files"] == {"model.bin": 1000, "state.json": 2}
    assert (record["step"], record["epoch"], record["attempt_number"], record["rank"]) == (60, 3, 2, 0)
    assert newest_complete(str(checkpoints)) == written == ResumePoint(
        60, 3, str(checkpoints / "step-0000000060"), 2)


def test_a_launched_rank_takes_the_launchers_word_alone(checkpoints, monkeypatch):
    """The ranks of one attempt start at different moments: a slow one must not resume from
    the checkpoint a fast one of the same attempt just wrote. Without the launcher (no
    PLATFORM_ATTEMPT_NUMBER) the newest complete checkpoint is the one."""
    written = write_checkpoint(60, {"a": b"1"})
    assert resume_point() is None  # launched, and the launcher chose nothing
    monkeypatch.setenv("PLATFORM_RESUME_STEP", "60")
    assert resume_point() == written
    monkeypatch.delenv("PLATFORM_RESUME_STEP")
    monkeypatch.delenv("PLATFORM_ATTEMPT_NUMBER")
    assert resume_point() == written


def test_the_newest_complete_one_wins_over_older_and_over_broken_newer_ones(checkpoints):
    write_checkpoint(10, {"a": b"1"})
    write_checkpoint(20, {"a": b"22"})
    no_manifest = checkpoints / "step-0000000030"  # died between the data and the manifest
    no_manifest.mkdir()
    (no_manifest / "a").write_bytes(b"333")
    write_checkpoint(40, {"a": b"4444"})
    (checkpoints / "step-0000000040" / "a").write_bytes(b"44")  # size mismatch: truncated
    write_checkpoint(50, {"a": b"5"})
    (checkpoints / "step-0000000050" / "a").unlink()  # a listed file missing
    write_checkpoint(55, {"a": b"5"})
    (checkpoints / "step-0000000055" / "manifest.json").write_text('{"step": 55, "ep')  # half
    (checkpoints / "step-0000000070").write_text("a file, not a folder")
    (checkpoints / "step-99").mkdir()  # not the contract's name
    point = newest_complete(str(checkpoints))
    assert point is not None and point.step == 20


@pytest.mark.parametrize("change", [
    {"step": 61},  # another step's manifest copied here
    {"step": True}, {"epoch": -1}, {"epoch": "3"}, {"attempt_number": None}, {"rank": 1.5},
    {"files": {"../outside": 1}}, {"files": {"a.partial-12": 1}}, {"files": ["a"]},
    {"time": "now"},
])
def test_a_manifest_that_breaks_the_contract_is_never_chosen(checkpoints, change):
    point = write_checkpoint(60, {"a": b"1"})
    assert complete(point.path) == point
    path = os.path.join(point.path, "manifest.json")
    with open(path) as stream:
        record = json.load(stream)
    record.update(change)
    with open(path, "w") as stream:
        json.dump(record, stream)
    assert complete(point.path) is None
    assert newest_complete(str(checkpoints)) is None


def test_an_empty_folder_resumes_nothing(checkpoints, monkeypatch):
    monkeypatch.delenv("PLATFORM_ATTEMPT_NUMBER")
    assert newest_complete(str(checkpoints)) is None
    assert resume_point() is None


def test_the_launchers_step_is_taken_even_when_a_newer_one_appeared(checkpoints, monkeypatch):
    """Node 0 chose step 20 for every server: a rank resumes there, not from its own view."""
    write_checkpoint(20, {"a": b"1"})
    write_checkpoint(30, {"a": b"1"})
    monkeypatch.setenv("PLATFORM_RESUME_STEP", "20")
    point = resume_point()
    assert point is not None and point.step == 20


def test_a_server_without_the_chosen_checkpoint_names_the_shared_mount(checkpoints, monkeypatch):
    monkeypatch.setenv("PLATFORM_RESUME_STEP", "20")
    with pytest.raises(CheckpointUnavailable) as caught:
        resume_point()
    assert "--checkpoint-dir" in str(caught.value) and "shared mount" in str(caught.value)


def test_a_removed_checkpoint_folder_is_a_clear_message(checkpoints):
    checkpoints.rmdir()
    for call in (resume_point, lambda: newest_complete(str(checkpoints)),
                 lambda: write_checkpoint(1, {"a": b"1"})):
        with pytest.raises(CheckpointUnavailable) as caught:
            call()
        assert "was removed while the job ran" in str(caught.value)
        assert str(checkpoints) in str(caught.value)
    assert not checkpoints.exists()  # never made again behind the user's back


def test_unset_says_the_launcher_sets_it(clean_environ):
    with pytest.raises(CheckpointUnavailable, match="PLATFORM_CHECKPOINT_DIR is not set"):
        manifest.checkpoint_dir()


def test_bad_steps_and_names_are_refused_before_writing(checkpoints):
    for step in (-1, 10 ** 10, 1.5, True):
        with pytest.raises(ValueError):
            write_checkpoint(step, {"a": b"1"})
    for name in ("", "../x", "manifest.json", "a.partial-1", "sub/a"):
        with pytest.raises(ValueError):
            write_checkpoint(5, {name: b"1"})
    assert newest_complete(str(checkpoints)) is None


RANK = """
import os, sys
from platform_plugin.checkpoint import manifest
folder = manifest.step_folder(80)
with open(manifest.temporary_path(folder, "model.bin"), "wb") as stream:
    stream.write(b"x" * 4096)
os.replace(manifest.temporary_path(folder, "model.bin"), os.path.join(folder, "model.bin"))
print("data written", flush=True)
sys.stdin.readline()  # killed here: between the data and the manifest
manifest.write_manifest(folder, 80, None, ["model.bin"])
"""


def test_a_rank_killed_between_the_data_and_the_manifest_leaves_no_candidate(checkpoints):
    write_checkpoint(70, {"model.bin": b"y" * 10})
    env = clean_env(PYTHONPATH=str(REPO), PLATFORM_CHECKPOINT_DIR=str(checkpoints))
    rank = subprocess.Popen([sys.executable, "-c", RANK], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert rank.stdout.readline().strip() == "data written"
        rank.send_signal(signal.SIGKILL)
    finally:
        rank.wait(timeout=60)
    assert (checkpoints / "step-0000000080" / "model.bin").stat().st_size == 4096
    point = newest_complete(str(checkpoints))
    assert point is not None and point.step == 70


def test_a_rank_whose_folder_was_removed_exits_with_the_message_and_no_traceback(tmp_path):
    env = clean_env(PYTHONPATH=str(REPO), PLATFORM_CHECKPOINT_DIR=str(tmp_path / "gone"))
    done = subprocess.run([sys.executable, "-c", "from platform_plugin.checkpoint.manifest "
                           "import resume_point\nresume_point()"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert "was removed while the job ran" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", hostile.FILE_KINDS)
def test_a_planted_manifest_is_no_checkpoint_and_never_hangs_or_raises(checkpoints, kind):
    """A manifest that is a FIFO (open() waited for a writer: the launcher hung before any rank
    started), 200,000 nested brackets (RecursionError), a link, a device, a huge file: not a
    complete checkpoint, and the older complete one is chosen."""
    older = write_checkpoint(10, {"a": b"1"})
    folder = checkpoints / "step-0000000020"
    folder.mkdir()
    (folder / "a").write_bytes(b"22")
    hostile.plant(kind, folder / "manifest.json")
    assert complete(str(folder)) is None
    assert newest_complete(str(checkpoints)) == older


def test_a_step_folder_linked_out_of_the_checkpoint_folder_is_no_checkpoint(checkpoints, tmp_path):
    older = write_checkpoint(10, {"a": b"1"})
    outside = tmp_path / "outside"
    outside.mkdir()
    write_checkpoint(20, {"a": b"22"}, directory=str(outside))  # complete where it is
    hostile.link_step_folder_out(checkpoints, "step-0000000020", outside / "step-0000000020")
    assert complete(str(outside / "step-0000000020")) is not None
    assert complete(str(checkpoints / "step-0000000020")) is None
    assert newest_complete(str(checkpoints)) == older


def test_a_data_file_linked_to_a_file_of_the_listed_size_is_no_checkpoint(checkpoints):
    older = write_checkpoint(10, {"a": b"1"})
    folder = checkpoints / "step-0000000020"
    folder.mkdir()
    (folder / "model.bin").symlink_to(hostile.PASSWD)
    (folder / "manifest.json").write_text(json.dumps(
        {"step": 20, "epoch": None, "attempt": 0, "rank": 0, "time": 1.0,
         "files": {"model.bin": hostile.passwd_size()}}))
    assert complete(str(folder)) is None
    assert newest_complete(str(checkpoints)) == older


def test_a_link_planted_under_a_temporary_name_is_not_written_through(checkpoints, tmp_path):
    """A rank writes a checkpoint file under a temporary name first: a link planted under that
    name is replaced, the file it points to is left as it was."""
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    folder = checkpoints / "step-0000000010"
    folder.mkdir()
    (folder / f"a{manifest.PARTIAL}{os.getpid()}").symlink_to(victim)
    write_checkpoint(10, {"a": b"1"})
    assert victim.read_text() == "keep me"
    assert complete(str(folder)) is not None


NOBODY = 65534  # another user's uid: the tests run as root, which may chown (else skipped)


@pytest.mark.parametrize("owned", ["step folder", "manifest", "data file"])
def test_what_another_user_owns_in_the_checkpoint_folder_is_no_checkpoint(checkpoints, owned):
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user (chown)")
    older = write_checkpoint(10, {"a": b"1"})
    newer = write_checkpoint(20, {"a": b"22"})
    assert newest_complete(str(checkpoints)) == newer
    folder = checkpoints / "step-0000000020"
    target = {"step folder": folder, "manifest": folder / "manifest.json", "data file": folder / "a"}[owned]
    os.chown(target, NOBODY, NOBODY)
    assert complete(str(folder)) is None
    assert newest_complete(str(checkpoints)) == older


def test_a_checkpoint_folder_whose_files_all_have_its_owner_is_read_as_on_a_root_squashed_mount(checkpoints):
    """On a network mount exported with root_squash, what a root rank writes belongs to
    `nobody`, the checkpoint folder too: its checkpoints stay complete (a chown of everything
    to 65534 stands in for the mount, which needs an NFS server)."""
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user (chown)")
    point = write_checkpoint(20, {"a": b"22"})
    for folder, _, names in os.walk(checkpoints):
        os.chown(folder, NOBODY, NOBODY)
        for name in names:
            os.chown(os.path.join(folder, name), NOBODY, NOBODY)
    assert newest_complete(str(checkpoints)) == point
