#!/usr/bin/env bats
# Debian's PyTorch is the real client of the contract: an unmodified env://
# script trains across 3 nodes under srun --ddp=gloo, without torchrun.
# bats file_tags=slurm,pytorch

load helpers
# Bats arms a test's timer before its body runs: the bound is set here, for
# every test of the file. 3 nodes x 2 PyTorch DDP processes on the 2 cores take minutes.
BATS_TEST_TIMEOUT=300

cluster_file 3

# the jobs are the unprivileged user's
setup() {
	as_user
}

teardown() {
	dump_logs_on_failure
}

@test "Debian's PyTorch of this release: 1.13 on Debian 12, 2.6 on 13 (env:// without libuv)" {
	run /usr/bin/python3 -c 'import torch; print(torch.__version__)'
	assert_success
	echo "# PyTorch $output, Debian $(cat /etc/debian_version)" >&3
	case $(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release) in
	bookworm) assert_output --regexp '^1\.13\.' ;;
	trixie) assert_output --regexp '^2\.6\.' ;;
	*) assert_output --regexp '^2\.' ;;
	esac
}

@test "3 nodes x 2 tasks of PyTorch DDP (gloo) end with identical parameters" {
	run --separate-stderr crun srun -N3 --ntasks-per-node=2 --ddp=gloo \
		/usr/bin/python3 "$REPO/contrib/pytorch/train_ddp.py" \
		--max-steps 12 --batch-size 32 --train-limit 2400 --test-limit 600
	if [ "$status" -ne 0 ]; then echo "$stderr"; fi
	assert_success
	assert_line --partial "# world 6, backend gloo, device cpu, master $(node_ip 1):"
	params=$(printf '%s\n' "$output" | grep '^params rank ')
	[ "$(echo "$params" | wc -l)" -eq 6 ]
	assert_equal "$(echo "$params" | awk '{print $3}' | sort -n | tr '\n' ' ')" "0 1 2 3 4 5 "
	# one digest: every rank holds the same parameters
	assert_equal "$(echo "$params" | awk '{print $4}' | sort -u | wc -l)" "1"
	assert_line --regexp '^test_accuracy 0\.[0-9]+ images_per_sec [0-9]+ world_size 6$'
}
