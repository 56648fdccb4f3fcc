"""The stop button during a long `%platform_clean`, in a real kernel: one line, what was
removed stays removed, the rest is kept, and the next `%platform_clean` works."""
from __future__ import annotations

import os

import pytest

from tests.helpers import wait_for
from tests.magic.helpers import ANSI, run_cell

pytestmark = pytest.mark.slow
FOLDERS, FILES = 400, 250  # 100,000 cache files: seconds of removal on any machine


def test_stopping_a_cleanup_leaves_one_line_and_a_consistent_folder(kernel, tmp_path):
    """Before: a KeyboardInterrupt through the walk's and the remover's frames."""
    km, kc = kernel
    code = tmp_path / "CODE"
    meta = code / "kernel_meta"
    for d in range(FOLDERS):
        (meta / f"d{d}").mkdir(parents=True)
        for i in range(FILES):
            (meta / f"d{d}" / f"f{i}.o").write_bytes(b"x")
    (code / "train.py").write_text("print('kept')\n")
    assert run_cell(kc, "%load_ext platform_plugin").ok
    msg_id = kc.execute(f"%platform_clean --root {code}")
    # the interrupt lands while the walk removes: some of the folders are gone already
    wait_for(lambda: len(os.listdir(meta)) < FOLDERS, timeout=120, interval=0.01,
             what="the cleanup removing")
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=120)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=120)
    assert reply["content"]["status"] == "error", "the cleanup ended before the interrupt"
    shown = [ANSI.sub("", line) for line in reply["content"]["traceback"]]
    assert shown == ["KeyboardInterrupt: %platform_clean stopped: what it removed before the "
                     "stop is gone, the rest is kept (`%platform_clean --dry-run` shows what is "
                     "left)"], shown
    assert (code / "train.py").exists()
    again = run_cell(kc, f"%platform_clean --root {code}", timeout=600)
    assert again.ok, "\n".join(again.error)
    assert not meta.exists() and (code / "train.py").exists()
