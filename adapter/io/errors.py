"""confluent-kafka errors → the adapter's error hierarchy (originals kept)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from adapter.core.publishing import Refusal
from adapter.errors import (
    AuthenticationError,
    BrokerUnavailableError,
    ConfigError,
    KafkaClientError,
    MessageTooLargeError,
    PossiblyPersistedError,
    SendError,
    TlsError,
    UnknownTopicError,
)
from adapter.io.clock import SYSTEM_CLOCK

_AUTH = {
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
AUTH_CODES = frozenset(_AUTH)
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE}
_UNKNOWN_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}
_UNREACHABLE = {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE}
#: How long every broker may be down, with none answering since a client started, before
#: a call gives up saying no broker can be reached (librdkafka reports all brokers down
#: after its first round of connection attempts: milliseconds for a refused port)
UNREACHABLE_S = 2.0
#: The send may have reached the log: report it, never resend it blindly.
_POSSIBLY_PERSISTED = {
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError._PURGE_INFLIGHT,
}
#: Flow control: back off exponentially, then resend.
FLOW_CONTROL = {KafkaError._QUEUE_FULL, KafkaError.THROTTLING_QUOTA_EXCEEDED}
_PROPERTY = re.compile(r'property "?([A-Za-z0-9._]+)"?')


#: The record itself is refused: resending it can never succeed.  Only size, invalid-record
#: and policy refusals are: a topic or partition that is unknown now (deleted, not visible
#: yet, metadata lagging) may exist later, so such a refusal is transient.
_PERMANENT = _TOO_LARGE | {
    KafkaError.INVALID_RECORD,
    KafkaError.POLICY_VIOLATION,
    KafkaError.RECORD_LIST_TOO_LARGE,
}


#: authorization refusals -> (the resource, the operation usually missing)
_NEEDS: dict[int, tuple[str, str]] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: ("TOPIC", "READ or WRITE"),
    KafkaError.GROUP_AUTHORIZATION_FAILED: ("GROUP", "READ"),
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ("TRANSACTIONAL_ID", "WRITE"),
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: ("CLUSTER", "the request's"),
}


def permission_hint(code: int, name: str | None = None, operation: str | None = None) -> str:
    """``"; missing permission: READ on GROUP 'g' ..."`` for an authorization refusal
    (``name``, ``operation``: where known), ``""`` for any other error code."""
    if code not in _NEEDS:
        return ""
    resource, usual = _NEEDS[code]
    target = f"{resource} {name!r}" if name else resource
    return (
        f"; missing permission: {operation or usual} on {target} "
        "(rmq-kafka acl print --role ... lists each component's ACLs)"
    )


def is_permanent(err: Any) -> bool:
    return isinstance(err, KafkaError) and err.code() in _PERMANENT


def refusal_of(err: Any) -> Refusal:
    """How a produce error refuses its record (see :mod:`adapter.core.publishing`)."""
    if is_too_large(err):
        return Refusal.TOO_LARGE
    if is_permanent(err):
        return Refusal.PERMANENT
    return Refusal.TRANSIENT


def is_unknown_topic(err: Any) -> bool:
    return isinstance(err, KafkaError) and err.code() in _UNKNOWN_TOPIC | {
        KafkaError._UNKNOWN_PARTITION
    }


def error_text(err: Any) -> str:
    """What a produce error says; for a topic authorization refusal, the permission a
    producer lacks (``WRITE``) too."""
    if not isinstance(err, KafkaError):
        return str(err)
    text = str(err.str())
    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        text += permission_hint(err.code(), None, "WRITE")
    return text


def is_too_large(err: Any) -> bool:
    """The record is bigger than the broker or topic (or this client) accepts."""
    return isinstance(err, KafkaError) and (
        err.code() in _TOO_LARGE or err.code() == KafkaError.RECORD_LIST_TOO_LARGE
    )


def is_flow_control(err: Any) -> bool:
    return err is not None and err.code() in FLOW_CONTROL


def is_possibly_persisted(err: Any) -> bool:
    return err is not None and err.code() in _POSSIBLY_PERSISTED


def send_error(err: Any, raw_message: Any = None, *, topic: str | None = None) -> SendError:
    """The adapter error for a failed delivery report."""
    code = err.code()
    where = f" (topic {topic!r})" if topic else ""
    text = f"{err.str()}{where}"
    cls: type[SendError]
    if code in _POSSIBLY_PERSISTED:
        cls = PossiblyPersistedError
        text = f"possibly persisted, not resent: {text}"
        if code == KafkaError._MSG_TIMED_OUT:
            text += (
                "; no acknowledgement within the producer's message.timeout.ms "
                "(Producer option send_msg_timeout_ms): raise it to ride out a longer "
                "broker outage or leader move"
            )
    elif code in _TOO_LARGE:
        cls = MessageTooLargeError
        size = len(raw_message.value() or b"") if raw_message is not None else None
        text = f"message too large for the broker (value {size} bytes): {text}"
    elif code in _UNKNOWN_TOPIC:
        cls = UnknownTopicError
    else:
        cls = SendError
    return cls(text, kafka_error=err, raw_message=raw_message)


def client_error(exc: BaseException, *, what: str) -> Exception:
    """The adapter error for a ``KafkaException`` raised by a client call."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return KafkaClientError(f"{what}: {exc}")
    err = exc.args[0]
    if not isinstance(err, KafkaError):
        return KafkaClientError(f"{what}: {exc}")
    code = err.code()
    text = f"{what}: {err.str()}"
    if code == KafkaError._INVALID_ARG:
        match = _PROPERTY.search(err.str())
        return ConfigError(match.group(1) if match else "config", None, err.str())
    if code in _AUTH:
        hint = "" if "missing permission" in what else permission_hint(code)
        return AuthenticationError(text + hint, kafka_error=err)
    if code in _UNREACHABLE:
        return BrokerUnavailableError(text, kafka_error=err)
    if code in _UNKNOWN_TOPIC:
        return UnknownTopicError(text, kafka_error=err)
    return KafkaClientError(text, kafka_error=err)


