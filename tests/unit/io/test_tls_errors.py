"""TLS failures in words (:func:`tls_error`, :class:`FatalErrorWatch`, :func:`wait_metadata`)
and authorization refusals naming the permission."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from adapter.errors import (
    AuthenticationError,
    BrokerUnavailableError,
    TlsError,
)
from adapter.io.errors import (
    PLAINTEXT_ON_TLS_CLOSES,
    FatalErrorWatch,
    WatchedLog,
    client_error,
    closed_at_apiversion,
    error_text,
    permission_hint,
    tls_error,
    tls_failure,
    wait_metadata,
)

pytestmark = pytest.mark.unit

WRONG_CA = (
    "ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified, verify that "
    "ssl.ca.location is correctly configured or root CA certificates are installed "
    "(after 5ms in state SSL_HANDSHAKE)"
)
PLAINTEXT_PORT = (
    "ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection "
    "closed by peer: connecting to a PLAINTEXT broker listener? (after 1ms in state "
    "SSL_HANDSHAKE)"
)
NO_CLIENT_CERT = (
    "ssl://127.0.0.1:9093/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls "
    "alert bad certificate: SSL alert number 42 (after 4ms in state APIVERSION_QUERY)"
)
EXPIRED = (
    "sasl_ssl://127.0.0.1:9094/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: certificate has expired (after 3ms in state SSL_HANDSHAKE)"
)
CONF = {
    "bootstrap.servers": "127.0.0.1:9093",
    "security.protocol": "SSL",
    "ssl.ca.location": "/etc/kafka/ca.pem",
    "sasl.password": "secret",
}


# --- TLS failures --------------------------------------------------------------------------
def test_a_wrong_ca_names_certificate_verification_and_the_ca_file() -> None:
    error = tls_error(WRONG_CA, CONF)
    assert isinstance(error, TlsError) and isinstance(error, BrokerUnavailableError)
    text = str(error)
    assert text.startswith("TLS handshake with ssl://127.0.0.1:9093 failed: certificate ")
    assert "ssl.ca.location='/etc/kafka/ca.pem'" in text and "secret" not in text


def test_a_plaintext_port_is_named_with_the_protocol() -> None:
    text = str(tls_error(PLAINTEXT_PORT, CONF))
    assert "does not speak TLS" in text and "security.protocol=SSL" in text
    assert "ssl.ca.location='/etc/kafka/ca.pem' was not reached" in text


def test_a_connection_closed_in_the_handshake_is_a_plaintext_port_too() -> None:
    closed = (
        "ssl://127.0.0.1:9092/bootstrap: Disconnected: SSL connection closed by peer "
        "(after 1ms in state SSL_HANDSHAKE)"
    )
    assert tls_failure(KafkaError(KafkaError._TRANSPORT, closed)) == closed
    assert "does not speak TLS" in str(tls_error(closed, CONF))


def test_a_refused_client_certificate_names_the_certificate_settings() -> None:
    text = str(tls_error(NO_CLIENT_CERT, CONF))
    assert "refused this client's certificate" in text
    assert "ssl.certificate.location" in text and "ssl.ca.location" in text


def test_an_expired_certificate_says_so() -> None:
    assert "a certificate has expired" in str(tls_error(EXPIRED, CONF))


def test_no_ca_location_says_the_system_store_was_used() -> None:
    text = str(tls_error(WRONG_CA, {"security.protocol": "SSL"}))
    assert "ssl.ca.location (not set: the system's CA certificates were used)" in text


def test_which_errors_are_tls_failures() -> None:
    assert tls_failure(KafkaError(KafkaError._SSL, WRONG_CA)) == WRONG_CA
    assert tls_failure(KafkaError(KafkaError._TRANSPORT, PLAINTEXT_PORT)) == PLAINTEXT_PORT
    assert tls_failure(KafkaError(KafkaError._TRANSPORT, NO_CLIENT_CERT)) == NO_CLIENT_CERT
    assert tls_failure(KafkaError(KafkaError._TRANSPORT, "Connection refused")) is None
    assert tls_failure(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")) is None
    assert tls_failure("not a KafkaError") is None


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_watch_keeps_the_tls_cause_when_all_brokers_go_down() -> None:
    clock = _Clock()
    seen: list[Any] = []
    watch = FatalErrorWatch(seen.append, clock, config=CONF)
    watch(KafkaError(KafkaError._SSL, WRONG_CA))
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    tls = watch.tls()
    assert isinstance(tls, TlsError) and "certificate verification failed" in str(tls)
    assert len(seen) == 2  # the application's own error_cb still gets each
    clock.now += 11  # not reported again for longer than it stands
    assert watch.tls() is None


def test_an_unrelated_error_does_not_keep_an_outage_standing_after_the_broker_came_back() -> None:
    # the broker went down and came back; the coordinator then loads for a while: the
    # client was said dead ("no broker reachable") for as long as those errors came
    clock = _Clock()
    watch = FatalErrorWatch(clock=clock, config=PLAIN)
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert isinstance(watch.current(), BrokerUnavailableError)
    for _ in range(3):
        clock.now += 6
        watch(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "coordinator loading"))
    assert watch.current() is None


def test_connection_errors_keep_an_outage_standing_while_it_lasts() -> None:
    clock = _Clock()
    watch = FatalErrorWatch(clock=clock, config=PLAIN)
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    for _ in range(3):
        clock.now += 6
        watch(KafkaError(KafkaError._TRANSPORT, "Connect to 127.0.0.1:9093 failed"))
    assert isinstance(watch.current(), BrokerUnavailableError)
    clock.now += 11  # and not one more: it no longer stands
    assert watch.current() is None
    watch(KafkaError(KafkaError._TRANSPORT, "an idle connection closed"))
    assert watch.current() is None  # a later lone error does not bring it back


#: librdkafka 2.x's lines (``logger``) for a plaintext client at a TLS listener (nothing
#: but "1/1 brokers are down" reaches the ``error_cb``), for a stopped broker, and an older
#: librdkafka's words for the first
CLOSED_AT_APIVERSION = (
    "[thrd:127.0.0.1:9093/bootstrap]: 127.0.0.1:9093/bootstrap: Disconnected: connection "
    "closed by peer: receive 0 after POLLIN (after 3ms in state APIVERSION_QUERY)"
)


OLD_CLOSED_AT_APIVERSION = (
    "sasl_plaintext://127.0.0.1:9094/bootstrap: Disconnected while requesting ApiVersion: "
    "might be caused by incorrect security.protocol configuration (connecting to a SSL "
    "listener?) or broker version is < 0.10 (see api.version.request)"
)


REFUSED = (
    "[thrd:127.0.0.1:9093/bootstrap]: 127.0.0.1:9093/bootstrap: Connect to "
    "ipv4#127.0.0.1:9093 failed: Connection refused (after 0ms in state CONNECT)"
)


CLOSED_WHEN_UP = (
    "[thrd:127.0.0.1:9093/bootstrap]: 127.0.0.1:9093/bootstrap: Disconnected: connection "
    "closed by peer: receive 0 after POLLIN (after 5012ms in state UP)"
)


PLAIN = {"bootstrap.servers": "127.0.0.1:9093"}


def _lines(watch: FatalErrorWatch, line: str, times: int, clock: _Clock | None = None) -> None:
    log = WatchedLog(_Sink(), watch)
    for _ in range(times):
        log.log(3, "%s [%s] %s", "FAIL", "rdkafka#producer-1", line)
        if clock is not None:
            clock.now += 0.01


class _Sink:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, msg: str, *args: Any) -> None:
        self.lines.append(msg % args)


def test_closes_before_apiversion_are_told_from_other_lines() -> None:
    assert closed_at_apiversion(CLOSED_AT_APIVERSION)
    assert closed_at_apiversion(OLD_CLOSED_AT_APIVERSION)
    assert not closed_at_apiversion(REFUSED)
    assert not closed_at_apiversion(CLOSED_WHEN_UP)


@pytest.mark.parametrize(
    ("given", "shown", "want"),
    [
        (None, "PLAINTEXT (the default)", "SSL (SASL_SSL with a SASL login)"),
        ("plaintext", "PLAINTEXT", "SSL (SASL_SSL with a SASL login)"),
        ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"),
    ],
)
def test_a_plaintext_client_at_a_tls_listener_is_told_what_to_set(
    given: str | None, shown: str, want: str
) -> None:
    clock = _Clock()
    conf = PLAIN if given is None else {**PLAIN, "security.protocol": given}
    watch = FatalErrorWatch(config=conf, clock=clock)
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    _lines(watch, CLOSED_AT_APIVERSION, PLAINTEXT_ON_TLS_CLOSES, clock)
    tls = watch.tls()
    assert isinstance(tls, TlsError), watch.last
    text = str(tls)
    assert text.startswith("the listener at 127.0.0.1:9093 speaks TLS "), text
    assert f"but security.protocol={shown}: set security.protocol={want} and " in text
    assert "ssl.ca.location" in text and "[thrd:" not in text
    assert "max.connections.per.ip" in text  # the one other cause that looks the same
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert watch.tls() is tls  # "all brokers down" does not hide why


def test_the_lines_reach_the_logger_the_client_had() -> None:
    sink = _Sink()
    WatchedLog(sink, FatalErrorWatch(config=PLAIN)).log(3, "%s [%s] %s", "FAIL", "c", REFUSED)
    assert sink.lines == [f"FAIL [c] {REFUSED}"]


def test_a_stopped_broker_is_no_tls_listener() -> None:
    """Refused connections, however many: the brokers are down, nothing about TLS."""
    clock = _Clock()
    watch = FatalErrorWatch(config=PLAIN, clock=clock)
    _lines(watch, REFUSED, 50, clock)
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert watch.tls() is None
    assert isinstance(watch.current(), BrokerUnavailableError)


def test_a_broker_closing_a_connection_or_two_is_no_tls_listener() -> None:
    """A broker shutting down may close a connection before answering; fewer than
    ``PLAINTEXT_ON_TLS_CLOSES`` within the window (or spread over longer) say nothing."""
    clock = _Clock()
    watch = FatalErrorWatch(config=PLAIN, clock=clock)
    _lines(watch, CLOSED_AT_APIVERSION, PLAINTEXT_ON_TLS_CLOSES - 1, clock)
    _lines(watch, CLOSED_WHEN_UP, 10, clock)
    assert watch.tls() is None
    for _ in range(PLAINTEXT_ON_TLS_CLOSES):
        clock.now += 11
        _lines(watch, CLOSED_AT_APIVERSION, 1)
    assert watch.tls() is None


def test_a_tls_client_reads_such_closes_as_no_plaintext_mistake() -> None:
    """A client that speaks TLS already learns about its handshake from the error_cb."""
    watch = FatalErrorWatch(config=CONF)
    _lines(watch, CLOSED_AT_APIVERSION, 10)
    assert watch.tls() is None


class _Client:
    """Answers ``list_topics`` like librdkafka with no broker reachable: after its timeout;
    ``poll`` runs the error callback (a TLS failure) as librdkafka's would."""

    def __init__(self, clock: _Clock, watch: FatalErrorWatch, tls: bool) -> None:
        self.clock, self.watch, self.tls = clock, watch, tls
        self.asked: list[float] = []

    def list_topics(self, timeout: float) -> Any:
        self.asked.append(timeout)
        self.clock.now += timeout
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))

    def poll(self, timeout: float) -> None:
        if self.tls:
            self.watch(KafkaError(KafkaError._SSL, WRONG_CA))


