"""Error values shared by every layer.

A `Problem` is a finding, not an exception: rank-table validation, settings resolution and
`platform-run doctor` all produce lists of them, so the same object feeds an error message, a
doctor row and a test assertion. Exceptions carry problems when a caller must stop.
"""
from __future__ import annotations



class Problem:
    """One finding with a stable `code` (tests and docs key on it, never on the message).

    An immutable value (equal and hashable by its fields). A plain class, not a dataclass:
    every command imports this module, and `dataclasses` would double `platform-run --help`'s
    import time."""

    __slots__ = ("code", "message", "path", "severity")

    code: str  # e.g. "RT_RANK_GAP", "ENV_CONFLICT"
    message: str  # what is wrong AND what to do about it
    path: str  # JSON path ("server_list[1].device[3].rank_id") or a variable name
    severity: str  # "error" | "warning"

    def __init__(self, code: str, message: str, path: str = "", severity: str = "error"):
        for name, value in zip(self.__slots__, (code, message, path, severity)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Problem is immutable: cannot set {name}")

    def _fields(self) -> tuple[str, str, str, str]:
        return (self.code, self.message, self.path, self.severity)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Problem):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __reduce__(self):
        """Pickled by its fields (the default would set the slots one by one, which
        `__setattr__` refuses): a Problem crosses process boundaries (multiprocessing)."""
        return (Problem, self._fields())

    def as_dict(self) -> dict[str, str]:
        """For JSON output (`--json` of env, ranktable and doctor)."""
        return dict(zip(self.__slots__, self._fields()))

    def __repr__(self) -> str:
        return (f"Problem(code={self.code!r}, message={self.message!r}, path={self.path!r}, "
                f"severity={self.severity!r})")

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
