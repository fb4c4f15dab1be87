#!/usr/bin/env bats
# ddp-check --node: one node alone, as Slurm's HealthCheckProgram or a prolog
# runs it (no srun, no peers), on crafted sysfs trees and NVIDIA driver lists;
# --drain through a stand-in scontrol that records what it was asked.  No
# cluster: ddp_check.bats runs it under a real slurmd.

load helpers

setup() {
	CHECK="$REPO/build/bin/ddp-check"
	T="$BATS_TEST_TMPDIR"
	export SLURMD_NODENAME=gpu07
	export DDP_CHECK_SYSFS="$T/sys" DDP_CHECK_NVIDIA_GPUS="$T/nvidia" DDP_CHECK_KMSG="$T/kmsg"
	: >"$T/kmsg"
	fake_nvidia "$T/nvidia" 0000:1b:00.0 0000:43:00.0
	fake_pci "$T/sys" 0000:1b:00.0 "32.0 GT/s PCIe" 16 "32.0 GT/s PCIe" 16
	fake_pci "$T/sys" 0000:43:00.0 "32.0 GT/s PCIe" 16 "32.0 GT/s PCIe" 16
	fake_sysfs "$T/sys" "4: ACTIVE" 16 "400 Gb/sec (4X NDR)"
	# scontrol as Slurm's would be asked: its arguments kept, its status $SCONTROL_RC
	mkdir -p "$T/bin"
	printf '#!/bin/sh\nprintf "%%s\\n" "$@" >"%s/scontrol.args"\nexit "${SCONTROL_RC:-0}"\n' "$T" >"$T/bin/scontrol"
	chmod +x "$T/bin/scontrol"
	export PATH="$T/bin:$PATH"
}

@test "a healthy node: both GPUs' and the HCA's links at full width, its port active; exit 0, nothing drained" {
	run "$CHECK" --node --drain
	echo "$output"
	assert_success
	assert_line --regexp "^OK +hw.pcie +3 PCIe links of the step's GPUs and NICs at full width$"
	assert_line --regexp "^OK +net.fabric +1 RDMA port active on 1 node, at 400 Gb/sec \(4X NDR\)$"
	assert_line "ddp-check --node gpu07: healthy"
	[ ! -e "$T/scontrol.args" ]
}

@test "a GPU at x8: FAIL naming it, exit 1; drained only with --drain, the check as the reason" {
	fake_pci "$T/sys" 0000:43:00.0 "32.0 GT/s PCIe" 8 "32.0 GT/s PCIe" 16
	run "$CHECK" --node
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +hw.pcie +gpu07: GPU 0000:43:00.0 at x8 of x16 \(32.0 GT/s PCIe of 32.0 GT/s PCIe\): a degraded link"
	assert_line "ddp-check --node gpu07: FAILED"
	[ ! -e "$T/scontrol.args" ]
	run "$CHECK" --node --drain
	echo "$output"
	assert_failure 1
	assert_line --regexp "^ddp-check: gpu07 drained: ddp-check hw.pcie: gpu07: GPU 0000:43:00.0 at x8 of x16"
	run cat "$T/scontrol.args"
	echo "$output"
	assert_line --index 0 update
	assert_line --index 1 NodeName=gpu07
	assert_line --index 2 State=DRAIN
	assert_line --index 3 --regexp "^Reason=ddp-check hw.pcie: gpu07: GPU 0000:43:00.0 at x8 of x16"
}

@test "a port down: net.fabric fails; an scontrol that fails is said, the node's status still 1" {
	echo "1: DOWN" >"$T/sys/class/infiniband/mlx5_0/ports/1/state"
	run env SCONTROL_RC=1 "$CHECK" --node --drain
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +net.fabric +gpu07: mlx5_0 port 1 is DOWN$"
	assert_line --regexp "^ddp-check: --drain: scontrol update NodeName=gpu07 State=DRAIN failed \(status 1\)$"
	refute_line --partial "drained:"
}

# NVML through the project's stand-in (tests/tools/fake_nvml.c), answering
# from FAKE_NVML's file: a line per GPU, its counters as key=value.
nvml() {
	printf 'driver 550.54.15\ncuda 12040\n' >"$T/nvml"
	printf '%s\n' "$@" >>"$T/nvml"
	export LD_LIBRARY_PATH="$REPO/build/tests/tools/nvml" FAKE_NVML="$T/nvml"
}

