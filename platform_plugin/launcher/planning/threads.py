"""How many threads each rank's OpenMP pool gets when several ranks share a server.

Unset, every rank's OpenMP runtime (torch's intra-op pool, oneDNN, numpy's BLAS through it)
starts one thread per core, so N ranks on a server start N x cores threads that fight for the
cores: the DDP tutorial ran 2.3x slower than under torchrun on 2 cores. torchrun sets
OMP_NUM_THREADS=1 when --nproc-per-node > 1 and the user set none (torch/distributed/run.py);
msrun sets no thread variable (MindSpore's own runtime sizes its pools itself). The launcher
gives each rank the cores divided among the local ranks (at least 1): torchrun's 1 wherever the
ranks are as many as the cores, and no idle cores on a server with more cores than ranks.
The user's value (exported or in .env) always wins; the launch line says the choice once.
"""
from __future__ import annotations

from typing import Mapping

THREAD_VARIABLE = "OMP_NUM_THREADS"


def thread_default(local_ranks: int, cores: int, user_env: Mapping[str, str]) -> tuple[dict, str]:
    """({OMP_NUM_THREADS: n}, the launch line's words) for `local_ranks` ranks sharing `cores`
    when the user gave no OMP_NUM_THREADS; ({}, "") for one rank or the user's own value."""
    if local_ranks < 2 or THREAD_VARIABLE in user_env:
        return {}, ""
    threads = max(1, cores // local_ranks)
    return ({THREAD_VARIABLE: str(threads)},
            f"{THREAD_VARIABLE}={threads} per rank ({cores} cores / {local_ranks} ranks; "
            "set it to choose)")
