"""A cell's printed output is kept bounded in the notebook, whole in a file next to it.

papermill keeps every output of the run in memory and writes the whole notebook at each save:
a cell that printed 100 MB made the runner's RSS 1.1 GB (the outputs, nbformat's line split and
JSON text, the encoded bytes: each a copy), and left a 100 MB .ipynb that JupyterLab cannot open.
Now a cell's stream output (stdout and stderr) beyond CELL_KEEP characters goes to
`<output notebook's name>.outputs/cell-N.txt` (all of that cell's stream output as it came,
from its first character); the cell keeps its first HEAD and last TAIL characters with a note
between them naming the file and the sizes. Nothing is lost: the terminal still gets every
line live, the file holds all of it. The runner holds at most ~CELL_KEEP characters per cell.
"""
from __future__ import annotations

import collections
import os
from typing import Any, Deque, Dict, Optional, Tuple

from nbclient.util import run_sync
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, papermill_engines

from platform_plugin.notebook.interrupt import abandon_cell_tasks
from platform_plugin.notebook.save import OutputNotSaved, outputs_folder

ENGINE = "platform-run-bounded"
HEAD = 512 * 1024  # characters of a cell's stream output kept in the notebook from its start
TAIL = 512 * 1024  # ... and from its end
CELL_KEEP = HEAD + TAIL
NOTE_MARK = "[platform-run] "  # the note's first characters (tests and readers find it)


