// cuemu: streams, events, CUDA graphs (stream capture), asynchronous
// copies and pinned host memory, for the GPU path's host code
// (trainer/cuda/net.c, prepare.c, gpu.c, graph.c, comm_nccl.c) run on the CPU.
//
// Work enqueued on a stream (a kernel, a copy, a cuDNN, cuBLAS or NCCL
// call) is a closure.  CUEMU_STREAMS (or cuemu_set_streams) says when it
// runs:
// - eager (the default): at once, in the order the host enqueues it;
// - lazy: not before something waits for it: a synchronize, an event
//   query, another stream's cudaStreamWaitEvent at the moment the waiting
//   stream gets there, the legacy stream (a blocking stream's work, both
//   ways), cudaFree.  Then it runs in one of two orders (drain): late, as
//   late as its waits allow, or ahead, the other streams' ready work first,
//   so a missing wait shows (the consumer reads what was there before the
//   producer ran, or the producer reads what its consumer's stream wrote
//   after it), and so does a fork placed too early (the forked stream reads
//   before the write that should have come before the fork).  A graph's
//   replays alternate between two such orders its edges allow
//   (cudaGraphInstantiate), so an edge the capture missed changes the
//   result too.  lazy-late and lazy-ahead fix the order (test_cuemu);
//   cudaEventQuery says cudaErrorNotReady once for work not yet run (a GPU
//   still busy), then runs it.
// Stream capture follows CUDA's rules where code gets them wrong: a
// stream joins a capture by waiting on an event recorded in it, the
// capture must end on the stream that began it with every fork joined back
// (cudaErrorStreamCaptureUnjoined), and a call that would synchronize
// (cudaMalloc, cudaMemcpy, cudaStreamSynchronize, the legacy stream, a
// wait on an event recorded outside the capture) invalidates it
// (cudaStreamEndCapture then fails with cudaErrorStreamCaptureInvalidated).
// Event times read a modelled clock (rt.h: each operation's threads,
// multiply-adds or bytes at fixed rates): not a GPU's time, nor the
// emulation's, but the same each run, so code that times its choices
// (cnn_train's --conv1/--conv2 auto) chooses the same way each run.
// Streams' work adds up one after another; a graph's replay adds its
// longest path of dependent nodes (the branches of a fork overlap, as on a
// GPU with room for both: what --backward-streams auto times).
#include "rt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include <cuda_profiler_api.h>

struct CUgraph_st;

namespace {

struct Node {
	std::function<void()> fn;
	const char *what;
	std::vector<size_t> deps;
	double ms;
	size_t stream;   // its stream's place in creation order
	// deps[k]'s edge is programmatic where prog[k] (shorter: not)
	std::vector<unsigned char> prog = {};

	bool programmatic(size_t k) const { return k < prog.size() && prog[k]; }
};

struct Op {
	std::function<void()> fn;   // empty: only a wait
	const char *what;
	std::vector<std::pair<CUstream_st *, uint64_t>> deps;   // stream's first k ops done first
	double ms;                  // on the clock
};

} // namespace

// A node's handle (cudaGraphGetNodes): its graph and its place there.
struct CUgraphNode_st {
	CUgraph_st *g;
	size_t i;
};

struct CUgraph_st {
	std::vector<Node> nodes;
	const CUgraph_st *cloned_from = nullptr;   // cudaGraphClone's original
	std::vector<std::unique_ptr<CUgraphNode_st>> handles;   // made when asked for
	bool live = true;        // still being captured
	bool relaxed = false;    // cudaStreamCaptureModeRelaxed
	std::string invalid;     // why the capture was invalidated, if it was
};

struct CUgraphExec_st {
	std::vector<Node> nodes;
	std::vector<size_t> order[2];   // replays alternate between them
	unsigned long launches = 0;
};

struct CUstream_st {
	bool blocking = true;    // synchronizes with the legacy stream
	std::deque<Op> q;
	uint64_t enq = 0, done = 0;
	CUgraph_st *cap = nullptr;   // the capture this stream takes part in
	bool origin = false;         // ... and began
	std::vector<size_t> frontier;
	const void *hold = nullptr;  // cuemu::hold_running's key: held from ...
	uint64_t hold_seq = 0;       // ... its hold_seq-th operation on
};

struct CUevent_st {
	unsigned flags = 0;
	bool recorded = false;
	CUstream_st *s = nullptr;
	uint64_t seq = 0;              // s's first seq ops
	uint64_t gen = 0;              // which record
	double t = -1;                 // the clock when its record ran
	bool said_not_ready = false;   // lazy: NotReady said once for this record
	CUgraph_st *cap = nullptr;     // recorded during this capture
	std::vector<size_t> nodes;     // ... after these nodes
};

