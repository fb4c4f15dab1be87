/* ddp-check's NCCL backend, loaded at run time (dlopen of libcudart and
 * libnccl) so that one ddp-check binary runs on CPU-only clusters too and
 * only `--ddp=nccl` steps need the GPU libraries.  Built against the CUDA
 * and NCCL headers when they are present (HAVE_NCCL); without them every
 * call says so.
 *
 * Every wait is bounded: the communicator is created non-blocking and
 * polled with ncclCommGetAsyncError until a deadline, then aborted, so a
 * missing peer ends in an error instead of a hang. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "coll.h"
#include "self.h"

#ifdef HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

static struct {
	void *cudart, *nccl;
	cudaError_t (*GetDeviceCount)(int *);
	cudaError_t (*SetDevice)(int);
	cudaError_t (*DeviceGetPCIBusId)(char *, int, int);
	cudaError_t (*DeviceGetByPCIBusId)(int *, const char *);
	cudaError_t (*Malloc)(void **, size_t);
	cudaError_t (*Free)(void *);
	cudaError_t (*MallocHost)(void **, size_t);
	cudaError_t (*FreeHost)(void *);
	cudaError_t (*GetDevice)(int *);
	cudaError_t (*DeviceCanAccessPeer)(int *, int, int);
	cudaError_t (*DeviceEnablePeerAccess)(int, unsigned int);
	cudaError_t (*DeviceDisablePeerAccess)(int);
	cudaError_t (*MemcpyPeer)(void *, int, const void *, int, size_t);
	cudaError_t (*DeviceSynchronize)(void);
	cudaError_t (*Memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
	cudaError_t (*StreamCreate)(cudaStream_t *);
	cudaError_t (*StreamDestroy)(cudaStream_t);
	cudaError_t (*StreamQuery)(cudaStream_t);
	const char *(*GetErrorString)(cudaError_t);
	ncclResult_t (*GetUniqueId)(ncclUniqueId *);
	ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
	ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
	ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
				  cudaStream_t);
	ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
	ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
				      cudaStream_t);
	ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
	ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
	ncclResult_t (*GroupStart)(void);
	ncclResult_t (*GroupEnd)(void);
	ncclResult_t (*CommFinalize)(ncclComm_t);
	ncclResult_t (*CommDestroy)(ncclComm_t);
	ncclResult_t (*CommAbort)(ncclComm_t);
	ncclResult_t (*GetVersion)(int *);
	const char *(*GetErrorStringN)(ncclResult_t);
	const char *(*GetLastError)(ncclComm_t);
} dl;

static void *open_first(const char *const *names, char *tried, size_t len)
{
	size_t off = 0;
	for (size_t i = 0; names[i]; i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (h)
			return h;
		off += (size_t)snprintf(tried + off, off < len ? len - off : 0, "%s%s", off ? ", " : "",
					names[i]);
	}
	return NULL;
}

#define SYM(h, field, name)                                                           \
	do {                                                                          \
		*(void **)&dl.field = dlsym(h, name);                                 \
		if (!dl.field) {                                                      \
			snprintf(err, errlen, "%s lacks %s (too old a CUDA or NCCL?)", \
				 h == dl.nccl ? "libnccl" : "libcudart", name);       \
			return -1;                                                    \
		}                                                                     \
	} while (0)

/* libcudart and the runtime calls ddp-check makes; -1 with err saying
 * which library failed and where it looked. */
