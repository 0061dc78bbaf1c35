# cfp: two commands set up a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
AZURITE := deploy/local/node_modules/.bin/azurite
JARS := deploy/spark/jars/.installed
FETCHED := deploy/spark/jars/.fetched
AZURITE_DIR ?= .azurite

.PHONY: help downloads install lock docs demo test unit integration chaos chaos-ci lint typecheck azurite spark-connect image image-test bench bench-decode bench-spark bench-cluster bench-startup bench-stream bench-state bench-changelog bench-rebalance bench-balance bench-formats bench-filter bench-freshness bench-profile bench-server-loss clean

help:
	@echo "make demo       Azurite, Spark Connect, a live workload, 3 hosts into Spark, kill -9, verify"
	@echo "make test       lint, type-check, unit and integration tests (starts its own Azurite)"
	@echo "make chaos      hosts, Azurite, the network and Spark Connect servers failing at random (SEED=1 DURATION=60 HOSTS=4 SPARK=connect|embedded SERVERS=2)"
	@echo "make image      the images cfp:host (thin hosts, no Java) and cfp:spark, with docker or podman"
	@echo "make image-test containers of them: a fleet, a Spark standalone cluster, a lost worker"
	@echo "make lock       the dependency locks again, after a change to pyproject.toml"
	@echo "make docs       the reference pages made from the code (docs/reference/)"
	@echo "make azurite    run Azurite in the foreground on the default ports (data in $(AZURITE_DIR)/)"
	@echo "make spark-connect  run a Spark Connect server on 127.0.0.1:15002 in the foreground"
	@echo "make bench      cfp read as a process vs a download + fastavro script vs the official SDK"
	@echo "make bench-decode     CPU per record: fastavro vs the columnar decoder"
	@echo "make bench-spark      one host into the Delta change log vs appending the same rows"
	@echo "make bench-cluster    1, 2, 3 thin hosts on Spark's standalone cluster vs appending the same rows"
	@echo "make bench-startup    a thin and an embedded host: their first lease and first commit"
	@echo "make bench-stream     the Spark source (readStream into Delta) vs a host into the change log"
	@echo "make bench-state      the state job's MERGEs at 100k, 1M and 10M blobs, history off and on"
	@echo "make bench-changelog  one host into a change log of 10M events (12 months) vs an empty one"
	@echo "make bench-rebalance  real hosts: kill -9, SIGTERM, scale-out (time, ticks, duplicates)"
	@echo "make bench-server-loss  thin hosts, their Spark Connect server killed 5 times: first commit after it is back"
	@echo "make bench-balance    the pure balancer at 1,000 hosts x 10,000 leases"
	@echo "make bench-formats    what --format and the change log's envelope columns cost"
	@echo "make bench-filter     what --container/--blob-prefix/... cost cfp read (90 % filtered out)"
	@echo "make bench-freshness  operation -> observer and -> state table, with hints and without (~20 min)"
	@echo "make bench-profile    where cfp read's time goes (py-spy, on the mixed benchmark feed)"

# byte code: compiled once, after the install, on both cores (--no-compile, then compileall -j0:
# pip compiles one file at a time); PYTHONDONTWRITEBYTECODE would otherwise leave every process
# compiling what it imports again (the Azure SDK's aio client: 1.9 s to import, 0.6 s compiled);
# and into the pyspark.zip Spark's Python workers import from (deploy/local/pyspark_bytecode.py)
# from the lock: every transitive dependency at a pinned version, checked against its hashes;
# then cfp itself, editable, without resolving anything again (setuptools' notice that folders
# named like the packages take precedence is what this layout is for: silenced)
LOCK := deploy/requirements-dev.lock
PIP_VERSION := 26.3
UV_COMPILE = $(VENV)/bin/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 --universal --quiet

$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(PY) -m pip install --quiet --no-compile --require-hashes -r $(LOCK)
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-compile --no-deps -e .
	PYTHONDONTWRITEBYTECODE= $(PY) -m compileall -q -j0 $(VENV)/lib processor observers leases
	$(PY) deploy/local/pyspark_bytecode.py
	touch $@

# the reference pages made from the code (tests/unit/test_docs.py fails while they are stale)
docs: $(VENV)/.installed
	$(PY) -m processor.cli.reference

# after changing a dependency in pyproject.toml (tests/unit/test_locks.py fails until then): a
# lock per role, the core, a thin host ([connect]), Spark ([spark]) and development ([dev])
lock: $(VENV)/.installed
	$(UV_COMPILE) -o deploy/requirements.lock
	$(UV_COMPILE) --extra connect -o deploy/requirements-connect.lock
	$(UV_COMPILE) --extra spark -o deploy/requirements-spark.lock
	$(UV_COMPILE) --extra dev -o $(LOCK)

$(AZURITE): deploy/local/package.json deploy/local/package-lock.json
	npm ci --prefix deploy/local --prefer-offline --no-audit --no-fund --loglevel=error
	touch $@

# Delta Lake and hadoop-azure for every Spark session (spark.jars): fetched once from Maven
# Central (beside the virtualenv's install), then checked against PySpark's own jars (a
# duplicate class fails the install)
$(FETCHED): deploy/spark/pom.xml
	rm -rf deploy/spark/jars
	mvn -q -B -Dstyle.color=never -f deploy/spark/pom.xml dependency:copy-dependencies -DoutputDirectory=jars
	touch $@

