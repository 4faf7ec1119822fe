"""RabbitMQ's Java client (``com.rabbitmq:amqp-client``) as a test driver.

``tests/java_client/`` is a small Maven project: ``Scenarios.java``, one ``main`` that runs a
named scenario against a port. :func:`classpath` compiles it (Maven resolves the client from
Central into ``~/.m2`` the first time; ``make java-client`` does the same before ``make test``)
and :func:`run_scenario` starts one JVM per scenario, answers its ``WAIT`` lines with the test's
actions, and returns its ``FACT key=value`` lines as a dict for the test to assert on.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent / "java_client"
POM = PROJECT / "pom.xml"
CLASSES = PROJECT / "target" / "classes"
CLASSPATH_FILE = PROJECT / "target" / "classpath.txt"
MAIN_CLASS = "io.starlight.rabbitmq.javaclient.Scenarios"
MAVEN_SETTINGS = PROJECT.parent.parent / "extension_shim" / "maven-settings.xml"
MAVEN_TIMEOUT = 900.0
# What a scenario may take, start to end (a JVM start is ~1 s; recovery waits up to 20 s).
SCENARIO_TIMEOUT = 180.0


class JavaClientUnavailable(RuntimeError):
    pass


def maven_command() -> list[str]:
    """The build ``make java-client`` runs: compile, and write the runtime classpath."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JavaClientUnavailable("`mvn` is not on PATH: Maven fetches the Java client")
    return [
        mvn,
        "--batch-mode",
        "--no-transfer-progress",
        "--quiet",
        "-s",
        str(MAVEN_SETTINGS),
        "-f",
        str(POM),
        "compile",
        "dependency:build-classpath",
        f"-Dmdep.outputFile={CLASSPATH_FILE}",
        "-Dmdep.includeScope=runtime",
    ]


def _up_to_date() -> bool:
    """Compiled after every source and the pom changed, and every dependency still there."""
    if not CLASSPATH_FILE.exists() or not CLASSES.exists():
        return False
    built = CLASSPATH_FILE.stat().st_mtime
    sources = [POM, *PROJECT.joinpath("src").rglob("*.java")]
    if any(source.stat().st_mtime > built for source in sources):
        return False
    entries = CLASSPATH_FILE.read_text().strip().split(os.pathsep)
    return all(Path(entry).exists() for entry in entries)


def classpath() -> str:
    """The scenarios' classpath, compiling them first unless that is already done."""
    if not _up_to_date():
        result = subprocess.run(
            maven_command(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=MAVEN_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            raise JavaClientUnavailable(f"Maven failed:\n{result.stdout}\n{result.stderr}")
        CLASSPATH_FILE.touch()  # Maven leaves an unchanged file's time alone
    return os.pathsep.join([str(CLASSES), CLASSPATH_FILE.read_text().strip()])


def run_scenario(
    classpath: str,
    scenario: str,
    port: int,
    *arguments: str,
    on_wait: Mapping[str, Callable[[], None]] | None = None,
    timeout: float = SCENARIO_TIMEOUT,
) -> dict[str, str]:
    """Run one scenario to its end; its facts. ``on_wait`` maps what a ``WAIT`` line names to
    the action the test takes before letting the scenario go on."""
    java = shutil.which("java")
    if java is None:
        raise JavaClientUnavailable("`java` is not on PATH")
    process = subprocess.Popen(
        [java, "-cp", classpath, MAIN_CLASS, scenario, str(port), *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    stderr: list[str] = []
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    threading.Thread(target=_collect, args=(process.stderr, stderr), daemon=True).start()
    facts: dict[str, str] = {}
    output: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    _report(f"{scenario} did not finish in {timeout} s", output, stderr)
                ) from None
            if line is None:
                break
            output.append(line)
            if line.startswith("FACT "):
                key, _, value = line[5:].partition("=")
                facts[key] = value.replace("\\n", "\n").replace("\\\\", "\\")
            elif line.startswith("WAIT "):
                what = line[5:]
                if on_wait is None or what not in on_wait:
                    raise AssertionError(_report(f"nothing to do for WAIT {what}", output, stderr))
                on_wait[what]()
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()
        status = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if status != 0:
        raise AssertionError(_report(f"{scenario} failed (exit {status})", output, stderr))
    return facts


def _pump(stream: object, lines: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _collect(stream: object, into: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.append(line.rstrip("\n"))


def _report(what: str, output: list[str], stderr: list[str]) -> str:
    return "\n".join([what, "--- stdout", *output, "--- stderr", *stderr[-80:]])