class LibrdkafkaLog:
    """librdkafka's own log lines (``%3|...|FAIL|...``) through Python ``logging``, under
    ``adapter.librdkafka``, instead of raw on stderr.  librdkafka reports transient trouble
    (a broker refusing a connection, a retried request) at its "error" level; what a client
    cannot get past reaches the application as an error, so those lines are warnings here.

    A line that repeats (the same client, facility and text, numbers aside: "Connect to ...
    failed (after 0ms ...)" every second while a broker is down) is written once, then at
    most once every ``every_s`` seconds with how many were left out.  Lines are told apart
    per client instance (librdkafka's ``rdkafka#producer-3``), so one client's repeats never
    hide another's first line.
    """

    __slots__ = ("_clock", "_every_s", "_seen", "logger")

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every_s: float = 30.0,
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self.logger = logger
        self._every_s = every_s
        self._clock = clock
        #: line shape -> [when last written, lines left out since]
        self._seen: dict[str, list[float]] = {}

    def log(self, level: int, msg: str, *args: Any) -> None:
        if level == logging.ERROR:
            level = logging.WARNING
        if level == logging.WARNING and args and _ROUTINE.search(str(args[-1])):
            level = logging.INFO  # a broker that just started: librdkafka retries by itself
        if level < logging.WARNING:
            self.logger.log(level, msg, *args)
            return
        # confluent-kafka calls ``log(level, "%s [%s] %s", facility, client name, text)``:
        # the client's name keeps its number, the rest is normalised
        if len(args) == 3:
            shape = f"{args[1]} {_DIGITS.sub('#', f'{args[0]} {args[2]}')}"
        else:
            shape = _DIGITS.sub("#", msg % args if args else msg)
        now = self._clock()
        seen = self._seen.get(shape)
        if seen is None:
            if len(self._seen) >= 1000:
                self._seen.clear()
            self._seen[shape] = [now, 0.0]
            self.logger.log(level, msg, *args)
        elif now - seen[0] >= self._every_s:
            left_out = int(seen[1])
            seen[0], seen[1] = now, 0.0
            suffix = (
                f" ({left_out} more like it in the last {self._every_s:g} s)" if left_out else ""
            )
            self.logger.log(level, msg + "%s", *args, suffix)
        else:
            seen[1] += 1


_DIGITS = re.compile(r"\d+")
#: librdkafka lines about a broker still starting up, which it retries by itself (a first
#: run against a new broker shows them; they are not the application's trouble)
_ROUTINE = re.compile(r"Coordinator load in progress|Coordinator not available: retrying")

#: The ``logger`` every client of the project gets unless its config brings one.
LIBRDKAFKA_LOG = LibrdkafkaLog(logging.getLogger("adapter.librdkafka"))


