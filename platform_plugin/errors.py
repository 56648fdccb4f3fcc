"""Error values shared by every layer.

A `Problem` is a finding, not an exception: rank-table validation, settings resolution and
`platform-run doctor` all produce lists of them, so the same object feeds an error message, a
doctor row and a test assertion. Exceptions carry problems when a caller must stop.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Problem:
    """One finding with a stable `code` (tests and docs key on it, never on the message).
    An immutable value: it crosses process boundaries (multiprocessing) pickled."""

    code: str  # e.g. "RT_RANK_GAP", "ENV_CONFLICT"
    message: str  # what is wrong AND what to do about it
    path: str = ""  # JSON path ("server_list[1].device[3].rank_id") or a variable name
    severity: str = "error"  # "error" | "warning"

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"[{self.code}]{where}: {self.message}"


class PlatformPluginError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code = 1

    def _render_traceback_(self) -> list[str]:
        """What IPython shows in a cell instead of a traceback: the error is deliberate and its
        message says what to do, so the plugin's frames would only hide it."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class ConfigError(PlatformPluginError):
    """Bad input (rank table, variables, options, files): nothing was started. Exit code 2."""

    exit_code = 2
    headline = "nothing was started"  # what the cell says above the problems (%platform_clean:
    # "nothing was removed", %dist_compare: "nothing was compared")

    def __init__(self, problems: list[Problem] | str, *, code: str | None = None):
        """`ConfigError([Problem, ...])`, or `ConfigError(message, code=CODE)` for one problem:
        every refusal carries a stable code (docs/errors.md lists them)."""
        if isinstance(problems, str):
            if not code:
                raise TypeError("ConfigError(message) needs code=: every refusal has a stable code")
            problems = [Problem(code, problems)]
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __reduce__(self):
        # Exception pickles its args (the message), and a message alone is refused without code=
        return (type(self), (self.problems,))

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mConfigError\x1b[0m: {self.headline}"] + [
            f"  {p}" for p in self.problems]


def errors_only(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]
