// cuemu's runtime inside: what its emulated libraries (streams.cc, dnn.cc,
// blas.cc, nccl.cc) share with the kernel scheduler (cuemu.cc).  Not for
// the code under test, which sees only the CUDA, cuDNN, cuBLAS and NCCL
// headers.
#ifndef CUEMU_RT_H
#define CUEMU_RT_H

#include <stddef.h>
#include <string.h>

#include <functional>

#include <cuda_runtime_api.h>

namespace cuemu {

// Work on stream s (0: the legacy stream): run now, queued behind the
// stream's earlier work (CUEMU_STREAMS=lazy), or, while s is being
// captured, a node of the graph.  what names it in messages; ms is what it
// adds to the emulated device's clock, which event times read (a model,
// so that code timing its choices chooses the same way each run).
void enqueue(cudaStream_t s, const char *what, std::function<void()> fn, double ms);

// The clock model's costs: a kernel's threads at 1 ns each, a library
// call's multiply-adds at 1 TFLOP/s, a copy's bytes at 100 GB/s, and
// 2 microseconds a launch.
constexpr double kLaunchMs = 2e-3;
inline double threads_ms(double threads) { return kLaunchMs + threads * 1e-6; }
inline double macs_ms(double macs) { return kLaunchMs + 2 * macs * 1e-9; }
inline double bytes_ms(double bytes) { return kLaunchMs + bytes * 1e-8; }

// A graph's replay (streams.cc) runs a node its programmatic edges reach
// between set_programmatic(true) and (false): its kernel's threads must
// each call pdl_enter (cuemu.cc checks it).
void set_programmatic(bool on);

// y[i] += a * x[i]: each output's terms in the order its caller's loops
// around give them (the same bits as a strided or dot-product loop), on
// unaliased rows g++ vectorizes (at -O2 its cost model leaves loops of
// unknown length alone: most of the emulated cuDNN's and cuBLAS's time
// was such rows, one element at a time).  cuemu.cc.
void axpy(float *__restrict y, float a, const float *__restrict x, int n);

// Is name in the comma-separated list of environment variable var?
bool named_in(const char *var, const char *name);

// What the clock charges for work of modelled time ms named in
// CUEMU_SLOW_KERNELS: 100 times its time past the launch's.
inline double slowed_ms(double ms) { return kLaunchMs + (ms - kLaunchMs) * 100; }

// A graph of this many nodes or more is a training step's, for
// CUEMU_STEP_SLOW_KERNELS (streams.cc): the step's have 14 or more, those
// that time one call (cnn_train's time_call) a few.
constexpr size_t kStepNodes = 12;

// The devices a process sees: CUEMU_DEVICES (1 to 16, default 1), on PCI
// buses CUEMU_PCI_BUS (hex, default 0) and up; the calling thread's
// current one (cudaSetDevice).  Their memory is one pool: a pointer says
// nothing of its device.  streams.cc.
int devices();
int current_device();

// Is [p, p+n) inside one "device" allocation (cudaMalloc)?
bool inside(const void *p, size_t n);
// Inside one cudaMallocHost allocation?
bool inside_host(const void *p, size_t n);

// A failure of the work running now (kernel, library call): printed, and
// kept for cudaGetLastError as a GPU keeps a sticky error.
void fail(cudaError_t e, const char *what, const char *msg);

// A call that the stream being captured on this thread forbids
// (cudaMalloc, a synchronizing call, the legacy stream): the capture is
// invalidated, as CUDA does, and its error returned; cudaSuccess if no
// capture is under way.
cudaError_t capture_forbids(const char *call);

// The stream whose operation is running now, held from that operation on
// until release(key): what follows it there counts as never done
// (cudaEventQuery, cudaStreamQuery: cudaErrorNotReady), and a call that
// would block on it aborts the program, saying so (a GPU would block
// forever).  An NCCL kernel spinning on a peer that died without a word
// (nccl.cc: CUEMU_NCCL_SILENT) until ncclCommAbort.
void hold_running(const void *key);
void release(const void *key);

// Everything queued on every stream done (cudaDeviceSynchronize, cudaFree).
void drain_all();
// Everything queued on the legacy stream done, and (as the legacy stream
// waits for them) the blocking streams' work.
void drain_legacy();

// TF32 where a library may use it: NVIDIA_TF32_OVERRIDE=0 forbids it, as
// it does in cuDNN and cuBLAS.
bool tf32_allowed();
// cvt.rna.tf32.f32, the rounding a tensor core applies to fp32 operands:
// 10 mantissa bits, to nearest, ties away from zero.
inline float to_tf32(float v)
{
	unsigned u;
	memcpy(&u, &v, 4);
	if ((u & 0x7f800000u) != 0x7f800000u)
		u = (u + 0x1000u) & ~0x1fffu;
	memcpy(&v, &u, 4);
	return v;
}

} // namespace cuemu

#endif