static int cuda_load(char *err, size_t errlen)
{
	static const char *const cudart[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
					      "libcudart.so.11.0", NULL };
	char tried[256];

	if (dl.GetErrorString)
		return 0;
	if (!dl.cudart && !(dl.cudart = open_first(cudart, tried, sizeof(tried)))) {
		snprintf(err, errlen, "the CUDA runtime: none of %s could be loaded (LD_LIBRARY_PATH=%s)",
			 tried, getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "");
		return -1;
	}
	SYM(dl.cudart, GetDeviceCount, "cudaGetDeviceCount");
	SYM(dl.cudart, SetDevice, "cudaSetDevice");
	SYM(dl.cudart, DeviceGetPCIBusId, "cudaDeviceGetPCIBusId");
	SYM(dl.cudart, DeviceGetByPCIBusId, "cudaDeviceGetByPCIBusId");
	SYM(dl.cudart, Malloc, "cudaMalloc");
	SYM(dl.cudart, Free, "cudaFree");
	SYM(dl.cudart, MallocHost, "cudaMallocHost");
	SYM(dl.cudart, FreeHost, "cudaFreeHost");
	SYM(dl.cudart, GetDevice, "cudaGetDevice");
	SYM(dl.cudart, DeviceCanAccessPeer, "cudaDeviceCanAccessPeer");
	SYM(dl.cudart, DeviceEnablePeerAccess, "cudaDeviceEnablePeerAccess");
	SYM(dl.cudart, DeviceDisablePeerAccess, "cudaDeviceDisablePeerAccess");
	SYM(dl.cudart, MemcpyPeer, "cudaMemcpyPeer");
	SYM(dl.cudart, DeviceSynchronize, "cudaDeviceSynchronize");
	SYM(dl.cudart, Memcpy, "cudaMemcpy");
	SYM(dl.cudart, StreamCreate, "cudaStreamCreate");
	SYM(dl.cudart, StreamDestroy, "cudaStreamDestroy");
	SYM(dl.cudart, StreamQuery, "cudaStreamQuery");
	SYM(dl.cudart, GetErrorString, "cudaGetErrorString");
	return 0;
}

int ck_nccl_load(char *err, size_t errlen)
{
	static const char *const nccl[] = { "libnccl.so.2", "libnccl.so", NULL };
	char tried[256], e[DDPENV_ERRLEN];

	if (dl.nccl)
		return 0;
	if (cuda_load(e, sizeof(e)) < 0) {
		snprintf(err, errlen, "--ddp=nccl: %s", e);
		return -1;
	}
	if (!(dl.nccl = open_first(nccl, tried, sizeof(tried)))) {
		snprintf(err, errlen, "--ddp=nccl needs NCCL: none of %s could be loaded (LD_LIBRARY_PATH=%s)",
			 tried, getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "");
		return -1;
	}
	SYM(dl.nccl, GetUniqueId, "ncclGetUniqueId");
	SYM(dl.nccl, CommInitRankConfig, "ncclCommInitRankConfig");
	SYM(dl.nccl, CommGetAsyncError, "ncclCommGetAsyncError");
	SYM(dl.nccl, AllReduce, "ncclAllReduce");
	SYM(dl.nccl, AllGather, "ncclAllGather");
	SYM(dl.nccl, ReduceScatter, "ncclReduceScatter");
	SYM(dl.nccl, Send, "ncclSend");
	SYM(dl.nccl, Recv, "ncclRecv");
	SYM(dl.nccl, GroupStart, "ncclGroupStart");
	SYM(dl.nccl, GroupEnd, "ncclGroupEnd");
	SYM(dl.nccl, CommFinalize, "ncclCommFinalize");
	SYM(dl.nccl, CommDestroy, "ncclCommDestroy");
	SYM(dl.nccl, CommAbort, "ncclCommAbort");
	SYM(dl.nccl, GetVersion, "ncclGetVersion");
	SYM(dl.nccl, GetErrorStringN, "ncclGetErrorString");
	*(void **)&dl.GetLastError = dlsym(dl.nccl, "ncclGetLastError");
	return 0;
}

int ck_nccl_device(int local_rank, int *dev, int *count, char *busid, size_t len, char *err,
		   size_t errlen)
{
	cudaError_t e = dl.GetDeviceCount(count);
	if (e != cudaSuccess || *count < 1) {
		snprintf(err, errlen, "no CUDA device visible (CUDA_VISIBLE_DEVICES=%s): %s",
			 getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset",
			 e != cudaSuccess ? dl.GetErrorString(e) : "count 0");
		return -1;
	}
	/* The plugin puts each task's own GPU at entry LOCAL_RANK of a list of
	 * all the node's GPUs, or alone (strict, --gpu-bind). */
	*dev = *count == 1 ? 0 : local_rank % *count;
	char b[32];
	if ((e = dl.SetDevice(*dev)) != cudaSuccess || (e = dl.DeviceGetPCIBusId(b, sizeof(b), *dev)) != cudaSuccess) {
		snprintf(err, errlen, "CUDA device %d: %s", *dev, dl.GetErrorString(e));
		return -1;
	}
	/* CUDA says "00000000:1B:00.0"; hwloc and Slurm "0000:1b:00.0". */
	if (ddpenv_busid_norm(b, busid, len) < 0)
		snprintf(busid, len, "%s", b);
	return 0;
}