namespace {

// LATE and AHEAD are lazy with one of its two orders (drain) fixed.
enum Mode { EAGER, LAZY, LATE, AHEAD };
int mode = -1;

int mode_named(const char *n)
{
	return !strcmp(n, "eager") ? EAGER : !strcmp(n, "lazy") ? LAZY :
	       !strcmp(n, "lazy-late") ? LATE : !strcmp(n, "lazy-ahead") ? AHEAD : -1;
}


int mode_now()
{
	if (mode < 0) {
		const char *e = getenv("CUEMU_STREAMS");
		mode = e && *e ? mode_named(e) : EAGER;
		if (mode < 0) {
			fprintf(stderr, "cuemu: CUEMU_STREAMS=%s: expected eager, lazy, lazy-late or lazy-ahead\n", e);
			abort();
		}
	}
	return mode;
}

bool lazy_now()
{
	return mode_now() != EAGER;
}

CUstream_st legacy;
std::vector<CUstream_st *> streams;   // created ones, in creation order
std::set<CUevent_st *> events;
std::set<CUgraph_st *> live_captures;
std::map<uintptr_t, size_t> hosts;    // cudaMallocHost: start -> size

// The emulated device's clock (ms): each operation's modelled time added
// as it runs (rt.h), one stream after another.
double clock_ms;

// The stream a handle names; nullptr for one never created (or destroyed).
CUstream_st *stream_of(cudaStream_t s)
{
	if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread)
		return &legacy;
	for (CUstream_st *t : streams)
		if (t == s)
			return t;
	return nullptr;
}

void drain(CUstream_st *st, uint64_t upto);

// Is st's seq-th operation behind a hold (cuemu::hold_running)?
bool held(const CUstream_st *st, uint64_t seq)
{
	return st->hold && seq >= st->hold_seq;
}

// The operation running now (run_front): its stream and place there.
CUstream_st *running;
uint64_t running_seq;

// Run st's next operation, after what it waits for.
void run_front(CUstream_st *st)
{
	Op op = std::move(st->q.front());
	st->q.pop_front();
	for (const auto &d : op.deps)
		drain(d.first, d.second);
	CUstream_st *outer = running;
	uint64_t outer_seq = running_seq;
	running = st;
	running_seq = st->done + 1;
	// waiting for held work holds this stream too, from here
	for (const auto &d : op.deps)
		if (held(d.first, d.second))
			cuemu::hold_running(d.first->hold);
	if (op.fn)
		op.fn();
	running = outer;
	running_seq = outer_seq;
	clock_ms += op.ms;
	st->done++;
}

// A call that blocks until st's first seq operations are done, where one
// of them is held: a GPU would never return from it.
void blocks_forever(const CUstream_st *st, uint64_t seq, const char *call)
{
	if (!held(st, seq))
		return;
	fprintf(stderr, "cuemu: %s waits for work behind an NCCL operation whose peer is gone "
		"(CUEMU_NCCL_SILENT): on a GPU it would never return; poll (cudaEventQuery) and "
		"ncclCommAbort instead\n", call);
	abort();
}

bool ready(const Op &op)
{
	for (const auto &d : op.deps)
		if (d.first->done < d.second)
			return false;
	return true;
}

// Every other stream's work that may run now (its waits met), until none.
void run_ready_others(CUstream_st *st)
{
	for (bool again = true; again;) {
		again = false;
		for (size_t i = 0; i <= streams.size(); i++) {
			CUstream_st *t = i ? streams[i - 1] : &legacy;
			while (t != st && !t->q.empty() && ready(t->q.front())) {
				run_front(t);
				again = true;
			}
		}
	}
}

// Lazy: each call of the host's that waits for work (a synchronize, an
// event query, a copy, cudaFree) runs it in one of two orders: late, the
// stream waited for runs through, its waits met as late as they can be
// (the other streams' work runs when it needs it), so a read with no wait
// for its write runs before the write; or ahead, each of its operations
// comes after every other stream's work that is ready then, so a stream
// forked off too early runs ahead of what follows the fork on the stream
// it came from.  A GPU may run either way.  CUEMU_STREAMS=lazy picks one
// for each such call, by a fixed pseudo-random sequence (the same each
// run: a failure reproduces); lazy-late and lazy-ahead always take one.
uint64_t pick = 0x9e3779b97f4a7c15ull;   // xorshift64 state
int drain_depth;
bool drain_ahead;       // this drain runs the other streams' ready work first

bool pick_ahead()
{
	if (mode_now() != LAZY)
		return mode_now() == AHEAD;
	pick ^= pick << 13;
	pick ^= pick >> 7;
	pick ^= pick << 17;
	return pick >> 63;
}

void drain(CUstream_st *st, uint64_t upto)
{
	if (drain_depth++ == 0)
		drain_ahead = st->done < upto && pick_ahead();
	while (st->done < upto) {
		if (drain_ahead)
			run_ready_others(st);
		run_front(st);
	}
	drain_depth--;
}

void invalidate(const char *why)
{
	for (CUgraph_st *g : live_captures)
		if (g->invalid.empty())
			g->invalid = why;
}

bool capturing_strictly()
{
	for (CUgraph_st *g : live_captures)
		if (!g->relaxed)
			return true;
	return false;
}

// Append op to st's queue (its waits on the legacy stream, or the legacy
// stream's on the blocking ones, added), run it if eager.
void push(CUstream_st *st, Op op)
{
	if (st == &legacy) {
		for (CUstream_st *b : streams)
			if (b->blocking)
				op.deps.emplace_back(b, b->enq);
	} else if (st->blocking) {
		op.deps.emplace_back(&legacy, legacy.enq);
	}
	st->q.push_back(std::move(op));
	st->enq++;
	if (mode_now() == EAGER)
		drain(st, st->enq);
}

// The nodes of g that are ancestors of (or in) from.
std::vector<bool> reach(const CUgraph_st *g, const std::vector<size_t> &from)
{
	std::vector<bool> seen(g->nodes.size(), false);
	std::vector<size_t> todo(from);
	while (!todo.empty()) {
		size_t i = todo.back();
		todo.pop_back();
		if (seen[i])
			continue;
		seen[i] = true;
		for (size_t d : g->nodes[i].deps)
			todo.push_back(d);
	}
	return seen;
}

