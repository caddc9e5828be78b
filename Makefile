# The two commands of README.md, and the steps they are made of.
#
#   make serve   set up, build, and run `infd serve` on the default repository
#   make test    set up, build, and run every test (what .ci/run runs)
#
# Builds use the CMake presets in CMakePresets.json (build/<preset>/).

PRESET ?= release
SHELL := /bin/bash
PYTHON := /usr/bin/python3
BUILD_DIR = build/$(PRESET)
INFD = $(BUILD_DIR)/infd
# Extra options for `make serve`, e.g. SERVE_ARGS="--http-port 9000".
SERVE_ARGS ?=
# The live video app's SRT listener (docs/VIDEO.md); empty: off.
VIDEO_LISTEN ?= srt://:9000
# The Redis job queue (docs/REDIS.md), e.g. REDIS=redis://127.0.0.1:6379;
# empty: off.
REDIS ?=

# Seconds of fuzzing: `make fuzz` runs the full 5 minutes, `make test` a short
# run with a fixed seed, so CI's result does not depend on luck.
FUZZ_SECONDS ?= 300
FUZZ_SEED ?= 0

.PHONY: all setup build serve test unit e2e fuzz fuzz-long check-format format clean test-fresh build-o3

all: build

setup:
	@bash scripts/setup.sh

build:
	@test -f $(BUILD_DIR)/build.ninja || cmake --preset $(PRESET)
	cmake --build --preset $(PRESET)

serve: setup build
	@$(INFD) serve --model-repository models $(if $(VIDEO_LISTEN),--video-listen $(VIDEO_LISTEN)) \
	    $(if $(REDIS),--redis $(REDIS)) $(SERVE_ARGS)

test: setup
	@echo "== format check"
	@$(MAKE) --no-print-directory check-format
	@echo "== build (release) and unit tests"
	@$(MAKE) --no-print-directory unit PRESET=release
	@echo "== end-to-end tests"
	@$(MAKE) --no-print-directory e2e PRESET=release
	@echo "== unit tests under ASan+UBSan"
	@$(MAKE) --no-print-directory unit PRESET=asan
	@echo "== the video app's 50 connect/disconnect cycles under ASan (its leak check at exit)"
	INFD_BIN=$(abspath build/asan/infd) $(PYTHON) -m pytest -q -rs tests/e2e/test_video.py \
	    -k test_50_connect_disconnect_cycles_leave_nothing
	@echo "== the Redis queue's, the processors', the ensembles', the cluster's, shared memory's and the speech server's tests under ASan (its leak check at exit)"
	INFD_BIN=$(abspath build/asan/infd) $(PYTHON) -m pytest -q -rs tests/e2e/test_redis.py \
	    tests/e2e/test_plugins.py tests/e2e/test_python_backend.py tests/e2e/test_ensemble.py \
	    tests/e2e/test_face_detect.py tests/e2e/test_classification.py \
	    tests/e2e/test_image_preprocess.py tests/e2e/test_cluster_member.py \
	    tests/e2e/test_cluster_link.py tests/e2e/test_router.py tests/e2e/test_shared_memory.py \
	    tests/e2e/test_cuda_shared_memory.py tests/e2e/test_asr_serve.py
	@echo "== the gRPC frontend's zero copy of large tensors under ASan (its copy counter)"
	INFD_BIN=$(abspath build/asan/infd) $(PYTHON) -m pytest -q -rs tests/e2e/test_grpc.py \
	    -k test_large_tensors_are_not_copied
	@echo "== CMake's Release build (-O3) with GCC and clang: warnings are errors"
	@$(MAKE) --no-print-directory build-o3
	@echo "== fuzzing the ONNX loader and config.pbtxt (short run)"
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=30 FUZZ_SEED=1
	@if [ "$${CI:-}" = true ]; then \
	    echo "== the README's two commands on a fresh Debian 12 root (CI only: make test-fresh)"; \
	    $(MAKE) --no-print-directory test-fresh FRESH_ARGS="--apt-cache $(FRESH_APT_CACHE)"; \
	fi
	@echo "== all tests passed"

unit: build
	ctest --preset $(PRESET)

# The configuration packagers use (-DCMAKE_BUILD_TYPE=Release, -O3), with
# both compilers: -O3 finds maybe-uninitialized paths -O2 does not, clang
# warnings GCC lacks. Compiled only; the tests run on the release preset.
build-o3:
	@$(MAKE) --no-print-directory build PRESET=release-o3
	@$(MAKE) --no-print-directory build PRESET=release-o3-clang

# The README's two commands on a pristine Debian 12 root (debootstrap +
# chroot; needs root or sudo; 10 minutes with the packages cached, more to
# download them). See scripts/check_fresh.sh. `make test` runs it last when
# CI=true (CI sets it; the chroot's environment does not, so it does not
# recurse), keeping downloaded packages in FRESH_APT_CACHE between runs.
FRESH_APT_CACHE ?= /var/cache/infd-fresh-apt
test-fresh:
	@bash scripts/check_fresh.sh $(FRESH_ARGS)

# pytest exits 5 when it collects no test: that is a failure here too.
e2e: build
	INFD_BIN=$(abspath $(INFD)) $(PYTHON) -m pytest -rs tests/e2e

