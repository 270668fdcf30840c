"""Read and write tapdiff traces (docs/trace-schema.md) with h5py and numpy only.

Meant for PyTorch forward hooks and notebooks: the writer produces the same files as
tapdiff's C++ TraceWriter, the reader accepts what either writes.

    with TraceWriter("run.h5", producer="external", tokens=prompt, prompt_length=len(prompt),
                     hparams={"n_layer": 2}) as trace:
        trace.record("attn_q", layer=0, first_position=0, rows=q)   # q: (n_rows, n_embd)
        trace.end_step()                                            # durable from here on
    # leaving the block normally sets complete=1; an exception leaves complete=0

    with TraceReader("run.h5") as trace:
        positions, values = trace.read("attn_q", 0)

Tap names are short ("attn_q"); per-layer taps are stored as "blk.{layer}.{name}", global
taps (layer -1) under their name (docs/taps.md). From a PyTorch forward hook:

    def tap(name, layer):
        def hook(module, inputs, output):           # output: (1, n_tokens, dim)
            rows = output.detach().float().cpu().numpy()[0]
            trace.record(name, layer, first_position=position, rows=rows)
        return hook
    model.model.layers[3].self_attn.q_proj.register_forward_hook(tap("attn_q", 3))

Taps known in advance are best passed as precreate=[(name, layer, row_shape), ...]: a kill
during the step that first creates a tap can cost the whole trace (docs/trace-schema.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import h5py
import numpy as np

FORMAT_NAME = "tapdiff-trace"
FORMAT_VERSION = (1, 0)
PRODUCERS = ("reference", "engine-host", "engine-cuda", "external")
DIM_NAMES = ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx")
REQUIRED_STRINGS = ("producer", "producer_version", "git_commit", "model_path", "model_sha256",
                    "precision", "fault")
REQUIRED_INTS = ("prompt_length", "complete", "committed_steps", "committed_tokens")

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

HParam = Union[int, float, str]


class TraceError(Exception):
    """A malformed trace or a rejected call: '<file>: <object>: <problem>'."""

    def __init__(self, file: str, obj: str, problem: str):
        super().__init__(f"{file}: {obj}: {problem}")
        self.file, self.object, self.problem = file, obj, problem


def full_tap_name(name: str, layer: int) -> str:
    return f"blk.{layer}.{name}" if layer >= 0 else name


@dataclass
class TapInfo:
    name: str
    layer: int
    full_name: str
    row_shape: Tuple[int, ...]
    n_rows: int
    runs: List[Tuple[int, int, int]] = field(default_factory=list)  # first_row, first_position, n

    def positions(self) -> np.ndarray:
        if not self.runs:
            return np.zeros(0, np.int64)
        return np.concatenate([np.arange(p, p + n, dtype=np.int64) for _, p, n in self.runs])


class _Tap:
    """A tap being written: its datasets and the bookkeeping the commit protocol needs."""

    def __init__(self, group: h5py.Group, row_shape: Tuple[int, ...], chunk_bytes: int, index: int):
        row_bytes = int(np.prod(row_shape)) * 4
        chunk_rows = min(256, max(1, chunk_bytes // row_bytes))
        self.data = group.create_dataset("data", shape=(0,) + row_shape,
                                         maxshape=(None,) + row_shape,
                                         chunks=(chunk_rows,) + row_shape, dtype="<f4")
        self.runs = group.create_dataset("runs", shape=(0, 2), maxshape=(None, 2), chunks=(64, 2),
                                         dtype="<i8")
        self.row_shape = row_shape
        self.index = index
        self.rows = 0
        self.last_position = -1


class TraceWriter:
    """Writes a trace; see the module docstring. Rows become durable at end_step()."""

    def __init__(self, path: str, *, producer: str = "external", producer_version: str = "",
                 git_commit: str = "", model_path: str = "", model_sha256: str = "",
                 hparams: Optional[Dict[str, HParam]] = None, precision: str = "f32",
                 fault: str = "none", prompt_length: int = 0, tokens: Iterable[int] = (),
                 dims: Optional[Dict[str, int]] = None, chunk_bytes: int = 64 * 1024,
                 precreate: Sequence[Tuple[str, int, Sequence[int]]] = ()):
        def reject(problem: str):
            raise TraceError(path, "/", problem)

        if producer not in PRODUCERS:
            reject(f"producer: expected one of {', '.join(PRODUCERS)}, got {producer!r}")
        if model_sha256 and not _SHA256.match(model_sha256):
            reject(f"model_sha256: expected 64 lowercase hex digits or empty, got {model_sha256!r}")
        if prompt_length < 0:
            reject(f"prompt_length {prompt_length} < 0")
        if dims is not None and set(dims) != set(DIM_NAMES):
            reject(f"dims: expected the keys {', '.join(DIM_NAMES)}")
        for key, value in (hparams or {}).items():
            if not isinstance(value, (bool, np.bool_, int, np.integer, float, np.floating, str)):
                reject(f"hparams[{key!r}]: expected int, float or str, got {type(value).__name__}")
        self.path = path
        self._chunk_bytes = chunk_bytes
        self._taps: Dict[str, _Tap] = {}
        self._pending_tokens: List[int] = [int(t) for t in tokens]
        self.steps = 0
        self.committed_steps = 0
        self._open = True
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
        for key in ("complete", "committed_steps", "committed_tokens"):
            a[key] = np.int64(0)
        for key in ("tap_filter_names", "tap_filter_layers", "tap_filter_positions"):
            a[key] = ""
        group = self._f.create_group("hparams")
        for key, value in (hparams or {}).items():
            if isinstance(value, (bool, np.bool_, int, np.integer)):
                group.attrs[key] = np.int64(value)
            elif isinstance(value, (float, np.floating)):
                group.attrs[key] = np.float64(value)
            else:
                group.attrs[key] = value
        if dims is not None:
            group = self._f.create_group("dims")
            for key in DIM_NAMES:
                group.attrs[key] = np.int64(dims[key])
        self._tokens = self._f.create_dataset("tokens", shape=(0,), maxshape=(None,),
                                              chunks=(1024,), dtype="<i4")
        self._committed = self._f.create_dataset("committed", shape=(0, 2), maxshape=(None, 2),
                                                 chunks=(256, 2), dtype="<i8", fillvalue=0)
        self._tap_group = self._f.create_group("taps")
        # Creating a group rewrites /taps in place; a kill during that flush can make the whole
        # group unreadable. Taps listed here are created before the first commit instead.
        for name, layer, row_shape in precreate:
            self._create_tap(name, layer, tuple(int(d) for d in row_shape))
        self._commit()
        os.replace(self._partial, path)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()

    def record(self, name: str, layer: int, first_position: int, rows) -> None:
        """rows: (n_rows, *row_shape) for positions first_position .. first_position+n_rows-1."""
        full = full_tap_name(name, layer)
        obj = f"/taps/{full}"
        if not self._open:
            raise TraceError(self.path, "/", "the trace is already closed")
        if not name or not _NAME.match(name) or name[0] == "." or name[-1] == ".":
            raise TraceError(self.path, obj,
                             "tap name may only use letters, digits, '_', '.' and '-'")
        if layer < -1 or (layer == -1 and name.startswith("blk.")):
            raise TraceError(self.path, obj, f"bad layer {layer} for tap {name!r}")
        if first_position < 0:
            raise TraceError(self.path, obj, f"first_position {first_position} < 0")
        values = np.ascontiguousarray(rows, dtype=np.float32)
        if values.ndim < 2 or values.shape[0] < 1 or 0 in values.shape or values.ndim > 5:
            raise TraceError(self.path, obj, f"rows: expected (n_rows, *row_shape) with 1 to 4 row "
                                             f"dimensions, got shape {values.shape}")
        row_shape = tuple(int(d) for d in values.shape[1:])
        tap = self._taps.get(full)
        if tap is None or (tap.rows == 0 and tap.row_shape != row_shape):
            tap = self._create_tap(name, layer, row_shape)
        if row_shape != tap.row_shape:
            raise TraceError(self.path, obj, f"row shape {list(row_shape)} differs from "
                                             f"{list(tap.row_shape)} recorded earlier")
        if first_position <= tap.last_position:
            raise TraceError(self.path, obj,
                             f"position {first_position} recorded after position "
                             f"{tap.last_position}: positions of a tap must increase")
        n = values.shape[0]
        if tap.rows == 0 or first_position != tap.last_position + 1:
            runs = tap.runs.shape[0]
            tap.runs.resize((runs + 1, 2))
            tap.runs[runs] = (tap.rows, first_position)
        tap.data.resize((tap.rows + n,) + row_shape)
        tap.data[tap.rows:tap.rows + n] = values
        tap.rows += n
        tap.last_position = first_position + n - 1

    def _create_tap(self, name: str, layer: int, row_shape: Tuple[int, ...]) -> _Tap:
        full = full_tap_name(name, layer)
        old = self._taps.get(full)
        if old is not None:  # a pre-created tap without rows takes the recorded shape
            del self._tap_group[full]
        group = self._tap_group.create_group(full)
        group.attrs["name"] = name
        group.attrs["layer"] = np.int64(layer)
        group.attrs["row_shape"] = np.array(row_shape, dtype=np.int64)
        group.attrs["index"] = np.int64(old.index if old is not None else len(self._taps))
        tap = _Tap(group, row_shape, self._chunk_bytes, int(group.attrs["index"]))
        self._taps[full] = tap
        return tap

    def append_tokens(self, tokens: Iterable[int]) -> None:
        self._pending_tokens.extend(int(t) for t in tokens)

    def end_step(self) -> None:
        """Ends a forward step and commits it: rows first, then the counts readers trust."""
        self.steps += 1
        self._commit()

    def close(self) -> None:
        if not self._open:
            return
        self._commit()
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
        self._f.flush()
        table = np.zeros((len(self._taps), 2), dtype=np.int64)
        for tap in self._taps.values():
            table[tap.index] = (tap.rows, tap.runs.shape[0])
        self._committed.resize((len(self._taps), 2))
        if len(self._taps):
            self._committed[:] = table
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
        if self.format_version[0] != FORMAT_VERSION[0]:
            self._fail("/", f"format_version {version} is not supported by this reader "
                            f"({FORMAT_VERSION[0]}.x)")
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
        self.hparams = {k: (_text(v) if isinstance(v, (str, bytes, np.bytes_)) else v.item())
                        for k, v in f["hparams"].attrs.items()}
        self.dims = None
        if "dims" in f:
            self.dims = {k: self._attr(f["dims"], "/dims", k, "int") for k in DIM_NAMES}
        self.tokens = self._committed_rows("tokens", ints["committed_tokens"], 1)
        committed = self._committed_rows("committed", None, 2)
        self._taps: Dict[Tuple[str, int], TapInfo] = {}
        if "taps" not in f or not isinstance(f["taps"], h5py.Group):
            self._fail("/taps", "missing group")
        for member, group in f["taps"].items():
            tap = self._load_tap(member, group, committed)
            if tap is not None:
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

    def _load_tap(self, member: str, group, committed: np.ndarray) -> Optional[TapInfo]:
        where = f"/taps/{member}"
        if "index" not in group.attrs and not self.complete:
            return None
        index = self._attr(group, where, "index", "int")
        if not 0 <= index < committed.shape[0]:
            if not self.complete:
                return None
            self._fail(where, f"attribute 'index': {index} is outside /committed")
        n_rows, n_runs = (int(v) for v in committed[index])
        if n_rows <= 0:
            return None
        name = self._attr(group, where, "name", "str")
        layer = self._attr(group, where, "layer", "int")
        if full_tap_name(name, layer) != member:
            self._fail(where, f"name {name!r} and layer {layer} do not make the group's name")
        if "row_shape" not in group.attrs:
            self._fail(where, "attribute 'row_shape': missing")
        row_shape = tuple(int(d) for d in np.atleast_1d(group.attrs["row_shape"]))
        data = group.get("data")
        if not isinstance(data, h5py.Dataset):
            self._fail(f"{where}/data", "missing dataset")
        if data.dtype != np.dtype("<f4"):
            self._fail(f"{where}/data", f"expected float32 elements, got {data.dtype}")
        if tuple(data.shape[1:]) != row_shape:
            self._fail(f"{where}/data", f"expected shape [*, {', '.join(map(str, row_shape))}], "
                                        f"got {list(data.shape)}")
        if n_rows > data.shape[0]:
            self._fail(f"{where}/data", f"committed rows {n_rows} exceed its {data.shape[0]} rows")
        raw = group["runs"][:n_runs].astype(np.int64) if n_runs else np.zeros((0, 2), np.int64)
        runs = []
        for i, (first_row, first_position) in enumerate(raw):
            end = int(raw[i + 1][0]) if i + 1 < len(raw) else n_rows
            count = end - int(first_row)
            last = runs[-1][1] + runs[-1][2] - 1 if runs else -1
            if (i == 0 and first_row != 0) or count < 1 or first_position <= last:
                self._fail(f"{where}/runs", f"run {i}: expected rows and positions to increase")
            runs.append((int(first_row), int(first_position), count))
        return TapInfo(name, layer, member, row_shape, n_rows, runs)

    def taps(self) -> List[TapInfo]:
        return list(self._taps.values())

    def tap(self, name: str, layer: int = -1) -> TapInfo:
        try:
            return self._taps[(name, layer)]
        except KeyError:
            self._fail(f"/taps/{full_tap_name(name, layer)}", "no such tap in the trace")

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
        try:
            values = self._f[f"taps/{tap.full_name}/data"][r0:r1]
        except Exception as e:  # h5py's errors on a damaged file
            self._fail(f"/taps/{tap.full_name}/data", f"cannot read rows {r0}..{r1 - 1}: {e}")
        return positions[r0:r1], values