void end_capture_of(CUgraph_st *g)
{
	g->live = false;
	live_captures.erase(g);
	for (CUstream_st *t : streams)
		if (t->cap == g) {
			t->cap = nullptr;
			t->origin = false;
			t->frontier.clear();
		}
	for (CUevent_st *e : events)
		if (e->cap == g) {
			e->cap = nullptr;
			e->recorded = false;
		}
}

bool host_inside(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	auto it = hosts.upper_bound(a);
	if (it == hosts.begin())
		return false;
	--it;
	return a >= it->first && a - it->first + n <= it->second;
}

// A copy's device side(s) inside allocations, for its kind.
bool copy_ok(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	if (kind == cudaMemcpyDefault)
		return cuemu::inside(dst, n) || cuemu::inside(src, n);
	bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	bool ds = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
	return (!dd || cuemu::inside(dst, n)) && (!ds || cuemu::inside(src, n));
}

} // namespace

void cuemu::enqueue(cudaStream_t s, const char *what, std::function<void()> fn, double ms)
{
	CUstream_st *st = stream_of(s);
	if (!st) {
		char m[120];
		snprintf(m, sizeof(m), "stream %p: not a stream cudaStreamCreate made (or destroyed)",
			 (void *)s);
		fail(cudaErrorInvalidResourceHandle, what, m);
		return;
	}
	if (st->cap) {
		CUgraph_st *g = st->cap;
		size_t rank = std::find(streams.begin(), streams.end(), st) - streams.begin();
		g->nodes.push_back(Node{ std::move(fn), what, st->frontier, ms, rank });
		st->frontier.assign(1, g->nodes.size() - 1);
		return;
	}
	if (st == &legacy && capturing_strictly()) {
		char m[200];
		snprintf(m, sizeof(m), "enqueued on the legacy stream while a stream is captured: "
			 "the capture is invalidated (cudaErrorStreamCaptureImplicit)");
		invalidate(what);
		fail(cudaErrorStreamCaptureImplicit, what, m);
		return;
	}
	push(st, Op{ std::move(fn), what, {}, ms });
}

bool cuemu::inside_host(const void *p, size_t n)
{
	return host_inside(p, n);
}

cudaError_t cuemu::capture_forbids(const char *call)
{
	if (!capturing_strictly())
		return cudaSuccess;
	invalidate(call);
	fprintf(stderr, "cuemu: %s during a stream capture: not permitted, the capture is invalidated\n",
		call);
	return cudaErrorStreamCaptureUnsupported;
}

void cuemu::drain_all()
{
	drain(&legacy, legacy.enq);
	for (size_t i = 0; i < streams.size(); i++)
		drain(streams[i], streams[i]->enq);
	for (size_t i = 0; i < streams.size(); i++)
		blocks_forever(streams[i], streams[i]->enq,
			       "a call that waits for the whole device (cudaDeviceSynchronize, cudaFree, a copy)");
}

void cuemu::drain_legacy()
{
	for (CUstream_st *b : streams)
		if (b->blocking)
			drain(b, b->enq);
	drain(&legacy, legacy.enq);
	for (CUstream_st *b : streams)
		if (b->blocking)
			blocks_forever(b, b->enq, "a call on the legacy stream, which waits for the blocking streams");
}

void cuemu::hold_running(const void *key)
{
	if (running && !running->hold) {
		running->hold = key;
		running->hold_seq = running_seq;
	}
}

void cuemu::release(const void *key)
{
	for (CUstream_st *t : streams)
		if (t->hold == key)
			t->hold = nullptr;
	if (legacy.hold == key)
		legacy.hold = nullptr;
}

bool cuemu::tf32_allowed()
{
	const char *e = getenv("NVIDIA_TF32_OVERRIDE");
	return !(e && !strcmp(e, "0"));
}

