# trickbench — the whole set-up is `make run` or `make test` on a fresh Linux x86-64 machine with
# python3 and pip: libtorch (the PyPI torch==2.11.0 wheel) is installed once per user under
# ~/.cache/trickbench (TRICKBENCH_VENV overrides) and linked here as .venv.

CARGO ?= cargo
# Where `make data` looks for an ImageFolder tar of CIFAR-10 before trying to download it.
CIFAR_TAR ?= ../shared/data/cifar10-jpeg.tar
# Where `make data` looks for tiny Shakespeare before trying to download it.
SHAKESPEARE_TXT ?= ../shared/data/tinyshakespeare.txt
# `make run`'s and `make parity`'s profile: auto is standard on a CUDA GPU and quick elsewhere.
PROFILE ?= auto
# `make run`'s tricks: those judged by throughput and memory (minutes on a CPU). The convergence
# tricks train to accuracy, several minutes each: `make run TRICKS=all`.
TRICKS ?= throughput,memory
# `make parity`'s torch.compile modes beside eager PyTorch, comma-separated (empty: none), e.g.
# `make parity COMPILE=default,max-autotune-no-cudagraphs`.
COMPILE ?=

# `make fuzz`: one cargo-fuzz target for FUZZ_SECONDS (fuzzing stays outside `make test`).
FUZZ_TARGET ?= cifar_reader
FUZZ_SECONDS ?= 300
FUZZ_ARGS ?= fuzz/corpus/$(FUZZ_TARGET) fuzz/seeds/$(FUZZ_TARGET)

.PHONY: setup build data run test bench parity reports fuzz clean

setup:
	scripts/setup-libtorch

build: setup
	$(CARGO) build --release

# Real CIFAR-10 in data/cifar10: imported from $(CIFAR_TAR) when present, else downloaded. When
# neither works, `run` says so and falls back to synthetic data.
data: build
	@if [ -f data/cifar10/test_batch.bin ]; then true; \
	elif [ -f "$(CIFAR_TAR)" ]; then ./target/release/trickbench data import "$(CIFAR_TAR)" --out data/cifar10; \
	else ./target/release/trickbench data fetch cifar10 --out data/cifar10 || \
	  echo "make data: no CIFAR-10 available; the benchmark will use synthetic data"; fi
	@if [ -f data/shakespeare/tinyshakespeare.txt ]; then true; \
	elif [ -f "$(SHAKESPEARE_TXT)" ]; then mkdir -p data/shakespeare && cp "$(SHAKESPEARE_TXT)" data/shakespeare/; \
	else ./target/release/trickbench data fetch shakespeare --out data/shakespeare || \
	  echo "make data: no tiny Shakespeare available; the GPT cells will be not applicable"; fi

run: data
	./target/release/trickbench run --profile $(PROFILE) --tricks $(TRICKS)

# trickbench against eager PyTorch (the set-up's .venv/bin/python) on the profile's ResNet and GPT:
# the loss of every step, and the step time in interleaved processes (`trickbench parity --help`).
parity: data
	./target/release/trickbench parity --profile $(PROFILE) $(if $(COMPILE),--compile $(COMPILE))

# The committed reports' pages and plots, which git ignores, rendered from their committed results
# files, and reports/index.html listing them (scripts/render-reports says which command per folder).
reports: build
	scripts/render-reports

# Release mode: the tests train real (small) networks, and `make run` then reuses the same build.
test: setup
	scripts/install-test-deps
	$(CARGO) test --release

bench: setup
	$(CARGO) bench

# Stable toolchain: RUSTC_BOOTSTRAP lets cargo-fuzz use its unstable flags; no sanitizer, as
# libtorch is not built for one.
fuzz: setup
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	mkdir -p fuzz/corpus/$(FUZZ_TARGET)
	RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run --fuzz-dir fuzz --sanitizer none $(FUZZ_TARGET) \
	  $(FUZZ_ARGS) -- -max_total_time=$(FUZZ_SECONDS)

clean:
	$(CARGO) clean
	rm -rf reports/runs
