"""platform_plugin: one trustworthy step from a notebook to a distributed job.

    import platform_plugin
    platform_plugin.launch(["python", "train.py"], nproc=2)   # -> JobResult, raises JobFailed

In a notebook: `%load_ext platform_plugin`, then `%dist_run --nproc 2 python train.py`.
"""
from .launch import JobFailed, JobResult, launch


def load_ipython_extension(ipython) -> None:
    from .magic import register
    register(ipython)


__all__ = ["launch", "JobResult", "JobFailed", "load_ipython_extension"]