/* The CUDA device (as CUDA numbers them under CUDA_VISIBLE_DEVICES) at
 * PCI bus id busid ("0000:1b:00.0"). */
static int cuda_device(const char *busid, int *dev, char *err, size_t errlen)
{
	cudaError_t e = dl.DeviceGetByPCIBusId(dev, busid);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "no CUDA device at %s (CUDA_VISIBLE_DEVICES=%s): %s", busid,
			 getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset",
			 dl.GetErrorString(e));
		return -1;
	}
	return 0;
}

int ck_cuda_h2d(const char *busid, size_t bytes, int trials, double *gbps, char *err, size_t errlen)
{
	void *h = NULL, *d = NULL;
	int dev, rv = -1;
	cudaError_t e;
	char le[DDPENV_ERRLEN];

	*gbps = 0;
	if (cuda_load(le, sizeof(le)) < 0) {
		snprintf(err, errlen, "%s", le);
		return -1;
	}
	if (cuda_device(busid, &dev, err, errlen) < 0)
		return -1;
	if ((e = dl.SetDevice(dev)) != cudaSuccess || (e = dl.MallocHost(&h, bytes)) != cudaSuccess ||
	    (e = dl.Malloc(&d, bytes)) != cudaSuccess) {
		snprintf(err, errlen, "CUDA device %d (%s): %zu bytes pinned and on the GPU: %s", dev, busid,
			 bytes, dl.GetErrorString(e));
		goto out;
	}
	memset(h, 1, bytes);   /* (the pages in: the first copy times the copy alone) */
	double best = -1;
	for (int t = 0; t <= trials; t++) {
		double t0 = ck_mono();
		if ((e = dl.Memcpy(d, h, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
			snprintf(err, errlen, "CUDA device %d (%s): cudaMemcpy of %zu bytes to it: %s", dev, busid,
				 bytes, dl.GetErrorString(e));
			goto out;
		}
		double dt = ck_mono() - t0;
		if (t > 0 && (best < 0 || dt < best))   /* (the first a warm-up) */
			best = dt;
	}
	*gbps = best > 0 ? (double)bytes / best / 1e9 : 0;
	rv = 0;
out:
	if (d)
		dl.Free(d);
	if (h)
		dl.FreeHost(h);
	return rv;
}

/* One timed copy from device a to b: the copy, then both devices idle. */
static cudaError_t peer_copy(void *const *buf, int a, int b, size_t bytes, double *secs)
{
	double t0 = ck_mono();
	cudaError_t e;
	if ((e = dl.MemcpyPeer(buf[b], b, buf[a], a, bytes)) != cudaSuccess ||
	    (e = dl.DeviceSynchronize()) != cudaSuccess || (e = dl.SetDevice(b)) != cudaSuccess ||
	    (e = dl.DeviceSynchronize()) != cudaSuccess || (e = dl.SetDevice(a)) != cudaSuccess)
		return e;
	*secs = ck_mono() - t0;
	return cudaSuccess;
}

/* Pair a -> b: peer access where the driver gives it (and taken back
 * after, where this call gave it: NCCL enables its own later), then the
 * best of 3. */
static cudaError_t peer_pair(void *const *buf, int a, int b, size_t bytes, float *gbps)
{
	int can = 0, mine = 0;
	double best = -1, dt;
	cudaError_t e = dl.SetDevice(a);
	if (e == cudaSuccess && dl.DeviceCanAccessPeer(&can, a, b) == cudaSuccess && can) {
		e = dl.DeviceEnablePeerAccess(b, 0);
		mine = e == cudaSuccess;
		if (e == cudaErrorPeerAccessAlreadyEnabled)
			e = cudaSuccess;
	}
	for (int t = 0; e == cudaSuccess && t <= 3; t++)
		if ((e = peer_copy(buf, a, b, bytes, &dt)) == cudaSuccess && t > 0 && (best < 0 || dt < best))
			best = dt;
	if (mine)
		dl.DeviceDisablePeerAccess(b);
	*gbps = best > 0 ? (float)((double)bytes / best / 1e9) : 0;
	return e;
}

int ck_cuda_p2p(size_t bytes, struct ck_p2p *p, char *err, size_t errlen)
{
	void *buf[CK_P2P_MAX] = { 0 };
	int count = 0, cur = 0, rv = -1;
	cudaError_t e;
	char le[DDPENV_ERRLEN], b[32];

	memset(p, 0, sizeof(*p));
	if (cuda_load(le, sizeof(le)) < 0) {
		snprintf(err, errlen, "%s", le);
		return -1;
	}
	if ((e = dl.GetDeviceCount(&count)) != cudaSuccess || (e = dl.GetDevice(&cur)) != cudaSuccess) {
		snprintf(err, errlen, "cudaGetDeviceCount: %s", dl.GetErrorString(e));
		return -1;
	}
	if (count < 2)
		return 0;
	int n = count > CK_P2P_MAX ? CK_P2P_MAX : count;
	for (int d = 0; d < n; d++) {
		if ((e = dl.DeviceGetPCIBusId(b, sizeof(b), d)) != cudaSuccess || (e = dl.SetDevice(d)) != cudaSuccess ||
		    (e = dl.Malloc(&buf[d], bytes)) != cudaSuccess) {
			snprintf(err, errlen, "CUDA device %d: %zu bytes on it: %s", d, bytes, dl.GetErrorString(e));
			goto out;
		}
		if (ddpenv_busid_norm(b, p->bus[d], sizeof(p->bus[d])) < 0)
			snprintf(p->bus[d], sizeof(p->bus[d]), "%.15s", b);
	}
	for (int x = 0; x < n; x++)
		for (int y = 0; y < n; y++)
			if (x != y && (e = peer_pair(buf, x, y, bytes, &p->gbps[x * n + y])) != cudaSuccess) {
				snprintf(err, errlen, "copies from CUDA device %d (%s) to %d (%s): %s", x, p->bus[x], y,
					 p->bus[y], dl.GetErrorString(e));
				goto out;
			}
	p->n = n;
	rv = 0;
out:
	for (int d = 0; d < n; d++)
		if (buf[d] && dl.SetDevice(d) == cudaSuccess)
			dl.Free(buf[d]);
	dl.SetDevice(cur);
	return rv;
}

struct ck_nccl {
	ncclComm_t comm;
	cudaStream_t stream;
	int timeout_ms;
	int broken;          /* a wait timed out: abort, never finalize */
	const char *what;    /* the last operation enqueued, for ck_nccl_sync's messages */
	struct ddpenv_store *s;
	double next_peer_check;
};

/* A task that died (its connection to the rendezvous closed without a
 * word): within a node NCCL's kernels spin on a dead peer's shared memory
 * and nothing reports it, so the waits ask the store every half second
 * (as cnn_train does) rather than hold on to the deadline.  1 with err
 * naming it, and the communicator to be aborted. */
static int peer_died(struct ck_nccl *c, const char *what, char *err, size_t errlen)
{
	double t = ck_mono();
	int dead[4];
	char e[DDPENV_ERRLEN];

	if (!c->s || t < c->next_peer_check)
		return 0;
	c->next_peer_check = t + 0.5;
	int k = ddpenv_store_dead_ranks(c->s, dead, 4, e, sizeof(e));
	if (k <= 0)
		return 0;
	snprintf(err, errlen, "NCCL %s: task %d died (its connection to the rendezvous closed)%s; "
		 "the communicator aborted", what, dead[0], k > 1 ? ", and others" : "");
	c->broken = 1;
	return 1;
}

static int nerr(struct ck_nccl *c, ncclResult_t r, const char *what, char *err, size_t errlen)
{
	/* (NCCL's last error is the process's: comm may be NULL, and is for a
	 * call made before there is one, ncclGetUniqueId) */
	const char *last = dl.GetLastError ? dl.GetLastError(c ? c->comm : NULL) : NULL;
	snprintf(err, errlen, "NCCL %s: %s%s%s", what, dl.GetErrorStringN(r), last && *last ? ": " : "",
		 last ? last : "");
	return -1;
}

/* Wait for the non-blocking communicator's last operation. */
static int settle(struct ck_nccl *c, const char *what, char *err, size_t errlen)
{
	double deadline = ck_mono() + c->timeout_ms / 1000.0;
	ncclResult_t st;
	for (;;) {
		ncclResult_t r = dl.CommGetAsyncError(c->comm, &st);
		if (r != ncclSuccess)
			return nerr(c, r, what, err, errlen);
		if (st == ncclSuccess)
			return 0;
		if (st != ncclInProgress)
			return nerr(c, st, what, err, errlen);
		if (ck_mono() > deadline) {
			snprintf(err, errlen, "NCCL %s: not done after %d s (a peer is missing or its "
				 "network is cut)", what, c->timeout_ms / 1000);
			c->broken = 1;
			return -1;
		}
		if (peer_died(c, what, err, errlen))
			return -1;
		usleep(1000);
	}
}

/* Rank 0 could not make the unique id: its reason where the other ranks
 * wait for the id, so that they stop at once and say why (they waited for
 * --timeout before).  Best effort: the store failing here is said by the
 * peers' own wait. */
static void id_failed(struct ddpenv_store *s, const char *why)
{
	char e[DDPENV_ERRLEN];
	ddpenv_store_set(s, "ck/nccl-failed", why, strlen(why), e, sizeof(e));
}

int ck_nccl_open(struct ck_nccl **out, struct ddpenv_store *s, int rank, int world,
		 int timeout_ms, char *err, size_t errlen)
{
	struct ck_nccl *c = calloc(1, sizeof(*c));
	ncclUniqueId id;
	void *v = NULL;
	size_t l = 0;
	int aborted = 0;
	ncclResult_t r;
	cudaError_t e;

	*out = NULL;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		if (rank == 0)
			id_failed(s, err);
		return -1;
	}
	c->timeout_ms = timeout_ms;
	c->s = s;
	c->next_peer_check = ck_mono() + 0.5;
	if ((e = dl.StreamCreate(&c->stream)) != cudaSuccess) {
		snprintf(err, errlen, "cudaStreamCreate: %s", dl.GetErrorString(e));
		if (rank == 0)
			id_failed(s, err);
		goto fail;
	}
	if (rank == 0) {
		if ((r = dl.GetUniqueId(&id)) != ncclSuccess) {
			nerr(NULL, r, "ncclGetUniqueId", err, errlen);
			id_failed(s, err);
			goto fail;
		}
		if (ddpenv_store_set(s, "ck/nccl-id", &id, sizeof(id), err, errlen) < 0)
			goto fail;
	} else {
		if (ddpenv_store_get_unless(s, "ck/nccl-id", "ck/nccl-failed", timeout_ms, &v, &l, &aborted,
					    err, errlen) < 0)
			goto fail;
		if (aborted) {
			/* (eval.c lists a task that stopped on a peer's failure after
			 * the peer, by these words) */
			snprintf(err, errlen, "NCCL unique id from rank 0: a peer failed first (task 0: %.*s)",
				 (int)(l < 400 ? l : 400), (const char *)v);
			free(v);
			goto fail;
		}
		if (l != sizeof(id)) {
			snprintf(err, errlen, "NCCL unique id from rank 0: %zu bytes, expected %zu", l, sizeof(id));
			free(v);
			goto fail;
		}
		memcpy(&id, v, sizeof(id));
		free(v);
	}
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	r = dl.CommInitRankConfig(&c->comm, world, id, rank, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		nerr(c, r, "ncclCommInitRankConfig", err, errlen);
		goto fail;
	}
	if (settle(c, "communicator set-up", err, errlen) < 0) {
		dl.CommAbort(c->comm);
		goto fail;
	}
	*out = c;
	return 0;
fail:
	if (c->stream)
		dl.StreamDestroy(c->stream);
	free(c);
	return -1;
}

int ck_nccl_allreduce(struct ck_nccl *c, void *dbuf, size_t n, char *err, size_t errlen)
{
	c->what = "all-reduce";
	ncclResult_t r = dl.AllReduce(dbuf, dbuf, n, ncclFloat32, ncclSum, c->comm, c->stream);
	if (r != ncclSuccess && r != ncclInProgress)
		return nerr(c, r, "all-reduce", err, errlen);
	return settle(c, "all-reduce", err, errlen);
}

int ck_nccl_allgather(struct ck_nccl *c, const void *send, void *recv, size_t n, char *err, size_t errlen)
{
	c->what = "all-gather";
	ncclResult_t r = dl.AllGather(send, recv, n, ncclFloat32, c->comm, c->stream);
	if (r != ncclSuccess && r != ncclInProgress)
		return nerr(c, r, "all-gather", err, errlen);
	return settle(c, "all-gather", err, errlen);
}

int ck_nccl_reduce_scatter(struct ck_nccl *c, const void *send, void *recv, size_t n, char *err,
			   size_t errlen)
{
	c->what = "reduce-scatter";
	ncclResult_t r = dl.ReduceScatter(send, recv, n, ncclFloat32, ncclSum, c->comm, c->stream);
	if (r != ncclSuccess && r != ncclInProgress)
		return nerr(c, r, "reduce-scatter", err, errlen);
	return settle(c, "reduce-scatter", err, errlen);
}

/* Grouped sends and receives of n floats: to and from each peer of
 * peers[0..np) at send + i * n, recv + i * n (one peer: an exchange; every
 * rank in order: an all-to-all). */
static int grouped(struct ck_nccl *c, const char *what, const int *peers, int np, const float *send,
		   float *recv, size_t n, char *err, size_t errlen)
{
	c->what = what;
	ncclResult_t r = dl.GroupStart();
	for (int i = 0; r == ncclSuccess && i < np; i++) {
		r = dl.Send(send + (size_t)i * n, n, ncclFloat32, peers[i], c->comm, c->stream);
		if (r == ncclSuccess || r == ncclInProgress)
			r = dl.Recv(recv + (size_t)i * n, n, ncclFloat32, peers[i], c->comm, c->stream);
		if (r == ncclInProgress)
			r = ncclSuccess;
	}
	ncclResult_t e = dl.GroupEnd();
	if (r == ncclSuccess)
		r = e;
	if (r != ncclSuccess && r != ncclInProgress)
		return nerr(c, r, what, err, errlen);
	return settle(c, what, err, errlen);
}

int ck_nccl_alltoall(struct ck_nccl *c, int world, const void *send, void *recv, size_t n, char *err,
		     size_t errlen)
{
	int *peers = malloc((size_t)world * sizeof(int));
	if (!peers) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int i = 0; i < world; i++)
		peers[i] = i;
	int rv = grouped(c, "all-to-all", peers, world, send, recv, n, err, errlen);
	free(peers);
	return rv;
}

