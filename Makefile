# segkv developer commands. `make test` is what CI runs; see README.md.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS        := ./...
# Every module of the repository: the library, then the ones that keep
# heavy dependencies out of its go.mod (bench/: the peer engines; raft/:
# hashicorp/raft; contrib/prometheus: client_golang; backup/: gocloud.dev
# and the S3 test server).
MODULES     := . bench raft contrib/prometheus backup
FUZZTIME    ?= 20s
BENCHARGS   ?=

.PHONY: test lint bench crash fuzz torture gobench docs meta

test:
	@set -e; for m in $(MODULES); do \
	  echo "== module $$m"; \
	  (cd $$m && $(GO) vet $(PKGS) && $(GO) test -race -timeout 25m $(PKGS)); \
	done

lint:
	@set -e; for m in $(MODULES); do \
	  echo "== module $$m"; \
	  (cd $$m && $(GO) vet $(PKGS) && $(GO) run $(STATICCHECK) $(PKGS)); \
	done

bench:
	$(GO) run ./cmd/segbench $(BENCHARGS)

gobench:
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./segstore/

# Crash tests at many more points and seeds than make test runs.
crash:
	SEGKV_CRASH_SEEDS=40 $(GO) test -race -timeout 60m -run 'Crash' $(PKGS)

# The metamorphic test (internal/metamorphic) at length: META_SEEDS seeds of
# META_OPS ops from META_FIRST (default: a new range each run, from the
# clock); META_KNOWN=open (default) holds the store to everything but the
# known open bugs (none today, docs/RELIABILITY.md), include to everything,
# avoid also leaves out the op patterns of issue 28's bugs.
# A failing seed prints its shrunk trace and writes it to META_OUT; replay
# with META_TRACE=file go test ./internal/metamorphic -run 'TestMeta$' -v.
META_SEEDS  ?= 400
META_OPS    ?= 5000
META_FIRST  ?= $(shell date +%s)
META_KNOWN  ?= open
META_SHRINK ?= 120s
META_OUT    ?= $(CURDIR)/meta-failures
meta: SHELL := /bin/bash
meta:
	set -o pipefail; META_SEEDS=$(META_SEEDS) META_OPS=$(META_OPS) META_FIRST=$(META_FIRST) \
	META_KNOWN=$(META_KNOWN) META_SHRINK=$(META_SHRINK) META_OUT=$(META_OUT) \
	  $(GO) test -count=1 -timeout 120m -run 'TestMeta$$' -v ./internal/metamorphic/ | \
	  grep -v -e '^=== ' -e '^ *--- PASS' -e ': ok: '

# Kill -9 torture on the real disk, hundreds of cycles.
torture:
	SEGKV_TORTURE_CYCLES=500 $(GO) test -timeout 60m -run 'Torture' ./segstore/

# Every fuzz target, FUZZTIME each.
fuzz:
	@set -e; for m in $(MODULES); do \
	  for pkg in $$(cd $$m && $(GO) list ./...); do \
	    for f in $$(cd $$m && $(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	      echo "== $$pkg $$f"; (cd $$m && $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg); \
	    done; \
	  done; \
	done

# docs/FORMAT.md is assembled from the per-package format notes.
docs:
	cat docs/parts/format-intro.md docs/parts/wal.md docs/parts/segment.md \
	    docs/parts/index.md docs/parts/manifest.md docs/parts/raft.md \
	    docs/parts/backup.md > docs/FORMAT.md
