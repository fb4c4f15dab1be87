# Shared compiler settings, included by each folder's Makefile.
# COMMON_MK: this file, a prerequisite of every object built with what it
# sets (a changed flag or soname rebuilds them).
COMMON_MK := $(abspath $(lastword $(MAKEFILE_LIST)))
# build/ beside mk/, from any folder's Makefile (tools/ddp-check is two down)
ifeq ($(origin BUILD),undefined)
BUILD := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)/build
endif
CC ?= cc
CFLAGS ?= -O2 -g
# -Wno-format-truncation is gcc's (every snprintf into a fixed buffer is
# checked for its return instead); clang does not know it and says so
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter \
	$(shell $(CC) -Werror -Wno-format-truncation -x c -c -o /dev/null /dev/null 2>/dev/null && echo -Wno-format-truncation)
# WERROR=1: every warning an error (C, C++ and nvcc's host compiler), as the
# build of each Slurm release in make check runs (tests/cluster/release.sh)
WERROR ?=
WERROR_FLAG := $(if $(WERROR),-Werror)
ALL_CFLAGS := -std=gnu11 $(WARN) -fPIC -D_GNU_SOURCE $(CFLAGS) $(WERROR_FLAG)
ifneq ($(SANITIZER),)
ALL_CFLAGS += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_LDFLAGS := -fsanitize=$(SANITIZER)
endif
SLURM_CFLAGS := $(shell pkg-config --cflags slurm 2>/dev/null)
SLURM_LIBS := $(shell pkg-config --libs slurm 2>/dev/null || echo -lslurm)
# What a program linking libddpenv needs besides it: nettle and libyaml it
# opens at their first use (libddpenv/src/libs.c), by
# the sonames of those this compiler links (DDPENV_SONAMES, expanded where
# used).
DDPENV_DEPLIBS := -lhwloc
soname_of = $(shell objdump -p "$$($(CC) -print-file-name=lib$(1).so)" 2>/dev/null | sed -n 's/^ *SONAME *//p')
DDPENV_SONAMES = -DDDPENV_NETTLE_SONAME=\"$(call soname_of,nettle)\" -DDDPENV_YAML_SONAME=\"$(call soname_of,yaml)\"
DDPENV_LIBS := $(DDPENV_DEPLIBS) $(SLURM_LIBS)
# Install locations (the top-level Makefile sets them for every folder).
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
MANDIR ?= $(PREFIX)/share/man
