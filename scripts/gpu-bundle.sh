#!/bin/bash
# Pack what the GPU runs need into .gpu/ (git-ignored) for a lent GPU
# machine that has CUDA, cuDNN, NCCL and PyTorch but no Debian packages and
# no network: the programs and tests built here, every non-CUDA shared
# library they load (oneDNN, gloo, hwloc, libyaml, libslurm, ... and this
# glibc with its loader, since that machine's may be older), and
# Fashion-MNIST.  Then, there:
#
#   .gpu/run.sh check        test_cuda_kernels, test_gpu_step, ddp-check (NCCL, world 1)
#   .gpu/run.sh train        cnn_train --device cuda, 2 epochs
#   .gpu/run.sh bench        bench/gpu_vs_torch.sh and bench/h2d_bind.sh
#   .gpu/run.sh CMD ARGS     any program of .gpu/bin with the bundle's libraries
#
# Build first (make; make -C bench); the bundle stays under the device
# tool's 64 MiB carry limit by xz-compressing the libraries.
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/.gpu
data=${DDP_DATA_DIR:-/usr/share/datasets/fashion-mnist}
cd "$repo"
progs=(build/bin/cnn_train build/bin/ddp-check build/tests/test_cuda_kernels build/tests/test_gpu_step
       build/bench/h2d_bind)
for p in "${progs[@]}" build/lib/cnn_train_cuda.so; do
	[ -e "$p" ] || { echo "gpu-bundle: $p is not built (make; make -C bench)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data" "$out/stage"
cp "${progs[@]}" "$out/bin/"
cp build/lib/cnn_train_cuda.so "$out/bin/"
# every library the programs and the module load, except CUDA's own (the
# GPU machine's match its driver) and the kernel's vdso
{
	for p in "${progs[@]}" build/lib/cnn_train_cuda.so; do ldd "$p"; done
} | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u |
	grep -v -e '^/usr/local/cuda' -e 'libcuda\.so' -e 'libnvidia' |
	while read -r lib; do cp -L "$lib" "$out/stage/"; done
tar -C "$out/stage" -cJf "$out/lib.tar.xz" .
rm -rf "${out:?}/stage" "${out:?}/lib"
cp "$data"/*-ubyte.gz "$out/data/"
cat >"$out/run.sh" <<'EOF'
#!/bin/bash
# See scripts/gpu-bundle.sh.  Runs from the repository root on the GPU machine.
set -eu
G=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$G/lib" ] || { mkdir -p "$G/lib" && tar -C "$G/lib" -xJf "$G/lib.tar.xz"; }
CUDA_LIBS=/usr/local/cuda/lib64:$(ls -d /usr/local/cuda/targets/*/lib 2>/dev/null | tr '\n' ':')
LIBPATH="$G/lib:$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CNN_TRAIN_CUDA_MODULE="$G/bin/cnn_train_cuda.so" DDP_DATA_DIR="$G/data"
# This glibc's loader runs the programs (the machine's may be older).
run() { local p=$1; shift; "$G/lib/ld-linux-x86-64.so.2" --library-path "$LIBPATH" "$G/bin/$p" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
world1() { env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NODE_RANK=0 MASTER_ADDR=127.0.0.1 \
	MASTER_PORT="$(free_port)" NCCL_SOCKET_IFNAME=lo DDP_BACKEND=nccl "$@"; }
case "${1:-check}" in
check)
	nvidia-smi -L
	(cd "$G/.." && run test_cuda_kernels)
	(cd "$G/.." && run test_gpu_step)
	world1 run ddp-check -e 256M
	;;
train)
	shift || true
	world1 run cnn_train --device cuda --epochs 2 --progress lines --log-every 200 "$@"
	;;
bench)
	shift || true
	printf '#!/bin/bash\nexec "%s/lib/ld-linux-x86-64.so.2" --library-path "%s" "%s/bin/cnn_train" "$@"\n' \
		"$G" "$LIBPATH" "$G" >"$G/cnn_train.sh"
	chmod +x "$G/cnn_train.sh"
	CNN_TRAIN="$G/cnn_train.sh" bench/gpu_vs_torch.sh "$@"
	;;
*)
	run "$@"
	;;
esac
EOF
chmod +x "$out/run.sh"
du -sh "$out"
