// cuemu: NCCL for one rank, on the CPU: what test_gpu_step does with it
// on a GPU (world size 1; NCCL refuses two ranks on one GPU, and the
// multi-rank logic is tested through the same comm interface on CPU
// ranks).  A communicator made with config.blocking = 0 says
// ncclInProgress until ncclCommGetAsyncError is asked once, as a
// non-blocking one does while it connects.  ncclAllReduce is a stream
// operation (streams.cc: queued, captured into a graph); over one rank
// every reduction leaves the data as it is, copied when the buffers
// differ.  Buffers outside device memory are refused, naming them.
#include "rt.h"

#include <stdio.h>
#include <string.h>

#include <nccl.h>

struct ncclComm {
	int nranks = 1;
	bool blocking = true;
	bool pending = false;   // non-blocking: the last call not yet "done"
	bool aborted = false;
	char last[256] = "";
};

namespace {

size_t type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	default: return 0;
	}
}

char global_last[256];

} // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	if (!uniqueId)
		return ncclInvalidArgument;
	memset(uniqueId, 0, sizeof(*uniqueId));
	snprintf(uniqueId->internal, sizeof(uniqueId->internal), "cuemu");
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config)
{
	if (!comm)
		return ncclInvalidArgument;
	*comm = nullptr;
	if (nranks != 1 || rank != 0) {
		snprintf(global_last, sizeof(global_last), "cuemu's NCCL has one rank (world size 1): "
			 "asked for rank %d of %d", rank, nranks);
		return ncclInvalidUsage;
	}
	ncclComm *c = new ncclComm;
	c->blocking = !config || config->blocking != 0;
	c->pending = !c->blocking;
	*comm = c;
	return c->pending ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	if (!comm || !asyncError)
		return ncclInvalidArgument;
	*asyncError = comm->pending ? ncclInProgress : ncclSuccess;
	comm->pending = false;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	if (!comm || comm->aborted)
		return ncclInvalidArgument;
	size_t es = type_size(datatype), bytes = es * count;
	if (!es || (int)op < 0 || (int)op >= (int)ncclNumOps) {
		snprintf(comm->last, sizeof(comm->last), "ncclAllReduce: data type %d or operation %d "
			 "unknown", (int)datatype, (int)op);
		return ncclInvalidArgument;
	}
	if (count && (!cuemu::inside(sendbuff, bytes) || !cuemu::inside(recvbuff, bytes))) {
		snprintf(comm->last, sizeof(comm->last), "ncclAllReduce: %zu bytes at %p (send) or %p "
			 "(receive) are not inside one cudaMalloc allocation", bytes, sendbuff, recvbuff);
		fprintf(stderr, "cuemu: %s\n", comm->last);
		return ncclInvalidArgument;
	}
	if (count && sendbuff != recvbuff)
		cuemu::enqueue(stream, "ncclAllReduce",
			       [sendbuff, recvbuff, bytes]() { memmove(recvbuff, sendbuff, bytes); },
			       cuemu::bytes_ms(bytes));
	else
		cuemu::enqueue(stream, "ncclAllReduce", []() {}, cuemu::bytes_ms(bytes));
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
	cuemu::drain_all();
	if (!comm->blocking)
		comm->pending = true;
	return comm->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
	delete comm;
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	delete comm;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error";
	case ncclSystemError: return "unhandled system error";
	case ncclInternalError: return "internal error";
	case ncclInvalidArgument: return "invalid argument";
	case ncclInvalidUsage: return "invalid usage";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

const char *ncclGetLastError(ncclComm_t comm)
{
	return comm && comm->last[0] ? comm->last : global_last;
}

} // extern "C"
