"""Writing one checkpoint as `manifest.py` reads it, for the framework helpers.

Each data file is written by its framework under a temporary name in the step's folder and
renamed into place, then the manifest is written last: a rank killed at any point leaves
either a complete checkpoint or a folder `newest_complete` never chooses. Older checkpoints
are removed only once a newer one is complete, so a restart always finds one.

Rank side: Python 3.7, the standard library only (docs/compat.md).
"""
from __future__ import annotations

import os
import shutil

from platform_plugin.checkpoint.manifest import (STEP_FOLDER, checkpoint_dir, complete, step_folder,
                                                 step_path, temporary_path, write_manifest)


def save_step(step: int, epoch, writers: dict, keep: int = 2) -> str:
    """Write checkpoint `step` into PLATFORM_CHECKPOINT_DIR and return its folder.

    `writers` maps each data file's name to a function that writes the file at the path it is
    given and returns the path it wrote, when the library chose another one (MindSpore adds
    `.ckpt`). The `keep` newest complete checkpoints stay, this one included.
    """
    directory = checkpoint_dir()
    folder = step_folder(step, directory)
    for name, write in writers.items():
        temporary = temporary_path(folder, name)
        os.replace(write(temporary) or temporary, os.path.join(folder, name))
    write_manifest(folder, step, epoch, list(writers))
    remove_older(directory, step, keep)
    return folder


def remove_older(directory: str, newest: int, keep: int) -> None:
    """Remove the step folders below `newest` except the `keep - 1` newest complete ones: what
    a half-written checkpoint left below those goes too."""
    below = sorted((int(match.group(1)) for match in map(STEP_FOLDER.fullmatch, os.listdir(directory))
                    if match and int(match.group(1)) < newest), reverse=True)
    complete_ones = [step for step in below if complete(step_path(directory, step)) is not None]
    kept = complete_ones[:max(0, keep - 1)]
    oldest_kept = kept[-1] if kept else newest
    for step in below:
        if step < oldest_kept:
            shutil.rmtree(step_path(directory, step), ignore_errors=True)
