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
	export DDP_CHECK_SYSFS="$T/sys" DDP_CHECK_NVIDIA_GPUS="$T/nvidia"
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
