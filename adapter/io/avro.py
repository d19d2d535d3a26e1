"""The Avro schemas of the analytics path, parsed once, and their plain-binary codecs.

Two schemas ship with the package (``adapter/io/schemas/``; the copies in the
repository's top-level ``schemas/`` directory are kept byte-identical by a unit test):

* ``consume_trace.avsc`` -- :class:`~adapter.core.trace.TraceEvent`, one per consumption
  outcome;
* ``consume_trace_batch.avsc`` -- many of those packed in one record (an array of
  ``ConsumeTrace``), what :class:`~adapter.io.trace_sink.KafkaTraceSink` writes by default
  (:func:`pack_traces` frames already-encoded events, so an event is encoded once whether
  it travels alone or packed; :func:`decode_trace_records` reads either kind);
* ``dlq_export.avsc`` -- one dead letter, as the DLQ report exports it.

Records are *plain* Avro binary (no Confluent wire-format prefix, no object-container
header), which is what Spark's ``from_avro`` reads: :func:`encode` writes any record with
``fastavro.schemaless_writer``; :func:`encode_trace` uses a writer compiled from the trace
schema (:func:`compile_encoder`, the same bytes at a third of the cost).  The writer schema is
named by the Kafka header :data:`TRACE_SCHEMA_HEADER` (``<full name>/<CRC-64-AVRO
fingerprint>``); a reader resolves from that writer schema to its own (Avro schema
resolution), so old and new writers can share a topic.  Older schemas that writers may
still use live beside the current one as ``<name>.<fingerprint>.avsc`` and are found by
:func:`known_schemas`.  The evolution rules are in ``schemas/README.md``.
"""

from __future__ import annotations

import functools
import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from adapter.core.trace import RUN_FIELDS, TraceEvent, expand_run
from adapter.errors import InvalidInputError

__all__ = [
    "DLQ_EXPORT",
    "TRACE",
    "TRACE_BATCH",
    "TRACE_SCHEMA_HEADER",
    "AvroSchema",
    "compile_encoder",
    "decode",
    "decode_trace",
    "decode_trace_records",
    "dlq_export_schema",
    "encode",
    "encode_trace",
    "known_schemas",
    "load_schema",
    "pack_traces",
    "run_encoder",
    "trace_batch_schema",
    "trace_encoder",
    "trace_schema",
]

#: Kafka header on every trace record: which schema wrote it (``<full name>/<fingerprint>``).
TRACE_SCHEMA_HEADER: Final = "RMQ_TRACE_SCHEMA"
TRACE: Final = "consume_trace"
TRACE_BATCH: Final = "consume_trace_batch"
DLQ_EXPORT: Final = "dlq_export"
_PACKAGE: Final = "adapter.io"
_DIR: Final = "schemas"


@dataclass(frozen=True, slots=True)
class AvroSchema:
    """One Avro schema: its text (for Spark), its parsed form (for fastavro) and its id."""

    name: str
    text: str
    parsed: Any
    fullname: str
    fingerprint: str  # CRC-64-AVRO of the parsing canonical form, 16 hex digits

    @property
    def tag(self) -> str:
        """The value of :data:`TRACE_SCHEMA_HEADER` for records this schema writes."""
        return f"{self.fullname}/{self.fingerprint}"

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f["name"] for f in json.loads(self.text)["fields"])


def _build(name: str, text: str) -> AvroSchema:
    raw = json.loads(text)
    parsed = fastavro.parse_schema(raw)
    fp = fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    fullname = f"{raw['namespace']}.{raw['name']}" if raw.get("namespace") else raw["name"]
    return AvroSchema(name, text, parsed, fullname, fp)


def _files() -> Any:
    return resources.files(_PACKAGE).joinpath(_DIR)


@functools.cache
def load_schema(name: str) -> AvroSchema:
    """The current schema ``<name>.avsc`` shipped with the package (parsed once)."""
    res = _files().joinpath(f"{name}.avsc")
    if not res.is_file():
        raise FileNotFoundError(f"no Avro schema {name!r} in {_PACKAGE}/{_DIR}")
    return _build(name, res.read_text(encoding="utf-8"))