extern "C" {

// "eager" or "lazy" (see above): 0, or -1 for another name.
int cuemu_set_streams(const char *name)
{
	int m = name ? mode_named(name) : -1;
	if (m < 0)
		return -1;
	cuemu::drain_all();
	mode = m;
	return 0;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	if (!pStream || (flags & ~cudaStreamNonBlocking))
		return cudaErrorInvalidValue;
	CUstream_st *st = new CUstream_st;
	st->blocking = !(flags & cudaStreamNonBlocking);
	streams.push_back(st);
	*pStream = st;
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	CUstream_st *st = stream_of(s);
	if (!st || st == &legacy)
		return cudaErrorInvalidResourceHandle;
	if (st->cap)
		return cudaErrorStreamCaptureUnsupported;
	// CUDA lets the work finish after the call returns; here it is done now
	drain(st, st->enq);
	streams.erase(std::find(streams.begin(), streams.end(), st));
	delete st;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	CUstream_st *st = stream_of(s);
	if (!st)
		return cudaErrorInvalidResourceHandle;
	if (st->cap || st == &legacy) {
		cudaError_t c = cuemu::capture_forbids("cudaStreamSynchronize");
		if (c != cudaSuccess)
			return c;
	}
	if (st == &legacy)
		cuemu::drain_legacy();
	else
		drain(st, st->enq);
	blocks_forever(st, st->enq, "cudaStreamSynchronize");
	return cudaPeekAtLastError();
}

// The stream's work run, then its error; with lazy streams cudaErrorNotReady
// for work not yet run when asked (a GPU still at it), as cudaEventQuery.
cudaError_t cudaStreamQuery(cudaStream_t s)
{
	CUstream_st *st = stream_of(s);
	if (!st)
		return cudaErrorInvalidResourceHandle;
	if (st->cap) {
		cuemu::capture_forbids("cudaStreamQuery of a capturing stream");
		return cudaErrorStreamCaptureUnsupported;
	}
	if (st == &legacy) {
		cuemu::drain_legacy();
		return cudaPeekAtLastError();
	}
	if (held(st, st->enq))
		return drain(st, st->enq), cudaErrorNotReady;
	if (st->done >= st->enq)
		return cudaPeekAtLastError();
	drain(st, st->enq);
	if (held(st, st->enq))
		return cudaErrorNotReady;
	return lazy_now() ? cudaErrorNotReady : cudaPeekAtLastError();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	if (!event)
		return cudaErrorInvalidValue;
	CUevent_st *e = new CUevent_st;
	e->flags = flags;
	events.insert(e);
	*event = e;
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	if (!events.erase(event))
		return cudaErrorInvalidResourceHandle;
	delete event;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t s)
{
	CUstream_st *st = stream_of(s);
	if (!st || !events.count(event))
		return cudaErrorInvalidResourceHandle;
	CUevent_st *e = event;
	if (st->cap) {
		e->recorded = true;
		e->cap = st->cap;
		e->nodes = st->frontier;
		return cudaSuccess;
	}
	if (st == &legacy && capturing_strictly()) {
		invalidate("cudaEventRecord on the legacy stream");
		return cudaErrorStreamCaptureImplicit;
	}
	e->recorded = true;
	e->cap = nullptr;
	e->s = st;
	e->said_not_ready = false;
	e->t = -1;
	e->seq = st->enq + 1;
	uint64_t gen = ++e->gen;
	push(st, Op{ [e, gen]() {
			    if (events.count(e) && e->gen == gen)
				    e->t = clock_ms;
		    },
		     "cudaEventRecord", {}, 0 });
	return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t event, unsigned int flags)
{
	CUstream_st *st = stream_of(s);
	if (!st || !events.count(event))
		return cudaErrorInvalidResourceHandle;
	CUevent_st *e = event;
	if (!e->recorded)
		return cudaSuccess;   // nothing to wait for, as in CUDA
	if (e->cap) {
		if (!st->cap) {
			if (st == &legacy) {
				invalidate("cudaStreamWaitEvent of the legacy stream");
				return cudaErrorStreamCaptureImplicit;
			}
			st->cap = e->cap;   // st joins the capture
			st->origin = false;
			st->frontier = e->nodes;
		} else if (st->cap == e->cap) {
			for (size_t n : e->nodes)
				if (std::find(st->frontier.begin(), st->frontier.end(), n) ==
				    st->frontier.end())
					st->frontier.push_back(n);
		} else {
			invalidate("cudaStreamWaitEvent across two captures");
			return cudaErrorStreamCaptureIsolation;
		}
		return cudaSuccess;
	}
	if (st->cap) {
		// a captured stream waiting on work outside its graph
		invalidate("cudaStreamWaitEvent on an event recorded outside the capture");
		return cudaErrorStreamCaptureIsolation;
	}
	if (st == &legacy && capturing_strictly()) {
		invalidate("cudaStreamWaitEvent of the legacy stream");
		return cudaErrorStreamCaptureImplicit;
	}
	push(st, Op{ nullptr, "cudaStreamWaitEvent", { { e->s, e->seq } }, 0 });
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	if (!events.count(event))
		return cudaErrorInvalidResourceHandle;
	CUevent_st *e = event;
	if (e->cap) {
		cuemu::capture_forbids("cudaEventQuery of an event recorded in a capture");
		return cudaErrorStreamCaptureUnsupported;
	}
	if (e->recorded && held(e->s, e->seq))
		return drain(e->s, e->seq), cudaErrorNotReady;
	if (!e->recorded || e->s->done >= e->seq)
		return cudaPeekAtLastError();
	if (e->s->cap) {
		cudaError_t c = cuemu::capture_forbids("cudaEventQuery");
		if (c != cudaSuccess)
			return c;
	}
	drain(e->s, e->seq);
	if (held(e->s, e->seq))
		return cudaErrorNotReady;
	if (lazy_now() && !e->said_not_ready) {
		e->said_not_ready = true;   // the GPU was still at it
		return cudaErrorNotReady;
	}
	return cudaPeekAtLastError();
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	if (!events.count(event))
		return cudaErrorInvalidResourceHandle;
	CUevent_st *e = event;
	if (e->cap) {
		cuemu::capture_forbids("cudaEventSynchronize of an event recorded in a capture");
		return cudaErrorStreamCaptureUnsupported;
	}
	if (e->recorded) {
		drain(e->s, e->seq);
		blocks_forever(e->s, e->seq, "cudaEventSynchronize");
	}
	return cudaPeekAtLastError();
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	if (!ms || !events.count(start) || !events.count(end))
		return cudaErrorInvalidResourceHandle;
	if ((start->flags | end->flags) & cudaEventDisableTiming)
		return cudaErrorInvalidResourceHandle;
	if (!start->recorded || !end->recorded || start->t < 0 || end->t < 0)
		return cudaErrorNotReady;
	*ms = (float)(end->t - start->t);
	return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
	CUstream_st *st = stream_of(s);
	if (!st)
		return cudaErrorInvalidResourceHandle;
	if (st == &legacy)
		return cudaErrorStreamCaptureUnsupported;
	if (st->cap)
		return cudaErrorIllegalState;
	CUgraph_st *g = new CUgraph_st;
	g->relaxed = m == cudaStreamCaptureModeRelaxed;
	live_captures.insert(g);
	st->cap = g;
	st->origin = true;
	st->frontier.clear();
	return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *pGraph)
{
	CUstream_st *st = stream_of(s);
	if (!st || !pGraph)
		return cudaErrorInvalidValue;
	*pGraph = nullptr;
	if (!st->cap)
		return cudaErrorIllegalState;
	if (!st->origin)
		return cudaErrorStreamCaptureUnmatched;
	CUgraph_st *g = st->cap;
	std::vector<bool> joined = reach(g, st->frontier);
	size_t unjoined = 0;
	const char *first = nullptr;
	for (size_t i = 0; i < g->nodes.size(); i++)
		if (!joined[i] && !unjoined++)
			first = g->nodes[i].what;
	end_capture_of(g);
	if (!g->invalid.empty()) {
		fprintf(stderr, "cuemu: cudaStreamEndCapture: the capture was invalidated by %s\n",
			g->invalid.c_str());
		delete g;
		return cudaErrorStreamCaptureInvalidated;
	}
	if (unjoined) {
		fprintf(stderr, "cuemu: cudaStreamEndCapture: %zu captured operations (the first: %s) "
			"are on a stream never joined back into the one that began the capture\n",
			unjoined, first);
		delete g;
		return cudaErrorStreamCaptureUnjoined;
	}
	*pGraph = g;
	return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
	CUstream_st *st = stream_of(s);
	if (!st || !status)
		return cudaErrorInvalidValue;
	*status = !st->cap ? cudaStreamCaptureStatusNone :
		  st->cap->invalid.empty() ? cudaStreamCaptureStatusActive :
					     cudaStreamCaptureStatusInvalidated;
	return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	delete graph;
	return cudaSuccess;
}

} // extern "C"

