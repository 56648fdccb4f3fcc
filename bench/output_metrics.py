"""What reading metrics from the ranks' lines costs the launcher's output path
(tracking/job/output_metrics.py), through `launch()` as bench/launch_output.py runs it.

    .venv/bin/python bench/output_metrics.py [--rounds 5] [--no-write]

The same 4 ranks x 250,000 lines, tracked (MLflow into a fresh sqlite store per job: reading
needs the rank's spool), system metrics off, alternating every round:
- the realistic lines (bench/output_writers.realistic: `[INFO]` logging lines, `\\r` bars,
  MindSpore chatter), reading off (`metrics_from_output="none"`: the launcher never makes its
  reader, the output path as it was before) and on with the built-ins (MindSpore's monitors:
  nothing in these lines matches, every chunk is searched) and with a user's regex as well
  (matching nothing either: the regex runs over every chunk);
- the same lines with every 100th one a LossMonitor line (`epoch: 1 step: N, loss is X`,
  2,500 points per rank into its spool), reading off and on.
CPU own is the launcher process's (getrusage self): the output path's cost, without the
forwarding helper that delivers the points (another process). Wall seconds include that
delivery (`launch()` returns once every point is stored).
"""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchdoc import alternate, load_text, spread, write_section  # noqa: E402
from launch_output import LINES, RANKS, _with_cpu  # noqa: E402
from output_writers import realistic, with_loss_monitor  # noqa: E402

REAL = realistic(LINES)
MONITOR = with_loss_monitor(LINES)
NO_MATCH_REGEX = r"val_acc=(?P<val_acc>[0-9.]+)"
EXPLANATION = ("What it costs, read from these figures: the built-ins are one search over every 64 KiB the launcher reads (`MONITOR_LINE`, re's scan for the literal `poch` with two short tails: about the cost of one `bytes.find`, ~30-35 µs per 64 KiB on this machine; two `bytes.find` passes before, `loss is` and `per step time`), and per matched line a regex on that line alone and a spool record. A user's regex runs in a parser process of its own: the launcher only writes each chunk into a pipe (and counts its lines), never waiting; on a firehose like this one the parser falls behind and the chunks it has no room for are counted as not parsed, never held. A training rank prints kilobytes per second: the reading is well under 1 ms of the launcher's CPU per MB of output. The wall time of the LossMonitor job with reading on is the delivery of its 10,000 points (the forwarding helper's MLflow import, the runs, the store under this load: `launch()` waits for it, as for points a rank logs itself), not the reading.")


def _launch(code: str, tmp: str, lost: list, **kw):
    from platform_plugin import launch
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow-{len(lost)}.db"
    stdout = sys.stdout
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        sys.stdout = devnull
        try:
            result = launch([sys.executable, "-c", code], nproc=RANKS, backend="plain",
                            tracking="mlflow", no_system_metrics=True, log_dir=tmp, **kw)
        finally:
            sys.stdout = stdout

    def check() -> None:
        lines = sum(Path(result.job_dir, f"rank_{r}.log").read_bytes().count(b"\n")
                    for r in range(RANKS))
        lost.append(RANKS * LINES - lines)
        spools = Path(result.job_dir, "tracking").glob("rank_*.jsonl")
        points.append(sum(p.read_bytes().count(b'["m", "loss"') for p in spools))
        shutil.rmtree(result.job_dir, ignore_errors=True)
    points: list = []
    check.points = points  # type: ignore[attr-defined]
    return check


