# Thin wrapper over CMake for the README's commands.
#   make demo   install missing packages, build, run the demo on the default device
#   make test   install missing packages, build, run every test
#   make build  configure and build only
BUILD_DIR ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_ARGS ?=

.PHONY: all deps configure build test demo bench clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: build
	@$(BUILD_DIR)/bufkern demo $(DEMO_ARGS)

bench: build
	@$(BUILD_DIR)/bufkern bench

clean:
	rm -rf $(BUILD_DIR)
