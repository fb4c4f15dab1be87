// cuemu: NCCL on the CPU, for test_gpu_step (one rank) and for cnn_train
// through the module built on cuemu (one rank, or several processes).
// A communicator made with config.blocking = 0 says ncclInProgress until
// ncclCommGetAsyncError is asked once, as a non-blocking one does while it
// connects.  ncclAllReduce, ncclAllGather and ncclReduceScatter are stream
// operations (streams.cc: queued, captured into a graph); buffers outside
// device memory are refused, naming them.  ncclSend, ncclRecv and their
// groups: nccl_p2p.cc.
//
// One rank: every reduction leaves the data as it is, copied when the
// buffers differ.  Several: a bootstrap as NCCL's, over TCP.
// ncclGetUniqueId (rank 0) listens on the address of the interface
// NCCL_SOCKET_IFNAME names (its first entry; 127.0.0.1 when unset), or at
// NCCL_COMM_ID's <address>:<port> where that is set (NCCL's refusal of one
// it cannot parse included), and puts that address in the id; the other
// ranks connect to it, each saying where it accepts its peers'
// connections (point-to-point), and rank 0 sends every rank the table of
// those addresses.  A collective, when its stream runs it, sends rank r's
// input to rank 0, which combines the ranks' (sums in rank order: the same
// bits on every rank, each run) and sends each rank its result; float32
// only.  Every wait is bounded by
// CUEMU_NCCL_TIMEOUT_MS (60000).  Where NCCL's kernel would wait for a
// peer that is gone until ncclCommAbort, this one gives up at once (the
// peer's socket closed) or at the bound: the stream operation ends with
// the buffer as it was, the communicator's async error says why, on
// stderr too, and every later call returns that error.
// CUEMU_NCCL_KILL_AT=N kills the process at its N-th collective (tests of
// a rank that dies mid-collective); CUEMU_NCCL_WRONG=all-gather,... (the
// collectives' names) gives the last rank one wrong element in each.
#include "rt.h"
#include "nccl_emu.h"

#include <errno.h>
#include <stdarg.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <map>
#include <string>
#include <vector>

#include <nccl.h>


namespace cuemu_nccl {

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

// The id: this magic, then rank 0's listening address.
extern const char kMagic[8] = "cuemu3";
struct Id {
	char magic[8];
	uint32_t len;                          // of addr's bytes
	unsigned char addr[sizeof(sockaddr_in6)];

	sockaddr_storage get() const
	{
		sockaddr_storage a;
		memset(&a, 0, sizeof(a));
		memcpy(&a, addr, len <= sizeof(addr) ? len : sizeof(addr));
		return a;
	}
};
static_assert(sizeof(Id) <= NCCL_UNIQUE_ID_BYTES, "cuemu's NCCL id");

// Listening sockets ncclGetUniqueId opened, by port: rank 0's init takes its own.
std::map<int, int> listeners;

// The collectives through rank 0
enum Kind : int32_t { kAllReduce, kAllGather, kReduceScatter };
const char *const kKindName[] = { "all-reduce", "all-gather", "reduce-scatter" };

struct Head {   // before each collective's data, both ways
	uint64_t seq, count;
	int32_t type, op, kind, pad;
};

// A rank's address for its peers' connections, as rank 0 sends the table
struct Addr {
	uint32_t len;
	unsigned char addr[sizeof(sockaddr_in6)];
};

int timeout_ms()
{
	const char *e = getenv("CUEMU_NCCL_TIMEOUT_MS");
	int v = e && *e ? atoi(e) : 0;
	return v > 0 ? v : 60000;
}

double now_ms()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// Wait until fd is readable (in) or writable; false at the deadline.
bool wait_fd(int fd, bool in, double deadline)
{
	for (;;) {
		double left = deadline - now_ms();
		if (left <= 0)
			return false;
		pollfd p = { fd, (short)(in ? POLLIN : POLLOUT), 0 };
		int r = poll(&p, 1, left > 1e6 ? 1000000 : (int)left + 1);
		if (r > 0)
			return true;
		if (r < 0 && errno != EINTR)
			return true;   // the read or write says what is wrong
	}
}

// All n bytes, or a reason in why.
bool send_all(int fd, const void *p, size_t n, double deadline, std::string &why)
{
	const char *c = (const char *)p;
	while (n) {
		if (!wait_fd(fd, false, deadline)) {
			why = "timed out sending";
			return false;
		}
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k <= 0) {
			why = std::string("send: ") + strerror(errno);
			return false;
		}
		c += k;
		n -= (size_t)k;
	}
	return true;
}

