# slurm-ddp: top-level Makefile.  Each folder builds into build/.
#
#   make            build libddpenv, the SPANK plugin, ddp-env, ddp-check and cnn_train
#   make demo       install missing Debian packages, build, start a local
#                   multi-node Slurm and train across it with srun --ddp
#   make check      the same set-up, then every test: on this machine's Slurm,
#                   then on every other supported release (DDP_RELEASES)
#   make check-release SLURM_RELEASE=24.11   one release's suite: its -Werror build,
#                   unit tests and the Bats files that touch Slurm, in a Debian
#                   root with that release (tests/cluster/release.sh); 25.05 and
#                   25.11 are built there from the SchedMD tarball DDP_SLURM_TARBALLS names
#   make bench      the benchmarks' programs (bench/*.sh run them)
#   make fuzz       the fuzz targets, 10 minutes each (make check runs them briefly)
#   make analyze    clang's static analyzer over the C and C++ code (not the .cu
#                   kernels), in build/analyze; fails on a finding
#   make deb        Debian packages (dpkg-buildpackage, lintian) in build/deb/
#   make install    PREFIX, DESTDIR, LIBDIR, MANDIR, SLURM_PLUGIN_DIR, SYSCONFDIR honoured
#   SANITIZER=address,undefined make check   unit tests under sanitizers

BUILD ?= $(CURDIR)/build
CC ?= cc
CFLAGS ?= -O2 -g
SANITIZER ?=
PREFIX ?= /usr/local
DESTDIR ?=
# Debian's Slurm plugin dir: /usr/lib/<multiarch>/slurm-wlm
SLURM_PLUGIN_DIR ?= /usr/lib/$(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/slurm-wlm
SYSCONFDIR ?= /etc/slurm
# LIBDIR ($(PREFIX)/lib) and MANDIR ($(PREFIX)/share/man): mk/common.mk, from
# each folder's PREFIX; not exported, so a later PREFIX=... is followed.
export BUILD CC CFLAGS SANITIZER PREFIX DESTDIR SLURM_PLUGIN_DIR SYSCONFDIR

.PHONY: all libddpenv comm spank trainer tools bench fuzz analyze deps check check-release unit bats demo deb install uninstall clean cluster-stop

all: libddpenv comm spank trainer tools

libddpenv:
	$(MAKE) -C libddpenv

spank: libddpenv
	$(MAKE) -C spank

comm: libddpenv
	$(MAKE) -C comm

trainer: libddpenv comm
	$(MAKE) -C trainer

tools: libddpenv comm
	$(MAKE) -C tools/ddp-env
	$(MAKE) -C tools/ddp-check

bench: all
	$(MAKE) -C bench

fuzz: deps
	$(MAKE) -C tests/fuzz run TIME=$${FUZZ_TIME:-600}

deps:
	scripts/deps.sh

# Its own build tree: the build's every compile goes to the analyzer
# (tests/tools/analyze-cc: clang --analyze with the file's own flags, no
# code generated), the GPU module's host code included (against the CUDA
# headers, when they are here), the kernels not (nvcc).  A finding is
# printed and its HTML report written to build/analyze/report.
ANALYZE := $(BUILD)/analyze
ANALYZE_CC := ANALYZE_REPORTS=$(ANALYZE)/report ANALYZE_REAL_CC=$(CC) $(MAKE) -s -j$(NPROC) BUILD=$(ANALYZE) \
	CC=$(CURDIR)/tests/tools/analyze-cc CXX=$(CURDIR)/tests/tools/analyze-cc
analyze:
	rm -rf $(ANALYZE)
	mkdir -p $(ANALYZE)/report
	$(ANALYZE_CC) HAVE_CUDA= all bench
	$(if $(wildcard /usr/local/cuda/include/cuda_runtime_api.h),$(ANALYZE_CC) -C trainer gpu-host)
	@n=$$(find $(ANALYZE)/report -name 'report-*.html' | wc -l); \
	files=$$(sort -u $(ANALYZE)/report.files | wc -l); \
	if [ "$$n" -gt 0 ]; then echo "analyze: $$n findings in $$files files (above; reports in $(ANALYZE)/report)"; exit 1; fi; \
	if [ "$$files" -lt 40 ]; then echo "analyze: only $$files files analyzed (expected every C and C++ file of the build)"; exit 1; fi; \
	echo "analyze: $$files files, no findings"

unit: libddpenv
	$(MAKE) -C tests unit

# check and demo: the packages first, then the build on every core (a
# plain `make check` is what CI runs), then the tests or the demo
NPROC := $(shell nproc 2>/dev/null || echo 1)

check: deps
	$(MAKE) -j$(NPROC) all bench
	tests/run.sh

SLURM_RELEASE ?=
check-release: deps
	@[ -n "$(SLURM_RELEASE)" ] || { echo "check-release: set SLURM_RELEASE, one of: 22.05 24.11 26.05, or 25.05 25.11 with DDP_SLURM_TARBALLS naming SchedMD's tarball"; exit 2; }
	tests/cluster/release.sh check $(SLURM_RELEASE)

demo: deps
	$(MAKE) -j$(NPROC) all
	scripts/demo.sh

deb: deps
	scripts/deb.sh

install: all
	$(MAKE) -C libddpenv install
	$(MAKE) -C spank install
	$(MAKE) -C trainer install
	$(MAKE) -C tools/ddp-env install
	$(MAKE) -C tools/ddp-check install

uninstall:
	$(MAKE) -C libddpenv uninstall
	$(MAKE) -C spank uninstall
	$(MAKE) -C trainer uninstall
	$(MAKE) -C tools/ddp-env uninstall
	$(MAKE) -C tools/ddp-check uninstall

cluster-stop:
	tests/cluster/cluster.sh stop

clean:
	rm -rf $(BUILD)/obj $(BUILD)/lib $(BUILD)/bin $(BUILD)/tests $(BUILD)/tests-san $(BUILD)/include $(BUILD)/bench $(BUILD)/fuzz $(BUILD)/deb $(ANALYZE)