def make_client(factory: Any, config: dict[str, Any], *, what: str) -> Any:
    """Create a confluent-kafka client, turning a bad config into a ConfigError naming the key.
    librdkafka's log lines go to Python ``logging`` (:class:`LibrdkafkaLog`) unless the
    config sets ``logger``; when the config's ``error_cb`` is a :class:`FatalErrorWatch`,
    the watch reads those lines too (some failures are only in them)."""
    logger = config.get("logger", LIBRDKAFKA_LOG)
    watch = config.get("error_cb")
    if isinstance(watch, FatalErrorWatch) and not isinstance(logger, WatchedLog):
        logger = WatchedLog(logger, watch)
    config = {**config, "logger": logger}
    try:
        return factory(config)
    except KafkaException as exc:
        raise client_error(exc, what=what) from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError("config", None, f"{what}: {exc}") from exc


#: librdkafka's words for a TLS connection that failed (its error code is ``_SSL`` for a
#: certificate that was not verified, ``_TRANSPORT`` for a listener that does not speak TLS)
#: ``_TRANSPORT`` too for a client certificate the broker refused (an OpenSSL alert)
_TLS_MARKS = ("SSL handshake failed", "SSL connection closed", "SSL routines", "ssl/tls alert")
_BROKER_PREFIX = re.compile(r"^(\w+://[^/\s]+|[^/\s]+)(?:/\S*)?: ")


#: librdkafka's words for a connection the broker closed before it answered the first
#: request (ApiVersion), as a TLS listener closes a plaintext client's: librdkafka 2.x logs
#: "Disconnected: connection closed by peer: receive 0 after POLLIN (after 3ms in state
#: APIVERSION_QUERY)", older ones "Disconnected while requesting ApiVersion: might be
#: caused by incorrect security.protocol configuration (connecting to a SSL listener?)".
#: Nothing goes to the ``error_cb`` but "1/1 brokers are down".
_CLOSED_AT_APIVERSION = re.compile(
    r"connecting to a SSL listener\?|closed by peer\b.*\bin state APIVERSION_QUERY", re.S
)
#: so many such closes within :data:`PLAINTEXT_ON_TLS_WINDOW_S` make the case (a broker
#: that is shutting down may close a connection or two so; a TLS listener closes every one,
#: and librdkafka retries within milliseconds: tens of lines a second)
PLAINTEXT_ON_TLS_CLOSES = 3
PLAINTEXT_ON_TLS_WINDOW_S = 10.0
_PLAIN_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")
#: a log line's thread (``[thrd:sasl_plaintext://127.0.0.1:9093/bootstrap]: ``) and a broker
#: name's protocol
_THREAD_PREFIX = re.compile(r"^\[thrd:[^\]]*\]: ")
_SCHEME = re.compile(r"^\w+://")


def closed_at_apiversion(line: str) -> bool:
    """``line`` (a librdkafka log line) says the broker closed the connection before it
    answered ApiVersion: what a plaintext client meets at a TLS listener."""
    return _CLOSED_AT_APIVERSION.search(line) is not None


def plaintext_on_tls_error(
    text: str, config: Mapping[str, Any] | None = None, err: Any = None
) -> TlsError:
    """The :class:`TlsError` of a plaintext client (``security.protocol`` unset,
    ``PLAINTEXT`` or ``SASL_PLAINTEXT``) at a TLS listener: names the protocol it used and
    what to set instead (``text``: librdkafka's line)."""
    config = config or {}
    text = _THREAD_PREFIX.sub("", text)
    match = _BROKER_PREFIX.match(text)
    where = (
        _SCHEME.sub("", match.group(1))
        if match
        else str(config.get("bootstrap.servers", "the broker"))
    )
    given = config.get("security.protocol")
    protocol = str(given or "PLAINTEXT").upper()
    shown = f"{protocol} (the default)" if not given else protocol
    want = "SASL_SSL" if protocol.startswith("SASL") else "SSL (SASL_SSL with a SASL login)"
    return TlsError(
        f"the listener at {where} speaks TLS (it closes every connection before answering), "
        f"but security.protocol={shown}: set security.protocol={want} and ssl.ca.location "
        f"(the CA certificate file that signed the broker's certificate); a broker that "
        "closes every connection from this host (max.connections.per.ip) looks the same "
        f"(librdkafka: {text})",
        kafka_error=err,
    )


def tls_failure(err: Any) -> str | None:
    """librdkafka's text when ``err`` reports a failed TLS handshake, else ``None``."""
    if not isinstance(err, KafkaError):
        return None
    text = str(err.str())
    if err.code() == KafkaError._SSL or any(mark in text for mark in _TLS_MARKS):
        return text
    return None