def test_wait_metadata_raises_the_tls_error_after_the_first_step() -> None:
    clock = _Clock()
    watch = FatalErrorWatch(config=CONF, clock=clock)
    client = _Client(clock, watch, tls=True)
    with pytest.raises(TlsError):
        wait_metadata(client, 30.0, watch=watch, serve=lambda: client.poll(0), clock=clock)
    assert client.asked == [1.0]  # one second, not thirty


def test_wait_metadata_without_a_tls_failure_waits_its_whole_timeout() -> None:
    clock = _Clock()
    watch = FatalErrorWatch(config=CONF, clock=clock)
    client = _Client(clock, watch, tls=False)
    with pytest.raises(KafkaException):
        wait_metadata(client, 3.0, watch=watch, serve=lambda: client.poll(0), clock=clock)
    assert sum(client.asked) == pytest.approx(3.0, abs=0.1)


# --- authorization refusals ---------------------------------------------------------------
def test_permission_hints_name_operation_and_resource() -> None:
    assert permission_hint(KafkaError.GROUP_AUTHORIZATION_FAILED, "g", "READ").startswith(
        "; missing permission: READ on GROUP 'g' "
    )
    hint = permission_hint(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert "WRITE on TRANSACTIONAL_ID" in hint
    assert permission_hint(KafkaError._TRANSPORT) == ""


def test_client_errors_of_refusals_carry_the_hint_once() -> None:
    exc = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"))
    error = client_error(exc, what="topic 't'; missing permission: WRITE on TOPIC 't'")
    assert isinstance(error, AuthenticationError)
    assert str(error).count("missing permission") == 1
    assert "READ or WRITE on TOPIC" in str(client_error(exc, what="x"))


def test_a_refused_copy_names_the_write_permission() -> None:
    """A copy (a retry, a dead letter, a forward) refused for want of an ACL says which
    permission is missing; other produce errors read as librdkafka says them."""
    refused = error_text(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert "missing permission: WRITE on TOPIC" in refused and "acl print" in refused
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    assert error_text(timed_out) == timed_out.str()
    assert error_text(ValueError("x")) == "x"
