# The two commands a newcomer needs (see README.md):
#   make example   build and run examples/hello.c (on the GPU if a driver is found, else on softcuda)
#   make test      build and run the whole test suite (CTest; softcuda unless TEST_DRIVER=system)
BUILD ?= build
JOBS ?= 2
TEST_DRIVER ?= softcuda
EXAMPLE ?= hello

.PHONY: example test configure clean header

# gpuhal.h is generated from src/: every target that builds regenerates it first (a no-op
# when it is current), so an edit in src/ is what the build sees.
configure: header
	cmake -S tests -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUHAL_TEST_DRIVER=$(TEST_DRIVER)

example: configure
	cmake --build $(BUILD) -j $(JOBS) --target example_$(EXAMPLE) softcuda
	sh tools/run_example.sh $(BUILD) $(EXAMPLE)

test: configure
	cmake --build $(BUILD) -j $(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

header:
	python3 tools/amalgamate.py

clean:
	rm -rf $(BUILD)
