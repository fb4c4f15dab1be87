// cuemu: NCCL's point-to-point calls (ncclSend, ncclRecv) and their groups
// (ncclGroupStart, ncclGroupEnd), over a TCP connection between the two
// ranks: the lower rank connects to the higher's listener (its address
// from rank 0's table at init, nccl.cc) the first time the two talk, and
// says who it is.  A group's operations on a communicator run as one
// stream operation (on the stream of its first), every send and receive
// of it progressing together (poll), so that a rank sending to and
// receiving from one peer, or every peer (an all-to-all), does not wait on
// itself; a send to itself is a copy.  A call outside a group is a group
// of one.  Each message is its length, then its bytes: a receive of
// another length breaks the communicator (ncclInvalidUsage), naming both.
// Bounded as the collectives (CUEMU_NCCL_TIMEOUT_MS).
#include "rt.h"
#include "nccl_emu.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

namespace cuemu_nccl {

int p2p_listen(ncclComm *c, int family, char *err, size_t errlen)
{
	sockaddr_storage a;
	memset(&a, 0, sizeof(a));
	a.ss_family = (sa_family_t)family;   // any address, any port
	socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
	int f = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f < 0 || bind(f, (sockaddr *)&a, len) < 0 || listen(f, 128) < 0 ||
	    getsockname(f, (sockaddr *)&a, &len) < 0) {
		snprintf(err, errlen, "rank %d: the socket for its peers: %s", c->rank, strerror(errno));
		if (f >= 0)
			close(f);
		return -1;
	}
	c->p2p_listen = f;
	return port_of(a);
}

} // namespace cuemu_nccl