bool recv_all(int fd, void *p, size_t n, double deadline, std::string &why)
{
	char *c = (char *)p;
	while (n) {
		if (!wait_fd(fd, true, deadline)) {
			why = "timed out waiting";
			return false;
		}
		ssize_t k = recv(fd, c, n, MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k == 0) {
			why = "its connection closed (the process exited?)";
			return false;
		}
		if (k < 0) {
			why = std::string("recv: ") + strerror(errno);
			return false;
		}
		c += k;
		n -= (size_t)k;
	}
	return true;
}

// The address NCCL_SOCKET_IFNAME's first entry has ("=" for an exact
// name, as NCCL reads it; IPv4 first), or 127.0.0.1 when it is unset.
// NCCL_COMM_ID: <IPv4 address or host name>:<port>, or [<IPv6 address>]:<port>
bool comm_id_addr(const char *e, sockaddr_storage *a, socklen_t *len, char *err, size_t errlen)
{
	std::string v(e), host, port;
	size_t c = v.rfind(':');
	if (v.size() > 2 && v[0] == '[' && c != std::string::npos && c > 1 && v[c - 1] == ']')
		host = v.substr(1, c - 2);
	else if (c != std::string::npos && v.find(':') == c)
		host = v.substr(0, c);
	port = c == std::string::npos ? "" : v.substr(c + 1);
	addrinfo hints, *ai = nullptr;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
	    getaddrinfo(host.c_str(), port.c_str(), &hints, &ai) != 0 || !ai) {
		snprintf(err, errlen, "Invalid NCCL_COMM_ID [%s], please use format: <ipv4>:<port> or "
			 "[<ipv6>]:<port> or <hostname>:<port>", e);
		return false;
	}
	*len = (socklen_t)ai->ai_addrlen;
	memcpy(a, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return true;
}

bool bootstrap_addr(sockaddr_storage *a, socklen_t *len, char *err, size_t errlen)
{
	memset(a, 0, sizeof(*a));
	const char *id = getenv("NCCL_COMM_ID");
	if (id && *id)
		return comm_id_addr(id, a, len, err, errlen);
	const char *e = getenv("NCCL_SOCKET_IFNAME");
	if (!e || !*e) {
		sockaddr_in *in = (sockaddr_in *)a;
		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*in);
		return true;
	}
	std::string want(e[0] == '=' ? e + 1 : e);
	want = want.substr(0, want.find(','));
	bool exact = e[0] == '=';
	ifaddrs *ifs = nullptr;
	if (getifaddrs(&ifs) < 0) {
		snprintf(err, errlen, "getifaddrs: %s", strerror(errno));
		return false;
	}
	bool found = false;
	for (int fam : { AF_INET, AF_INET6 }) {
		for (ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
			if (!i->ifa_addr || i->ifa_addr->sa_family != fam || !(i->ifa_flags & IFF_UP))
				continue;
			if (exact ? want != i->ifa_name : strncmp(i->ifa_name, want.c_str(), want.size()) != 0)
				continue;
			*len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
			memcpy(a, i->ifa_addr, *len);
			found = true;
		}
		if (found)
			break;
	}
	freeifaddrs(ifs);
	if (!found)
		snprintf(err, errlen, "NCCL_SOCKET_IFNAME=%s: no interface here that is up with an address of that name", e);
	return found;
}

int port_of(const sockaddr_storage &a)
{
	return ntohs(a.ss_family == AF_INET ? ((const sockaddr_in *)&a)->sin_port :
					      ((const sockaddr_in6 *)&a)->sin6_port);
}

