"""An artifact record ships only the copy the rank's tracker made under the job's spool folder.

A spool is appendable by anyone who can write the job folder, and `sync` (or the forwarding
helper) runs as the launcher's user: lines planted in a real job's spool that name a secret
outside the job (by its absolute path, by `..`, through a link to it, a link to its folder, a
hard link, a FIFO in a copy's place, an artifact path climbing out of the run) are each set aside
with the reason and counted, while the rank's own artifact reaches the real MLflow store, by a
real `platform-run sync` process. The secret's bytes are found nowhere in the store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

from platform_plugin.tracking.job.handle import JobTracking
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.rank.tracker import Tracker
from platform_plugin.tracking.shared.state import StreamState
from tests.tracking.helpers import client, make_plan

CLI = str(Path(sys.executable).with_name("platform-run"))
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- planted-test-secret\n"


def _tracker(tmp_path: Path) -> tuple[JobTracking, Tracker]:
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    return jt, Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[0].env, **env}))


def _files_holding(root: Path, needle: bytes, but: Path) -> list[Path]:
    """Regular files under `root` (links not followed) whose bytes hold `needle`, `but` aside
    (and any other name of its inode)."""
    skip = os.stat(but).st_ino
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            info = os.lstat(path)
            if not path.is_symlink() and info.st_ino != skip and os.path.isfile(path) and needle in path.read_bytes():
                found.append(path)
    return found


def test_planted_artifact_lines_never_ship_a_file_outside_the_job(tracking_env, tmp_path):
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    jt, tracker = _tracker(tmp_path)
    spool = Path(jt.spool_dir)
    model = tmp_path / "model.txt"
    model.write_text("the rank's own weights\n")
    tracker.log_metric("loss", 1.0)
    tracker.log_artifact(model, "ckpt")
    tracker.close()
    own = spool / "artifacts" / "rank_0"
    (own / "linked").mkdir()
    (own / "linked" / "id_rsa").symlink_to(secret)
    (own / "folder").symlink_to(secret.parent)  # a link to the secret's folder
    (own / "hard").mkdir()
    os.link(secret, own / "hard" / "id_rsa")  # (a stranger cannot: protected_hardlinks; root can)
    (own / "fifo").mkdir()
    os.mkfifo(own / "fifo" / "id_rsa")
    (copy,) = [json.loads(line)[1] for line in (spool / "rank_0.jsonl").read_text().splitlines()
               if line.startswith('["a"')]
    planted = [["a", str(secret), None],
               ["a", "artifacts/../../../home/.ssh/id_rsa", None],
               ["a", "artifacts/rank_0/linked/id_rsa", None],
               ["a", "artifacts/rank_0/folder/id_rsa", None],
               ["a", "artifacts/rank_0/hard/id_rsa", None],
               ["a", "artifacts/rank_0/fifo/id_rsa", None],
               ["a", copy, "../../../escaped"]]
    with open(spool / "rank_0.jsonl", "a") as f:
        f.writelines(json.dumps(line) + "\n" for line in planted)

    sync = subprocess.run([CLI, "sync", str(spool.parent)], capture_output=True, text=True, timeout=300)
    assert sync.returncode == 0, sync.stdout + sync.stderr
    assert f"set aside: {len(planted)} record(s)" in sync.stdout, sync.stdout
    rejected = [json.loads(line) for line in (spool / "rank_0.jsonl.rejected").read_text().splitlines()]
    by_record = {json.dumps(entry["record"]): entry["reason"] for entry in rejected}
    assert len(rejected) == len(planted) and set(by_record) == {json.dumps(line) for line in planted}
    reasons = [by_record[json.dumps(line)] for line in planted]
    assert "not a copy under the spool folder's artifacts/" in reasons[0] and "not a copy" in reasons[1]
    assert "is a link" in reasons[2] and "not followed" in reasons[2] and "is a link" in reasons[3]
    assert "2 names (a hard link)" in reasons[4]
    assert "not a regular file" in reasons[5]
    assert "not a plain relative path" in reasons[6]
    assert "set aside" in sync.stdout and "artifact" in sync.stdout  # the last reason, said
    c = client(jt.config.tracking_uri)
    run_id = StreamState.load(spool, "rank_0").run_id
    assert [a.path for a in c.list_artifacts(run_id, "ckpt")] == ["ckpt/model.txt"]
    shipped = Path(c.download_artifacts(run_id, "ckpt/model.txt", str(tmp_path / "down")))
    assert shipped.read_text() == "the rank's own weights\n"
    assert _files_holding(tmp_path, b"planted-test-secret", but=secret) == []


def test_the_tracker_copies_an_artifact_when_it_is_logged_and_refuses_what_it_cannot_copy(tracking_env, tmp_path):
    jt, tracker = _tracker(tmp_path)
    spool = Path(jt.spool_dir)
    model = tmp_path / "model.txt"
    model.write_text("step 1\n")
    tracker.log_artifact(model)
    tracker.log_artifact(model)  # twice, one name: two copies
    model.write_text("step 2, rewritten after it was logged\n")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    done = threading.Event()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def refused() -> None:
            tracker.log_artifact(pipe)  # must not wait for a writer
            tracker.log_artifact(tmp_path / "missing.txt")
            tracker.log_artifact(tmp_path)
            tracker.log_artifact(model, "../out")
            done.set()
        thread = threading.Thread(target=refused, daemon=True)
        thread.start()
        thread.join(60)
        if not done.is_set():
            with open(pipe, "w"):  # free the thread before failing
                pass
        assert done.is_set(), "log_artifact of a FIFO blocked"
    tracker.close()
    lines = [json.loads(line) for line in (spool / "rank_0.jsonl").read_text().splitlines()]
    assert [line[0] for line in lines] == ["a", "a", "r", "r", "r", "r"]
    copies = [spool / line[1] for line in lines[:2]]
    assert copies[0] != copies[1] and all(p.read_text() == "step 1\n" for p in copies)
    assert all(line[1].startswith("artifacts/rank_0/") and not os.path.isabs(line[1]) for line in lines[:2])
    assert "not a regular file" in lines[2][3] and "No such file" in lines[3][3]
    assert "Is a directory" in lines[4][3] and "not a plain relative path" in lines[5][3]
    assert len(caught) == 4  # one per name: pipe, missing.txt, the folder, model.txt