namespace {

// What kind of node a captured operation is on a GPU: a copy, a memset,
// else a kernel (cnn_train's, or a cuDNN, cuBLAS or NCCL call's).
enum cudaGraphNodeType kind_of(const Node &n)
{
	return !strcmp(n.what, "cudaMemcpyAsync") ? cudaGraphNodeTypeMemcpy :
	       !strcmp(n.what, "cudaMemsetAsync") ? cudaGraphNodeTypeMemset :
						   cudaGraphNodeTypeKernel;
}

CUgraphNode_st *handle(CUgraph_st *g, size_t i)
{
	while (g->handles.size() < g->nodes.size())
		g->handles.emplace_back(new CUgraphNode_st{ g, g->handles.size() });
	return g->handles[i].get();
}

struct Edge {
	size_t from, to;
	bool prog;   // programmatic (cudaGraphDependencyTypeProgrammatic)
};

// The edges from each node's dependencies to it, each once.
std::vector<Edge> edges_of(const CUgraph_st *g)
{
	std::vector<Edge> e;
	for (size_t i = 0; i < g->nodes.size(); i++) {
		const Node &n = g->nodes[i];
		std::set<std::pair<size_t, bool>> from;
		for (size_t k = 0; k < n.deps.size(); k++)
			from.emplace(n.deps[k], n.programmatic(k));
		for (const auto &d : from)
			e.push_back(Edge{ d.first, i, d.second });
	}
	return e;
}

// A handle of one of g's nodes (nullptr if it is not).
bool node_of(cudaGraph_t g, cudaGraphNode_t h)
{
	return g && h && h->g == g && h->i < g->nodes.size();
}

bool graph_ok(cudaGraph_t g)
{
	return g && !g->live;
}

} // namespace

extern "C" {

// Nodes and edges as CUDA lists them: with a NULL array the count, else up
// to *num entries, the rest of a longer array NULL and *num the count.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *num)
{
	if (!graph_ok(graph) || !num)
		return cudaErrorInvalidValue;
	size_t n = graph->nodes.size();
	if (nodes) {
		for (size_t i = 0; i < *num; i++)
			nodes[i] = i < n ? handle(graph, i) : nullptr;
		if (*num > n)
			*num = n;
	} else {
		*num = n;
	}
	return cudaSuccess;
}

cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
			      cudaGraphEdgeData *data, size_t *num)
{
	if (!graph_ok(graph) || !num || !from != !to || (data && !from))
		return cudaErrorInvalidValue;
	std::vector<Edge> e = edges_of(graph);
	if (!from) {
		*num = e.size();
		return cudaSuccess;
	}
	for (size_t k = 0; k < *num; k++) {
		from[k] = k < e.size() ? handle(graph, e[k].from) : nullptr;
		to[k] = k < e.size() ? handle(graph, e[k].to) : nullptr;
		if (k < e.size() && e[k].prog && !data)
			return cudaErrorLossyQuery;   // as CUDA: a programmatic edge needs its data
		if (data) {
			memset(&data[k], 0, sizeof(data[k]));
			if (k < e.size() && e[k].prog) {
				data[k].from_port = cudaGraphKernelNodePortProgrammatic;
				data[k].type = cudaGraphDependencyTypeProgrammatic;
			}
		}
	}
	if (*num > e.size())
		*num = e.size();
	return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *type)
{
	if (!node || !type || !node->g || node->i >= node->g->nodes.size())
		return cudaErrorInvalidValue;
	*type = kind_of(node->g->nodes[node->i]);
	return cudaSuccess;
}

