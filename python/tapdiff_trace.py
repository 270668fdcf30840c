"""Read and write tapdiff traces (docs/trace-schema.md, format 3.0; reads 2.x) with h5py and numpy only.

Meant for PyTorch forward hooks and notebooks: the writer produces the same files as
tapdiff's C++ TraceWriter, the reader accepts what either writes.

    with TraceWriter("run.h5", producer="external", tokens=prompt, prompt_length=len(prompt),
                     hparams={"n_layer": 2}) as trace:
        trace.record("attn_q", layer=0, first_position=0, rows=q)   # q: (n_rows, n_embd)
        trace.end_step()                                            # durable from here on
    # leaving the block normally sets complete=1; an exception leaves complete=0

    with TraceReader("run.h5") as trace:
        positions, values = trace.read("attn_q", 0)

A tap is a short name ("attn_q") and a layer (-1 for a global tap); its full name is
"blk.{layer}.{name}", or the name alone for a global tap (docs/taps.md). The taps of one name
and row shape are stored side by side in one stack, /taps/<name>, a slot per layer. record()
copies the rows and holds them until end_step(), which writes each stack's new rows in one
block and commits them. From a PyTorch forward hook:

    def tap(name, layer):
        def hook(module, inputs, output):           # output: (1, n_tokens, dim)
            rows = output.detach().float().cpu().numpy()[0]
            trace.record(name, layer, first_position=position, rows=rows)
        return hook
    model.model.layers[3].self_attn.q_proj.register_forward_hook(tap("attn_q", 3))

Recording attn.probs also records attn.probs.summary at the step's end, four numbers per head
that say where the weights went (attention_summary(); docs/taps.md), as the C++ writer does,
unless the producer records attn.probs.summary of that layer itself.

Taps known in advance are best passed as precreate=[(name, layer, row_shape), ...]: a kill
during the step that first creates a stack or a slot can cost the whole trace
(docs/trace-schema.md), and the stacks created up front are chunked a row of all their
slots at a time.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import h5py
import numpy as np

FORMAT_NAME = "tapdiff-trace"
FORMAT_VERSION = (3, 0)
OLDEST_MAJOR = 2  # 2.x: every row in a stack's data, /committed (n_taps, 2)
PRODUCERS = ("reference", "engine-host", "engine-cuda", "external", "llama.cpp", "transformers")
DIM_NAMES = ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx")
# A mixture of experts' counts: written by a model that has them, 0 where absent.
OPTIONAL_DIM_NAMES = ("n_expert", "n_expert_used")
REQUIRED_STRINGS = ("producer", "producer_version", "git_commit", "model_path", "model_sha256",
                    "precision", "fault")
REQUIRED_INTS = ("prompt_length", "complete", "committed_steps", "committed_tokens")
RUN_CHUNK_ROWS = 64

ATTN_PROBS = "attn.probs"
ATTN_SUMMARY = "attn.probs.summary"
ATTN_SUMMARY_FIELDS = ("missing", "max", "mean_key", "future")

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

HParam = Union[int, float, str]


def attention_summary(probs, first_position: int) -> np.ndarray:
    """attn.probs rows (n_rows, n_head, width) for positions first_position.. reduced per head to
    (n_rows, n_head, 4): missing = 1 - sum_j w_j, max, mean_key = sum_j j*w_j / max(p, 1), and
    future = sum_{j>p} w_j (tapdiff/attn_summary.hpp; docs/taps.md)."""
    probs = np.asarray(probs, dtype=np.float32)
    n_rows, n_head, width = probs.shape
    keys = np.arange(width, dtype=np.float64)
    out = np.empty((n_rows, n_head, len(ATTN_SUMMARY_FIELDS)), dtype=np.float32)
    for r in range(n_rows):  # one row at a time: a long prefill's rows in float64 at once are large
        p = first_position + r
        w = probs[r].astype(np.float64)
        out[r, :, 0] = 1 - w.sum(axis=1)
        out[r, :, 1] = probs[r].max(axis=1)
        out[r, :, 2] = w @ keys / max(p, 1)
        out[r, :, 3] = w[:, p + 1:].sum(axis=1)
    return out


class TraceError(Exception):
    """A malformed trace or a rejected call: '<file>: <object>: <problem>'."""

    def __init__(self, file: str, obj: str, problem: str):
        super().__init__(f"{file}: {obj}: {problem}")
        self.file, self.object, self.problem = file, obj, problem


def stack_rows(stack: h5py.Group, slot: int, r0: int, r1: int, batch_rows: int) -> np.ndarray:
    """Rows [r0, r1) of a stack's slot: rows below batch_rows (the third column of its
    /committed row, format 3) from the stack's batch, the rest from its data."""
    parts = []
    if r0 < batch_rows:
        parts.append(stack["batch"][slot, r0:min(r1, batch_rows)])
    if r1 > batch_rows:
        parts.append(stack["data"][max(r0, batch_rows):r1, slot])
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def full_tap_name(name: str, layer: int) -> str:
    return f"blk.{layer}.{name}" if layer >= 0 else name


