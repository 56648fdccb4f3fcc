"""Metrics read from the ranks' output: a script that prints its loss gets it tracked per rank
without a line of tracking code.

Built in, MindSpore's callbacks as every version prints them (1.x, 2.x and the model zoo's
shell-loop scripts alike):
- `LossMonitor`: `epoch: 1 step: 10, loss is 0.027` -> `loss`, at the job-wide step
  (`(epoch - 1) * steps per epoch + step`, the steps per epoch learned from the first epoch's
  last printed step, as `MetricsCallback` counts it; a script that resumed at epoch N > 1 has
  the points of that first epoch placed when it ends, or when the output ends inside it);
- `TimeMonitor`: `epoch time: 1234.5 ms, per step time: 12.3 ms` (2.x: `Train epoch time: ...`,
  optionally `(data time: ...)`) -> `epoch_time_s` and `step_time_s`, at the epoch's number.
Any other script's lines: `--metrics-from-output REGEX` (or `metrics_from_output` in the
`[launch]` table of the project's platform.toml), each named group a metric (`step` and
`epoch`, when present, give the step).

The points go into the rank's own spool file (tracking/rank/spool.py), so they reach the rank's
MLflow run, the board and `compare` as if the rank had logged them. The launcher appends whole
lines with O_APPEND writes, as the system-metrics sampler does: a rank's writer and this one
never interleave within a line. The launcher's records are spelled with a space after each
comma (`["m", "loss", ...]`, the same JSON), the rank's tracker writes none: that tells the
rank's own points from these in the file.

The rank's own tracker wins: a name the rank logs itself through `get_tracker()` is not parsed
into its spool. A parsed point waits HOLD_S (longer than the rank's 0.2 s spool flush) before
it is written; by then a rank that logs the same step itself has written its own point, and the
parsed name is dropped for that rank from then on. (A rank that logs a name for the first time
later than HOLD_S after printing it keeps the points parsed before.)

Cost on the output path: the chunk the launcher read is searched once for the monitors' lines
(MONITOR_LINE: re's literal scan) and their regexes run only on the lines it finds. A user's
pattern is one compiled regex search per chunk, in a parser process of its own
(parse_process.py: a pattern that backtracks must never hold up the output). Numbers in
docs/benchmarks.md (output throughput, metrics from output).
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Protocol

from platform_plugin.tracking.rank.identity import stream_name
from platform_plugin.tracking.rank.spool import SPOOL_SUFFIX, SpoolWriter
from platform_plugin.util.regular_file import open_regular_file

HOLD_S = 1.0  # a parsed point waits this long for the rank's own point of the same name
CARRY_MAX = 64 * 1024  # a line longer than this without its newline is not parsed
OWN_READ = 8 << 20  # the rank's spool read per tick to learn the names it logs itself
STEP_GROUPS = ("step", "epoch")  # a pattern's groups that give the step, not a metric
OFF = "none"  # --metrics-from-output none: no parsing at all, the built-ins neither
NUMBER = rb"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"


class LineScanner(Protocol):
    """What the output path hands one rank's chunks to (`RankLines`, or the parser process's
    `parse_process.RankFeed`)."""

    def scan(self, data: bytes, cut: int) -> None: ...


class OutputReader(Protocol):
    """What reads the ranks' lines for metrics: `OutputMetrics` in the launcher's process (the
    built-in patterns), `parse_process.ParseProcess` (a pattern of the user's)."""

    def rank(self, name: str) -> LineScanner | None: ...

    def tick(self) -> None: ...

    def close(self) -> str: ...


class LinePattern:
    """A regex over one line; `monitor`: a MindSpore monitor's line, found first by
    MONITOR_LINE (the regex then runs on that line alone); `per_unit`: metric name -> what its
    printed value is divided by (ms -> s); `epochs`: a line printed once per epoch, its step the
    epoch's number (1, 2, ...)."""

    def __init__(self, regex: re.Pattern, monitor: bool = False, per_unit: tuple = (),
                 epochs: bool = False):
        self.regex, self.monitor, self.epochs = regex, monitor, epochs
        self.per_unit = dict(per_unit)
        self.metrics = tuple(n for n in regex.groupindex if n not in STEP_GROUPS)


# Every monitor line holds `epoch:` (LossMonitor) or `epoch time:` (TimeMonitor): one search
# finds both. re scans for the literal `poch` at the speed of one bytes.find and tries the two
# short tails only there, so a chunk is read once, not once per monitor (two bytes.find passes
# before: docs/benchmarks.md); a progress bar's `Epoch 1:` is no hit. Only the lines it finds
# meet the monitors' regexes.
MONITOR_LINE = re.compile(rb"poch(?::| time:)")
LOSS_MONITOR = LinePattern(re.compile(
    rb"epoch:\s*(?P<epoch>\d+),?\s+step:\s*(?P<step>\d+),?\s*loss is\s*"
    rb"(?:Tensor\(shape=\[\], dtype=\w+, value=\s*)?\[?(?P<loss>" + NUMBER + rb")"),
    monitor=True)
TIME_MONITOR = LinePattern(re.compile(
    rb"[Ee]poch time:\s*(?P<epoch_time_s>" + NUMBER + rb")\s*(?:ms)?,\s*per step time:\s*"
    rb"(?P<step_time_s>" + NUMBER + rb")"), monitor=True,
    per_unit=(("epoch_time_s", 1000.0), ("step_time_s", 1000.0)), epochs=True)
BUILT_IN = (LOSS_MONITOR, TIME_MONITOR)


def user_pattern(text: str) -> LinePattern:
    """`--metrics-from-output REGEX` as a pattern; ValueError says what is wrong with it."""
    try:
        regex = re.compile(text.encode("utf-8"), re.MULTILINE)
    except re.error as exc:
        raise ValueError(f"not a regular expression ({exc})") from None
    pattern = LinePattern(regex)
    if not pattern.metrics:
        raise ValueError("name the value with a named group, e.g. "
                         "'loss[: ]+(?P<loss>[0-9.eE+-]+)' (its name is the metric's)")
    return pattern


def regex_problem(text: str) -> str | None:
    """What is wrong with a --metrics-from-output value (None: usable), for the option's check."""
    if text.strip().lower() == OFF:
        return None
    try:
        user_pattern(text)
    except ValueError as exc:
        return str(exc)
    return None


def patterns_for(option: str | None) -> tuple:
    """The patterns a job parses: the user's first (its names win on a line), then the
    built-ins; `none`: nothing."""
    if option is None:
        return BUILT_IN
    if option.strip().lower() == OFF:
        return ()
    return (user_pattern(option),) + BUILT_IN


def _value(raw: bytes) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


class RankLines:
    """One rank's output as it is read: matched lines become pending points."""

    def __init__(self, patterns: tuple):
        self.patterns = patterns
        self.monitors = [(order, p) for order, p in enumerate(patterns) if p.monitor]
        self.carry = b""  # the line the last chunk ended in, without its newline yet
        self.pending: list[tuple[str, float, int, int, float]] = []  # (name, value, step, ms, at)
        self.counters: dict[str, int] = {}
        self.epoch: int | None = None
        self.top_in_epoch = 0  # the highest step printed in the current epoch
        self.per_epoch = 0  # steps per epoch, once an epoch has ended
        # a resumed job's first epoch (its first line says epoch N > 1): its job-wide steps need
        # the epoch's length, known when the epoch ends; its points wait here until then
        # (name, value, epoch, step in epoch, ms, at), `waiting`: the line's (epoch, step)
        self.unplaced: list[tuple[str, float, int, int, int, float]] = []
        self.waiting: tuple[int, int] | None = None

    def scan(self, data: bytes, cut: int, at_ms: int | None = None) -> None:
        """`data[:cut]` ends the carried line and holds whole lines; the rest is carried.
        `at_ms`: when the launcher read it (the parser process is told; else now)."""
        if not cut:
            self.carry = self.carry + data if len(self.carry) + len(data) <= CARRY_MAX else b""
            return
        start = 0
        if self.carry:
            first = data.find(b"\n") + 1
            self._scan(self.carry + data[:first], 0, len(self.carry) + first, at_ms)
            start = first
        if start < cut:
            self._scan(data, start, cut, at_ms)
        rest = len(data) - cut
        self.carry = data[cut:] if rest and rest <= CARRY_MAX else b""

    def end(self) -> None:
        """The rank's output ended: a last line without its newline counts too."""
        if self.carry:
            self._scan(self.carry, 0, len(self.carry))
            self.carry = b""
        if self.unplaced:  # the output ended inside the resumed epoch: its steps printed so far
            self.per_epoch = self.per_epoch or self.top_in_epoch
            self._place()

    def _place(self) -> None:
        """The resumed epoch's points at their job-wide steps, before the later ones (older)."""
        placed = [(name, value, (epoch - 1) * self.per_epoch + step, ms, at)
                  for name, value, epoch, step, ms, at in self.unplaced]
        self.pending[:0] = placed
        self.unplaced = []

    def _scan(self, data: bytes, start: int, stop: int, at_ms: int | None = None) -> None:
        """The points of the lines in data[start:stop] (whole lines)."""
        matches = []  # (line start, pattern's rank, match): read in the order they were printed
        if self.monitors:  # each line MONITOR_LINE finds, alone
            hit = MONITOR_LINE.search(data, start, stop)
            while hit is not None:
                line = max(start, data.rfind(b"\n", start, hit.start()) + 1)
                end = data.find(b"\n", hit.start(), stop)
                end = stop if end < 0 else end
                for order, pattern in self.monitors:
                    match = pattern.regex.search(data, line, end)
                    if match is not None:
                        matches.append((line, order, match))
                hit = MONITOR_LINE.search(data, end, stop)
        for order, pattern in enumerate(self.patterns):
            if pattern.monitor:
                continue
            for match in pattern.regex.finditer(data, start, stop):
                line = max(start, data.rfind(b"\n", start, match.start()) + 1)
                if b"\n" in match.group(0):  # a match must stay on its line: the line alone
                    end = data.find(b"\n", match.start(), stop)
                    match = pattern.regex.search(data, line, stop if end < 0 else end)
                    if match is None:
                        continue
                matches.append((line, order, match))
        if not matches:
            return
        matches.sort(key=lambda item: item[:2])
        found: set = set()  # (line start, name): the first pattern to name a metric on a line wins
        now_ms, now = int(time.time() * 1000) if at_ms is None else at_ms, time.monotonic()
        for line, order, match in matches:
            self._matched(self.patterns[order], match, line, found, (now_ms, now))

    def _matched(self, pattern: LinePattern, match: re.Match, line: int, found: set,
                 when: tuple) -> None:
        groups = match.groupdict()
        self.waiting = None
        step = self._step(groups.get("epoch"), groups.get("step"))
        for name in pattern.metrics:
            raw = groups.get(name)
            value = _value(raw) if raw is not None else None
            if value is None or (line, name) in found:
                continue
            found.add((line, name))
            if name in pattern.per_unit:
                value /= pattern.per_unit[name]
            if self.waiting is not None:  # a resumed epoch's step: placed when it ends
                self.unplaced.append((name, value, *self.waiting, *when))
                continue
            if step is not None:
                point_step = step
            elif pattern.epochs and self.epoch is not None:
                point_step = self.epoch  # TimeMonitor: the epoch LossMonitor printed last
            else:
                point_step = self.counters.get(name, 1 if pattern.epochs else 0)
            self.counters[name] = point_step + 1
            self.pending.append((name, value, point_step, *when))

    def _step(self, epoch_text: bytes | None, step_text: bytes | None) -> int | None:
        """The point's step: `step` within `epoch` counted from the job's start, `step` alone,
        `epoch` alone (a metric per epoch), or None (a counter per name, as the tracker's)."""
        try:
            step = int(step_text) if step_text is not None else None
            epoch = int(epoch_text) if epoch_text is not None else None
        except ValueError:  # a user's group that holds no whole number
            return None
        if step is None or epoch is None:
            return epoch if step is None else step
        if epoch != self.epoch:
            if self.epoch is not None and epoch == self.epoch + 1:
                self.per_epoch = max(self.per_epoch, self.top_in_epoch)
                if self.unplaced:
                    self._place()
            self.epoch, self.top_in_epoch = epoch, 0
        self.top_in_epoch = max(self.top_in_epoch, step)
        if not self.per_epoch and (epoch > 1 or self.unplaced):  # resumed: the length unknown
            self.waiting = (epoch, step)
            return None
        return (epoch - 1) * self.per_epoch + step if self.per_epoch else step


def parsed_metric(name_json: str, value: float, step: int, timestamp_ms: int) -> str:
    """A spool record the launcher parsed: the rank's format with a space after each comma."""
    number = repr(value) if value - value == 0.0 else json.dumps(value)
    return f'["m", {name_json}, {number}, {step}, {timestamp_ms}]\n'


def own_mark(name_json: str) -> bytes:
    """How a point the rank logged itself starts (tracking/rank/spool.encode_metric)."""
    return f'["m",{name_json},'.encode()


class RankSpool:
    """The parsed points of one rank into its spool, unless the rank logs the name itself."""

    def __init__(self, spool_dir: str, label: str, patterns: tuple):
        self.path = os.path.join(spool_dir, f"{stream_name(label)}{SPOOL_SUFFIX}")
        self.lines = RankLines(patterns)
        self.writer: SpoolWriter | None = None
        # every name the patterns can give -> its JSON spelling: each block of the rank's spool
        # is searched for all of them once (a name first parsed later may be in an earlier one)
        self.names = {name: json.dumps(name) for pattern in patterns for name in pattern.metrics}
        self.own: set[str] = set()  # names the rank logs itself
        self.offset = 0  # how far the rank's spool was read for its own names
        self.written = 0  # points written

    def tick(self, now: float, final: bool = False) -> None:
        pending = self.lines.pending
        if not pending or not final and now - pending[0][4] < HOLD_S:
            return
        due = len(pending) if final else next(
            (i for i, item in enumerate(pending) if now - item[4] < HOLD_S), len(pending))
        if not due:
            return
        self._learn_own(final)
        lines = [parsed_metric(self.names[name], value, step, ms)
                 for name, value, step, ms, _ in pending[:due] if name not in self.own]
        del pending[:due]
        if lines:
            if self.writer is None:
                self.writer = SpoolWriter(self.path)
            for line in lines:
                self.writer.append(line)
            self.writer.flush()
            self.written += len(lines)

    def _learn_own(self, final: bool) -> None:
        """Read what the rank added to its spool since the last look: which of the parsed names
        it logs itself (a plain byte search, nothing decoded)."""
        unknown = [name for name in self.names if name not in self.own]
        while unknown:
            try:
                with open_regular_file(self.path, within=os.path.dirname(self.path)) as spool:
                    spool.seek(self.offset)
                    block = spool.read(OWN_READ)
            except OSError:  # nothing spooled yet (or no file: nothing to learn from it)
                return
            whole = block.rfind(b"\n") + 1  # complete lines only: the rest is still written
            if not whole:
                return
            self.offset += whole
            block = block[:whole]
            self.own.update(name for name in unknown if own_mark(self.names[name]) in block)
            unknown = [name for name in unknown if name not in self.own]
            if not final:
                return

    def close(self) -> None:
        self.lines.end()
        self.tick(time.monotonic(), final=True)
        if self.writer is not None:
            self.writer.close()


class OutputMetrics:
    """Every worker rank's parsed points (the launcher's output path feeds it, its display tick
    writes them)."""

    def __init__(self, spool_dir: str, patterns: tuple, labels: dict[str, str]):
        self.spool_dir = spool_dir
        self.patterns = patterns
        self.labels = labels  # output stream name -> rank label (its spool)
        self.ranks: dict[str, RankSpool] = {}

    def rank(self, name: str) -> RankLines | None:
        """The line scanner of a process's output, None for one that is no rank (a scheduler)."""
        label = self.labels.get(name)
        if label is None or not self.patterns:
            return None
        spool = self.ranks[name] = RankSpool(self.spool_dir, label, self.patterns)
        return spool.lines

    def tick(self) -> None:
        now = time.monotonic()
        for spool in self.ranks.values():
            spool.tick(now)

    def close(self) -> str:
        """The last points written; nothing to say (the built-ins never fall behind)."""
        for spool in self.ranks.values():
            spool.close()
        return ""

    def written(self) -> int:
        return sum(spool.written for spool in self.ranks.values())