// The capture's dependencies of s's next node: the handles of its
// frontier, valid until the next call on s (one array, reused).
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status,
				     unsigned long long *id, cudaGraph_t *graph,
				     const cudaGraphNode_t **deps, const cudaGraphEdgeData **data,
				     size_t *num)
{
	static std::vector<cudaGraphNode_t> handles;
	static std::vector<cudaGraphEdgeData> zero;
	CUstream_st *st = stream_of(s);
	if (!st || !status || (data && !deps))
		return cudaErrorInvalidValue;
	cudaError_t e = cudaStreamIsCapturing(s, status);
	if (e != cudaSuccess || *status != cudaStreamCaptureStatusActive)
		return e;
	if (id)
		*id = (unsigned long long)(uintptr_t)st->cap;
	if (graph)
		*graph = st->cap;
	handles.clear();
	for (size_t i : st->frontier)
		handles.push_back(handle(st->cap, i));
	zero.assign(handles.size(), cudaGraphEdgeData{});
	if (deps)
		*deps = handles.data();
	if (data)
		*data = zero.data();
	if (num)
		*num = handles.size();
	return cudaSuccess;
}

// A copy of graph (its nodes, edges and their types); its nodes are the
// original's found by cudaGraphNodeFindInClone.
cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t graph)
{
	if (!clone || !graph_ok(graph))
		return cudaErrorInvalidValue;
	CUgraph_st *c = new CUgraph_st;
	c->nodes = graph->nodes;
	c->live = false;
	c->cloned_from = graph;
	*clone = c;
	return cudaSuccess;
}

cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *node, cudaGraphNode_t original,
				     cudaGraph_t clone)
{
	if (!node || !clone || !original || original->g != clone->cloned_from ||
	    original->i >= clone->nodes.size())
		return cudaErrorInvalidValue;
	*node = handle(clone, original->i);
	return cudaSuccess;
}

// CUDA's rules for an edge's data: a programmatic edge joins two kernel
// nodes and leaves its first by the programmatic or launch-completion
// port; a default edge by the default port; no port into a node.
static cudaError_t edge_ok(cudaGraph_t g, cudaGraphNode_t from, cudaGraphNode_t to,
			   const cudaGraphEdgeData *d, bool *prog)
{
	if (!node_of(g, from) || !node_of(g, to) || from == to)
		return cudaErrorInvalidValue;
	*prog = d && d->type == cudaGraphDependencyTypeProgrammatic;
	if (!d)
		return cudaSuccess;
	if (d->to_port != 0 ||
	    (d->type != cudaGraphDependencyTypeDefault && d->type != cudaGraphDependencyTypeProgrammatic))
		return cudaErrorInvalidValue;
	if (!*prog)
		return d->from_port == cudaGraphKernelNodePortDefault ? cudaSuccess : cudaErrorInvalidValue;
	if (kind_of(g->nodes[from->i]) != cudaGraphNodeTypeKernel ||
	    kind_of(g->nodes[to->i]) != cudaGraphNodeTypeKernel ||
	    (d->from_port != cudaGraphKernelNodePortProgrammatic &&
	     d->from_port != cudaGraphKernelNodePortLaunchCompletion))
		return cudaErrorInvalidValue;
	// CUEMU_NO_PDL=k1,k2: a programmatic edge into those refused, as a
	// driver may refuse one into a kind of kernel it does not allow there
	if (cuemu::named_in("CUEMU_NO_PDL", g->nodes[to->i].what))
		return cudaErrorNotSupported;
	return cudaSuccess;
}

// to's dependency on from of that type: its place in to's deps, or -1.
static long dep_at(const Node &to, size_t from, bool prog)
{
	for (size_t k = 0; k < to.deps.size(); k++)
		if (to.deps[k] == from && to.programmatic(k) == prog)
			return (long)k;
	return -1;
}

// Each of n edges good by edge_ok, and (adding) new or (removing) there.
static cudaError_t edges_ok(cudaGraph_t graph, const cudaGraphNode_t *from,
			    const cudaGraphNode_t *to, const cudaGraphEdgeData *data, size_t n,
			    bool adding)
{
	if (!graph_ok(graph) || (n && (!from || !to)))
		return cudaErrorInvalidValue;
	for (size_t k = 0; k < n; k++) {
		bool prog;
		cudaError_t e = edge_ok(graph, from[k], to[k], data ? &data[k] : NULL, &prog);
		if (e != cudaSuccess)
			return e;
		const Node &t = graph->nodes[to[k]->i];
		if (!adding) {
			if (dep_at(t, from[k]->i, prog) < 0)
				return cudaErrorInvalidValue;
			continue;
		}
		if (dep_at(t, from[k]->i, false) >= 0 || dep_at(t, from[k]->i, true) >= 0)
			return cudaErrorInvalidValue;
		// a cycle: to already reaches from
		if (reach(graph, { from[k]->i })[to[k]->i])
			return cudaErrorInvalidValue;
		for (size_t j = 0; j < k; j++)
			if (from[j] == from[k] && to[j] == to[k])
				return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

// Edges added (each new: an edge already there, of either type, is
// cudaErrorInvalidValue, as is one that would close a cycle) or removed
// (each must be there, of its type).  Nothing changes unless all are good.
cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
				     const cudaGraphNode_t *to, const cudaGraphEdgeData *data,
				     size_t n)
{
	cudaError_t e = edges_ok(graph, from, to, data, n, true);
	if (e != cudaSuccess)
		return e;
	for (size_t k = 0; k < n; k++) {
		Node &t = graph->nodes[to[k]->i];
		bool prog = data && data[k].type == cudaGraphDependencyTypeProgrammatic;
		t.prog.resize(t.deps.size(), 0);
		t.deps.push_back(from[k]->i);
		t.prog.push_back(prog);
	}
	return cudaSuccess;
}

cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
					const cudaGraphNode_t *to, const cudaGraphEdgeData *data,
					size_t n)
{
	cudaError_t e = edges_ok(graph, from, to, data, n, false);
	if (e != cudaSuccess)
		return e;
	for (size_t k = 0; k < n; k++) {
		Node &t = graph->nodes[to[k]->i];
		bool prog = data && data[k].type == cudaGraphDependencyTypeProgrammatic;
		long at;
		t.prog.resize(t.deps.size(), 0);
		// every copy of the edge (a capture may list a dependency twice)
		while ((at = dep_at(t, from[k]->i, prog)) >= 0) {
			t.deps.erase(t.deps.begin() + at);
			t.prog.erase(t.prog.begin() + at);
		}
	}
	return cudaSuccess;
}