def run(rounds: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="bench_output_metrics_")
    lost: list[int] = []
    parsed: dict[str, list[int]] = {}
    cpu: dict = {}

    def side(name: str, code: str, **kw):
        def go():
            check = _launch(code, tmp, lost, **kw)

            def after():
                check()
                parsed.setdefault(name, []).append(check.points[-1])
            return after
        return go

    sides = {
        "off": side("off", REAL, metrics_from_output="none"),
        "builtin": side("builtin", REAL),
        "regex": side("regex", REAL, metrics_from_output=NO_MATCH_REGEX),
        "monitor_off": side("monitor_off", MONITOR, metrics_from_output="none"),
        "monitor_on": side("monitor_on", MONITOR),
    }
    try:
        times = alternate({name: _with_cpu(go, cpu, name) for name, go in sides.items()}, rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = {name: values[1:] for name, values in cpu.items()}
    return {"times": times, "cpu": cpu, "lost": sum(lost), "runs": len(lost), "parsed": parsed}


def _output_path(chunks: list[bytes], tmp: str, patterns: tuple) -> None:
    """One rank's chunks through the launcher's Output (log file, prefixed display on
    /dev/null), with the reader of `patterns` (none: no reader, as before)."""
    from platform_plugin.launcher.display.output import Output
    from platform_plugin.tracking.job.output_metrics import OutputMetrics
    from platform_plugin.tracking.job.parse_process import ParseProcess
    stdout = sys.stdout
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        sys.stdout = devnull
        try:
            output = Output("all")
            if isinstance(patterns, str):  # a user's regex: handed to its parser process
                output.metrics = ParseProcess(tmp, patterns, {"0": "0"})
            elif patterns:
                output.metrics = OutputMetrics(tmp, patterns, {"0": "0"})
            output.open("0", os.path.join(tmp, "rank_0.log"))
            for chunk in chunks:
                output.feed("0", chunk)
                output.write_pending()
            output.close()
        finally:
            sys.stdout = stdout
    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))


def launcher_reads() -> dict[str, list[bytes]]:
    """One rank's real output ("real": the realistic writer, "monitor": the LossMonitor one,
    RANKS * LINES lines each) cut into the launcher's 64 KiB reads."""
    import subprocess
    data = {}
    for name, writer in (("real", realistic(RANKS * LINES)),
                         ("monitor", with_loss_monitor(RANKS * LINES))):
        out = subprocess.run([sys.executable, "-c", writer, "0"], capture_output=True,
                             check=True).stdout
        data[name] = [out[i:i + (1 << 16)] for i in range(0, len(out), 1 << 16)]
    return data