# ddp-check --node with an NVML that never answers: a failure, within its
# 10 s bound (the lines it says: the caller's)
hung_nvml_fails() {
	nvml hang
	SECONDS=0
	run "$CHECK" --node
	echo "$output"
	assert_failure 1
	[ "$SECONDS" -lt 25 ]
}

@test "gpu.health without NVML on the node: skipped, saying why; the other checks as ever" {
	run "$CHECK" --node
	assert_success
	assert_line --regexp "^SKIP +gpu.health +NVML answered for none of the 2 tasks' GPUs: gpu07 GPU 0000:1b:00.0 \(task 0\): NVML not loaded: libnvidia-ml.so.1: cannot open shared object file"
}

@test "gpu.health through NVML: healthy GPUs OK with the driver; uncorrected ECC errors and an Xid 79 in the kernel's log FAIL, drained with the check as the reason" {
	nvml "gpu 0000:1b:00.0" "gpu 0000:43:00.0"
	run "$CHECK" --node --drain
	echo "$output"
	assert_success
	assert_line --regexp "^OK +gpu.health +2 GPUs read by NVML \(driver 550.54.15, CUDA 12040\): no uncorrected ECC error, no pending retirement or row remap, no clock held down, persistence on, no Xid since boot$"
	nvml "gpu 0000:1b:00.0" "gpu 0000:43:00.0 ecc_vol=2 ecc_agg=5"
	printf '4,812,3305001,-;NVRM: Xid (PCI:0000:43:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n' >"$T/kmsg"
	run "$CHECK" --node --drain
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +gpu.health +gpu07 GPU 0000:43:00.0 \(task 1\): 2 uncorrected ECC errors since the driver loaded; gpu07 GPU 0000:43:00.0 \(task 1\): Xid 79 in the kernel's log since boot \(its Xids: 79\)$"
	refute_line --partial "0000:1b:00.0 (task 0)"
	run cat "$T/scontrol.args"
	assert_line --index 3 --regexp "^Reason=ddp-check gpu.health: gpu07 GPU 0000:43:00.0 \(task 1\): 2 uncorrected ECC errors"
}

@test "gpu.health warnings: a row remap waiting for a reset, clocks held down by heat, persistence off, a lower power limit, another Xid; exit 0" {
	nvml "gpu 0000:1b:00.0 remap_pending=1 reasons=0x40 sm=1100 persistence=0" "gpu 0000:43:00.0 limit=400000"
	printf '6,10,20,-;NVRM: Xid (PCI:0000:1b:00): 13, pid=7, Graphics SM Warp Exception\n' >"$T/kmsg"
	run "$CHECK" --node
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +gpu.health +gpu07 GPU 0000:1b:00.0 \(task 0\): Xid 13 in the kernel's log since boot; gpu07 GPU 0000:1b:00.0 \(task 0\): a row remapping waits for a GPU reset; gpu07 GPU 0000:1b:00.0 \(task 0\): clocks held down \(HW thermal slowdown\), SM at 1100 of 1980 MHz; gpu07 GPU 0000:1b:00.0 \(task 0\): persistence mode off: .*; gpu07 GPU 0000:43:00.0 \(task 1\): power limit 400 W where the node's others have 700 W$"
}

@test "gpu.health: a GPU NVML does not know is a warning; NVML that hangs is a failure within its 10 s bound" {
	nvml "gpu 0000:1b:00.0"
	run "$CHECK" --node
	assert_success
	assert_line --regexp "^WARN +gpu.health +gpu07 GPU 0000:43:00.0 \(task 1\): NVML has no GPU at 0000:43:00.0: Not Found$"
	hung_nvml_fails
	assert_line --regexp "^FAIL +gpu.health +gpu07 GPU 0000:1b:00.0 \(task 0\): NVML did not answer for 0000:1b:00.0 within 10 s \(a hung driver or GPU\?\); "
}

