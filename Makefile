# README command 1: make run. README command 2: make test.
GO       ?= go
PORT     ?= 8080
REGIONS  ?= 1
TESTARGS ?=

.PHONY: run test test-go test-contract test-terraform vet bench capacity fuzz fuzz-brief soak generate mock

## run: start the emulators and every function at http://localhost:$(PORT); REGIONS=2: two region processes behind one endpoint
# exec: the runner's parent is make itself, whose death it notices.
run:
	$(GO) build -o bin/local ./cmd/local && PORT=$(PORT) REGIONS=$(REGIONS) exec ./bin/local

## test: every test: vet, the API description's checks, unit and emulator-backed Go tests, brief fuzzing, Terraform checks
test: vet test-contract test-go fuzz-brief test-terraform

# The node tools are pinned in package.json and package-lock.json (npm ci).
NPX       ?= npx --no-install
MOCK_PORT ?= 4010

## generate: the clients from docs/openapi.yaml: TypeScript types and compiled client (clients/typescript), Go client (shared/apiclient)
generate:
	$(NPX) openapi-typescript docs/openapi.yaml -o clients/typescript/src/schema.d.ts --silent
	$(NPX) tsc -p clients/typescript
	cp clients/typescript/dist/client.js cmd/local/playground/client.js
	cp node_modules/openapi-fetch/dist/index.mjs cmd/local/playground/openapi-fetch.js
	$(GO) generate ./shared/apiclient/

## test-contract: Spectral (oas and OWASP rulesets, .spectral.yaml), the TypeScript client's drift, strict compile and unit tests
# The Go client's drift is a test of shared/apiclient (test-go); the TypeScript
# client against the local stack is TestTypeScriptClient (cmd/local).
test-contract:
	$(NPX) spectral lint --fail-severity=hint docs/openapi.yaml
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(NPX) openapi-typescript docs/openapi.yaml -o "$$tmp/schema.d.ts" --silent && \
	$(NPX) tsc -p clients/typescript --outDir "$$tmp/dist" && \
	{ diff -u clients/typescript/src/schema.d.ts "$$tmp/schema.d.ts" && diff -ru clients/typescript/dist "$$tmp/dist" && \
	  cmp clients/typescript/dist/client.js cmd/local/playground/client.js && \
	  cmp node_modules/openapi-fetch/dist/index.mjs cmd/local/playground/openapi-fetch.js; } || \
	{ echo "test-contract: the committed TypeScript client differs from what docs/openapi.yaml and its sources generate: run make generate" >&2; exit 1; }
	node --test clients/typescript/dist/client.test.js

## mock: a mock of the API on http://localhost:$(MOCK_PORT) answering docs/openapi.yaml's examples (Prism), for frontend work without the backend
mock:
	$(NPX) prism mock --host 127.0.0.1 --port $(MOCK_PORT) docs/openapi.yaml

# Every fuzz target for a moment (its seeds already ran in test-go). A count,
# not a duration: with a duration, Go 1.26's fuzz coordinator can report
# "context deadline exceeded" when time is up (golang/go#75804, fixed in 1.27).
fuzz-brief:
	$(MAKE) --no-print-directory fuzz FUZZTIME=3000x

vet:
	$(GO) vet ./...

# One emulator stack serves every test binary; each test isolates itself in
# its own project, database, tables and topics.
# terraform/check runs in test-terraform, after fmt and the provider build.
# An empty package list would run nothing and pass: it fails instead.
# Test artifacts (the browser tests' screenshots) land in .artifacts/_artifacts/.
test-go:
	@pkgs="$$($(GO) list ./... | grep -v /terraform/check)"; \
	test -n "$$pkgs" || { echo "test-go: no packages to test" >&2; exit 1; }; \
	rm -rf .artifacts && mkdir -p .artifacts && \
	$(GO) run ./cmd/withemulators -- $(GO) test -shuffle=on -count=1 -race -timeout 20m \
		-artifacts -outputdir $(CURDIR)/.artifacts $(TESTARGS) $$pkgs

## test-terraform: fmt, validate and plan per environment offline, cross-checks with the code
test-terraform:
	bash terraform/check.sh

## bench: benchmarks on the local stack, figures side by side; the per-operation costs go to docs/benchmarks/costs.json
bench:
	$(GO) run ./cmd/bench -costs docs/benchmarks/costs.json
	$(GO) run ./cmd/benchjobs
	$(GO) run ./cmd/benchmanip
	$(GO) test -run '^$$' -bench BenchmarkVerify ./shared/auth/
	$(GO) run ./cmd/withemulators -- $(GO) test -run '^$$' -bench BenchmarkHistoryFirstPage -benchtime 200x ./shared/history/historystore/
	$(GO) run ./cmd/withemulators -- $(GO) test -run '^$$' -bench BenchmarkExpireHistoryCost -benchtime 1x ./functions/expirehistory/
	$(GO) run ./cmd/withemulators -- $(GO) test -run '^$$' -bench BenchmarkPrepareExportMemory -benchtime 1x ./functions/prepareexport/

## capacity: each environment's capacity plan from its Terraform, topology.json and docs/benchmarks/costs.json (docs/capacity.md)
capacity:
	$(GO) run ./cmd/capacity

## soak: a bounded mixed load with faults on the local stack; prints drift (must be 0)
SOAK ?= 10m
soak:
	$(GO) run ./cmd/soak -duration $(SOAK)

## fuzz: every fuzz target for longer (FUZZTIME each: a duration, or a count such as 100000x)
# The targets are read from the test sources (tools/fuzz.sh): none found fails.
FUZZTIME ?= 60s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash tools/fuzz.sh