void set_port(sockaddr_storage *a, int port)
{
	if (a->ss_family == AF_INET)
		((sockaddr_in *)a)->sin_port = htons((uint16_t)port);
	else
		((sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
}

void close_all(ncclComm *c)
{
	for (int f : c->fd)
		if (f >= 0)
			close(f);
	c->fd.clear();
	for (auto &p : c->p2p_fd)
		close(p.second);
	c->p2p_fd.clear();
	if (c->p2p_listen >= 0)
		close(c->p2p_listen);
	c->p2p_listen = -1;
}

// A failed exchange: said on stderr, kept as the communicator's error.
// With CUEMU_NCCL_SILENT, a peer that is gone (ncclRemoteError) is not:
// NCCL's kernel over shared memory or P2P, within a node, spins on a peer
// that died and nothing reports it.  The operation's stream is held
// (cuemu::hold_running) until ncclCommAbort, the async error stays
// ncclSuccess, and so does every later operation's.
void broken(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->last, sizeof(c->last), fmt, ap);
	va_end(ap);
	const char *silent = getenv("CUEMU_NCCL_SILENT");
	if (r == ncclRemoteError && silent && *silent && strcmp(silent, "0")) {
		fprintf(stderr, "cuemu: NCCL rank %d of %d: %s: silent (CUEMU_NCCL_SILENT): its stream "
			"held until ncclCommAbort\n", c->rank, c->nranks, c->last);
		c->last[0] = 0;
		c->stuck = true;
		cuemu::hold_running(c);
		close_all(c);
		return;
	}
	fprintf(stderr, "cuemu: NCCL rank %d of %d: %s\n", c->rank, c->nranks, c->last);
	c->async = r;
	close_all(c);
}

// Rank 0: the result for rank r of a collective of count elements (float32
// only) whose inputs, rank by rank, are in (each count long, count x nranks
// for a reduce-scatter): the sums in rank order (the same bits on every
// rank, each run), the concatenation, or rank r's share of the sums.
std::vector<float> combine(const std::vector<std::vector<float>> &in, int kind, ncclRedOp_t op,
			   size_t count, int r)
{
	int nranks = (int)in.size();
	if (kind == kAllGather) {
		std::vector<float> all;
		for (const auto &v : in)
			all.insert(all.end(), v.begin(), v.end());
		return all;
	}
	size_t n = in[0].size(), from = kind == kReduceScatter ? (size_t)r * count : 0;
	std::vector<float> acc(in[0].begin() + from, in[0].begin() + from + (kind == kReduceScatter ? count : n));
	for (int q = 1; q < nranks; q++)
		for (size_t i = 0; i < acc.size(); i++) {
			float a = acc[i], b = in[q][from + i];
			acc[i] = op == ncclSum || op == ncclAvg ? a + b : op == ncclProd ? a * b :
				 op == ncclMax ? (a > b ? a : b) : (a < b ? a : b);
		}
	if (op == ncclAvg)
		for (float &v : acc)
			v /= (float)nranks;
	return acc;
}

// Rank 0's part of collective seq: every rank's input, then each its
// result.  false where the exchange broke (c->async says why).
bool gather_combine(ncclComm *c, const Head &me, const void *send, void *recv, size_t in_n)
{
	double deadline = now_ms() + timeout_ms();
	unsigned long long seq = me.seq;
	const char *what = kKindName[me.kind];
	std::vector<std::vector<float>> in(c->nranks, std::vector<float>(in_n));
	memcpy(in[0].data(), send, in_n * 4);
	bool ok = true;
	char bad[200] = "";
	std::string why;
	for (int r = 1; r < c->nranks; r++) {
		Head h;
		if (!recv_all(c->fd[r], &h, sizeof(h), deadline, why))
			return broken(c, ncclRemoteError, "%s #%llu: rank %d: %s", what, seq, r, why.c_str()), false;
		if (h.seq != me.seq || h.count != me.count || h.type != me.type || h.op != me.op ||
		    h.kind != me.kind) {
			if (ok)
				snprintf(bad, sizeof(bad), "%s #%llu: rank 0 runs %s of %llu values (type %d, op "
					 "%d), rank %d's #%llu %s of %llu (type %d, op %d)", what, seq, what,
					 (unsigned long long)me.count, me.type, me.op, r, (unsigned long long)h.seq,
					 h.kind >= 0 && h.kind <= kReduceScatter ? kKindName[h.kind] : "?",
					 (unsigned long long)h.count, h.type, h.op);
			ok = false;
			// its data is not read: the exchange ends here
			continue;
		}
		if (!recv_all(c->fd[r], in[r].data(), in_n * 4, deadline, why))
			return broken(c, ncclRemoteError, "%s #%llu: rank %d: %s", what, seq, r, why.c_str()), false;
	}
	if (!ok) {
		Head no = { me.seq, (uint64_t)-1, 0, 0, 0, 0 };
		for (int r = 1; r < c->nranks; r++)
			send_all(c->fd[r], &no, sizeof(no), deadline, why);
		return broken(c, ncclInvalidUsage, "%s", bad), false;
	}
	for (int r = 1; r < c->nranks; r++) {
		std::vector<float> out = combine(in, me.kind, (ncclRedOp_t)me.op, me.count, r);
		// CUEMU_NCCL_WRONG=all-gather (a list of kinds): the last rank's
		// first element off by one, as a faulty link or GPU would leave it
		if (r == c->nranks - 1 && !out.empty() && cuemu::named_in("CUEMU_NCCL_WRONG", what))
			out[0] += 1;
		if (!send_all(c->fd[r], &me, sizeof(me), deadline, why) ||
		    !send_all(c->fd[r], out.data(), out.size() * 4, deadline, why))
			return broken(c, ncclRemoteError, "%s #%llu: rank %d: %s", what, seq, r, why.c_str()), false;
	}
	std::vector<float> mine = combine(in, me.kind, (ncclRedOp_t)me.op, me.count, 0);
	memcpy(recv, mine.data(), mine.size() * 4);
	return true;
}

// One collective across the ranks, as its stream runs it: each rank sends
// rank 0 its input (count floats, count x nranks for a reduce-scatter),
// rank 0 combines them and sends each its result (count floats,
// count x nranks for an all-gather).
void exchange(ncclComm *c, int kind, const void *send, void *recv, size_t count, ncclDataType_t type,
	      ncclRedOp_t op)
{
	if (c->async != ncclSuccess || c->aborted)
		return;
	if (c->stuck)
		return cuemu::hold_running(c);
	uint64_t seq = ++c->seq;
	// CUEMU_NCCL_KILL_AT=N: this process killed (SIGKILL) as its N-th
	// collective starts, as a rank the OOM killer takes mid-collective
	const char *kill_at = getenv("CUEMU_NCCL_KILL_AT");
	if (kill_at && *kill_at && strtoull(kill_at, nullptr, 10) == seq)
		raise(SIGKILL);
	Head me = { seq, count, (int32_t)type, (int32_t)op, kind, 0 };
	size_t in_n = kind == kReduceScatter ? count * c->nranks : count;
	size_t out_n = kind == kAllGather ? count * c->nranks : count;
	if (!c->rank) {
		gather_combine(c, me, send, recv, in_n);
		return;
	}
	double deadline = now_ms() + timeout_ms();
	const char *what = kKindName[kind];
	std::string why;
	Head back;
	if (!send_all(c->fd[0], &me, sizeof(me), deadline, why) ||
	    !send_all(c->fd[0], send, in_n * 4, deadline, why) ||
	    !recv_all(c->fd[0], &back, sizeof(back), deadline, why))
		return broken(c, ncclRemoteError, "%s #%llu: rank 0: %s", what, (unsigned long long)seq,
			      why.c_str());
	if (back.count != (uint64_t)-1 && back.seq == seq && back.count == count) {
		if (!recv_all(c->fd[0], recv, out_n * 4, deadline, why))
			return broken(c, ncclRemoteError, "%s #%llu: rank 0: %s", what, (unsigned long long)seq,
				      why.c_str());
		return;
	}
	return broken(c, ncclInvalidUsage, "%s #%llu: rank 0 refused it (the ranks' calls differ: "
		      "rank 0's message says how)", what, (unsigned long long)seq);
}

// Rank 0: the other ranks' connections, each saying who it is.
bool accept_ranks(ncclComm *c, int lfd, char *err, size_t errlen)
{
	double deadline = now_ms() + timeout_ms();
	for (int k = 1; k < c->nranks; k++) {
		if (!wait_fd(lfd, true, deadline)) {
			snprintf(err, errlen, "rank 0: %d of %d ranks connected after %d ms", k - 1, c->nranks - 1,
				 timeout_ms());
			return false;
		}
		int f = accept(lfd, nullptr, nullptr);
		if (f < 0) {
			snprintf(err, errlen, "rank 0: accept: %s", strerror(errno));
			return false;
		}
		// (as the ranks' side: without it, each reply's data waited for
		// the ACK of its header, 40 ms of delayed ACK an all-reduce)
		int one = 1;
		setsockopt(f, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		Hello h;
		std::string why;
		if (!recv_all(f, &h, sizeof(h), deadline, why) || memcmp(h.magic, kMagic, sizeof(kMagic)) ||
		    h.nranks != c->nranks || h.rank < 1 || h.rank >= c->nranks || c->fd[h.rank] >= 0) {
			snprintf(err, errlen, "rank 0: a connection that is not one of ranks 1 to %d of %d (or a "
				 "rank twice)%s%s", c->nranks - 1, c->nranks, why.empty() ? "" : ": ", why.c_str());
			close(f);
			return false;
		}
		c->fd[h.rank] = f;
		// its peers reach it where rank 0 sees it, at the port it gave
		sockaddr_storage &pa = c->p2p_addr[h.rank];
		socklen_t pl = sizeof(pa);
		getpeername(f, (sockaddr *)&pa, &pl);
		set_port(&pa, h.p2p_port);
	}
	return true;
}

// Rank 0: every rank's address for its peers, to each.
bool send_table(ncclComm *c, char *err, size_t errlen)
{
	double deadline = now_ms() + timeout_ms();
	std::vector<Addr> t(c->nranks);
	for (int r = 0; r < c->nranks; r++) {
		const sockaddr_storage &a = c->p2p_addr[r];
		t[r].len = a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
		memcpy(t[r].addr, &a, t[r].len);
	}
	std::string why;
	for (int r = 1; r < c->nranks; r++)
		if (!send_all(c->fd[r], t.data(), t.size() * sizeof(Addr), deadline, why)) {
			snprintf(err, errlen, "rank 0: the peers' addresses to rank %d: %s", r, why.c_str());
			return false;
		}
	return true;
}

bool recv_table(ncclComm *c, char *err, size_t errlen)
{
	std::vector<Addr> t(c->nranks);
	std::string why;
	if (!recv_all(c->fd[0], t.data(), t.size() * sizeof(Addr), now_ms() + timeout_ms(), why)) {
		snprintf(err, errlen, "rank %d: the peers' addresses from rank 0: %s", c->rank, why.c_str());
		return false;
	}
	for (int r = 0; r < c->nranks; r++) {
		memset(&c->p2p_addr[r], 0, sizeof(sockaddr_storage));
		memcpy(&c->p2p_addr[r], t[r].addr, t[r].len <= sizeof(t[r].addr) ? t[r].len : sizeof(t[r].addr));
	}
	return true;
}

bool connect_root(ncclComm *c, const Id &id, char *err, size_t errlen)
{
	double deadline = now_ms() + timeout_ms();
	sockaddr_storage to = id.get();
	char host[INET6_ADDRSTRLEN] = "?";
	const void *a = to.ss_family == AF_INET ? (const void *)&((const sockaddr_in *)&to)->sin_addr :
						  (const void *)&((const sockaddr_in6 *)&to)->sin6_addr;
	inet_ntop(to.ss_family, a, host, sizeof(host));
	for (;;) {
		int f = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (f >= 0 && connect(f, (const sockaddr *)&to, id.len) == 0) {
			int one = 1;
			setsockopt(f, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			Hello h;
			memcpy(h.magic, kMagic, sizeof(kMagic));
			h.rank = c->rank;
			h.nranks = c->nranks;
			h.p2p_port = port_of(c->p2p_addr[c->rank]);
			std::string why;
			if (!send_all(f, &h, sizeof(h), deadline, why)) {
				snprintf(err, errlen, "rank %d: rank 0 at %s port %d: %s", c->rank, host,
					 port_of(to), why.c_str());
				close(f);
				return false;
			}
			c->fd[0] = f;
			return true;
		}
		int e = errno;
		if (f >= 0)
			close(f);
		if (now_ms() > deadline) {
			snprintf(err, errlen, "rank %d: connecting to rank 0 at %s port %d: %s", c->rank, host,
				 port_of(to), strerror(e));
			return false;
		}
		usleep(10000);
	}
}

} // namespace cuemu_nccl

using namespace cuemu_nccl;

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	if (!uniqueId)
		return ncclInvalidArgument;
	memset(uniqueId, 0, sizeof(*uniqueId));
	Id id;
	memset(&id, 0, sizeof(id));
	memcpy(id.magic, kMagic, sizeof(kMagic));
	sockaddr_storage a;
	socklen_t len;
	if (!bootstrap_addr(&a, &len, global_last, sizeof(global_last)))
		return getenv("NCCL_COMM_ID") && *getenv("NCCL_COMM_ID") ? ncclInvalidArgument : ncclSystemError;
	int f = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f < 0 || bind(f, (sockaddr *)&a, len) < 0 || listen(f, 128) < 0 ||
	    getsockname(f, (sockaddr *)&a, &len) < 0 || len > sizeof(id.addr)) {
		snprintf(global_last, sizeof(global_last), "bootstrap socket: %s", strerror(errno));
		if (f >= 0)
			close(f);
		return ncclSystemError;
	}
	listeners[port_of(a)] = f;
	id.len = len;
	memcpy(id.addr, &a, len);
	memcpy(uniqueId->internal, &id, sizeof(id));
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config)
{
	if (!comm)
		return ncclInvalidArgument;
	*comm = nullptr;
	Id id;
	memcpy(&id, commId.internal, sizeof(id));
	if (nranks < 1 || rank < 0 || rank >= nranks || memcmp(id.magic, kMagic, sizeof(kMagic))) {
		snprintf(global_last, sizeof(global_last), "rank %d of %d, or an id ncclGetUniqueId did not make",
			 rank, nranks);
		return ncclInvalidArgument;
	}
	ncclComm *c = new ncclComm;
	c->nranks = nranks;
	c->rank = rank;
	c->blocking = !config || config->blocking != 0;
	c->fd.assign(rank ? 1 : nranks, -1);
	c->p2p_addr.assign(nranks, sockaddr_storage());
	bool ok = true;
	if (nranks > 1) {
		// this rank's listener for ncclSend and ncclRecv (nccl_p2p.cc);
		// rank 0 is reached at its bootstrap address
		sockaddr_storage boot = id.get();
		int port = p2p_listen(c, boot.ss_family, global_last, sizeof(global_last));
		ok = port > 0;
		c->p2p_addr[rank] = boot;
		set_port(&c->p2p_addr[rank], port);
	}
	if (ok && rank == 0) {
		auto l = listeners.find(port_of(id.get()));
		if (l == listeners.end()) {
			snprintf(global_last, sizeof(global_last), "rank 0: the id is not this process's "
				 "(ncclGetUniqueId is rank 0's)");
			ok = false;
		} else {
			ok = nranks == 1 || (accept_ranks(c, l->second, global_last, sizeof(global_last)) &&
					     send_table(c, global_last, sizeof(global_last)));
			close(l->second);
			listeners.erase(l);
		}
	} else if (ok) {
		ok = connect_root(c, id, global_last, sizeof(global_last)) &&
		     recv_table(c, global_last, sizeof(global_last));
	}
	if (!ok) {
		close_all(c);
		delete c;
		return ncclSystemError;
	}
	c->pending = !c->blocking;
	*comm = c;
	return c->pending ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	if (!comm || !asyncError)
		return ncclInvalidArgument;
	*asyncError = comm->pending || (comm->stuck && comm->finalizing) ? ncclInProgress : comm->async;
	comm->pending = false;
	return ncclSuccess;
}

} // extern "C"

