# The two commands that matter: `make run` and `make test`. Everything installs itself.
VENV    ?= .venv
PYTHON  := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
COMPILED := $(VENV)/.compiled-stamp
CONFIG  ?= conf/gateway.conf

.PHONY: install run test unit integration lint bench stack-up stack-down stack-status clean dist

install: $(STAMP) $(COMPILED)

# Re-install only when the dependency list changes; the package itself is editable.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev,rollup]'
	touch $(STAMP)

# The compiled modules (gateway/pulsar/compiled.py, gateway/amqp/compiled.py), cached outside
# the repo per source, libpulsar and Python; without gcc the gateway uses pulsar-client's
# binding alone and takes every AMQP frame in Python.
$(COMPILED): $(STAMP) $(wildcard gateway/pulsar/native/*) $(wildcard gateway/amqp/native/*) gateway/native_build.py
	$(PYTHON) -m gateway.pulsar.compiled
	$(PYTHON) -c 'import sys; from gateway.amqp.compiled import main; sys.exit(main())'
	touch $(COMPILED)

# The wheel and the sdist in dist/ (starlight_rabbitmq-<version>-py3-none-any.whl and .tar.gz):
# `python -m build` makes the sdist, then the wheel from that sdist, so a file missing from
# the sdist is missing from the wheel too and shows up in tests/integration/test_wheel.py.
# Its isolated build environment takes setuptools from PyPI (pip's cache), nothing from here.
dist: $(STAMP)
	$(PYTHON) -m build --outdir dist .

# The stack script is stdlib-only, so it needs no virtualenv. PROFILE=secured or
# PROFILE=cluster (2 brokers, 2 bookies, ZooKeeper as JVMs of their own) picks another
# profile; see docs/local-stack.md.
PROFILE ?= default
stack-up:
	python3 scripts/stack.py up --profile $(PROFILE)

stack-down:
	python3 scripts/stack.py down --profile $(PROFILE)

stack-status:
	python3 scripts/stack.py status --profile $(PROFILE)

# The secured profile: a second, independent Pulsar (TLS only, token + TLS authentication,
# authorization) on its own ports; see docs/local-stack.md. The default stack is not touched.
.PHONY: stack-up-secured stack-down-secured stack-status-secured

stack-up-secured:
	python3 scripts/stack.py up --profile secured

stack-down-secured:
	python3 scripts/stack.py down --profile secured

stack-status-secured:
	python3 scripts/stack.py status --profile secured

# jemalloc, the allocator the benchmarks' figures were measured with (docs/performance.md):
# where it cannot be installed the gateway runs on glibc's (slower under load; its start log
# names the allocator in use).
.PHONY: allocator
allocator:
	scripts/debian_packages.sh libjemalloc2 || echo "make run: jemalloc not installed; the gateway uses glibc's allocator"

run: install allocator stack-up
	$(VENV)/bin/starlight-rabbitmq -c $(CONFIG)

lint: install
	$(VENV)/bin/ruff check gateway tests scripts bench
	$(VENV)/bin/ruff format --check gateway tests scripts bench
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict scripts/stack.py scripts/stack_cluster.py scripts/pulsar_proxy.py
	$(VENV)/bin/mypy --strict scripts/helm_chart.py

# The whole suite. The test session starts the local stack if it is not up and stops what it
# started, so the machine is left as it was found. A test that hangs fails on its own
# (pytest-timeout, pyproject.toml); the outer limit only catches a process so stuck that no
# Python code runs, so that CI reports it long before its own limit.
TEST_TIME_LIMIT ?= 3000
test: install lint test-tools shim k8s-tools java-client client-suites
	timeout --kill-after=30 $(TEST_TIME_LIMIT) $(VENV)/bin/pytest

# The real servers the suite starts on loopback besides Pulsar (Debian's packages).
.PHONY: test-tools
test-tools:
	scripts/debian_packages.sh

# The Pulsar proxy extension (docs/proxy-extension.md): the NAR, after its Surefire unit tests.
# Maven caches its downloads in ~/.m2; maven-settings.xml sends every repository to Central.
MVN := mvn --batch-mode --no-transfer-progress -s extension_shim/maven-settings.xml -f extension_shim/pom.xml
.PHONY: shim run-proxy
shim:
	$(MVN) package

# The reference's proxy-extension quick start on this machine: the local stack, then a real
# Pulsar proxy with the NAR loaded (proxyExtensions=rabbitmq) serving AMQP on 127.0.0.1:5672.
run-proxy: install stack-up
	python3 scripts/pulsar_proxy.py run

# RabbitMQ's Java client (com.rabbitmq:amqp-client, from Maven Central into ~/.m2) and the
# scenarios tests/integration/clients/test_java_client.py runs with it: compiled, classpath written.
.PHONY: java-client
java-client:
	mvn --batch-mode --no-transfer-progress --quiet -s extension_shim/maven-settings.xml \
		-f tests/java_client/pom.xml compile dependency:build-classpath \
		-Dmdep.outputFile=target/classpath.txt -Dmdep.includeScope=runtime
	touch tests/java_client/target/classpath.txt  # built now (Maven keeps an unchanged file)

# RabbitMQ's client libraries' own test suites (tests/integration/clients/test_client_suites.py):
# amqp091-go from the Go module proxy (compiled once into Go's build cache) and amqplib from
# npm, pinned, cached in ~/.cache/starlight-rabbitmq/client-suites (~2 min the first time on a
# fresh machine, ~2 s afterwards). Go and Node come with the machine image.
.PHONY: client-suites
client-suites: install
	$(PYTHON) -m tests.support.client_suites

# helm, the helm-unittest plugin, etcd and kube-apiserver for the Helm chart's tests, built from
# the Go module proxy into ~/.cache/starlight-tools (~15 min the first time, instant afterwards).
.PHONY: k8s-tools image
k8s-tools:
	scripts/k8s_tools.sh

# The gateway image (helm/image/Containerfile) with buildah; see docs/helm.md. Not part of `make test`.
image:
	scripts/build_image.sh $(IMAGE_ARGS)

unit: install
	$(VENV)/bin/pytest tests/unit

integration: install
	$(VENV)/bin/pytest tests/integration

# Benchmarks print ratios from one run (docs/performance.md); not part of `make test`.
# RabbitMQ's columns need Debian's rabbitmq-server (apt-get install rabbitmq-server).
bench: install stack-up
	$(PYTHON) bench/bench_codec.py
	$(PYTHON) bench/bench_gateway_vs_pulsar.py
	$(PYTHON) bench/bench_perftest.py

# A million fuzzed inputs through the sans-IO AMQP core: inputs/s, how they ended, and any
# failing input shrunk into fuzz-failures/ (docs/reliability.md). `make test` runs 20,000.
.PHONY: fuzz
FUZZ_INPUTS ?= 1000000
fuzz: install
	$(PYTHON) bench/fuzz_core.py --inputs $(FUZZ_INPUTS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis dist build
