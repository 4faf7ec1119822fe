"""RabbitMQ's client libraries' own test suites, as a test driver (issue 34).

Two suites written by RabbitMQ's client authors run against a gateway:

* **amqp091-go** (``github.com/rabbitmq/amqp091-go``, RabbitMQ's Go client): the module zip
  that the Go module proxy serves carries its ``_test.go`` files. ``go mod download`` puts it
  in Go's module cache (read-only), a copy goes to this cache, and ``go test -tags
  integration`` runs it there with ``AMQP_URL`` naming the gateway, the suite's own knob.
* **amqplib** (the Node client): the npm tarball of the pinned version ships ``test/``.
  ``npm pack`` fetches it, it is unpacked here, and its one test-only dependency that needs
  fetching (``claire``, for its property tests) is installed beside it from npm. Its own
  ``make test`` command runs it (``node --test``). Many of its tests connect to
  ``amqp://localhost`` (port 5672) with no way to say otherwise, and one to ``amqp://[::1]``:
  ``amqplib_target.js``, preloaded with ``--require``, sends exactly those connections to
  the gateway's ports instead, and nothing else (its tests of refused and timed-out
  connections use other ports).

Nothing of either suite is changed or kept in the repository: downloads and builds live
under ``~/.cache/starlight-rabbitmq/client-suites`` (``STARLIGHT_CLIENT_SUITES_CACHE``), Go's
module and build caches where Go keeps them, npm's in ``~/.npm``. ``make client-suites``
(part of ``make test``) runs :func:`prepare` so that the test itself only runs them;
``python -m tests.support.client_suites`` does the same by hand.

Outcomes are read per test: Go's ``-json`` events (``go test -list`` names every test the
suite has, so a test that never reported is a failure too, not a test less) and Node's JUnit
report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

GO_MODULE = "github.com/rabbitmq/amqp091-go"
GO_VERSION = "v1.14.0"  # the version issue 34 measured (217 tests, RabbitMQ 216/217)
AMQPLIB_VERSION = "2.0.1"  # likewise (RabbitMQ 317/317 then; 319 tests in its tarball)
# amqplib's devDependency for its codec/frame/bitset property tests, at the version its
# package.json pins; its other devDependencies (biome, typescript, lefthook, uglify-js) only
# lint, type-check or build, and its tests do not load them.
CLAIRE_VERSION = "0.4.1"

REPO = Path(__file__).resolve().parents[2]
TARGET_SCRIPT = Path(__file__).resolve().parent / "amqplib_target.js"

# A first `go mod download` or `npm pack` on a fresh machine; a first build of the Go suite
# (the standard library and the client, ~80 s on 2 cores; cached afterwards).
FETCH_TIMEOUT = 600.0


def cache_dir() -> Path:
    override = os.environ.get("STARLIGHT_CLIENT_SUITES_CACHE")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "starlight-rabbitmq" / "client-suites"


class SuiteUnavailable(RuntimeError):
    """A suite could not be fetched or started (no go/npm/node, a registry refused)."""


@dataclass(frozen=True)
class Outcome:
    name: str
    status: str  # "passed", "failed" or "skipped"
    detail: str = ""  # what the test printed when it did not pass


@dataclass
class SuiteRun:
    """One run of a suite: an outcome per test, how long it took, and its output's tail."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0
    returncode: int = 0
    tail: str = ""

    def with_status(self, status: str) -> list[str]:
        return sorted(name for name, o in self.outcomes.items() if o.status == status)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SuiteUnavailable(f"`{name}` is not on PATH")
    return found