// Graphviz of the captured operations, each named as cuemu names it (a
// GPU's file names each kernel and its launch instead).
cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags)
{
	(void)flags;
	if (!graph_ok(graph) || !path)
		return cudaErrorInvalidValue;
	FILE *f = fopen(path, "w");
	if (!f)
		return cudaErrorOperatingSystem;
	fprintf(f, "digraph cuemu {\n");
	for (size_t i = 0; i < graph->nodes.size(); i++) {
		const Node &n = graph->nodes[i];
		enum cudaGraphNodeType t = kind_of(n);
		fprintf(f, "  n%zu [label=\"", i);
		for (const char *c = n.what; *c; c++)
			fprintf(f, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
		fprintf(f, "\" shape=%s];\n", t == cudaGraphNodeTypeKernel ? "box" : "ellipse");
	}
	for (const auto &e : edges_of(graph))
		fprintf(f, "  n%zu -> n%zu%s;\n", e.from, e.to, e.prog ? " [style=dashed]" : "");
	fprintf(f, "}\n");
	return fclose(f) == 0 ? cudaSuccess : cudaErrorOperatingSystem;
}

} // extern "C"

namespace {

// A topological order of x's nodes: each time the ready node that
// better(a, b) puts first.
template <class Better> std::vector<size_t> topo(const CUgraphExec_st *x, Better better)
{
	size_t n = x->nodes.size();
	std::vector<size_t> waiting(n), order;
	std::vector<std::vector<size_t>> users(n);
	for (size_t i = 0; i < n; i++) {
		waiting[i] = x->nodes[i].deps.size();
		for (size_t d : x->nodes[i].deps)
			users[d].push_back(i);
	}
	auto worse = [&](size_t a, size_t b) { return better(b, a); };
	std::priority_queue<size_t, std::vector<size_t>, decltype(worse)> ready(worse);
	for (size_t i = 0; i < n; i++)
		if (!waiting[i])
			ready.push(i);
	while (!ready.empty()) {
		size_t i = ready.top();
		ready.pop();
		order.push_back(i);
		for (size_t u : users[i])
			if (!--waiting[u])
				ready.push(u);
	}
	return order;
}

} // namespace

extern "C" {

// The replay's order: the order of capture (eager); lazy alternates, one
// replay to the next (lazy-late takes the first, lazy-ahead the second), between two orders any GPU may take: the ready node
// captured last first (the stream that began the capture runs ahead of
// the streams it forked, whose work comes late), and the forked streams'
// ready nodes first (they run ahead of it).  A missing edge changes the
// result in one or the other: a read before the write it should wait for,
// or a write before a read that should have come first.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
				 unsigned long long flags)
{
	if (!pGraphExec || !graph)
		return cudaErrorInvalidValue;
	CUgraphExec_st *x = new CUgraphExec_st;
	x->nodes = graph->nodes;
	size_t n = x->nodes.size();
	if (mode_now() == EAGER) {
		for (size_t i = 0; i < n; i++)
			x->order[0].push_back(i);
		x->order[1] = x->order[0];
	} else {
		x->order[0] = topo(x, [](size_t a, size_t b) { return a > b; });
		x->order[1] = topo(x, [x](size_t a, size_t b) {
			size_t sa = x->nodes[a].stream, sb = x->nodes[b].stream;
			return sa != sb ? sa > sb : a < b;
		});
	}
	*pGraphExec = x;
	return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
	delete exec;
	return cudaSuccess;
}

