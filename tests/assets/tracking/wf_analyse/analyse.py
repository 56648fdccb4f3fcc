"""STAND-IN `wf_analyse.analyse.wflogger`: appends each call as a JSON line to the file named by
WFLOGGER_STANDIN_LOG. The real SDK's calls as the platform docs show them:
`wflogger.log_param(name=..., value=...)`; metrics `wflogger.log_metric(name=..., value=..., step=...)`.
With WFLOGGER_STANDIN_HANG set, every call hangs (a network call without a timeout)."""
import json
import os
import time


class _WfLogger:
    def _record(self, call, **kwargs):
        while os.environ.get("WFLOGGER_STANDIN_HANG"):
            time.sleep(3600)
        with open(os.environ["WFLOGGER_STANDIN_LOG"], "a") as f:
            f.write(json.dumps({"call": call, **kwargs}) + "\n")

    def log_param(self, name, value):
        self._record("log_param", name=name, value=value)

    def log_metric(self, name, value, step=None):
        self._record("log_metric", name=name, value=value, step=step)


wflogger = _WfLogger()