@functools.cache
def known_schemas(name: str) -> dict[str, AvroSchema]:
    """Every writer schema of ``name`` a reader must understand: ``{tag: schema}``.

    The current one plus the retired ones kept as ``<name>.<fingerprint>.avsc``.
    """
    out = {load_schema(name).tag: load_schema(name)}
    for res in _files().iterdir():
        fname = res.name
        if fname.startswith(f"{name}.") and fname.endswith(".avsc") and fname != f"{name}.avsc":
            old = _build(name, res.read_text(encoding="utf-8"))
            out.setdefault(old.tag, old)
    return out


def trace_schema() -> AvroSchema:
    return load_schema(TRACE)


def trace_batch_schema() -> AvroSchema:
    """The packed-record schema: ``{"events": [ConsumeTrace, ...]}``."""
    return load_schema(TRACE_BATCH)


def dlq_export_schema() -> AvroSchema:
    return load_schema(DLQ_EXPORT)


def encode(schema: AvroSchema, record: dict[str, Any]) -> bytes:
    """Plain Avro binary of ``record`` (no prefix): what Spark's ``from_avro`` reads."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema.parsed, record)
    return buf.getvalue()


def decode(schema: AvroSchema, data: bytes, *, reader: AvroSchema | None = None) -> dict[str, Any]:
    """Decode plain Avro binary written with ``schema``, resolved to ``reader`` if given."""
    out = fastavro.schemaless_reader(
        io.BytesIO(data), schema.parsed, reader.parsed if reader is not None else None
    )
    if not isinstance(out, dict):
        raise InvalidInputError("data", type(out).__name__, f"{schema.fullname}: not a record")
    return out


_TRACE_FIELDS: Final = TraceEvent._fields


def trace_record(event: TraceEvent) -> dict[str, Any]:
    """The Avro record of an event (cheaper than ``dataclasses.asdict``)."""
    record = {name: getattr(event, name) for name in _TRACE_FIELDS}
    record["status"] = event.status.value
    return record


# --------------------------------------------------------------------------------------------
# a writer compiled from the schema (the trace sink's hot path)
# --------------------------------------------------------------------------------------------

_SMALL_LONGS: Final = 128  # zig-zag varints of -128..127 are precomputed


def _zigzag_varint(n: int) -> bytes:
    """Avro ``long``/``int``: zig-zag, then a little-endian base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    # unrolled for the values that are not memoized (offsets): up to four bytes
    if 0 <= z < 0x4000:
        return bytes((z,)) if z < 0x80 else bytes((z & 0x7F | 0x80, z >> 7))
    if 0 <= z < 0x10000000:
        if z < 0x200000:
            return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14))
        return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80, z >> 21))
    if z >> 64:
        raise InvalidInputError("long", n, "does not fit in an Avro long")
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL: Final = tuple(_zigzag_varint(i) for i in range(-_SMALL_LONGS, _SMALL_LONGS))


#: Recently written large values (timestamps repeat within and across events): their bytes.
_RECENT: dict[int, bytes] = {}
_RECENT_MAX: Final = 4096


def _long(n: int) -> bytes:
    if -_SMALL_LONGS <= n < _SMALL_LONGS:
        return _SMALL[n + _SMALL_LONGS]
    b = _RECENT.get(n)
    if b is None:
        b = _zigzag_varint(n)
        if len(_RECENT) >= _RECENT_MAX:
            _RECENT.clear()
        _RECENT[n] = b
    return b