// Uploading a graph ahead of its first launch: nothing to do here (the
// nodes run on the host), but the arguments are checked as CUDA does.
cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t s)
{
	if (!exec || !stream_of(s))
		return cudaErrorInvalidResourceHandle;
	return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
	CUstream_st *st = stream_of(s);
	if (!exec || !st)
		return cudaErrorInvalidResourceHandle;
	cuemu::enqueue(s, "cudaGraphLaunch", [exec]() {
		int o = mode_now() == LATE ? 0 : mode_now() == AHEAD ? 1 : exec->launches % 2;
		exec->launches++;
		// branches overlap: the replay takes its longest path's time
		// a programmatic edge: the node is launched while the one before
		// it runs, its launch's time hidden behind that one's
		// CUEMU_STEP_SLOW_KERNELS=k1,k2: those cost 100 times their time
		// in a graph of kStepNodes nodes or more (a training step's; the
		// graphs that time one call have fewer): a call whose cost in the
		// step is not its cost alone, as two streams' kernels contending
		// for a GPU's SMs make it
		bool step = exec->nodes.size() >= cuemu::kStepNodes;
		std::vector<double> done(exec->nodes.size(), 0);
		double end = 0;
		for (size_t i : exec->order[o]) {
			const Node &n = exec->nodes[i];
			bool prog = false;
			double start = 0;
			for (size_t k = 0; k < n.deps.size(); k++) {
				size_t d = n.deps[k];
				double early = n.programmatic(k) ?
					std::min(cuemu::kLaunchMs, exec->nodes[d].ms) : 0;
				start = std::max(start, done[d] - early);
				prog |= n.programmatic(k);
			}
			cuemu::set_programmatic(prog);
			n.fn();
			cuemu::set_programmatic(false);
			done[i] = start + (step && cuemu::named_in("CUEMU_STEP_SLOW_KERNELS", n.what) ?
						   cuemu::slowed_ms(n.ms) : n.ms);
			end = std::max(end, done[i]);
		}
		clock_ms += end;
	}, 0);
	return cudaPeekAtLastError();
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t s)
{
	if (!count)
		return cudaSuccess;
	if (!copy_ok(dst, src, count, kind))
		return cudaErrorInvalidValue;
	if (!stream_of(s))
		return cudaErrorInvalidResourceHandle;
	cuemu::enqueue(s, "cudaMemcpyAsync", [dst, src, count]() { memcpy(dst, src, count); },
		       cuemu::bytes_ms(count));
	return cudaPeekAtLastError();
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t s)
{
	if (count && !cuemu::inside(devPtr, count))
		return cudaErrorInvalidValue;
	if (!stream_of(s))
		return cudaErrorInvalidResourceHandle;
	cuemu::enqueue(s, "cudaMemsetAsync", [devPtr, value, count]() { memset(devPtr, value, count); },
		       cuemu::bytes_ms(count));
	return cudaPeekAtLastError();
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	if (!ptr)
		return cudaErrorInvalidValue;
	cudaError_t c = cuemu::capture_forbids("cudaMallocHost");
	if (c != cudaSuccess)
		return c;
	void *p = malloc(size ? size : 1);
	if (!p)
		return cudaErrorMemoryAllocation;
	memset(p, 0xff, size);   // never zeros, as cudaMalloc's (cuemu.cc)
	hosts[(uintptr_t)p] = size;
	*ptr = p;
	return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr)
{
	if (!ptr)
		return cudaSuccess;
	auto it = hosts.find((uintptr_t)ptr);
	if (it == hosts.end())
		return cudaErrorInvalidValue;
	cuemu::drain_all();
	hosts.erase(it);
	free(ptr);
	return cudaSuccess;
}

} // extern "C"

int cuemu::devices()
{
	const char *e = getenv("CUEMU_DEVICES");
	int n = e && *e ? atoi(e) : 1;
	return n < 1 ? 1 : n > 16 ? 16 : n;
}

static thread_local int current;

int cuemu::current_device()
{
	return current;
}

extern "C" {

cudaError_t cudaSetDevice(int device)
{
	if (device < 0 || device >= cuemu::devices())
		return cudaErrorInvalidDevice;
	current = device;
	return cudaSuccess;
}

// The first device's PCI bus: 0, or CUEMU_PCI_BUS (hex, as lspci writes
// it), so that processes on one machine can stand for ranks on GPUs of
// their own; device d's the d-th after it.
static unsigned emu_bus()
{
	const char *e = getenv("CUEMU_PCI_BUS");
	return e && *e ? (unsigned)strtoul(e, nullptr, 16) & 0xff : 0;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
	if (device < 0 || device >= cuemu::devices())
		return cudaErrorInvalidDevice;
	char b[16];
	int n = snprintf(b, sizeof(b), "0000:%02x:00.0", (emu_bus() + (unsigned)device) & 0xff);
	if (!pciBusId || len < n + 1)
		return cudaErrorInvalidValue;
	memcpy(pciBusId, b, (size_t)n + 1);
	return cudaSuccess;
}

// "0000:00:00.0" in any of the spellings CUDA takes (a domain of 4 or 8
// hex digits, any case).
cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId)
{
	unsigned dom, bus, dev, fn;
	if (!device || !pciBusId || sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
		return cudaErrorInvalidValue;
	if (dom || bus < emu_bus() || bus >= emu_bus() + (unsigned)cuemu::devices() || dev || fn)
		return cudaErrorInvalidDevice;
	*device = (int)(bus - emu_bus());
	return cudaSuccess;
}

// A profiler's capture range: with CUEMU_PROFILER_LOG set, each call is a
// line on stderr, so a test sees where it falls among the program's own.
cudaError_t cudaProfilerStart(void)
{
	if (getenv("CUEMU_PROFILER_LOG"))
		fprintf(stderr, "cuemu: cudaProfilerStart\n");
	return cudaSuccess;
}

cudaError_t cudaProfilerStop(void)
{
	if (getenv("CUEMU_PROFILER_LOG"))
		fprintf(stderr, "cuemu: cudaProfilerStop\n");
	return cudaSuccess;
}

} // extern "C"