# libFuzzer under ASan+UBSan (clang), seeded with small generated models:
# fuzz_onnx_loader (the loader alone) and fuzz_plan (load, infer, fold,
# fuse, compile, run), and with Triton configs: fuzz_pbtxt (config.pbtxt
# parser and writers), and with KServe requests: fuzz_kserve_json (the HTTP
# inference-header decoder), and with plan files: fuzz_plan_file (the plan
# file reader and loader; seeds are `infd build` of the ONNX seeds), and
# with the speech app's inputs: fuzz_wav (sound files) and fuzz_asr_json
# (config.json and model contracts), and with BYTES tensors in pieces:
# fuzz_bytes (the runtime's element reader), and with the video app's:
# fuzz_video (SRT stream IDs, BlazeFace output decoding and drawing), and
# with the Redis queue's jobs: fuzz_redisq_job (stream entry fields and
# their request), and with images: fuzz_image (the image_decode
# processor's JPEG/PNG decoding and letterbox);
# FUZZ_SECONDS each; corpora
# grow in build/fuzz/. fuzz_wav runs with its stderr closed
# (-close_fd_mask=2; libFuzzer's own output and sanitizer reports go to a
# copy of it): libsndfile's MPEG decoder writes notes there for every bad
# frame, gigabytes an hour, and a fifth of the time.
FUZZ_TARGETS := fuzz_onnx_loader fuzz_plan fuzz_plan_file fuzz_pbtxt fuzz_kserve_json fuzz_wav \
	fuzz_asr_json fuzz_bytes fuzz_video fuzz_redisq_job fuzz_image fuzz_etcd fuzz_link \
	fuzz_grpc_wire fuzz_raw fuzz_http fuzz_npy

# fuzz-long: every target to FUZZ_RUNS executions (10 M, issue #24), one
# after another, without a time limit (hours for the slower ones: fuzz_http
# makes a connection an input). FUZZ_TARGETS="..." picks some.
FUZZ_RUNS ?= 10000000
fuzz-long:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=0 FUZZ_EXTRA=-runs=$(FUZZ_RUNS)

fuzz:
	@test -f build/fuzz/build.ninja || cmake --preset fuzz
	cmake --build --preset fuzz
	$(PYTHON) tests/fuzz/make_seeds.py build/fuzz/seeds build/fuzz/seeds-pbtxt build/fuzz/seeds-wav \
	    build/fuzz/seeds-npy
	@mkdir -p build/fuzz/seeds-plan; for m in build/fuzz/seeds/*.onnx; do \
	    build/fuzz/infd build $$m --max-batch 2 -o build/fuzz/seeds-plan/$$(basename $$m .onnx).plan \
	        >/dev/null 2>&1 || true; \
	done
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p build/fuzz/corpus-$$t; \
	    seeds=build/fuzz/seeds; [ $$t = fuzz_pbtxt ] && seeds=build/fuzz/seeds-pbtxt; \
	    [ $$t = fuzz_kserve_json ] && seeds=tests/fuzz/seeds-kserve; \
	    [ $$t = fuzz_plan_file ] && seeds=build/fuzz/seeds-plan; \
	    [ $$t = fuzz_wav ] && seeds=build/fuzz/seeds-wav; \
	    [ $$t = fuzz_asr_json ] && seeds=tests/fuzz/seeds-asr-json; \
	    [ $$t = fuzz_bytes ] && seeds=tests/fuzz/seeds-bytes; \
	    [ $$t = fuzz_video ] && seeds=tests/fuzz/seeds-video; \
	    [ $$t = fuzz_redisq_job ] && seeds=tests/fuzz/seeds-redisq; \
	    [ $$t = fuzz_image ] && seeds=tests/fuzz/seeds-image; \
	    [ $$t = fuzz_etcd ] && seeds=tests/fuzz/seeds-etcd; \
	    [ $$t = fuzz_link ] && seeds=tests/fuzz/seeds-link; \
	    [ $$t = fuzz_grpc_wire ] && seeds=tests/fuzz/seeds-grpc-wire; \
	    [ $$t = fuzz_raw ] && seeds=tests/fuzz/seeds-raw; \
	    [ $$t = fuzz_http ] && seeds=tests/fuzz/seeds-http; \
	    [ $$t = fuzz_npy ] && seeds=build/fuzz/seeds-npy; \
	    quiet=; [ $$t = fuzz_wav ] && quiet=-close_fd_mask=2; \
	    echo "== $$t ($(if $(FUZZ_EXTRA),$(FUZZ_EXTRA),$(FUZZ_SECONDS) s))"; \
	    build/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -seed=$(FUZZ_SEED) -rss_limit_mb=4096 \
	        -timeout=30 -max_len=65536 -print_final_stats=1 -artifact_prefix=build/fuzz/ \
	        $$quiet $(FUZZ_EXTRA) build/fuzz/corpus-$$t $$seeds 2>&1 | \
	        grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|ERROR)|DONE +cov"; \
	    test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done

C_SOURCES = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)

check-format:
	@clang-format --dry-run --Werror $(C_SOURCES) && echo "format: ok"

format:
	clang-format -i $(C_SOURCES)

clean:
	rm -rf build
