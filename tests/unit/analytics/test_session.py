"""Quiet by default: the Spark driver's log level and log4j2 configuration, and the filter
on the driver JVM's stderr (a real child process writes through it)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from adapter.analytics.session import (
    JVM_NOISE,
    LOG4J2_CONFIG,
    jvm_stderr_filter,
    log_java_options,
    spark_log_level,
)


def test_spark_logs_at_error_unless_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RMQ_SPARK_LOG_LEVEL", raising=False)
    assert spark_log_level() == "ERROR"
    assert spark_log_level(verbose=True) == "WARN"
    monkeypatch.setenv("RMQ_SPARK_LOG_LEVEL", "INFO")
    assert spark_log_level() == "INFO"


def test_the_driver_gets_the_log4j2_configuration() -> None:
    options = log_java_options("ERROR")
    assert f"-Dlog4j2.configurationFile=file:{LOG4J2_CONFIG}" in options
    assert "-Drmq.spark.logLevel=ERROR" in options
    text = LOG4J2_CONFIG.read_text()
    assert "rootLogger.level = ${sys:rmq.spark.logLevel:-ERROR}" in text
    # the gateway's logger: no "Setting default log level" banner; NativeCodeLoader: never
    assert "org.apache.spark.api.python.PythonGatewayServer" in text
    assert "logger.nativecode.level = ERROR" in text


def test_the_stderr_filter_drops_the_noise_and_keeps_the_rest(
    capfd: pytest.CaptureFixture[str],
) -> None:
    script = f"import sys; sys.stderr.write('{JVM_NOISE[0]}\\nan ERROR line\\n')"
    with jvm_stderr_filter():
        child = subprocess.Popen([sys.executable, "-c", script])
    child.wait(timeout=30)
    deadline = time.monotonic() + 10
    err = ""
    while "an ERROR line" not in err and time.monotonic() < deadline:
        err += capfd.readouterr().err
        time.sleep(0.05)
    assert "an ERROR line" in err
    assert JVM_NOISE[0] not in err
    # this process's own stderr is as before
    print("after", file=sys.stderr, flush=True)
    assert "after" in capfd.readouterr().err
