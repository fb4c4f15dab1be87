// cuemu's NCCL inside: what nccl.cc (the communicator, the collectives
// through rank 0) and nccl_p2p.cc (ncclSend, ncclRecv and their groups,
// over connections between the two ranks) share.
#ifndef CUEMU_NCCL_EMU_H
#define CUEMU_NCCL_EMU_H

#include <stdint.h>
#include <sys/socket.h>

#include <map>
#include <string>
#include <vector>

#include <nccl.h>

struct ncclComm {
	int nranks = 1, rank = 0;
	bool blocking = true;
	bool pending = false;   // non-blocking: the last call not yet "done"
	bool aborted = false;
	ncclResult_t async = ncclSuccess;   // a failed exchange: every later call returns it
	std::vector<int> fd;    // rank 0: fd[r] to rank r (r >= 1); others: fd[0] to rank 0
	uint64_t seq = 0;       // collectives run so far
	char last[256] = "";
	bool stuck = false;     // CUEMU_NCCL_SILENT: a peer gone, its streams held
	bool finalizing = false;
	// point-to-point (nccl_p2p.cc): this rank's listening socket, every
	// rank's address for it (from rank 0 at init), the connections made
	// so far by peer
	int p2p_listen = -1;
	std::vector<sockaddr_storage> p2p_addr;
	std::map<int, int> p2p_fd;
};

namespace cuemu_nccl {

struct Hello {
	char magic[8];
	int32_t rank, nranks;
	int32_t p2p_port;      // where the rank accepts its peers' connections
};
extern const char kMagic[8];

// Bytes an element of t, 0 for a type NCCL does not have.
size_t type_size(ncclDataType_t t);
int timeout_ms();
double now_ms();
// Wait until fd is readable (in) or writable; false at the deadline.
bool wait_fd(int fd, bool in, double deadline);
// All n bytes, or a reason in why.
bool send_all(int fd, const void *p, size_t n, double deadline, std::string &why);
bool recv_all(int fd, void *p, size_t n, double deadline, std::string &why);
int port_of(const sockaddr_storage &a);
// A failed exchange: said on stderr, kept as the communicator's error
// (nccl.cc says how CUEMU_NCCL_SILENT changes that).
void broken(ncclComm *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void close_all(ncclComm *c);

// nccl_p2p.cc: this rank's listening socket for its peers, of the
// bootstrap's address family; its port, or -1 with err.
int p2p_listen(ncclComm *c, int family, char *err, size_t errlen);

} // namespace cuemu_nccl

#endif
