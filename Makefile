# The two commands of README.md, and the steps they are made of.
#
#   make serve   set up, build, and run `infd serve` on the default repository
#   make test    set up, build, and run every test (what .ci/run runs)
#
# Builds use the CMake presets in CMakePresets.json (build/<preset>/).

PRESET ?= release
PYTHON := /usr/bin/python3
BUILD_DIR = build/$(PRESET)
INFD = $(BUILD_DIR)/infd
# Exit status of an infd command that is not built yet (src/cli/main.c).
NOT_BUILT := 3

.PHONY: all setup build serve test unit e2e asan-unit check-format format clean

all: build

setup:
	@bash scripts/setup.sh

build:
	@test -f $(BUILD_DIR)/build.ninja || cmake --preset $(PRESET)
	cmake --build --preset $(PRESET)

serve: setup build
	@$(INFD) serve --model-repository models; rc=$$?; \
	if [ $$rc -eq $(NOT_BUILT) ]; then \
	    echo "make serve: the server is not built yet (issue #4); here is the build instead:"; \
	    $(INFD) --version; \
	else \
	    exit $$rc; \
	fi

test: setup
	@echo "== format check"
	@$(MAKE) --no-print-directory check-format
	@echo "== build (release) and unit tests"
	@$(MAKE) --no-print-directory unit PRESET=release
	@echo "== end-to-end tests"
	@$(MAKE) --no-print-directory e2e PRESET=release
	@echo "== unit tests under ASan+UBSan"
	@$(MAKE) --no-print-directory unit PRESET=asan
	@echo "== all tests passed"

unit: build
	ctest --preset $(PRESET)

# pytest exits 5 when it collects no test: that is a failure here too.
e2e: build
	INFD_BIN=$(abspath $(INFD)) $(PYTHON) -m pytest -rs tests/e2e

C_SOURCES = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)

check-format:
	@clang-format --dry-run --Werror $(C_SOURCES) && echo "format: ok"

format:
	clang-format -i $(C_SOURCES)

clean:
	rm -rf build