class _Memo(dict[Any, bytes]):
    """Value -> its Avro bytes, filled on a miss (``memo[value]`` is a C dict look-up when
    the value was written before: group, topic, status, batch figures and timestamps repeat
    from event to event).  Bounded: cleared when full, then seeded again."""

    def __init__(self, write: Callable[[Any], bytes], seed: dict[Any, bytes], limit: int) -> None:
        super().__init__(seed)
        self._write = write
        self._seed = seed
        self._limit = limit

    def __missing__(self, value: Any) -> bytes:
        out = self._write(value)  # raises on a value of the wrong type
        if len(self) >= self._limit:
            self.clear()
            self.update(self._seed)
        self[value] = out
        return out


_MEMO_MAX: Final = 4096


def _write_branch(branch: bytes, write: Callable[[Any], bytes], v: Any) -> bytes:
    return branch + write(v)


def _write_string(v: str) -> bytes:
    b = v.encode()
    return _long(len(b)) + b


def _write_bytes(v: bytes) -> bytes:
    b = bytes(v)
    return _long(len(b)) + b


def _writer_of(t: Any, unique: bool) -> tuple[Callable[[Any], bytes], bool] | None:
    """How to write one value of Avro type ``t`` (and whether it may be memoized)."""
    kind = t.get("type") if isinstance(t, dict) else t
    if kind in ("long", "int"):
        return (_zigzag_varint, False) if unique else (_long, True)
    if kind == "string":
        return _write_string, True
    # floating point is never memoized: 0.0 == -0.0 (one memo key) but their bytes differ
    if kind == "double":
        return struct.Struct("<d").pack, False
    if kind == "float":
        return struct.Struct("<f").pack, False
    if kind == "bytes":
        return _write_bytes, False  # bytearrays are not hashable
    if kind == "boolean":
        return (lambda v: b"\x01" if v else b"\x00"), False
    if kind == "enum" and isinstance(t, dict):
        symbols = {sym: _long(i) for i, sym in enumerate(t["symbols"])}
        return symbols.__getitem__, True  # an unknown symbol raises KeyError
    return None


def _field_code(t: Any, var: str, env: dict[str, Any], unique: bool) -> str | None:
    """The expression that gives the bytes of ``var`` (Avro type ``t``); None: unsupported.
    ``unique``: the field rarely repeats a value (an offset, an id), so it is written
    directly rather than memoized (a miss costs more than a write)."""
    seed: dict[Any, bytes]
    if isinstance(t, list):
        if len(t) != 2 or "null" not in t:
            return None
        null_at = t.index("null")
        found = _writer_of(t[1 - null_at], unique)
        if found is None:
            return None
        inner, memoize = found
        branch, null = _long(1 - null_at), _long(null_at)
        write: Callable[[Any], bytes] = functools.partial(_write_branch, branch, inner)
        seed = {None: null}
        if not memoize or unique:
            name = f"W{len(env)}"
            env[name] = write
            return f"({null!r} if {var} is None else {name}({var}))"
    else:
        found = _writer_of(t, unique)
        if found is None:
            return None
        write, memoize = found
        seed = {}
        if not memoize or unique:
            name = f"W{len(env)}"
            env[name] = write
            return f"{name}({var})"
    name = f"M{len(env)}"
    env[name] = _Memo(write, seed, _MEMO_MAX)
    return f"{name}[{var}]"