def _layer_problem(name: str, layer: int) -> Optional[str]:
    if layer < -1 or (layer == -1 and name.startswith("blk.")):
        return f"bad layer {layer} for tap {name!r}"
    return None


@dataclass
class TapInfo:
    name: str
    layer: int
    full_name: str
    row_shape: Tuple[int, ...]
    n_rows: int
    runs: List[Tuple[int, int, int]] = field(default_factory=list)  # first_row, first_position, n
    stack: str = ""  # the group under /taps that holds the tap
    slot: int = 0    # its column in the stack's data and runs
    index: int = 0   # its row in /committed
    batch_rows: int = 0  # rows 0 .. batch_rows - 1 are in the stack's batch (format 3), the rest in data

    def positions(self) -> np.ndarray:
        if not self.runs:
            return np.zeros(0, np.int64)
        return np.concatenate([np.arange(p, p + n, dtype=np.int64) for _, p, n in self.runs])


class _Slot:
    """One tap of a stack being written: counts written so far and rows waiting for end_step()."""

    def __init__(self, layer: int, index: int):
        self.layer, self.index = layer, index
        self.rows = 0   # rows and runs written to the datasets
        self.runs = 0
        self.last_position = -1
        self.pending: List[np.ndarray] = []
        self.pending_rows = 0
        self.pending_runs: List[Tuple[int, int]] = []  # (first_row, first_position)

    @property
    def recorded(self) -> int:
        return self.rows + self.pending_rows