def _run(command: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> str:
    result = subprocess.run(
        command,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise SuiteUnavailable(
            f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout


def _publish(staging: Path, final: Path) -> None:
    """Move a fully prepared directory into place (a run cut short leaves only staging)."""
    if final.exists():
        shutil.rmtree(staging)
        return
    staging.rename(final)


# --------------------------------------------------------------------------- amqp091-go


def go_environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # -mod=mod: the copy may complete its go.sum; GOTOOLCHAIN=local: the module's `go 1.20`
    # line must never make Go fetch another toolchain. Go's own caches (GOMODCACHE, GOCACHE)
    # stay where Go keeps them, outside the repository.
    env.update(GOFLAGS="-mod=mod", GOTOOLCHAIN="local", **extra)
    # Unset, amqp091-go's test of a memory alarm skips itself rather than run `rabbitmqctl`.
    env.pop("RABBITMQ_RABBITMQCTL_PATH", None)
    return env


def prepare_go() -> Path:
    """The suite's directory: a writable copy of the module at GO_VERSION, built once."""
    root = cache_dir()
    suite = root / f"amqp091-go@{GO_VERSION}"
    if not (suite / "go.mod").exists():
        root.mkdir(parents=True, exist_ok=True)
        go = _tool("go")
        found = json.loads(
            _run(
                [go, "mod", "download", "-json", f"{GO_MODULE}@{GO_VERSION}"],
                cwd=root,
                env=go_environment(),
                timeout=FETCH_TIMEOUT,
            )
        )
        if "Error" in found:
            raise SuiteUnavailable(f"go mod download {GO_MODULE}@{GO_VERSION}: {found['Error']}")
        staging = Path(tempfile.mkdtemp(prefix="amqp091-go.", dir=root))
        # The module cache is read-only; `go test` writes go.sum and the tests may write files.
        shutil.copytree(found["Dir"], staging, dirs_exist_ok=True)
        for path in [staging, *staging.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        if suite.exists():
            shutil.rmtree(suite)  # an earlier attempt cut short
        _publish(staging, suite)
    # Compiles the client and its tests into Go's build cache: the test run only links. The
    # directory is stable so that the cache's entries (keyed by it) are found again.
    go_test_list(suite)
    return suite


def go_test_list(suite: Path) -> list[str]:
    """Every test and example the suite would run (`go test -list`): its own inventory."""
    out = _run(
        [_tool("go"), "test", "-tags", "integration", "-list", ".*", "."],
        cwd=suite,
        env=go_environment(),
        timeout=FETCH_TIMEOUT,
    )
    # Examples run only with an `// Output:` comment; -list names those only, so every name
    # is a test that runs. Benchmarks do not run without -bench.
    return [line for line in out.splitlines() if line.startswith(("Test", "Example"))]


def run_go(
    suite: Path,
    url: str,
    *,
    skip: Iterable[str] = (),
    only: Iterable[str] = (),
    timeout: float,
    log: Path | None = None,
) -> SuiteRun:
    """``go test -tags integration`` against ``url``, ``skip`` left out (never run), or only
    ``only``; an outcome for every top-level test of the inventory that was to run. ``log``
    gets the whole output."""
    skip, only = sorted(skip), sorted(only)
    expected = [t for t in go_test_list(suite) if t not in skip and (not only or t in only)]
    command = [_tool("go"), "test", "-tags", "integration", "-count=1", "-json"]
    # go test's own limit panics the binary (every goroutine printed) a little before ours.
    command += ["-timeout", f"{int(timeout)}s"]
    if skip:
        command += ["-skip", f"^({'|'.join(skip)})$"]
    if only:
        command += ["-run", f"^({'|'.join(only)})$"]
    started = time.monotonic()
    result = subprocess.run(
        [*command, "."],
        cwd=suite,
        env=go_environment(AMQP_URL=url),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    run = SuiteRun(seconds=time.monotonic() - started, returncode=result.returncode)
    if log is not None:
        log.write_text(_go_text(result.stdout) + result.stderr)
    reported = parse_go_events(result.stdout.splitlines())
    for name in expected:
        run.outcomes[name] = reported.get(
            name, Outcome(name, "failed", "no result (the test binary ended before it)")
        )
    run.tail = _tail(_go_text(result.stdout) + result.stderr)
    return run


def _go_text(events: str) -> str:
    """What ``go test`` would have printed without ``-json``."""
    text = []
    for line in events.splitlines():
        try:
            text.append(str(json.loads(line).get("Output", "")))
        except ValueError:
            text.append(line + "\n")
    return "".join(text)


def parse_go_events(lines: Iterable[str]) -> dict[str, Outcome]:
    """Top-level tests' outcomes from ``go test -json`` (test2json) events; a failing test's
    output (its subtests' too) as the detail. A test that started and never ended (a panic
    elsewhere, a timeout) is failed."""
    printed: dict[str, list[str]] = {}
    ended: dict[str, str] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the build's own output
        test = event.get("Test")
        if not isinstance(test, str):
            continue
        top = test.split("/", 1)[0]
        action = event.get("Action")
        if action == "run" and test == top:
            printed.setdefault(top, [])
        elif action == "output":
            printed.setdefault(top, []).append(str(event.get("Output", "")))
        elif action in ("pass", "fail", "skip") and test == top:
            ended[top] = {"pass": "passed", "fail": "failed", "skip": "skipped"}[action]
    outcomes = {}
    for name, lines_of in printed.items():
        status = ended.get(name, "failed")
        detail = "" if status == "passed" else "".join(lines_of)[-4000:]
        if name not in ended:
            detail = "started, never ended\n" + detail
        outcomes[name] = Outcome(name, status, detail)
    return outcomes


# --------------------------------------------------------------------------- amqplib


def prepare_amqplib() -> Path:
    """The suite's directory: amqplib's npm tarball at AMQPLIB_VERSION, unpacked, with its
    test dependency installed in the folder above it (Node looks there from ``test/``)."""
    root = cache_dir()
    home = root / f"amqplib@{AMQPLIB_VERSION}"
    package = home / "package"
    if not (home / "node_modules" / "claire" / "package.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        npm = _tool("npm")
        staging = Path(tempfile.mkdtemp(prefix="amqplib.", dir=root))
        tarball_name = _run(
            [npm, "pack", f"amqplib@{AMQPLIB_VERSION}", "--pack-destination", str(staging)],
            cwd=staging,
            env=os.environ,
            timeout=FETCH_TIMEOUT,
        ).split()[-1]
        with tarfile.open(staging / tarball_name) as tarball:
            tarball.extractall(staging, filter="data")
        (staging / tarball_name).unlink()
        _run(
            [
                npm,
                "install",
                "--prefix",
                str(staging),
                "--no-save",
                "--no-package-lock",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                f"claire@{CLAIRE_VERSION}",
            ],
            cwd=staging,
            env=os.environ,
            timeout=FETCH_TIMEOUT,
        )
        if home.exists():
            shutil.rmtree(home)  # an earlier attempt cut short
        _publish(staging, home)
    if not (package / "test").is_dir():
        raise SuiteUnavailable(f"amqplib@{AMQPLIB_VERSION}'s tarball has no test/ folder")
    _tool("node")
    return package


def run_amqplib(
    package: Path,
    ipv4: tuple[str, int],
    ipv6: tuple[str, int],
    *,
    timeout: float,
    log: Path | None = None,
) -> SuiteRun:
    """amqplib's suite as its Makefile's ``test`` runs it (``node --test``), its connections to
    port 5672 of the local host sent to ``ipv4``, those to ``[::1]:5672`` to ``ipv6``.
    ``log`` gets the whole output."""
    with tempfile.TemporaryDirectory(prefix="amqplib-report.") as reports:
        junit = Path(reports) / "junit.xml"
        command = [
            _tool("node"),
            "--require",
            str(TARGET_SCRIPT),
            "--test",
            "--test-reporter=junit",
            f"--test-reporter-destination={junit}",
            "--test-reporter=spec",
            "--test-reporter-destination=stdout",
        ]
        env = dict(os.environ)
        env.update(
            # The suite's own knob (channel_api tests), and the preload's for the others.
            URL=f"amqp://{ipv4[0]}:{ipv4[1]}",
            STARLIGHT_AMQP_TARGET=f"{ipv4[0]}:{ipv4[1]}",
            STARLIGHT_AMQP_TARGET_IPV6=f"{ipv6[0]}:{ipv6[1]}",
        )
        env.pop("NODE_OPTIONS", None)
        started = time.monotonic()
        result = subprocess.run(
            command,
            cwd=package,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        run = SuiteRun(seconds=time.monotonic() - started, returncode=result.returncode)
        run.tail = _tail(result.stdout + result.stderr)
        if log is not None:
            log.write_text(result.stdout + result.stderr)
        if junit.exists():
            run.outcomes = parse_junit(junit.read_text())
    return run


def parse_junit(text: str) -> dict[str, Outcome]:
    """Node's JUnit report: one outcome per ``testcase``, named by its suites' path
    (``describe`` blocks) joined with `` > ``; a repeated name gets `` #2`` and so on."""
    root = ElementTree.fromstring(text)
    outcomes: dict[str, Outcome] = {}
    for path, case in _cases(root, ()):
        name = " > ".join((*path, case.get("name", "?")))
        if name in outcomes:
            n = 2
            while f"{name} #{n}" in outcomes:
                n += 1
            name = f"{name} #{n}"
        failure = case.find("failure")
        if failure is not None or case.get("failure") is not None:
            detail = case.get("failure") or ""
            if failure is not None:
                detail = (failure.text or failure.get("message") or detail).strip()
            outcomes[name] = Outcome(name, "failed", detail[-4000:])
        elif case.find("skipped") is not None:
            outcomes[name] = Outcome(name, "skipped")
        else:
            outcomes[name] = Outcome(name, "passed")
    return outcomes


def _cases(
    element: ElementTree.Element, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], ElementTree.Element]]:
    for child in element:
        if child.tag == "testsuite":
            yield from _cases(child, (*path, child.get("name", "?")))
        elif child.tag == "testcase":
            yield path, child


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def prepare() -> dict[str, Path]:
    """Both suites fetched (and the Go one built): what ``make client-suites`` runs."""
    return {"amqp091-go": prepare_go(), "amqplib": prepare_amqplib()}


def main() -> int:
    started = time.monotonic()
    try:
        for name, where in prepare().items():
            print(f"client-suites: {name} ready in {where}")
    except (SuiteUnavailable, subprocess.TimeoutExpired) as error:
        print(f"client-suites: {error}", file=sys.stderr)
        return 1
    print(f"client-suites: prepared in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
