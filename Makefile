# SharedOS — every target works on a fresh machine with Go 1.26; tests start
# their own embedded NATS servers on loopback.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
CONFIG ?= cluster.yaml

.PHONY: run test test-short fuzz conformance bench bench-kernel lint soak clean

## run: start a node with the sample cluster.yaml (embedded NATS + JetStream)
run:
	$(GO) run ./cmd/node serve --config $(CONFIG)

## test: the whole suite with the race detector, plus a short fuzz of the frame guard
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -run '^$$' -fuzz '^FuzzGuard$$' -fuzztime 15s -fuzzminimizetime 5s ./messages

## conformance: print the conformance table (rows x columns); any failing cell fails
conformance:
	$(GO) test -race -count=1 -run '^TestConformance$$' -v ./conformance \
	  | grep -vE '^\s*(=== (RUN|PAUSE|CONT)|--- PASS|table.go:)'

## bench-kernel: go test benchmarks of the kernel's hot paths
bench-kernel:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./actors ./catalog ./authority ./internal/audit ./messages

## bench: the load harness (bench/): every scenario and its floor at concurrency 1 and 64,
## the concurrency sweep and memory per idle open turn; prints the ratios to the floors.
## BENCHFLAGS adds flags (BENCHFLAGS='--runs 3 --json'); docs/performance.md explains them.
BENCHFLAGS ?=
bench:
	$(GO) run ./bench --sweep 1,4,16,64,256 --idle-turns 10000,100000 $(BENCHFLAGS)

## fuzz: a longer fuzz run of the frame guard (FUZZTIME=5m make fuzz)
FUZZTIME ?= 2m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzGuard$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./messages

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## soak: long runs that stay out of `make test`: the suite 20 times under the race
## detector on one and two CPUs, 10 minutes of fuzzing, and 5 minutes of load per scenario.
SOAKTIME ?= 5m
soak:
	$(GO) test -race -count=10 -cpu 1,2 -timeout 60m ./...
	$(GO) test -run '^$$' -fuzz '^FuzzGuard$$' -fuzztime 10m -fuzzminimizetime 5s ./messages
	$(GO) run ./bench --concurrency 64 --duration $(SOAKTIME)

clean:
	rm -rf data .sharedos