class _Spill:
    """One cell's output past its head: the file with all of it, the tail in memory."""

    def __init__(self, path: Optional[str], note: Any) -> None:
        self.path = path
        self.note = note
        self.handle = None if path is None else open(path, "wb")  # noqa: SIM115
        self.written = 0  # bytes in the file
        self.chars = 0  # characters past the head
        self.tail: Deque[Tuple[str, str]] = collections.deque()
        self.tail_chars = 0

    def write(self, text: str) -> None:
        if self.handle is not None:
            try:
                for data in _encoded(text):
                    self.handle.write(data)
                    self.written += len(data)
                self.handle.flush()  # the file has what the terminal showed, even after a kill
            except OSError as exc:  # e.g. a full disk: the run stops, as for the notebook
                raise OutputNotSaved(exc.errno, exc.strerror, self.path) from None

    def add(self, name: str, text: str, start: int = 0) -> None:
        """`text[start:]`, past the head (already in the file): counted, the last ones kept
        (never a whole 100 MB message: the runner would hold it until the cell ends)."""
        if len(text) <= start:
            return
        self.chars += len(text) - start
        text = text[max(start, len(text) - TAIL):]
        self.tail.append((name, text))
        self.tail_chars += len(text)
        while self.tail_chars - len(self.tail[0][1]) >= TAIL:
            self.tail_chars -= len(self.tail.popleft()[1])

    def tail_outputs(self) -> list:
        """The last TAIL characters as stream outputs (consecutive chunks of one stream joined)."""
        import nbformat

        chunks = list(self.tail)
        excess = self.tail_chars - TAIL
        if excess > 0:
            name, text = chunks[0]
            cut = text.find("\n", excess)  # start on a whole line when one is near
            chunks[0] = (name, text[cut + 1:] if 0 <= cut < excess + 4096 else text[excess:])
        merged: list = []
        for name, text in chunks:
            if merged and merged[-1][0] == name:
                merged[-1][1].append(text)
            else:
                merged.append((name, [text]))
        return [nbformat.v4.new_output("stream", name=name, text="".join(parts))
                for name, parts in merged if any(parts)]

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class BoundedClient(PapermillNotebookClient):
    """papermill's client whose cells keep at most CELL_KEEP characters of stream output."""

    def __init__(self, nb_man: Any, **kwargs: Any) -> None:
        super().__init__(nb_man, **kwargs)
        self._kept: Dict[int, int] = {}  # cell -> stream characters kept (head)
        self._spills: Dict[int, _Spill] = {}
        self._folder = outputs_folder(nb_man.output_path) if nb_man.output_path else None
        if self._folder is not None and _regular_output(nb_man.output_path):
            _remove_earlier_files(self._folder)


    def output(self, outs: list, msg: dict, display_id: Optional[str], cell_index: int) -> Any:
        clearing = self.clear_before_next_output  # clear_output(wait=True): done by super
        out = super().output(outs, msg, display_id, cell_index)
        if clearing and not self.clear_before_next_output:
            self._cleared(outs, cell_index)
        if out is None or out.get("output_type") != "stream" or not outs or outs[-1] is not out:
            return out
        spill = self._spills.get(cell_index)
        text = out.text
        if spill is None:
            kept = self._kept.get(cell_index, 0)
            if kept + len(text) <= HEAD:
                self._kept[cell_index] = kept + len(text)
                return out
            spill = self._spills[cell_index] = self._start_spill(outs, cell_index)
            head = text[:HEAD - kept]  # the head's last part stays (whole lines), then the note
            cut = head.rfind("\n")
            head = head[:cut + 1] if cut >= len(head) - 4096 else head
            outs[-1:] = [nbformat_stream(out.name, head), spill.note] if head else [spill.note]
            spill.add(out.name, text, len(head))
        else:
            outs.pop()  # past the head: into the file and the tail, never into the notebook
            spill.write(text)
            spill.add(out.name, text)
        return out  # papermill still streams it (whole) to the terminal

    def clear_output(self, outs: list, msg: dict, cell_index: int) -> None:
        super().clear_output(outs, msg, cell_index)
        if not outs:  # cleared now (not wait=True, not a widget's output hook)
            self._cleared(outs, cell_index)

    def _cleared(self, outs: list, cell_index: int) -> None:
        """The notebook shows what follows a clear, as Jupyter does: the head is counted
        afresh; a spilled cell gets its note back first (its file still has all of it) and its
        tail restarts (what was cleared is not shown again at the cell's end). Detected from
        nbclient's clear, not from the outputs' count: a display between the clear and the
        next print (a live plot) hid the rest of the cell and its note."""
        self._kept.pop(cell_index, None)
        spill = self._spills.get(cell_index)
        if spill is not None:
            spill.tail.clear()
            spill.tail_chars = 0
            outs.insert(0, spill.note)
            self._shift_displays(cell_index, 0, 1)

    def _shift_displays(self, cell_index: int, start: int, by: int) -> None:
        """nbclient finds a display to update (a display handle's `update`, from any later
        cell) by its index in the cell's outputs: outputs inserted before it move it."""
        for cells in self._display_id_map.values():
            indices = cells.get(cell_index)
            if indices:
                cells[cell_index] = [i + by if i >= start else i for i in indices]

    def log_output_message(self, output: Any) -> None:
        """papermill's live stream, without its `"".join(text)` copy of a whole message, in
        pieces (a 100 MB message was encoded whole for the terminal)."""
        stream = {"stdout": self.stdout_file, "stderr": self.stderr_file}.get(
            output.get("name")) if output.output_type == "stream" else None
        if stream is None or self.log_output:
            super().log_output_message(output)
            return
        text = output.text
        for at in range(0, len(text), PIECE):
            stream.write(text[at:at + PIECE])
        stream.flush()

    def _start_spill(self, outs: list, cell_index: int) -> _Spill:
        """The head stays; the file starts with it (it holds the cell's whole output)."""
        import nbformat

        head = [o for o in outs if o.get("output_type") == "stream"]  # with the new chunk
        path = None
        if self._folder is not None and _regular_output(self.nb_man.output_path):
            path = os.path.join(self._folder, f"cell-{cell_index + 1}.txt")
        note = nbformat.v4.new_output("stream", name="stderr", text="")
        try:
            if path is not None:
                os.makedirs(self._folder, exist_ok=True)  # type: ignore[arg-type]
            spill = _Spill(path, note)
        except OSError as exc:
            raise OutputNotSaved(exc.errno, exc.strerror, path or "") from None
        for output in head:
            spill.write(output.text)
        self._describe(spill)
        return spill

    def _describe(self, spill: _Spill, shown: int | None = None) -> None:
        """The note; `shown`: the tail's characters once the cell ended (None: running)."""
        where = (f"the cell's whole output (stdout and stderr as they came) is in {spill.path}"
                 if spill.path else "the rest was not kept (the output notebook is not a file)")
        if shown is None:
            text = f"the cell is still running; {where}"
        else:
            text = (f"{spill.chars - shown:,} characters of this cell's output are left out "
                    f"here ({spill.written:,} bytes in all); {where}. Its last {shown:,} "
                    "characters follow")
        spill.note["text"] = f"\n{NOTE_MARK}{text}\n"

    def _finish(self, cell_index: int, outs: list) -> None:
        spill = self._spills.pop(cell_index, None)
        self._kept.pop(cell_index, None)
        if spill is None:
            return
        spill.close()
        tail = spill.tail_outputs()
        self._describe(spill, sum(len(o.text) for o in tail))
        at = next((i for i, o in enumerate(outs) if o is spill.note), None)
        if at is not None:  # outputs displayed after the note (a plot) stay after the tail
            outs[at + 1:at + 1] = tail
            self._shift_displays(cell_index, at + 1, len(tail))

    async def async_execute_cell(self, cell: Any, cell_index: int, *args: Any,
                                 **kwargs: Any) -> Any:
        try:
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        finally:  # also when the cell failed, timed out or its kernel died
            self._finish(cell_index, cell.get("outputs", []))

    def execute_cell(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
        # nbclient's execute_cell is bound to its own async_execute_cell, not to this one
        try:
            return run_sync(self.async_execute_cell)(cell, cell_index, *args, **kwargs)
        except KeyboardInterrupt:  # the run stops here; the cell's tasks must not outlive it
            abandon_cell_tasks()
            raise


PIECE = 1 << 20  # characters encoded at a time (file, terminal)


def _encoded(text: str) -> Any:
    for at in range(0, len(text), PIECE):
        yield text[at:at + PIECE].encode("utf-8", "surrogateescape")


def nbformat_stream(name: str, text: str) -> Any:
    import nbformat

    return nbformat.v4.new_output("stream", name=name, text=text)


def _remove_earlier_files(folder: str) -> None:
    """The cells' files of an earlier run into the same `--output`: its notebook is replaced,
    and a cell-N.txt left beside it would be taken for this run's (another cell's, even)."""
    try:
        names = os.listdir(folder)
    except OSError:  # none (the usual case), or not a folder: the first spill says so
        return
    for name in names:
        if name.startswith("cell-") and name.endswith(".txt") and name[5:-4].isdigit():
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:  # left as it is: the run does not depend on it
                pass


def _regular_output(path: str) -> bool:
    """`--output /dev/null` (or a FIFO): the notebook is not kept, nor are the cells' files."""
    return not os.path.exists(path) or os.path.isfile(path)


class BoundedEngine(NBClientEngine):
    """papermill's nbclient engine (NBClientEngine.execute_managed_notebook) with BoundedClient."""

    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False,
                                 stdout_file: Any = None, stderr_file: Any = None,
                                 start_timeout: int = 60, execution_timeout: Any = None,
                                 **kwargs: Any) -> Any:
        from papermill.log import logger
        from papermill.utils import merge_kwargs, remove_args

        kwargs = remove_args(["input_path"], **kwargs)
        safe_kwargs = remove_args(["timeout", "startup_timeout"], **kwargs)
        final_kwargs = merge_kwargs(
            safe_kwargs, timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
            startup_timeout=start_timeout, kernel_name=kernel_name, log=logger,
            log_output=log_output, stdout_file=stdout_file, stderr_file=stderr_file)
        return BoundedClient(nb_man, **final_kwargs).execute()


papermill_engines.register(ENGINE, BoundedEngine)
