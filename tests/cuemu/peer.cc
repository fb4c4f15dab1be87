// cuemu: copies between devices (CUEMU_DEVICES, streams.cc) and peer
// access.  Every device may read every other's memory; a copy between two
// is a memcpy after the legacy stream's work, as cudaMemcpy's.
// CUEMU_PEER_GBPS="A-B:GBPS,..." holds copies between devices A and B
// (either way) to that rate (the copy, then a sleep for what is left), as
// a pair on a slow path (through the host, a degraded NVLink) runs.
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

namespace {

double now_s()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

// CUEMU_PEER_GBPS's rate for the pair a, b; 0 none.
double pair_gbps(int a, int b)
{
	const char *e = getenv("CUEMU_PEER_GBPS");
	for (const char *p = e; p && *p;) {
		int x, y;
		double g;
		if (sscanf(p, "%d-%d:%lf", &x, &y, &g) == 3 && ((x == a && y == b) || (x == b && y == a)))
			return g;
		p = strchr(p, ',');
		p = p ? p + 1 : nullptr;
	}
	return 0;
}

bool valid(int d)
{
	return d >= 0 && d < cuemu::devices();
}

} // namespace

extern "C" {

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
	if (!canAccessPeer || !valid(device) || !valid(peerDevice))
		return cudaErrorInvalidDevice;
	*canAccessPeer = device != peerDevice;
	return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	if (!valid(peerDevice) || peerDevice == cuemu::current_device() || flags)
		return cudaErrorInvalidDevice;
	return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
	if (!valid(peerDevice) || peerDevice == cuemu::current_device())
		return cudaErrorInvalidDevice;
	return cudaSuccess;
}

cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
	if (!valid(dstDevice) || !valid(srcDevice))
		return cudaErrorInvalidDevice;
	if (!count)
		return cudaSuccess;
	if (!cuemu::inside(dst, count) || !cuemu::inside(src, count))
		return cudaErrorInvalidValue;
	cudaError_t c = cuemu::capture_forbids("cudaMemcpyPeer");
	if (c != cudaSuccess)
		return c;
	cuemu::drain_legacy();
	double t0 = now_s(), g = pair_gbps(srcDevice, dstDevice);
	memcpy(dst, src, count);
	double left = g > 0 ? (double)count / (g * 1e9) - (now_s() - t0) : 0;
	if (left > 0) {
		timespec ts = { (time_t)left, (long)((left - (time_t)left) * 1e9) };
		nanosleep(&ts, nullptr);
	}
	return cudaSuccess;
}

} // extern "C"