def compile_encoder(
    schema: AvroSchema,
    positional: tuple[str, ...] | None = None,
    unique: frozenset[str] = frozenset(),
) -> Callable[[Any], bytes] | None:
    """A plain-Avro-binary writer specialised to ``schema`` that reads the fields as
    *attributes* of an object (or, when ``positional`` lists the schema's field names in
    order, unpacks the object as a tuple: a :class:`TraceEvent`), or ``None`` when the
    schema uses a type it does not handle (then :func:`encode` is the way).

    It writes exactly the bytes ``fastavro.schemaless_writer`` writes (unit-tested against it
    on random events) at a fraction of the cost: no record dict, no union search (only
    ``[null, T]`` unions), one ``join`` of one expression per field generated from the
    schema, and each field's bytes memoized by value (:class:`_Memo`), so a value seen
    before costs a dict look-up -- except the fields named in ``unique``, whose values
    rarely repeat.
    """
    raw = json.loads(schema.text)
    names = tuple(f["name"] for f in raw["fields"])
    if not all(n.isidentifier() for n in names):
        return None
    unpack = positional is not None and tuple(positional) == names
    env: dict[str, Any] = {}
    exprs = []
    for i, f in enumerate(raw["fields"]):
        var = f"f{i}" if unpack else f"e.{f['name']}"
        code = _field_code(f["type"], var, env, f["name"] in unique)
        if code is None:
            return None
        exprs.append(code)
    lines = ["def _encode(e):"]
    if unpack:
        lines.append(f"    ({', '.join(f'f{i}' for i in range(len(names)))},) = e")
    lines.append(f"    return b''.join(({', '.join(exprs)},))")
    namespace = dict(env)
    exec(compile("\n".join(lines), f"<avro writer {schema.fullname}>", "exec"), namespace)
    encoder: Callable[[Any], bytes] = namespace["_encode"]
    return encoder


#: Trace fields whose values rarely repeat from event to event (not worth memoizing).
_TRACE_UNIQUE: Final = frozenset({"offset", "msg_id", "origin_msg_id"})


@functools.cache
def trace_encoder() -> Callable[[tuple[Any, ...]], bytes]:
    """``encode_trace`` without the look-up: the writer compiled from ``consume_trace.avsc``
    (fastavro when the schema has a type the compiler does not handle).  It takes a
    :class:`TraceEvent` or any tuple of its fields in its order (what
    :func:`~adapter.core.trace.consumer_fields` gives)."""
    compiled = compile_encoder(trace_schema(), TraceEvent._fields, _TRACE_UNIQUE)
    if compiled is not None:
        return compiled
    schema = trace_schema()
    return lambda fields: encode(schema, trace_record(TraceEvent._make(fields)))


def encode_trace(event: TraceEvent) -> bytes:
    """Plain Avro binary of ``event`` (``consume_trace.avsc``); raises on a bad field."""
    return trace_encoder()(event)


def decode_trace(data: bytes, writer_tag: str | None = None) -> dict[str, Any]:
    """Decode a single-event trace record; ``writer_tag`` is its :data:`TRACE_SCHEMA_HEADER`
    value (:func:`decode_trace_records` reads packed records too)."""
    current = trace_schema()
    writer = known_schemas(TRACE).get(writer_tag or current.tag)
    if writer is None:
        raise InvalidInputError(TRACE_SCHEMA_HEADER, writer_tag, "unknown trace schema")
    return decode(writer, data, reader=current)


@functools.cache
def run_encoder() -> Callable[[tuple[Any, ...]], bytes]:
    """The writer compiled from the ``ConsumeTraceRun`` record of ``consume_trace_batch``
    (the element of its ``runs``); it takes the fields as a tuple in
    :data:`~adapter.core.trace.RUN_FIELDS` order (what
    :meth:`~adapter.core.trace.RunBuilder.close` gives)."""
    batch = json.loads(trace_batch_schema().text)
    run = next(f for f in batch["fields"] if f["name"] == "runs")["type"]["items"]
    schema = _build("consume_trace_run", json.dumps(run))
    compiled = compile_encoder(schema, RUN_FIELDS, frozenset({"first_offset", "timestamps"}))
    if compiled is not None:
        return compiled
    names = RUN_FIELDS
    return lambda fields: encode(schema, dict(zip(names, fields, strict=True)))


def pack_traces(encoded: list[bytes], runs: list[bytes] | tuple[()] = ()) -> bytes:
    """The plain Avro binary of a ``consume_trace_batch`` record holding ``encoded`` (each
    the plain Avro binary of one ``ConsumeTrace``) and ``runs`` (each that of one
    ``ConsumeTraceRun``): each array as one block -- its item count, the items, the
    terminating zero count.  No re-encoding: packing costs one join."""
    head = (_long(len(encoded)), *encoded, b"\x00") if encoded else (b"\x00",)
    if not runs:
        return b"".join((*head, b"\x00"))
    return b"".join((*head, _long(len(runs)), *runs, b"\x00"))