int ck_nccl_exchange(struct ck_nccl *c, int peer, const void *send, void *recv, size_t n, char *err,
		     size_t errlen)
{
	return grouped(c, "send/receive", &peer, 1, send, recv, n, err, errlen);
}

/* Wait for the stream, bounded: a kernel waiting for a dead peer never
 * ends, so poll the stream and NCCL's error state until the deadline. */
int ck_nccl_sync(struct ck_nccl *c, char *err, size_t errlen)
{
	double deadline = ck_mono() + c->timeout_ms / 1000.0;
	const char *what = c->what ? c->what : "all-reduce";
	for (;;) {
		cudaError_t e = dl.StreamQuery(c->stream);
		if (e == cudaSuccess)
			return settle(c, what, err, errlen);
		if (e != cudaErrorNotReady) {
			snprintf(err, errlen, "CUDA stream: %s", dl.GetErrorString(e));
			return -1;
		}
		ncclResult_t st;
		if (dl.CommGetAsyncError(c->comm, &st) == ncclSuccess && st != ncclSuccess &&
		    st != ncclInProgress)
			return nerr(c, st, what, err, errlen);
		if (ck_mono() > deadline) {
			snprintf(err, errlen, "NCCL %s: not done after %d s (a peer is missing or "
				 "its network is cut)", what, c->timeout_ms / 1000);
			c->broken = 1;
			return -1;
		}
		if (peer_died(c, what, err, errlen))
			return -1;
		usleep(50);
	}
}