def tls_error(text: str, config: Mapping[str, Any] | None = None, err: Any = None) -> TlsError:
    """The :class:`TlsError` of librdkafka's report ``text``: the cause in words, and the
    settings to check, ``ssl.ca.location`` always named (with its value when set)."""
    config = config or {}
    match = _BROKER_PREFIX.match(text)
    where = match.group(1) if match else str(config.get("bootstrap.servers", "the broker"))
    ca = config.get("ssl.ca.location")
    ca_text = (
        f"ssl.ca.location={ca!r}"
        if ca
        else "ssl.ca.location (not set: the system's CA certificates were used)"
    )
    protocol = str(config.get("security.protocol", "SSL")).upper()
    lower = text.lower()
    # a plaintext listener answers a ClientHello by closing the connection (librdkafka adds
    # "connecting to a PLAINTEXT broker listener?" only to some of those lines)
    if (
        "plaintext broker listener" in lower
        or "wrong version number" in lower
        or ("connection closed by peer" in lower and "ssl_handshake" in lower)
    ):
        cause = (
            f"the listener does not speak TLS (security.protocol={protocol} against a "
            "PLAINTEXT or SASL_PLAINTEXT listener?): check bootstrap.servers and "
            f"security.protocol; {ca_text} was not reached"
        )
    elif "expired" in lower:
        cause = (
            f"certificate verification failed: a certificate has expired (checked with {ca_text})"
        )
    elif "certificate verify failed" in lower or "could not be verified" in lower:
        cause = (
            "certificate verification failed: the broker's certificate is not signed by a CA "
            f"in {ca_text} (or names another host, or has expired)"
        )
    elif "certificate required" in lower or "bad certificate" in lower or "alert" in lower:
        cause = (
            "the broker refused this client's certificate (mutual TLS): check "
            "ssl.certificate.location and ssl.key.location (a certificate signed by a CA the "
            f"broker trusts); the broker itself was checked with {ca_text}"
        )
    else:
        cause = f"check {ca_text}, security.protocol={protocol} and bootstrap.servers"
    return TlsError(
        f"TLS handshake with {where} failed: {cause} (librdkafka: {text})", kafka_error=err
    )