def decode_trace_records(data: bytes, writer_tag: str | None = None) -> list[dict[str, Any]]:
    """The events of one trace-topic record, packed or single: ``writer_tag`` (its
    :data:`TRACE_SCHEMA_HEADER` value) says which; each event resolved to the current
    ``consume_trace`` schema.  A record without the header is a single event.  A packed
    record's ``events`` come first, then the events of its ``runs``
    (:func:`~adapter.core.trace.expand_run`)."""
    packed = known_schemas(TRACE_BATCH).get(writer_tag) if writer_tag else None
    if packed is None:
        return [decode_trace(data, writer_tag)]
    record = decode(packed, data, reader=trace_batch_schema())
    events: list[dict[str, Any]] = record["events"]
    for run in record["runs"]:
        events.extend(expand_run(run))
    return events


# --------------------------------------------------------------------------------------------
# evolution
# --------------------------------------------------------------------------------------------

#: Avro's type promotions (writer type -> reader types it resolves to).
_PROMOTIONS: Final = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def _branches(t: Any) -> list[Any]:
    return list(t) if isinstance(t, list) else [t]


def _type_name(t: Any) -> str:
    if isinstance(t, dict):
        return str(t.get("name") or t["type"])
    return str(t)


def _compatible(writer: Any, reader: Any, where: str, problems: list[str]) -> None:
    """Can data written as ``writer`` be read as ``reader``?  Problems are appended."""
    rb = _branches(reader)
    for w in _branches(writer):
        names = {_type_name(r) for r in rb}
        wname = _type_name(w)
        if wname in names:
            r = next(r for r in rb if _type_name(r) == wname)
            if isinstance(w, dict) and w.get("type") == "enum":
                added = [s for s in w["symbols"] if s not in r["symbols"]]
                if added and "default" not in r:
                    problems.append(
                        f"{where}: enum symbols {added} unknown to the reader, which has no "
                        "enum default"
                    )
            elif isinstance(w, dict) and w.get("type") == "record":
                problems.extend(check_evolution(w, r, prefix=f"{where}."))
            elif isinstance(w, dict) and w.get("type") in ("array", "map"):
                key = "items" if w["type"] == "array" else "values"
                _compatible(w[key], r[key], f"{where}[]", problems)
        elif not (_PROMOTIONS.get(wname, set()) & names):
            problems.append(f"{where}: writer type {wname} cannot be read as {sorted(names)}")


def check_evolution(old: Any, new: Any, *, prefix: str = "") -> list[str]:
    """Problems that stop ``old`` and ``new`` record schemas (JSON dicts) from reading each
    other's data (the rules of ``schemas/README.md``); empty when they evolve safely."""
    problems: list[str] = []
    old_fields = {f["name"]: f for f in old["fields"]}
    new_fields = {f["name"]: f for f in new["fields"]}
    for name, f in new_fields.items():
        aliases = set(f.get("aliases", ()))
        if name not in old_fields and not aliases & set(old_fields) and "default" not in f:
            problems.append(f"{prefix}{name}: added without a default (old data cannot be read)")
    for name, f in old_fields.items():
        renamed = any(name in g.get("aliases", ()) for g in new_fields.values())
        if name not in new_fields and not renamed and "default" not in f:
            problems.append(
                f"{prefix}{name}: removed but had no default (old readers cannot read new data)"
            )
    for name, f in new_fields.items():
        before = old_fields.get(name) or next(
            (old_fields[a] for a in f.get("aliases", ()) if a in old_fields), None
        )
        if before is None:
            continue
        _compatible(before["type"], f["type"], f"{prefix}{name}", problems)  # new reads old
        _compatible(f["type"], before["type"], f"{prefix}{name}", problems)  # old reads new
    return problems