void *ck_nccl_alloc(size_t bytes)
{
	void *p = NULL;
	return dl.Malloc(&p, bytes) == cudaSuccess ? p : NULL;
}

void ck_nccl_free(void *p)
{
	if (p)
		dl.Free(p);
}

int ck_nccl_copy(void *dst, const void *src, size_t bytes, int to_device)
{
	return dl.Memcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) ==
	       cudaSuccess ? 0 : -1;
}

void ck_nccl_close(struct ck_nccl *c)
{
	char err[256];
	if (!c)
		return;
	ncclResult_t r = c->broken ? ncclInternalError : dl.CommFinalize(c->comm);
	if ((r == ncclSuccess || r == ncclInProgress) && settle(c, "finalize", err, sizeof(err)) == 0)
		dl.CommDestroy(c->comm);
	else
		dl.CommAbort(c->comm);
	/* (returns at once; a GPU releases it once its work is done) */
	dl.StreamDestroy(c->stream);
	free(c);
}

int ck_nccl_version(void)
{
	int v = 0;
	if (dl.GetVersion)
		dl.GetVersion(&v);
	return v;
}

#else /* !HAVE_NCCL */

static const char nonccl[] = "this ddp-check was built without the CUDA and NCCL headers "
			     "(/usr/local/cuda/include): --ddp=nccl is not available; use --ddp=gloo";