def in_process(rounds: int) -> dict:
    """The output path alone, in this process: a rank's real output (the realistic writer and
    the LossMonitor one, 1,000,000 lines each) cut into the launcher's 64 KiB reads, fed to
    `Output` with the reader off and on; CPU seconds of this process per run."""
    from platform_plugin.tracking.job.output_metrics import BUILT_IN, patterns_for
    tmp = tempfile.mkdtemp(prefix="bench_output_path_")
    data = launcher_reads()
    regex = NO_MATCH_REGEX  # (patterns_for checks it the way the option does)
    assert patterns_for(regex)
    sides = {"off": (data["real"], ()), "builtin": (data["real"], BUILT_IN),
             "regex": (data["real"], regex), "monitor_off": (data["monitor"], ()),
             "monitor_on": (data["monitor"], BUILT_IN)}
    cpu: dict = {}
    try:
        alternate({name: _with_cpu(lambda c=c, p=p: _output_path(c, tmp, p), cpu, name)
                   for name, (c, p) in sides.items()}, rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    megabytes = {name: sum(map(len, c)) / 1e6 for name, (c, _) in sides.items()}
    return {"cpu": {name: [v[0] for v in values[1:]] for name, values in cpu.items()},
            "mb": megabytes}


def _reader_of(revision: str):
    """output_metrics.py as it was at `revision` (git), loaded as a module of its own."""
    import importlib.util
    import subprocess
    source = subprocess.run(["git", "show", f"{revision}:platform_plugin/tracking/job/output_metrics.py"],
                            capture_output=True, check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    folder = tempfile.mkdtemp(prefix="bench_reader_")
    path = os.path.join(folder, "output_metrics_before.py")
    Path(path).write_bytes(source)
    spec = importlib.util.spec_from_file_location("output_metrics_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shutil.rmtree(folder, ignore_errors=True)
    return module


def against(revision: str, rounds: int) -> dict:
    """The built-ins' reading alone, side by side: `RankLines.scan` of `revision`'s
    output_metrics.py and of this tree's over the same chunks (one rank's real output, 64 KiB
    reads), alternating; CPU seconds of this process per pass."""
    import time
    from platform_plugin.tracking.job import output_metrics as now
    before = _reader_of(revision)
    data = launcher_reads()

    def reading(module, chunks):
        def go():
            lines = module.RankLines(module.BUILT_IN)
            started = time.process_time()
            for chunk in chunks:
                lines.scan(chunk, chunk.rfind(b"\n") + 1)
                lines.pending.clear()
            cpu.setdefault(go.name, []).append(time.process_time() - started)
        return go
    cpu: dict = {}
    sides = {}
    for name, chunks in data.items():
        for label, module in (("before", before), ("now", now)):
            side = reading(module, chunks)
            side.name = f"{name}_{label}"  # type: ignore[attr-defined]
            sides[side.name] = side  # type: ignore[attr-defined]
    alternate(sides, rounds)
    return {"cpu": {k: v[1:] for k, v in cpu.items()},
            "reads": {name: len(chunks) for name, chunks in data.items()},
            "mb": {name: sum(map(len, chunks)) / 1e6 for name, chunks in data.items()}}


def against_section(result: dict, revision: str, header: str) -> str:
    cpu, reads, mb = result["cpu"], result["reads"], result["mb"]
    lines = ["### Metrics read from the ranks' lines: one search per read", "", header, "",
             f"The built-ins' reading alone (`RankLines.scan`), side by side: output_metrics.py "
             f"at `{revision}` (two `bytes.find` passes per read: `loss is`, `per step time`) and "
             f"now (one `MONITOR_LINE` search), over one rank's real output ({RANKS * LINES:,} "
             f"lines, {mb['real']:.0f} MB, {reads['real']:,} reads of 64 KiB); CPU seconds per "
             "pass:", "", "| output | before | now | now / before | µs per read, before → now |",
             "|---|---|---|---|---|"]
    for name, what in (("real", "realistic lines (nothing matches)"),
                       ("monitor", "every 100th line a LossMonitor line")):
        old, new = cpu[f"{name}_before"], cpu[f"{name}_now"]
        ratio = statistics.median(new) / statistics.median(old)
        lines.append(f"| {what} | {spread(old)} | {spread(new)} | {ratio:.2f}x | "
                     f"{statistics.median(old) / reads[name] * 1e6:.0f} → "
                     f"{statistics.median(new) / reads[name] * 1e6:.0f} |")
    return "\n".join(lines)


def in_process_section(result: dict) -> list[str]:
    cpu, mb = result["cpu"], result["mb"]
    rows = [("off", "realistic lines, no reader (as before)"),
            ("builtin", "the same, MindSpore's monitors read (nothing matches)"),
            ("regex", "the same, a user's regex: the chunks handed to its parser process (its "
                      "CPU not counted; the parser falls behind this firehose: chunks dropped)"),
            ("monitor_off", "every 100th line a LossMonitor line, no reader"),
            ("monitor_on", "the same, read: 10,000 `loss` points into the spool")]
    lines = ["", f"The output path alone, in one process: one rank's real output ({RANKS * LINES:,} "
             f"lines, {mb['off']:.0f} MB) cut into the launcher's 64 KiB reads and fed to "
             "`Output` (its log file, the prefixed display on /dev/null); CPU of the process:", "",
             "| what | CPU seconds | ratio | µs per 64 KiB read |", "|---|---|---|---|"]
    for name, what in rows:
        base = "monitor_off" if name.startswith("monitor") else "off"
        ratio = statistics.median(cpu[name]) / statistics.median(cpu[base])
        per_read = statistics.median(cpu[name]) / (mb[name] * 1e6 / (1 << 16)) * 1e6
        lines.append(f"| {what} | {spread(cpu[name], digits=3)} | {ratio:.2f}x | {per_read:.0f} |")
    return lines


def section(result: dict, header: str) -> str:
    t, cpu, parsed = result["times"], result["cpu"], result["parsed"]
    own = {name: [c[0] for c in values] for name, values in cpu.items()}
    rows = [
        ("off", "realistic lines, reading off (`--metrics-from-output none`: the path as before)"),
        ("builtin", "the same, reading on: MindSpore's monitors (the default; nothing matches)"),
        ("regex", f"the same, a user's regex `{NO_MATCH_REGEX}` (nothing matches): the built-ins "
                  "and it in the parser process, whose CPU is not the launcher's"),
        ("monitor_off", "every 100th line a LossMonitor line, reading off"),
        ("monitor_on", "the same lines, reading on: 2,500 `loss` points per rank into its spool"),
    ]
    lines = ["### Metrics read from the ranks' lines", "", header, "",
             f"{RANKS} ranks x {LINES:,} lines through `launch()` (the CLI's display on /dev/null), "
             "tracked into a fresh sqlite store per job, system metrics off; CPU own = the "
             "launcher process (the output path), wall = until every point is stored (the "
             "forwarding helper's MLflow import and delivery included):", "",
             "| what | launcher CPU own | ratio (own CPU) | wall seconds | loss points in the spools |",
             "|---|---|---|---|---|"]
    for name, what in rows:
        base = "monitor_off" if name.startswith("monitor") else "off"
        ratio = statistics.median(own[name]) / statistics.median(own[base])
        lines.append(f"| {what} | {spread(own[name], digits=3)} | {ratio:.2f}x | "
                     f"{spread(t[name], digits=2)} | {parsed[name][-1]:,} |")
    ratios = [statistics.median(own[a]) / statistics.median(own[b])
              for a, b in (("builtin", "off"), ("regex", "off"), ("monitor_on", "monitor_off"))]
    lines += ["", f"Reading on vs off, the launcher's own CPU: {ratios[0]:.2f}x with the "
              f"built-ins, {ratios[1]:.2f}x with a user's regex as well, {ratios[2]:.2f}x with "
              f"LossMonitor lines read into the spools; lines lost over {result['runs']} "
              f"launcher runs: {result['lost']}."]
    if "in_process" in result:
        lines += in_process_section(result["in_process"])
    lines += ["", EXPLANATION]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--in-process-only", action="store_true",
                        help="only the output path in this process (quick)")
    parser.add_argument("--against", metavar="REV",
                        help="only the built-ins' reading, side by side with output_metrics.py "
                        "at git revision REV")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    before = load_text()
    if args.against:
        result = against(args.against, args.rounds)
        header = (f"Command: `.venv/bin/python bench/output_metrics.py --against {args.against} "
                  f"--rounds {args.rounds}` — {started}; {before} at the start, {load_text()} at "
                  "the end. Sides alternate every round; median (min–max) of "
                  f"{args.rounds} rounds after one warm-up each.")
        body = against_section(result, args.against, header)
        print(body)
        if not args.no_write:
            write_section("output-metrics-search", body)
        return
    if args.in_process_only:
        print("\n".join(in_process_section(in_process(args.rounds))))
        return
    result = run(args.rounds)
    result["in_process"] = in_process(args.rounds)
    header = (f"Command: `.venv/bin/python bench/output_metrics.py --rounds {args.rounds}` — "
              f"{started}; {before} at the start, {load_text()} at the end (the cores were "
              "shared with other jobs: absolute times are noisy, the ratios of alternating runs "
              "are what count). Sides alternate every round; median (min–max) of "
              f"{args.rounds} rounds after one warm-up each.")
    text = section(result, header)
    print(text)
    if not args.no_write:
        write_section("output-metrics", text)


if __name__ == "__main__":
    main()
