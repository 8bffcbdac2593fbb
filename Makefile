# Durable Console. `make run` starts the demo; `make test` runs the whole suite
# on SQLite and on PostgreSQL. Both set up everything from a fresh clone.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PG_TEST_URL ?= postgres://postgres@127.0.0.1:5432/postgres
TEST_ENV := DEBUG=1 SECRET_KEY=test-only-secret-key
# Each database leg runs in this many pytest processes (pytest-xdist), each
# on a test database of its own; `--dist loadfile` hands out whole files, so
# a file's module-scoped servers and clusters start once. The rows the
# migrations seed come back after every flush (workflows.apps), so no test
# depends on which ran before it. `TEST_PROCESSES=0` runs a leg in one process.
TEST_PROCESSES ?= 2
XDIST = -n $(TEST_PROCESSES) --dist loadfile
# Where `make run` serves the console and the ticket desk: `make run PORT=9000 DESK_PORT=9100`,
# or the same from the environment.
PORT ?= 8000
DESK_PORT ?= 8100

.PHONY: setup setup-browser-checks run test test-sqlite test-postgres bench lint format docs screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The project's own modules compiled once here, as pip compiles what it
# installs: where PYTHONDONTWRITEBYTECODE is set, every process start (a
# worker cluster, the web, each command) would otherwise compile them from
# source (docs/deploying.md#what-runs). Only changed files are
# compiled again.
setup: $(STAMP)
	@$(BIN)/python -m compileall -q -j0 workflows durableconsole tests manage.py

# What the browser tests run inside Chromium (axe-core), from the npm
# registry at the version package-lock.json pins; the console never serves it.
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

setup-browser-checks: $(NODE_STAMP)

run: setup
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py rundemo --web 127.0.0.1:$(PORT) --desk-port $(DESK_PORT)

# The two database legs, and the subset through PgBouncer, run side by side,
# keeping both cores busy (docs/development.md#running-the-tests); each
# leg's output is printed whole when it ends.
# `make test-sqlite` / `make test-postgres` / `make test-pooled` run one.
test: setup setup-browser-checks
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-sqlite test-postgres test-pooled

# Tests marked `once` check what no database engine changes (the browser's
# pages and layout, the role matrix, the docs): they run on the SQLite leg
# alone; `once_postgres` (some bench parts) on the PostgreSQL leg alone
# (docs/development.md#running-the-tests).
test-sqlite: setup setup-browser-checks
	@echo "== test suite on SQLite =="
	env -u DATABASE_URL $(TEST_ENV) $(BIN)/pytest -m 'not once_postgres' $(XDIST) $(PYTEST_ARGS)

test-postgres: setup setup-browser-checks
	@echo "== test suite on PostgreSQL ($(PG_TEST_URL)) =="
	@if $(BIN)/python -c "import psycopg, sys; psycopg.connect(sys.argv[1], connect_timeout=3).close()" "$(PG_TEST_URL)" 2>/dev/null; then \
		$(TEST_ENV) DATABASE_URL=$(PG_TEST_URL) $(BIN)/pytest -m 'not once' $(XDIST) $(PYTEST_ARGS); \
	elif [ "$$CI" = "true" ]; then \
		echo "!! PostgreSQL at $(PG_TEST_URL) is unreachable: CI requires the PostgreSQL leg" >&2; exit 1; \
	else \
		echo "" >&2; \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2; \
		echo "!! PostgreSQL at $(PG_TEST_URL) is unreachable:" >&2; \
		echo "!! the PostgreSQL leg was NOT run. Set PG_TEST_URL or start PostgreSQL." >&2; \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2; \
	fi

# The marked subset (crash matrix, effects in flight, approval proofs)
# with the database behind a real PgBouncer in transaction mode, LISTEN on
# a direct connection (docs/deploying.md#pgbouncer).
test-pooled: setup
	@echo "== marked subset through PgBouncer ($(PG_TEST_URL)) =="
	$(BIN)/python tests/support/pgbouncer.py $(PG_TEST_URL) -- env $(TEST_ENV) $(BIN)/pytest -m pooled --reuse-db -p no:cacheprovider -q

# ruff, configured in pyproject.toml; `make format` rewrites, `make lint` only checks.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: setup
	$(BIN)/python manage.py bench

# The documentation site (mkdocs.yml), built into var/site; --strict fails on
# a broken link, a missing anchor or a page left out of the navigation.
# NO_MKDOCS_2_WARNING keeps the theme's end-of-life banner out of the output.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet -d var/site

# docs/img/*.png, taken from the real console (a seeded demo on a database of
# its own under var/screenshots/) in the system Chromium.
screenshots: setup
	DEBUG=1 $(BIN)/python -m workflows.ops.screenshots

clean:
	rm -rf $(VENV) node_modules var staticfiles test-artifacts .pytest_cache