$(JARS): $(FETCHED) $(VENV)/.installed
	$(PY) -m observers.builtin.spark.session.jars --check
	touch $@

# promtool, for the tests of deploy/prometheus/alerts.yaml: the binary alone, out of Debian's
# prometheus package at a pinned version. `apt-get download` needs apt's package lists, not root
# (as root, lists that are missing or stale are refreshed once).
# A new PROMETHEUS_DEB is fetched only after `rm -rf deploy/prometheus/.promtool`.
PROMTOOL := deploy/prometheus/.promtool/promtool
PROMETHEUS_DEB := 2.42.0+ds-5+deb12u1

$(PROMTOOL):
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	get() { (cd "$$tmp" && apt-get download -q prometheus=$(PROMETHEUS_DEB)); } && \
	if ! get && ! { [ "$$(id -u)" = 0 ] && apt-get update -q && get; }; then \
		echo "$@: could not download Debian's prometheus=$(PROMETHEUS_DEB) with apt-get." >&2; \
		echo "  If apt's package lists are missing or stale, run 'sudo apt-get update' and then" >&2; \
		echo "  'make install' again (or put a promtool $(firstword $(subst +, ,$(PROMETHEUS_DEB))) at $@)." >&2; \
		exit 1; \
	fi && \
	dpkg-deb -x "$$tmp"/prometheus_*.deb "$$tmp/root" && \
	mkdir -p $(@D) && cp "$$tmp/root/usr/bin/promtool" $@.tmp && \
	$(abspath $@.tmp) --version && mv $@.tmp $@

# the class archive of the Spark JVM (observers/builtin/spark/session/class_archive.py): a
# training run's classes, mapped into every embedded session and `cfp spark-connect` after it
# (an embedded session opened in 7-8 s instead of 11-12 on 2 cores); Spark's output in build.log
ARCHIVE := $(VENV)/share/cfp/.made
$(ARCHIVE): $(JARS) $(VENV)/.installed
	@mkdir -p $(@D)
	@$(PY) -m observers.builtin.spark.class_archive_build > $(@D)/build.log 2>&1 \
		|| { tail -n 40 $(@D)/build.log; exit 1; }
	@tail -n 1 $(@D)/build.log
	@touch $@

# the four downloads (PyPI, npm, Maven Central, Debian) run side by side; each one's output is
# printed whole when it ends
downloads:
	@$(MAKE) --no-print-directory -j4 --output-sync=target $(VENV)/.installed $(AZURITE) $(JARS) $(PROMTOOL)

install: downloads
	@$(MAKE) --no-print-directory $(ARCHIVE)

demo: install
	$(PY) deploy/local/demo.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

unit: $(VENV)/.installed $(JARS) $(PROMTOOL)
	$(VENV)/bin/pytest -q tests/unit

integration: install
	$(VENV)/bin/pytest -q -n 3 --dist loadfile --no-loadscope-reorder tests/integration

# the class archive is made while lint and mypy run (one core each)
test: downloads
	@$(MAKE) --no-print-directory -j3 --output-sync=target $(ARCHIVE) lint typecheck
	$(VENV)/bin/pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=15 tests --ignore=tests/image

chaos: install
	$(PY) -m tests.chaos.runner --seed $(or $(SEED),1) --duration $(or $(DURATION),60) --hosts $(or $(HOSTS),4) --spark $(or $(SPARK),connect) --servers $(or $(SERVERS),2)

# a seed whose 60 s of faults kill one Spark Connect server of two, and both at once, besides a
# host killed, paused, stopped, skewed, Azurite restarted and the network dropped
chaos-ci: install
	$(PY) -m tests.chaos.runner --seed 20262050 --duration 60 --hosts 4 --servers 2

# the image: docker or podman (installed when root), a Debian base where no registry answers
image: $(JARS)
	deploy/image/build

image-test: install image
	deploy/image/test

azurite: $(AZURITE)
	mkdir -p $(AZURITE_DIR)
	$(AZURITE) --location $(AZURITE_DIR) --skipApiVersionCheck --loose --disableTelemetry

spark-connect: $(VENV)/.installed $(ARCHIVE)
	$(VENV)/bin/cfp spark-connect --port $(or $(PORT),15002)

bench: install
	$(PY) -m bench.read_throughput

bench-decode: $(VENV)/.installed
	$(PY) -m bench.decode_cost

bench-profile: install
	$(PY) -m bench.read_profile

bench-spark: install
	$(PY) -m bench.spark_ingest

bench-cluster: install
	$(PY) -m bench.cluster_ingest

bench-startup: install
	$(PY) -m bench.startup

bench-stream: install
	$(PY) -m bench.stream_ingest

bench-state: install
	$(PY) -m bench.state_merge

bench-changelog: install
	$(PY) -m bench.changelog_growth

bench-rebalance: install
	$(PY) -m bench.rebalance

bench-server-loss: install
	$(PY) -m bench.server_loss

bench-balance: $(VENV)/.installed
	$(PY) -m bench.balance_sim

bench-formats: $(VENV)/.installed
	$(PY) -m bench.formats

bench-filter: install
	$(PY) -m bench.filter_cost

bench-freshness: install
	$(PY) -m bench.freshness

clean:
	rm -rf $(VENV) deploy/local/node_modules deploy/spark/jars deploy/prometheus/.promtool .pytest_cache .mypy_cache .ruff_cache .bench