class _Stack:
    """A stack being written: /taps/<group> with one slot per layer of one tap name and shape."""

    def __init__(self, group: h5py.Group, name: str, row_shape: Tuple[int, ...], n_slots: int,
                 chunk_bytes: int):
        row_bytes = int(np.prod(row_shape)) * 4
        self.chunk_rows = min(256, max(1, chunk_bytes // (row_bytes * n_slots)))
        self.data = group.create_dataset("data", shape=(0, 0) + row_shape,
                                         maxshape=(None, None) + row_shape,
                                         chunks=(self.chunk_rows, n_slots) + row_shape, dtype="<f4")
        self.runs = group.create_dataset("runs", shape=(0, 0, 2), maxshape=(None, None, 2),
                                         chunks=(RUN_CHUNK_ROWS, n_slots, 2), dtype="<i8")
        group.attrs["name"] = name
        group.attrs["row_shape"] = np.array(row_shape, dtype=np.int64)
        self.group, self.name, self.row_shape = group, name, row_shape
        self.slots: List[_Slot] = []

    def add_slots(self, slots: List[_Slot]) -> None:
        self.slots.extend(slots)
        self.data.resize(len(self.slots), axis=1)
        self.runs.resize(len(self.slots), axis=1)
        self.group.attrs["layers"] = np.array([s.layer for s in self.slots], dtype=np.int64)
        # Written last: a reader skips a stack without 'index' in an incomplete trace.
        self.group.attrs["index"] = np.array([s.index for s in self.slots], dtype=np.int64)

    def write_pending(self) -> None:
        """Writes the rows and runs recorded since the last commit; one block when it can."""
        rows = [(s, slot) for s, slot in enumerate(self.slots) if slot.pending_rows]
        if rows:
            end = max(slot.rows + slot.pending_rows for _, slot in rows)
            _grow(self.data, end, self.chunk_rows)
            if _same_span(rows, lambda slot: (slot.rows, slot.pending_rows)):
                first, lo, hi = rows[0][1], rows[0][0], rows[-1][0] + 1
                block = np.empty((first.pending_rows, hi - lo) + self.row_shape, np.float32)
                for s, slot in rows:
                    np.concatenate(slot.pending, out=block[:, s - lo])
                self.data[first.rows:first.rows + first.pending_rows, lo:hi] = block
            else:
                for s, slot in rows:
                    rows_of_slot = np.concatenate(slot.pending)
                    self.data[slot.rows:slot.rows + slot.pending_rows, s] = rows_of_slot
        runs = [(s, slot) for s, slot in enumerate(self.slots) if slot.pending_runs]
        if runs:
            _grow(self.runs, max(slot.runs + len(slot.pending_runs) for _, slot in runs),
                  RUN_CHUNK_ROWS)
            if _same_span(runs, lambda slot: (slot.runs, slot.pending_runs)):
                first, lo, hi = runs[0][1], runs[0][0], runs[-1][0] + 1
                block = np.broadcast_to(np.array(first.pending_runs, np.int64)[:, None],
                                        (len(first.pending_runs), hi - lo, 2))
                self.runs[first.runs:first.runs + len(first.pending_runs), lo:hi] = block
            else:
                for s, slot in runs:
                    self.runs[slot.runs:slot.runs + len(slot.pending_runs), s] = slot.pending_runs
        for slot in self.slots:
            slot.rows += slot.pending_rows
            slot.runs += len(slot.pending_runs)
            slot.pending, slot.pending_rows, slot.pending_runs = [], 0, []

    def trim(self) -> None:
        """Shrinks the datasets to the most rows and runs any slot committed."""
        self.data.resize(max((s.rows for s in self.slots), default=0), axis=0)
        self.runs.resize(max((s.runs for s in self.slots), default=0), axis=0)


def _grow(ds: h5py.Dataset, rows: int, chunk_rows: int) -> None:
    """Extends dimension 0 to hold `rows`, by whole chunks (the extent may run ahead)."""
    if rows > ds.shape[0]:
        ds.resize(-(-rows // chunk_rows) * chunk_rows, axis=0)


def _same_span(slots: List[Tuple[int, _Slot]], key) -> bool:
    """True when the slots are adjacent and key() gives the same value for each."""
    return (slots[-1][0] - slots[0][0] + 1 == len(slots)
            and all(key(slot) == key(slots[0][1]) for _, slot in slots))


class TraceWriter:
    """Writes a trace; see the module docstring. Rows become durable at end_step()."""

    def __init__(self, path: str, *, producer: str = "external", producer_version: str = "",
                 git_commit: str = "", model_path: str = "", model_sha256: str = "",
                 hparams: Optional[Dict[str, HParam]] = None, precision: str = "f32",
                 fault: str = "none", prompt_length: int = 0, tokens: Iterable[int] = (),
                 dims: Optional[Dict[str, int]] = None,
                 settings: Optional[Dict[str, HParam]] = None,
                 unavailable: Optional[Dict[str, str]] = None,
                 layouts: Optional[Dict[str, str]] = None, chunk_bytes: int = 64 * 1024,
                 precreate: Sequence[Tuple[str, int, Sequence[int]]] = (), lockstep_source: str = "",
                 tap_filter: Optional[Dict[str, str]] = None):
        def reject(problem: str):
            raise TraceError(path, "/", problem)

        if producer not in PRODUCERS:
            reject(f"producer: expected one of {', '.join(PRODUCERS)}, got {producer!r}")
        if model_sha256 and not _SHA256.match(model_sha256):
            reject(f"model_sha256: expected 64 lowercase hex digits or empty, got {model_sha256!r}")
        if prompt_length < 0:
            reject(f"prompt_length {prompt_length} < 0")
        if dims is not None and not set(DIM_NAMES) <= set(dims) <= set(DIM_NAMES + OPTIONAL_DIM_NAMES):
            reject(f"dims: expected the keys {', '.join(DIM_NAMES)}, and optionally {', '.join(OPTIONAL_DIM_NAMES)}")
        for group_name, values in (("hparams", hparams), ("settings", settings)):
            for key, value in (values or {}).items():
                if not isinstance(value, (bool, np.bool_, int, np.integer, float, np.floating, str)):
                    reject(f"{group_name}[{key!r}]: expected int, float or str, got {type(value).__name__}")
        if not set(tap_filter or {}) <= {"names", "layers", "positions"} or not all(
                isinstance(v, str) for v in (tap_filter or {}).values()):
            reject("tap_filter: expected strings under the keys names, layers, positions (the name globs, layer "
                   "ranges and position ranges the run recorded, as `tapdiff run --taps/--layers/--positions` take them)")
        if not isinstance(lockstep_source, str):
            reject(f"lockstep_source: expected the path of the trace the run continued from, got "
                   f"{type(lockstep_source).__name__}")
        for key, value in (unavailable or {}).items():
            if not isinstance(value, str) or not value:
                reject(f"unavailable[{key!r}]: expected a string saying why the tap is not available")
        for key, value in (layouts or {}).items():
            if not isinstance(value, str) or "=" not in value:
                reject(f"layouts[{key!r}]: expected a layout such as \"axes=head_dim,n_head; shard=n_head:0/2\"")
            if dims is None:
                reject(f"layouts[{key!r}]: a layout is written in the model's dims: pass dims=")
        unavailable = dict(unavailable or {})
        if ATTN_SUMMARY not in unavailable:
            if ATTN_PROBS in unavailable:
                unavailable[ATTN_SUMMARY] = ("derived from attn.probs, which this producer does not record: " +
                                             unavailable[ATTN_PROBS])
            elif ATTN_PROBS in (layouts or {}):
                unavailable[ATTN_SUMMARY] = ("derived only from attn.probs rows in the catalogue's layout "
                                             "[n_head, n_ctx]; this trace stores them as " + layouts[ATTN_PROBS])
        self._derives_summary = ATTN_SUMMARY not in unavailable
        self._summary_recorded = set()
        self._derived: List[Tuple[int, int, np.ndarray]] = []  # attn.probs.summary rows of this step
        self.path = path
        self._chunk_bytes = chunk_bytes
        self._stacks: Dict[Tuple[str, Tuple[int, ...]], _Stack] = {}
        self._slots: Dict[Tuple[str, int], Tuple[_Stack, _Slot]] = {}
        self._by_index: List[_Slot] = []  # every slot, by its row in /committed
        self._pending_tokens: List[int] = [int(t) for t in tokens]
        self.steps = 0
        self.committed_steps = 0
        self._open = True
        stacks = self._precreate_plan(precreate)
        # v110 at most: files stay readable by HDF5 1.10 (Debian's libhdf5). No lock, so a
        # reader may look at the trace while it is written. Built under a temporary name and
        # renamed after its first commit, so that a trace file is never half-created.
        self._partial = path + ".partial"
        self._f = h5py.File(self._partial, "w", libver=("earliest", "v110"), locking=False)
        a = self._f.attrs
        a["format"] = FORMAT_NAME
        a["format_version"] = f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"
        for key, value in (("producer", producer), ("producer_version", producer_version),
                           ("git_commit", git_commit), ("model_path", model_path),
                           ("model_sha256", model_sha256), ("precision", precision),
                           ("fault", fault)):
            a[key] = str(value)
        a["prompt_length"] = np.int64(prompt_length)
        if lockstep_source:
            a["lockstep_source"] = lockstep_source
        for key in ("complete", "committed_steps", "committed_tokens"):
            a[key] = np.int64(0)
        for key in ("names", "layers", "positions"):
            a[f"tap_filter_{key}"] = (tap_filter or {}).get(key, "")
        for group_name, values in (("hparams", hparams or {}), ("producer_settings", settings),
                                   ("unavailable", unavailable), ("layouts", layouts)):
            if values is None or (group_name != "hparams" and not values):
                continue
            group = self._f.create_group(group_name)
            for key, value in values.items():
                if isinstance(value, (bool, np.bool_, int, np.integer)):
                    group.attrs[key] = np.int64(value)
                elif isinstance(value, (float, np.floating)):
                    group.attrs[key] = np.float64(value)
                else:
                    group.attrs[key] = str(value)  # a str subclass (torch's version) is not an HDF5 string
        if dims is not None:
            group = self._f.create_group("dims")
            for key in DIM_NAMES:
                group.attrs[key] = np.int64(dims[key])
            for key in OPTIONAL_DIM_NAMES:
                if dims.get(key, 0) > 0:
                    group.attrs[key] = np.int64(dims[key])
        self._tokens = self._f.create_dataset("tokens", shape=(0,), maxshape=(None,),
                                              chunks=(1024,), dtype="<i4")
        # Rows, runs, rows in the stack's batch: this writer puts every row in data.
        self._committed = self._f.create_dataset("committed", shape=(0, 3), maxshape=(None, 3),
                                                 chunks=(256, 3), dtype="<i8", fillvalue=0)
        self._tap_group = self._f.create_group("taps")
        # Creating a stack rewrites /taps in place, adding a slot rewrites the stack's
        # attributes; a kill during that flush can make them unreadable. Stacks listed here
        # are created, with all their slots, before the first commit instead.
        for (name, row_shape), layers in stacks.items():
            self._new_stack(name, row_shape, layers)
        self._commit()
        os.replace(self._partial, path)

    def _precreate_plan(self, precreate) -> Dict[Tuple[str, Tuple[int, ...]], List[int]]:
        """{(name, row_shape): layers} of the stacks to create up front, checked."""
        stacks: Dict[Tuple[str, Tuple[int, ...]], List[int]] = {}
        seen = set()
        for name, layer, row_shape in precreate:
            self._check_tap(name, layer)
            shape = tuple(int(d) for d in row_shape)
            if not 1 <= len(shape) <= 4 or min(shape) < 1:
                raise TraceError(self.path, f"/taps/{name}", f"layer {layer}: row shape "
                                 f"{list(shape)}: expected 1 to 4 dimensions, each >= 1")
            if (name, layer) in seen:
                raise TraceError(self.path, f"/taps/{name}",
                                 f"layer {layer}: listed twice in precreate")
            seen.add((name, layer))
            stacks.setdefault((name, shape), []).append(layer)
        # The summaries the writer will derive, where the list does not name them itself.
        if self._derives_summary:
            for (name, shape), layers in list(stacks.items()):
                if name != ATTN_PROBS or len(shape) != 2:
                    continue
                for layer in layers:
                    if (ATTN_SUMMARY, layer) not in seen:
                        seen.add((ATTN_SUMMARY, layer))
                        stacks.setdefault((ATTN_SUMMARY, (shape[0], len(ATTN_SUMMARY_FIELDS))), []).append(layer)
        return stacks

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()

    def _check_tap(self, name: str, layer: int) -> None:
        obj = f"/taps/{name}"
        if not name or not _NAME.match(name) or name[0] == "." or name[-1] == ".":
            raise TraceError(self.path, obj,
                             "tap name may only use letters, digits, '_', '.' and '-'")
        problem = _layer_problem(name, layer)
        if problem:
            raise TraceError(self.path, obj, problem)

    def record(self, name: str, layer: int, first_position: int, rows) -> None:
        """rows: (n_rows, *row_shape) for positions first_position .. first_position+n_rows-1.
        The rows are copied; they are written and committed at the next end_step()."""
        if not self._open:
            raise TraceError(self.path, "/", "the trace is already closed")
        self._check_tap(name, layer)
        obj = f"/taps/{name}"
        if first_position < 0:
            raise TraceError(self.path, obj, f"layer {layer}: first_position {first_position} < 0")
        values = np.array(rows, dtype=np.float32)
        if values.ndim < 2 or values.shape[0] < 1 or 0 in values.shape or values.ndim > 5:
            raise TraceError(self.path, obj, f"layer {layer}: rows: expected (n_rows, *row_shape) "
                                             f"with 1 to 4 row dimensions, got shape "
                                             f"{values.shape}")
        # A producer that computes the summary itself (or copies a trace) records it; then nothing
        # is derived for that layer. Derived rows wait for the step's end to see that.
        if name == ATTN_SUMMARY and layer not in self._summary_recorded:
            self._summary_recorded.add(layer)
            self._derived = [d for d in self._derived if d[0] != layer]
        self._record_rows(name, layer, first_position, values)  # a rejected record derives nothing
        if (name == ATTN_PROBS and values.ndim == 3 and self._derives_summary
                and layer not in self._summary_recorded):
            self._derived.append((layer, first_position, attention_summary(values, first_position)))

    def _record_derived(self) -> None:
        derived, self._derived = self._derived, []
        for layer, first_position, rows in derived:
            self._record_rows(ATTN_SUMMARY, layer, first_position, rows)

    def _record_rows(self, name: str, layer: int, first_position: int, values: np.ndarray) -> None:
        obj = f"/taps/{name}"
        row_shape = tuple(int(d) for d in values.shape[1:])
        stack, slot = self._slots.get((name, layer), (None, None))
        if slot is None or (slot.recorded == 0 and stack.row_shape != row_shape):
            # A new tap, or a pre-created one recorded with another shape: it takes a new slot
            # (and index) in the stack of its shape; the old slot keeps 0 rows.
            stack, slot = self._add_slot(name, layer, row_shape)
        if row_shape != stack.row_shape:
            raise TraceError(self.path, obj, f"layer {layer}: row shape {list(row_shape)} differs "
                                             f"from {list(stack.row_shape)} recorded earlier")
        if first_position <= slot.last_position:
            raise TraceError(self.path, obj,
                             f"layer {layer}: position {first_position} recorded after position "
                             f"{slot.last_position}: positions of a tap must increase")
        if slot.recorded == 0 or first_position != slot.last_position + 1:
            slot.pending_runs.append((slot.recorded, first_position))
        slot.pending.append(values)
        slot.pending_rows += values.shape[0]
        slot.last_position = first_position + values.shape[0] - 1

    def _new_stack(self, name: str, row_shape: Tuple[int, ...], layers: List[int]) -> _Stack:
        n = sum(1 for stack_name, _ in self._stacks if stack_name == name)
        group = self._tap_group.create_group(name if n == 0 else f"{name}#{n + 1}")
        stack = _Stack(group, name, row_shape, len(layers), self._chunk_bytes)
        self._stacks[(name, row_shape)] = stack
        slots = [_Slot(layer, len(self._by_index) + i) for i, layer in enumerate(layers)]
        self._by_index.extend(slots)
        stack.add_slots(slots)
        for slot in slots:
            self._slots[(name, slot.layer)] = (stack, slot)
        return stack

    def _add_slot(self, name: str, layer: int, row_shape: Tuple[int, ...]) -> Tuple[_Stack, _Slot]:
        stack = self._stacks.get((name, row_shape))
        if stack is None:
            stack = self._new_stack(name, row_shape, [layer])
        else:
            slot = _Slot(layer, len(self._by_index))
            self._by_index.append(slot)
            stack.add_slots([slot])
            self._slots[(name, layer)] = (stack, slot)
        return self._slots[(name, layer)]

    def append_tokens(self, tokens: Iterable[int]) -> None:
        self._pending_tokens.extend(int(t) for t in tokens)

    def end_step(self) -> None:
        """Ends a forward step and commits it: rows first, then the counts readers trust."""
        self._record_derived()
        self.steps += 1
        self._commit()

    def close(self) -> None:
        if not self._open:
            return
        self._record_derived()
        self._commit()
        for stack in self._stacks.values():
            stack.trim()
        self._f.attrs["complete"] = np.int64(1)
        self._f.close()
        self._open = False

    def abandon(self) -> None:
        """Closes without setting complete (an aborted run); committed steps stay readable."""
        if self._open:
            self._f.close()
            self._open = False

    def _commit(self) -> None:
        if self._pending_tokens:
            n = self._tokens.shape[0]
            self._tokens.resize((n + len(self._pending_tokens),))
            self._tokens[n:] = np.asarray(self._pending_tokens, dtype=np.int32)
            self._pending_tokens = []
        for stack in self._stacks.values():
            stack.write_pending()
        self._f.flush()
        self._committed.resize((len(self._by_index), 3))
        if self._by_index:
            self._committed[:] = np.array([(s.rows, s.runs, 0) for s in self._by_index], np.int64)
        self._f.attrs["committed_steps"] = np.int64(self.steps)
        self._f.attrs["committed_tokens"] = np.int64(self._tokens.shape[0])
        self._f.flush()
        self.committed_steps = self.steps


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else str(value)


class TraceReader:
    """Opens and validates a trace; reads tap rows by position range, up to the committed counts."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._f = h5py.File(path, "r", locking=False)
        except (OSError, FileNotFoundError) as e:
            raise TraceError(path, "/", f"cannot open as an HDF5 file: {e}") from None
        try:
            self._load()
        except TraceError:
            self._f.close()
            raise
        except Exception as e:  # h5py's errors on a damaged file
            self._f.close()
            raise TraceError(path, "/", f"unreadable: {e}") from None

    def __enter__(self) -> "TraceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    def _fail(self, obj: str, problem: str):
        raise TraceError(self.path, obj, problem)

    def _attr(self, obj, where: str, key: str, kind: str):
        if key not in obj.attrs:
            self._fail(where, f"attribute {key!r}: missing")
        value = obj.attrs[key]
        if kind == "str":
            if not isinstance(value, (str, bytes, np.bytes_)):
                self._fail(where, f"attribute {key!r}: expected a string")
            return _text(value)
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
            self._fail(where, f"attribute {key!r}: expected an integer")
        return int(value)

    def _ints(self, obj, where: str, key: str) -> Tuple[int, ...]:
        if key not in obj.attrs:
            self._fail(where, f"attribute {key!r}: missing")
        value = np.asarray(obj.attrs[key])
        if value.dtype.kind not in "iu" or value.ndim > 1:
            self._fail(where, f"attribute {key!r}: expected a 1-D array of integers")
        return tuple(int(v) for v in value.reshape(-1))

    def _load(self) -> None:
        f = self._f
        fmt = self._attr(f, "/", "format", "str")
        if fmt != FORMAT_NAME:
            self._fail("/", f"attribute 'format': expected {FORMAT_NAME!r}, got {fmt!r}")
        version = self._attr(f, "/", "format_version", "str")
        match = re.fullmatch(r"(\d+)\.(\d+)", version)
        if not match:
            self._fail("/", f"attribute 'format_version': expected MAJOR.MINOR, got {version!r}")
        self.format_version = (int(match.group(1)), int(match.group(2)))
        if self.format_version[0] > FORMAT_VERSION[0]:
            self._fail("/", f"format_version {version} is newer than this reader supports "
                            f"({FORMAT_VERSION[0]}.x): upgrade tapdiff to read it")
        if self.format_version[0] < OLDEST_MAJOR:
            self._fail("/", f"format_version {version} is older than any this reader supports "
                            f"({OLDEST_MAJOR}.x to {FORMAT_VERSION[0]}.x): record the trace again "
                            f"with this tapdiff")
        self.metadata: Dict[str, object] = {k: self._attr(f, "/", k, "str")
                                            for k in REQUIRED_STRINGS}
        if self.metadata["producer"] not in PRODUCERS:
            self._fail("/", f"attribute 'producer': expected one of {', '.join(PRODUCERS)}")
        ints = {k: self._attr(f, "/", k, "int") for k in REQUIRED_INTS}
        self.metadata["prompt_length"] = ints["prompt_length"]
        self.complete = ints["complete"] != 0
        self.committed_steps = ints["committed_steps"]
        self.filter = {k: _text(f.attrs.get(f"tap_filter_{k}", ""))
                       for k in ("names", "layers", "positions")}
        if "hparams" not in f or not isinstance(f["hparams"], h5py.Group):
            self._fail("/hparams", "missing group")
        def attributes(name: str) -> Dict[str, object]:
            if name not in f:
                return {}
            return {k: (_text(v) if isinstance(v, (str, bytes, np.bytes_)) else v.item())
                    for k, v in f[name].attrs.items()}
        self.hparams = attributes("hparams")
        self.settings = attributes("producer_settings")  # format 2.1
        self.unavailable = attributes("unavailable")     # format 2.1: tap -> why
        self.layouts = attributes("layouts")             # format 2.2: tap -> layout (rows read as stored)
        self.dims = None
        if "dims" in f:
            self.dims = {k: self._attr(f["dims"], "/dims", k, "int") for k in DIM_NAMES}
            for k in OPTIONAL_DIM_NAMES:
                self.dims[k] = self._attr(f["dims"], "/dims", k, "int") if k in f["dims"].attrs else 0
        self.tokens = self._committed_rows("tokens", ints["committed_tokens"], 1)
        committed = self._committed_rows("committed", None, 2 if self.format_version[0] < 3 else 3)
        self._taps: Dict[Tuple[str, int], TapInfo] = {}
        self._index_owner: Dict[int, str] = {}
        if "taps" not in f or not isinstance(f["taps"], h5py.Group):
            self._fail("/taps", "missing group")
        for member, group in f["taps"].items():
            for tap in self._load_stack(member, group, committed):
                other = self._taps.get((tap.name, tap.layer))
                if other is not None:
                    self._fail(f"/taps/{member}", f"slot {tap.slot} (layer {tap.layer}): the tap "
                                                  f"{tap.full_name} has rows in slot {other.slot} "
                                                  f"of /taps/{other.stack} too")
                self._taps[(tap.name, tap.layer)] = tap

    def _committed_rows(self, name: str, n: Optional[int], width: int) -> np.ndarray:
        if name not in self._f or not isinstance(self._f[name], h5py.Dataset):
            self._fail(f"/{name}", "missing dataset")
        ds = self._f[name]
        rank = 1 if width == 1 else 2
        if ds.dtype.kind not in "iu" or ds.ndim != rank or (rank == 2 and ds.shape[1] != width):
            self._fail(f"/{name}", "unexpected type or shape")
        n = ds.shape[0] if n is None else n
        if n > ds.shape[0]:
            self._fail(f"/{name}", f"committed count {n} exceeds its {ds.shape[0]} rows")
        return ds[:n].astype(np.int64)

    def _load_stack(self, member: str, group, committed: np.ndarray) -> List[TapInfo]:
        where = f"/taps/{member}"
        if not isinstance(group, h5py.Group):
            self._fail(where, "expected a group")
        if "index" not in group.attrs and not self.complete:
            return []  # being created when the writer stopped
        name, row_shape, layers, index = self._stack_attrs(group, where)
        data, runs = self._stack_datasets(group, where, row_shape, len(layers))
        batch = None
        counted = []  # (slot, n_rows, n_runs, n_batch) of the slots that are taps
        for s, (layer, idx) in enumerate(zip(layers, index)):
            slot_name = f"slot {s} (layer {layer})"
            if not 0 <= idx < committed.shape[0]:
                if not self.complete:
                    continue  # added when the writer stopped
                self._fail(where, f"attribute 'index': {slot_name}: {idx} is outside /committed "
                                  f"({committed.shape[0]} rows)")
            if idx in self._index_owner:
                self._fail(where, f"attribute 'index': {slot_name}: {idx} is also the index of "
                                  f"{self._index_owner[idx]}")
            self._index_owner[idx] = f"slot {s} of {where}"
            n_rows, n_runs = int(committed[idx][0]), int(committed[idx][1])
            n_batch = int(committed[idx][2]) if committed.shape[1] > 2 else 0
            if not 0 <= n_batch <= n_rows:
                self._fail("/committed", f"row {idx} ({full_tap_name(name, layer)}): {n_batch} rows in "
                                         f"the stack's batch, expected 0 to its {n_rows} rows")
            if n_batch > 0 and batch is None:
                batch = self._stack_batch(group, where, row_shape, len(layers))
            checks = [(runs, n_runs, "runs", 0)]
            if n_rows > n_batch:
                checks.append((data, n_rows, "rows", 0))
            if n_batch > 0:
                checks.append((batch, n_batch, "batch rows", 1))
            for ds, count, what, axis in checks:
                if not 0 <= count <= ds.shape[axis]:
                    self._fail(ds.name, f"{slot_name}: {count} committed {what} (/committed row "
                                        f"{idx}) do not fit its {ds.shape[axis]} rows")
            if n_rows == 0:
                continue  # pre-created and never written: not a tap
            if n_runs == 0:
                self._fail(f"{where}/runs", f"{slot_name}: {n_rows} committed rows but no runs")
            counted.append((s, n_rows, n_runs, n_batch))
        if not counted:
            return []
        all_runs = runs[:max(n for _, _, n, _ in counted)].astype(np.int64)  # one read per stack
        return [TapInfo(name, layers[s], full_tap_name(name, layers[s]), row_shape, n_rows,
                        self._runs(f"{where}/runs", f"slot {s} (layer {layers[s]})",
                                   all_runs[:n_runs, s], n_rows),
                        member, s, index[s], n_batch)
                for s, n_rows, n_runs, n_batch in counted]

    def _stack_attrs(self, group, where: str):
        """(name, row_shape, layers, index) of a stack, checked."""
        name = self._attr(group, where, "name", "str")
        row_shape = self._ints(group, where, "row_shape")
        if not 1 <= len(row_shape) <= 4 or min(row_shape) < 1:
            self._fail(where, f"attribute 'row_shape': expected 1 to 4 dimensions, each >= 1, "
                              f"got {list(row_shape)}")
        layers = self._ints(group, where, "layers")
        index = self._ints(group, where, "index")
        if len(layers) != len(index):
            self._fail(where, f"attributes 'layers' and 'index': expected the same length, got "
                              f"{len(layers)} and {len(index)}")
        for key, values in (("layers", layers), ("index", index)):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                self._fail(where, f"attribute {key!r}: {repeated[0]} appears more than once")
        for layer in layers:
            problem = _layer_problem(name, layer)
            if problem:
                self._fail(where, f"attribute 'layers': {problem}")
        return name, row_shape, layers, index

    def _stack_datasets(self, group, where: str, row_shape: Tuple[int, ...], n_slots: int):
        """(data, runs) of a stack, their types and shapes checked."""
        data = self._stack_dataset(group, where, "data")
        if data.dtype != np.dtype("<f4"):
            self._fail(f"{where}/data", f"expected float32 elements, got {data.dtype}")
        if data.ndim != 2 + len(row_shape):
            self._fail(f"{where}/data", f"expected rank {2 + len(row_shape)}, got {data.ndim}")
        if data.shape[1] < n_slots or tuple(data.shape[2:]) != row_shape:
            shape = ", ".join(map(str, row_shape))
            self._fail(f"{where}/data", f"expected shape [*, >= {n_slots}, {shape}], "
                                        f"got {list(data.shape)}")
        runs = self._stack_dataset(group, where, "runs")
        if runs.dtype.kind not in "iu":
            self._fail(f"{where}/runs", f"expected integer elements, got {runs.dtype}")
        if runs.ndim != 3 or runs.shape[1] < n_slots or runs.shape[2] != 2:
            self._fail(f"{where}/runs", f"expected shape [*, >= {n_slots}, 2], "
                                        f"got {list(runs.shape)}")
        return data, runs

    def _stack_batch(self, group, where: str, row_shape: Tuple[int, ...], n_slots: int):
        """A stack's batch (format 3): (slots, rows, *row_shape), checked."""
        batch = self._stack_dataset(group, where, "batch")
        if batch.dtype != np.dtype("<f4"):
            self._fail(f"{where}/batch", f"expected float32 elements, got {batch.dtype}")
        if batch.ndim != 2 + len(row_shape) or batch.shape[0] < n_slots or tuple(batch.shape[2:]) != row_shape:
            shape = ", ".join(map(str, row_shape))
            self._fail(f"{where}/batch", f"expected shape [>= {n_slots} slots, *, {shape}], "
                                         f"got {list(batch.shape)}")
        return batch

    def _stack_dataset(self, group, where: str, key: str) -> h5py.Dataset:
        ds = group.get(key)
        if not isinstance(ds, h5py.Dataset):
            self._fail(f"{where}/{key}", "missing dataset")
        return ds

    def _runs(self, where: str, slot_name: str, raw: np.ndarray,
              n_rows: int) -> List[Tuple[int, int, int]]:
        """(first_row, first_position, n) of a slot's committed runs, checked."""
        runs: List[Tuple[int, int, int]] = []
        for i, (first_row, first_position) in enumerate(raw):
            end = int(raw[i + 1][0]) if i + 1 < len(raw) else n_rows
            count = end - int(first_row)
            last = runs[-1][1] + runs[-1][2] - 1 if runs else -1
            if (i == 0 and first_row != 0) or count < 1 or first_position <= last:
                self._fail(where, f"{slot_name}: run {i}: expected rows and positions to "
                                  f"increase from row 0")
            runs.append((int(first_row), int(first_position), count))
        return runs

    def taps(self) -> List[TapInfo]:
        return list(self._taps.values())

    def tap(self, name: str, layer: int = -1) -> TapInfo:
        try:
            return self._taps[(name, layer)]
        except KeyError:
            self._fail(f"/taps/{name}", f"layer {layer}: no such tap in the trace")

    def read(self, name: str, layer: int = -1, first_position: int = 0,
             last_position: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
        """(positions (n,), values (n, *row_shape)) for positions in [first, last]."""
        tap = self.tap(name, layer)
        positions = tap.positions()
        last = positions[-1] if last_position is None else last_position
        wanted = np.nonzero((positions >= first_position) & (positions <= last))[0]
        if wanted.size == 0:
            return positions[:0], np.zeros((0,) + tap.row_shape, np.float32)
        r0, r1 = int(wanted[0]), int(wanted[-1]) + 1  # positions increase: one row range
        where = f"/taps/{tap.stack}"
        try:
            values = stack_rows(self._f[where], tap.slot, r0, r1, tap.batch_rows)
        except Exception as e:  # h5py's errors on a damaged file
            self._fail(where, f"slot {tap.slot} (layer {layer}): cannot read rows "
                              f"{r0}..{r1 - 1}: {e}")
        return positions[r0:r1], values