@test "no driver's list under /proc (a container): the GPUs NVML lists, their links and health checked; neither: no GPUs, saying where it looked" {
	rm -rf "$T/nvidia"
	# NVML writes 00000000:1B:00.0; the checks name it as the driver's list would
	nvml "gpu 0000:1b:00.0" "gpu 0000:43:00.0 ecc_vol=1"
	run "$CHECK" --node
	echo "$output"
	assert_failure 1
	assert_line --regexp "^OK +hw.pcie +3 PCIe links of the step's GPUs and NICs at full width$"
	assert_line --regexp "^FAIL +gpu.health +gpu07 GPU 0000:43:00.0 \(task 1\): 1 uncorrected ECC errors since the driver loaded$"
	# a degraded link of a GPU only NVML named
	fake_pci "$T/sys" 0000:1b:00.0 "32.0 GT/s PCIe" 8 "32.0 GT/s PCIe" 16
	nvml "gpu 0000:1b:00.0" "gpu 0000:43:00.0"
	run "$CHECK" --node
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +hw.pcie +.*0000:1b:00.0.* x8 "
	assert_line --regexp "^OK +gpu.health +2 GPUs read by NVML "
	# no NVML either: nothing to check, and where it looked said
	unset LD_LIBRARY_PATH FAKE_NVML
	fake_pci "$T/sys" 0000:1b:00.0 "32.0 GT/s PCIe" 16 "32.0 GT/s PCIe" 16
	run "$CHECK" --node
	echo "$output"
	assert_success
	assert_line --regexp "^OK +gpu.health +no GPUs on this node \(the driver's list $T/nvidia: none there; NVML: NVML not loaded: libnvidia-ml.so.1: cannot open shared object file"
	assert_line --regexp "^OK +gpu.p2p +no GPUs on this node$"
	# an NVML that hangs listing them: a driver, and a bad one
	hung_nvml_fails
	assert_line --regexp "^FAIL +gpu.health +no GPUs on this node \(the driver's list $T/nvidia: none there; NVML: NVML did not answer for its GPU list within 10 s \(a hung driver or GPU\?\)\)$"
}

@test "a driver's list with GPUs: NVML's list is not asked for (a GPU NVML alone knows is no GPU of the node's)" {
	nvml "gpu 0000:1b:00.0" "gpu 0000:43:00.0" "gpu 0000:c3:00.0"
	run "$CHECK" --node
	echo "$output"
	assert_success
	assert_line --regexp "^OK +gpu.health +2 GPUs read by NVML "
	refute_output --partial "0000:c3:00.0"
}

@test "gpu.p2p through NVML: two GPUs with 18 NVLinks each OK; one with 16 active fails, naming it; peer reads the topology forbids and NVLink errors warn" {
	nvml "gpu 0000:1b:00.0 nvlinks=18" "gpu 0000:43:00.0 nvlinks=18"
	run "$CHECK" --node
	echo "$output"
	assert_success
	assert_line --regexp "^OK +gpu.p2p +2 GPUs: peer reads between every two of a node's \(2 pairs both ways\), 18 NVLinks active on each, no NVLink error$"
	nvml "gpu 0000:1b:00.0 nvlinks=18" "gpu 0000:43:00.0 nvlinks=16"
	run "$CHECK" --node --drain
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +gpu.p2p +gpu07 GPU 0000:43:00.0: 16 of its NVLinks active where the node's others have 18$"
	run cat "$T/scontrol.args"
	assert_line --index 3 "Reason=ddp-check gpu.p2p: gpu07 GPU 0000:43:00.0: 16 of its NVLinks active where the node's others have 18"
	nvml "gpu 0000:1b:00.0 nvlinks=4 p2p=3" "gpu 0000:43:00.0 nvlinks=4 nvl_crc=9"
	run "$CHECK" --node
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +gpu.p2p +gpu07: GPU 0000:1b:00.0 cannot read GPU 0000:43:00.0's memory directly \(not supported by the I/O hub topology\): NCCL goes through host memory between them; gpu07 GPU 0000:43:00.0: NVLink errors since the driver loaded: 0 recovery, 36 CRC or ECC$"
}

@test "--drain without --node is a usage error" {
	run "$CHECK" --drain
	assert_failure 2
	assert_output --partial "--drain: only with --node"
}

@test "--node --json: one object, each check with its level and message, the drain's reason, the exit code" {
	fake_pci "$T/sys" 0000:1b:00.0 "32.0 GT/s PCIe" 4 "32.0 GT/s PCIe" 16
	run --separate-stderr "$CHECK" --node --drain --json
	assert_failure 1
	run /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1])
c = {x["name"]: x for x in r["checks"]}
assert r["node"] == "gpu07" and r["exit_code"] == 1, r
assert c["hw.pcie"]["level"] == "FAIL" and "GPU 0000:1b:00.0 at x4 of x16" in c["hw.pcie"]["message"], c
assert c["net.fabric"]["level"] == "OK", c
assert r["drained"].startswith("ddp-check hw.pcie: gpu07: GPU 0000:1b:00.0 at x4 of x16"), r["drained"]
print("json ok")' "$output"
	echo "$output"
	assert_success
	assert_output "json ok"
}