class FatalErrorWatch:
    """An ``error_cb`` that remembers authentication / unreachable / TLS errors for
    fail-fast.  ``config`` (the client's settings) lets a TLS error name the
    ``ssl.ca.location`` it used."""

    def __init__(
        self,
        user_cb: Any = None,
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
        *,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.user_cb = user_cb
        self.last: Exception | None = None
        self._last_at = 0.0
        self._clock = clock
        self._config = {
            k: v
            for k, v in (config or {}).items()
            if k in ("bootstrap.servers", "security.protocol", "ssl.ca.location")
        }
        protocol = str(self._config.get("security.protocol") or "PLAINTEXT").upper()
        self._plain = protocol in _PLAIN_PROTOCOLS
        #: when the closes at ApiVersion counted began, and how many
        self._closes_since = 0.0
        self._closes = 0

    def line(self, text: str) -> None:
        """Read one of librdkafka's log lines (:class:`WatchedLog`): a plaintext client
        whose connections a broker keeps closing before it answered ApiVersion is at a TLS
        listener; remember a :class:`TlsError` that says so."""
        if not self._plain or not closed_at_apiversion(text):
            return
        now = self._clock()
        if self._closes == 0 or now - self._closes_since > PLAINTEXT_ON_TLS_WINDOW_S:
            self._closes_since, self._closes = now, 0
        self._closes += 1
        if self._closes >= PLAINTEXT_ON_TLS_CLOSES:
            self.last = plaintext_on_tls_error(text, self._config)
            self._last_at = now

    def report(self, error: Exception) -> None:
        """Remember ``error`` as if librdkafka had reported it now (an authorization
        refusal met on a consumed record): ``current()`` gives it while it keeps coming."""
        self.last = error
        self._last_at = self._clock()

    def tls(self) -> TlsError | None:
        """The TLS failure librdkafka reported lately, if any."""
        current = self.current()
        return current if isinstance(current, TlsError) else None

    def current(self, max_age_s: float = 10.0) -> Exception | None:
        """The last error if it still stands: fatal errors always, others (authentication,
        unreachable brokers) only while librdkafka keeps reporting them (recent)."""
        last = self.last
        if last is None:
            return None
        err = getattr(last, "kafka_error", None)
        if err is not None and err.fatal():
            return last
        return last if self._clock() - self._last_at <= max_age_s else None

    def __call__(self, err: Any) -> None:
        code = err.code()
        now = self._clock()
        tls = tls_failure(err)
        if tls is not None:
            self.last, self._last_at = tls_error(tls, self._config, err), now
        elif code in _AUTH:
            self.last = AuthenticationError(
                f"authentication/authorization failed: {err.str()}{permission_hint(code)}",
                kafka_error=err,
            )
            self._last_at = now
        elif err.fatal():
            self.last = KafkaClientError(f"fatal client error: {err.str()}", kafka_error=err)
            self._last_at = now
        elif code == KafkaError._ALL_BROKERS_DOWN:
            if not isinstance(self.last, TlsError):
                # else the brokers are down *because* of the TLS failure: keep saying why
                self.last = BrokerUnavailableError(
                    f"no broker reachable: {err.str()}", kafka_error=err
                )
            self._last_at = now
        elif (
            code in _UNREACHABLE
            and isinstance(self.last, BrokerUnavailableError)
            and self.current() is not None
        ):
            # an outage that still stands, reported again; any other error (a coordinator
            # loading after the broker came back) says nothing of it and does not keep it
            self._last_at = now
        if self.user_cb is not None:
            self.user_cb(err)


class WatchedLog:
    """A client's ``logger`` that hands each of librdkafka's lines to a
    :class:`FatalErrorWatch` (:meth:`FatalErrorWatch.line`) and then to ``inner`` (the
    logger the client had)."""

    __slots__ = ("inner", "watch")

    def __init__(self, inner: Any, watch: FatalErrorWatch) -> None:
        self.inner = inner
        self.watch = watch

    def log(self, level: int, msg: str, *args: Any) -> None:
        # confluent-kafka calls ``log(level, "%s [%s] %s", facility, client name, text)``
        self.watch.line(str(args[-1]) if args else msg)
        self.inner.log(level, msg, *args)


def wait_metadata(
    client: Any,
    timeout_s: float,
    *,
    watch: FatalErrorWatch | None = None,
    serve: Callable[[], Any] | None = None,
    topic: str | None = None,
    clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
    where: Any = None,
    what: str = "metadata",
) -> Any:
    """``client.list_topics()`` within ``timeout_s``, asked in steps of at most a second;
    between steps ``serve()`` (an admin client's or producer's ``poll(0)``: it runs the
    ``error_cb`` and forwards librdkafka's log lines) and a TLS failure the ``watch`` saw
    raises its :class:`TlsError` at once, instead of a bare "transport failure" after the
    whole timeout.  ``topic``: ask for that topic's metadata only.  With ``where`` (the
    bootstrap address), a client that no broker has answered gives up after
    :data:`UNREACHABLE_S` saying no broker can be reached there (a wrong address, a stopped
    cluster), not after ``timeout_s``."""
    start = clock()
    deadline = start + timeout_s
    while True:
        step = max(0.05, min(1.0, deadline - clock()))
        try:
            if topic is not None:
                return client.list_topics(topic=topic, timeout=step)
            return client.list_topics(timeout=step)
        except KafkaException as exc:
            if serve is not None:
                serve()
            tls = None if watch is None else watch.tls()
            if tls is not None:
                raise tls from None
            now = clock()
            if where is not None and now - start >= UNREACHABLE_S:
                error = client_error(exc, what=what)
                if isinstance(error, BrokerUnavailableError):
                    raise BrokerUnavailableError(
                        f"{what}: cannot reach any broker at {where} ({exc.args[0].str()})",
                        kafka_error=error.kafka_error,
                    ) from None
            if now >= deadline:
                raise


def principal(config: Mapping[str, Any]) -> str:
    """Who connects, for error messages: ``user 'admin' (SASL_PLAINTEXT, SCRAM-SHA-256) at
    host:port``; the password never appears."""
    user = config.get("sasl.username")
    who = f"user {user!r}" if user else "no SASL user"
    protocol = str(config.get("security.protocol", "plaintext")).upper()
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    how = f"{protocol}, {mechanism}" if mechanism else protocol
    return f"{who} ({how}) at {config.get('bootstrap.servers')}"


def _scrub(text: str, config: Mapping[str, Any]) -> str:
    for key in ("sasl.password", "ssl.key.password", "ssl.keystore.password"):
        secret = config.get(key)
        if isinstance(secret, str) and secret:
            text = text.replace(secret, "***")
    return text


def auth_error(config: Mapping[str, Any], what: str, detail: str, err: Any = None) -> Exception:
    """An :class:`AuthenticationError` naming who was refused (never the password) and, for
    an authorization refusal, the kind of permission missing."""
    hint = permission_hint(err.code()) if isinstance(err, KafkaError) else ""
    if hint and "missing permission" in detail:
        hint = ""
    return AuthenticationError(
        _scrub(f"{what}: refused for {principal(config)}: {detail}{hint}", config), kafka_error=err
    )