int ck_nccl_load(char *err, size_t errlen)
{
	snprintf(err, errlen, "%s", nonccl);
	return -1;
}

int ck_nccl_device(int local_rank, int *dev, int *count, char *busid, size_t len, char *err,
		   size_t errlen)
{
	snprintf(err, errlen, "%s", nonccl);
	return -1;
}

int ck_nccl_open(struct ck_nccl **out, struct ddpenv_store *s, int rank, int world,
		 int timeout_ms, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s", nonccl);
	return -1;
}

int ck_nccl_allreduce(struct ck_nccl *c, void *dbuf, size_t n, char *err, size_t errlen)
{
	return -1;
}

int ck_nccl_sync(struct ck_nccl *c, char *err, size_t errlen)
{
	return -1;
}

int ck_nccl_allgather(struct ck_nccl *c, const void *send, void *recv, size_t n, char *err, size_t errlen)
{
	return -1;
}

int ck_nccl_reduce_scatter(struct ck_nccl *c, const void *send, void *recv, size_t n, char *err,
			   size_t errlen)
{
	return -1;
}

int ck_nccl_alltoall(struct ck_nccl *c, int world, const void *send, void *recv, size_t n, char *err,
		     size_t errlen)
{
	return -1;
}

int ck_nccl_exchange(struct ck_nccl *c, int peer, const void *send, void *recv, size_t n, char *err,
		     size_t errlen)
{
	return -1;
}

void *ck_nccl_alloc(size_t bytes)
{
	return NULL;
}

void ck_nccl_free(void *p)
{
}

int ck_nccl_copy(void *dst, const void *src, size_t bytes, int to_device)
{
	return -1;
}

void ck_nccl_close(struct ck_nccl *c)
{
}

int ck_nccl_version(void)
{
	return 0;
}

int ck_cuda_h2d(const char *busid, size_t bytes, int trials, double *gbps, char *err, size_t errlen)
{
	*gbps = 0;
	snprintf(err, errlen, "%s", nonccl);
	return -1;
}

int ck_cuda_p2p(size_t bytes, struct ck_p2p *p, char *err, size_t errlen)
{
	memset(p, 0, sizeof(*p));
	snprintf(err, errlen, "%s", nonccl);
	return -1;
}
#endif
