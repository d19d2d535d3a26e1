"""Prometheus' HTTP API for ``rmq-kafka dashboard render``: the thin part (urllib).

:class:`PrometheusApi` asks ``/api/v1/query`` (a stat panel's value at the end of the range)
and ``/api/v1/query_range`` (a timeseries), and lists the metric names Prometheus knows
(``/api/v1/label/__name__/values`` and the scraped targets' ``/api/v1/metadata``).  A query
Prometheus answers with an error is a :class:`~adapter.ops.dashboard.QueryRefusedError`
naming the panel; a Prometheus that cannot be reached is tried again with back-off, then a
:class:`PrometheusUnreachableError`.  :func:`fetch` asks every panel's targets.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import tenacity

from adapter.errors import AdapterError
from adapter.ops.dashboard import (
    Panel,
    QueryRefusedError,
    Series,
    Settings,
    UnknownMetricError,
    metric_names,
    substitute,
    variables,
)

__all__ = ["PrometheusApi", "PrometheusUnreachableError", "check_metrics", "fetch"]

log = logging.getLogger(__name__)

#: the suffixes of a histogram's or a summary's series (the metadata names the family)
_FAMILY_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


class PrometheusUnreachableError(AdapterError):
    """Prometheus did not answer (connection refused, timeout, a 5xx) after the retries."""


class _Refused(Exception):
    """Prometheus answered ``status: error`` (a 4xx): the query is wrong, do not retry."""


class _Transient(Exception):
    """No answer or a 5xx: worth trying again."""


class PrometheusApi:
    """Prometheus' HTTP API at ``url`` (e.g. ``http://127.0.0.1:9090``)."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, attempts: int = 5) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.attempts = attempts

    def _get_once(self, path: str, params: dict[str, str]) -> Any:
        address = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            if exc.code >= 500 and exc.code != 503 and b'"status":"error"' in body:
                raise _Refused(_message(body, exc)) from None  # 422-like execution errors
            if exc.code >= 500:
                raise _Transient(f"HTTP {exc.code}: {_message(body, exc)}") from None
            raise _Refused(_message(body, exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise _Transient(str(getattr(exc, "reason", exc))) from None
        try:
            data = json.loads(body)
        except ValueError:
            raise _Refused(f"not a Prometheus API answer: {body[:200]!r}") from None
        if data.get("status") != "success":
            raise _Refused(str(data.get("error", data)))
        return data["data"]

    def get(self, path: str, params: dict[str, str]) -> Any:
        """The ``data`` of a successful answer; :class:`_Refused` for an error answer."""
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(multiplier=0.5, max=5.0),
            retry=tenacity.retry_if_exception_type(_Transient),
            before_sleep=lambda state: log.info(
                "Prometheus at %s: %s; trying again",
                self.url,
                state.outcome.exception() if state.outcome else "?",
            ),
            reraise=True,
        )
        try:
            return retrying(self._get_once, path, params)
        except _Transient as exc:
            raise PrometheusUnreachableError(
                f"Prometheus at {self.url} did not answer {path} after {self.attempts} "
                f"attempt(s): {exc}"
            ) from None

    def instant(self, expr: str, at: float) -> list[Series]:
        data = self.get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        return _series(data)

    def range(self, expr: str, start: float, end: float, step_s: float) -> list[Series]:
        params = {
            "query": expr,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step_s:g}",
        }
        return _series(self.get("/api/v1/query_range", params))

    def known_metrics(self) -> set[str]:
        """Every metric name Prometheus has series of, plus every family its scraped
        targets describe (``# HELP`` / ``# TYPE``, with or without samples yet): a
        histogram's ``_bucket`` / ``_sum`` / ``_count``, a counter's ``_total``."""
        names = set(self.get("/api/v1/label/__name__/values", {}))
        for family, entries in dict(self.get("/api/v1/metadata", {})).items():
            names.add(family)
            kinds = {str(e.get("type")) for e in entries}
            if kinds & {"histogram", "summary", "gaugehistogram"}:
                names.update(family + suffix for suffix in _FAMILY_SUFFIXES)
            if "counter" in kinds:  # a counter's family is named without its ``_total``
                names.add(family + "_total")
        return names


def _message(body: bytes, exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(body).get("error") or exc)
    except ValueError:
        return f"HTTP {exc.code}: {body[:200]!r}"


def _value(text: Any) -> float:
    v = float(text)
    return v if math.isfinite(v) else math.nan


def _series(data: Any) -> list[Series]:
    kind, result = data.get("resultType"), data.get("result", [])
    if kind == "scalar":
        return [Series({}, ((float(result[0]), _value(result[1])),))]
    found: list[Series] = []
    for item in result:
        labels = {str(k): str(v) for k, v in dict(item.get("metric", {})).items()}
        if "values" in item:
            points = tuple((float(t), _value(v)) for t, v in item["values"])
        else:
            t, v = item["value"]
            points = ((float(t), _value(v)),)
        found.append(Series(labels, points))
    return found


def fetch(
    api: PrometheusApi, panels: Sequence[Panel], settings: Settings
) -> dict[int, list[list[Series]]]:
    """Per panel id, per target, what Prometheus answered: a stat panel's instant value at
    the end, a timeseries' range.  A refused query raises, naming the panel."""
    values = variables(settings)
    data: dict[int, list[list[Series]]] = {}
    for panel in panels:
        if panel.kind == "row":
            continue
        answers: list[list[Series]] = []
        for target in panel.targets:
            expr = substitute(panel.title, target.expr, values)
            try:
                if panel.kind == "stat":
                    answers.append(api.instant(expr, settings.end))
                else:
                    answers.append(api.range(expr, settings.start, settings.end, settings.step_s))
            except _Refused as exc:
                raise QueryRefusedError(panel.title, expr, str(exc)) from None
        data[panel.id] = answers
    return data


def check_metrics(api: PrometheusApi, panels: Sequence[Panel]) -> None:
    """Every metric a panel's query reads is one Prometheus knows (a scraped target exposes
    it); the first panel whose query reads an unknown one raises, naming it."""
    known = api.known_metrics()
    for panel in panels:
        for target in panel.targets:
            missing = [m for m in metric_names(target.expr) if m not in known]
            if missing:
                raise UnknownMetricError(panel.title, target.expr, missing)