namespace {

// A collective of count elements a rank (in count, or count x nranks for a
// reduce-scatter; out count, or count x nranks for an all-gather) as a
// stream operation: checked, then queued.
ncclResult_t collective(const char *name, int kind, const void *sendbuff, void *recvbuff, size_t count,
			ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	if (!comm || comm->aborted)
		return ncclInvalidArgument;
	if (comm->async != ncclSuccess)
		return comm->async;
	size_t es = type_size(datatype);
	size_t in = es * count * (kind == kReduceScatter ? comm->nranks : 1);
	size_t out = es * count * (kind == kAllGather ? comm->nranks : 1);
	if (!es || (int)op < 0 || (int)op >= (int)ncclNumOps) {
		snprintf(comm->last, sizeof(comm->last), "%s: data type %d or operation %d unknown", name,
			 (int)datatype, (int)op);
		return ncclInvalidArgument;
	}
	if (comm->nranks > 1 && datatype != ncclFloat32) {
		snprintf(comm->last, sizeof(comm->last), "%s: cuemu reduces float32 only across ranks, not "
			 "data type %d", name, (int)datatype);
		return ncclInvalidUsage;
	}
	if (count && (!cuemu::inside(sendbuff, in) || !cuemu::inside(recvbuff, out))) {
		snprintf(comm->last, sizeof(comm->last), "%s: %zu bytes at %p (send) or %zu at %p (receive) "
			 "are not inside one cudaMalloc allocation", name, in, sendbuff, out, recvbuff);
		fprintf(stderr, "cuemu: %s\n", comm->last);
		return ncclInvalidArgument;
	}
	if (comm->nranks > 1)
		cuemu::enqueue(stream, name,
			       [comm, kind, sendbuff, recvbuff, count, datatype, op]() {
				       exchange(comm, kind, sendbuff, recvbuff, count, datatype, op);
			       },
			       cuemu::bytes_ms((double)in + out));
	else if (count && sendbuff != recvbuff)
		cuemu::enqueue(stream, name, [sendbuff, recvbuff, out]() { memmove(recvbuff, sendbuff, out); },
			       cuemu::bytes_ms((double)out));
	else
		cuemu::enqueue(stream, name, []() {}, cuemu::bytes_ms((double)out));
	return ncclSuccess;
}

} // namespace

extern "C" {

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	return collective("ncclAllReduce", kAllReduce, sendbuff, recvbuff, count, datatype, op, comm,
			  stream);
}

// One rank: its input is the result.
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
			   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	return collective("ncclAllGather", kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum,
			  comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
			       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			       cudaStream_t stream)
{
	return collective("ncclReduceScatter", kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op,
			  comm, stream);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
	if (comm->stuck) {
		// its kernels never end: a non-blocking finalize never settles
		if (comm->blocking) {
			fprintf(stderr, "cuemu: ncclCommFinalize of a communicator whose peer is gone "
				"(CUEMU_NCCL_SILENT): on a GPU it would never return; ncclCommAbort instead\n");
			abort();
		}
		comm->finalizing = true;
		return ncclInProgress;
	}
	cuemu::drain_all();
	if (!comm->blocking)
		comm->pending = true;
	return comm->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
	cuemu::release(comm);
	close_all(comm);
	delete comm;
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	cuemu::release(comm);   // its kernels end: the streams go on
	close_all(comm);
	delete comm;
	return ncclSuccess;
}

// the headers' version: cuemu follows the API it was built against
ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = NCCL_VERSION_CODE;
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