namespace {

using namespace cuemu_nccl;

struct Op {
	ncclComm *c;
	int peer;
	bool send;
	char *buf;
	size_t bytes;
	cudaStream_t stream;
};

int depth;              // ncclGroupStart's nesting
std::vector<Op> group;  // the open group's operations

void nodelay(int f)
{
	int one = 1;
	setsockopt(f, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// The lower rank's side: connect to peer's listener and say who it is.
int connect_peer(ncclComm *c, int peer, double deadline, std::string &why)
{
	const sockaddr_storage &to = c->p2p_addr[peer];
	socklen_t len = to.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
	for (;;) {
		int f = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (f >= 0 && connect(f, (const sockaddr *)&to, len) == 0) {
			nodelay(f);
			Hello h;
			memcpy(h.magic, kMagic, sizeof(kMagic));
			h.rank = c->rank;
			h.nranks = c->nranks;
			h.p2p_port = 0;
			if (!send_all(f, &h, sizeof(h), deadline, why)) {
				close(f);
				return -1;
			}
			return f;
		}
		int e = errno;
		if (f >= 0)
			close(f);
		if (now_ms() > deadline) {
			why = std::string("connecting: ") + strerror(e);
			return -1;
		}
		usleep(10000);
	}
}

// The higher rank's side: accept until peer's connection is in (another
// lower rank's that comes first is kept for its turn).
int accept_peer(ncclComm *c, int peer, double deadline, std::string &why)
{
	for (;;) {
		auto it = c->p2p_fd.find(peer);
		if (it != c->p2p_fd.end())
			return it->second;
		if (!wait_fd(c->p2p_listen, true, deadline)) {
			why = "it never connected";
			return -1;
		}
		int f = accept4(c->p2p_listen, nullptr, nullptr, SOCK_CLOEXEC);
		if (f < 0) {
			why = std::string("accept: ") + strerror(errno);
			return -1;
		}
		nodelay(f);
		Hello h;
		if (!recv_all(f, &h, sizeof(h), deadline, why) || memcmp(h.magic, kMagic, sizeof(kMagic)) ||
		    h.nranks != c->nranks || h.rank < 0 || h.rank >= c->rank || c->p2p_fd.count(h.rank)) {
			close(f);
			why = "a connection that is not a lower rank's (or a rank twice)";
			return -1;
		}
		c->p2p_fd[h.rank] = f;
	}
}

int peer_fd(ncclComm *c, int peer, double deadline, std::string &why)
{
	auto it = c->p2p_fd.find(peer);
	if (it != c->p2p_fd.end())
		return it->second;
	if (c->rank > peer)
		return accept_peer(c, peer, deadline, why);
	int f = connect_peer(c, peer, deadline, why);
	if (f >= 0)
		c->p2p_fd[peer] = f;
	return f;
}

// One message on its way: its length (8 bytes) then its bytes; done counts both.
struct Xfer {
	char *buf;
	size_t bytes, done;
	uint64_t len;   // sending: bytes; receiving: what the peer says
};

// Sends to itself taken by its receives in order.  false where they differ.
bool self_copies(ncclComm *c, const std::vector<Op> &ops)
{
	std::deque<const Op *> sends;
	for (const Op &o : ops)
		if (o.peer == c->rank && o.send)
			sends.push_back(&o);
	for (const Op &o : ops) {
		if (o.peer != c->rank || o.send)
			continue;
		if (sends.empty() || sends.front()->bytes != o.bytes) {
			broken(c, ncclInvalidUsage, "rank %d receives %zu bytes from itself, and sends itself %s",
			       c->rank, o.bytes, sends.empty() ? "nothing more" : "another length");
			return false;
		}
		memmove(o.buf, sends.front()->buf, o.bytes);
		sends.pop_front();
	}
	if (!sends.empty()) {
		broken(c, ncclInvalidUsage, "rank %d sends itself %zu bytes that no receive takes", c->rank,
		       sends.front()->bytes);
		return false;
	}
	return true;
}

// Move what fd takes of x now; -1 where the connection failed (why), 1
// when x is done.
int step(int fd, Xfer &x, bool send, std::string &why)
{
	size_t total = 8 + x.bytes;
	while (x.done < total) {
		char *p = x.done < 8 ? (char *)&x.len + x.done : x.buf + (x.done - 8);
		size_t n = x.done < 8 ? 8 - x.done : total - x.done;
		ssize_t k = send ? ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			return 0;
		if (k <= 0) {
			why = k == 0 ? "its connection closed (the process exited?)" :
				       std::string(send ? "send: " : "recv: ") + strerror(errno);
			return -1;
		}
		x.done += (size_t)k;
		if (!send && x.done == 8 && x.len != x.bytes) {
			why = "length";
			return -1;
		}
	}
	return 1;
}

struct Peer {
	int fd;
	std::deque<Xfer> out, in;
};

// Progress every message of the group together until each is through.
void progress(ncclComm *c, std::map<int, Peer> &peers, double deadline)
{
	std::string why;
	for (;;) {
		std::vector<pollfd> pf;
		std::vector<int> who;
		for (auto &p : peers)
			if (!p.second.out.empty() || !p.second.in.empty()) {
				short ev = (short)((p.second.out.empty() ? 0 : POLLOUT) | (p.second.in.empty() ? 0 : POLLIN));
				pf.push_back({ p.second.fd, ev, 0 });
				who.push_back(p.first);
			}
		if (pf.empty())
			return;
		double left = deadline - now_ms();
		if (left <= 0 || (poll(pf.data(), pf.size(), (int)left + 1) < 0 && errno != EINTR))
			return broken(c, ncclRemoteError, "send/receive with rank %d: timed out", who[0]);
		for (size_t i = 0; i < pf.size(); i++) {
			Peer &p = peers[who[i]];
			if (!pf[i].revents)
				continue;
			int r;
			if (!p.out.empty() && (r = step(p.fd, p.out.front(), true, why)) != 0) {
				if (r < 0)
					return broken(c, ncclRemoteError, "send to rank %d: %s", who[i], why.c_str());
				p.out.pop_front();
			}
			if (!p.in.empty() && (r = step(p.fd, p.in.front(), false, why)) != 0) {
				if (r < 0 && why == "length")
					return broken(c, ncclInvalidUsage, "rank %d sent %llu bytes where rank %d receives "
						      "%zu", who[i], (unsigned long long)p.in.front().len, c->rank,
						      p.in.front().bytes);
				if (r < 0)
					return broken(c, ncclRemoteError, "receive from rank %d: %s", who[i], why.c_str());
				p.in.pop_front();
			}
		}
	}
}

// A group's operations on c, as its stream runs them.
void run_group(ncclComm *c, const std::vector<Op> &ops)
{
	if (c->async != ncclSuccess || c->aborted)
		return;
	if (c->stuck)
		return cuemu::hold_running(c);
	double deadline = now_ms() + timeout_ms();
	if (!self_copies(c, ops))
		return;
	std::map<int, Peer> peers;
	std::string why;
	for (const Op &o : ops) {
		if (o.peer == c->rank)
			continue;
		if (!peers.count(o.peer)) {
			int f = peer_fd(c, o.peer, deadline, why);
			if (f < 0)
				return broken(c, ncclRemoteError, "rank %d: %s", o.peer, why.c_str());
			peers[o.peer].fd = f;
		}
		Xfer x = { o.buf, o.bytes, 0, o.send ? (uint64_t)o.bytes : 0 };
		(o.send ? peers[o.peer].out : peers[o.peer].in).push_back(x);
	}
	progress(c, peers, deadline);
}

// The closed group: its operations, a stream operation per communicator.
void flush()
{
	std::vector<Op> ops;
	ops.swap(group);
	std::map<ncclComm *, std::vector<Op>> by;
	for (const Op &o : ops)
		by[o.c].push_back(o);
	for (auto &b : by) {
		double bytes = 0;
		for (const Op &o : b.second)
			bytes += (double)o.bytes;
		ncclComm *c = b.first;
		std::vector<Op> mine = b.second;
		cuemu::enqueue(mine[0].stream, "ncclGroupEnd", [c, mine]() { run_group(c, mine); },
			       cuemu::bytes_ms(bytes));
	}
}

ncclResult_t p2p(const char *name, bool send, const void *buf, size_t count, ncclDataType_t type, int peer,
		 ncclComm_t comm, cudaStream_t stream)
{
	if (!comm || comm->aborted)
		return ncclInvalidArgument;
	if (comm->async != ncclSuccess)
		return comm->async;
	size_t bytes = type_size(type) * count;
	if (!type_size(type) || peer < 0 || peer >= comm->nranks) {
		snprintf(comm->last, sizeof(comm->last), "%s: data type %d or peer %d (of %d ranks) unknown",
			 name, (int)type, peer, comm->nranks);
		return ncclInvalidArgument;
	}
	if (count && !cuemu::inside(buf, bytes)) {
		snprintf(comm->last, sizeof(comm->last), "%s: %zu bytes at %p are not inside one cudaMalloc "
			 "allocation", name, bytes, buf);
		fprintf(stderr, "cuemu: %s\n", comm->last);
		return ncclInvalidArgument;
	}
	group.push_back({ comm, peer, send, (char *)buf, bytes, stream });
	if (!depth)
		flush();
	return ncclSuccess;
}

} // namespace

extern "C" {

ncclResult_t ncclGroupStart()
{
	depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd()
{
	if (!depth)
		return ncclInvalidUsage;
	if (!--depth)
		flush();
	return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
		      ncclComm_t comm, cudaStream_t stream)
{
	return p2p("ncclSend", true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
		      cudaStream_t stream)
{
	return p2p("ncclRecv", false, recvbuff, count, datatype, peer, comm, stream);
}

} // extern "C"
