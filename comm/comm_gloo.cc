// The gloo backend of the comm layer: the one C++ file, with a C API.
//
// gloo is the engine PyTorch uses for CPU collectives (Debian's libgloo-dev).
// Its full mesh is bootstrapped through the libddpenv store and bound to
// GLOO_SOCKET_IFNAME, or, when that is unset, to the local address of this
// rank's connection to the store (the address that reaches MASTER_ADDR,
// never 127.0.1.1 from a Debian /etc/hosts).  No exception crosses into C.
//
// gloo cannot be interrupted while it connects its mesh, and a peer that
// dies after publishing its address is never seen by it: the rank that
// listens for that peer waits out gloo's own connect timeout, five times the
// one it was given (Debian's gloo of 2022: 100 s with --timeout 20).  So
// the mesh connects on a thread of its own, and the caller watches the
// store meanwhile: a rank whose connection to the store closed, a peer's
// published failure, or the timeout ends the wait with the reason, and the
// connecting thread is left behind (it touches nothing of the caller's
// once given up, and ends when gloo does).
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "gloo_compat.h"

extern "C" {
#include "comm.h"
}

namespace {

// Where a rank whose gloo cannot start says why (cnn_comm_gloo_init): its
// peers, waiting for its address, stop then and name it, rather than
// time out on a key it will never set.
const char kFailedKey[] = CNN_COMM_FAILED_KEY;

// A peer gave up first: its own reason.
struct PeerFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the store showed: a dead peer, the store gone, or a key that never
// came (the error names who is at fault already).
struct StoreSaid : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the connecting thread and its caller share.  The store client is
// one connection: its calls take turns (store_mu), and once the caller has
// given up (abandoned) the store may be closed, so the thread calls it no
// more.
struct Mesh {
  std::mutex store_mu;
  bool abandoned = false;  // under store_mu
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // under mu, with what follows
  bool ok = false;
  bool peer_failed = false;
  bool store_said = false;
  std::string error;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
};

// "rank 1 (node2)": the host the rank published (comm.c), if it did.
std::string rank_name(struct ddpenv_store* s, int rank) {
  char key[32], e[256];
  void* v = nullptr;
  size_t len = 0;
  std::string host = "?";
  snprintf(key, sizeof(key), "host/%d", rank);
  if (ddpenv_store_get(s, key, 0, &v, &len, e, sizeof(e)) == 0) {
    host.assign(static_cast<char*>(v), len);
    free(v);
  }
  return "rank " + std::to_string(rank) + " (" + host + ")";
}

// The store's host is gone: ERR, the store client's words.
std::string store_gone(const char* err) {
  return std::string("rank 0 (the rendezvous store) is unreachable, so rank 0 died or its node "
                     "is gone (") + err + ")";
}

// Under store_mu: 1 with *why "rank 1 (node2) died ..." where a rank's
// connection to the store closed without leaving (crashed or killed), 0
// where none did, -1 with *why where the store itself is gone.
int dead_peer(struct ddpenv_store* s, std::string* why) {
  int dead[1];
  char e[256];
  int n = ddpenv_store_dead_ranks(s, dead, 1, e, sizeof(e));
  if (n < 0)
    *why = store_gone(e);
  if (n <= 0)
    return n;
  *why = rank_name(s, dead[0]) +
         " died while the mesh connected (its connection to the rendezvous closed)";
  return 1;
}

// How often a wait looks for a dead peer.
constexpr int kWatchMs = 500;

// gloo's Store interface over the libddpenv store.
class DdpStore : public gloo::rendezvous::Store {
 public:
  DdpStore(struct ddpenv_store* s, int timeout_ms, std::shared_ptr<Mesh> m)
      : s_(s), timeout_ms_(timeout_ms), m_(std::move(m)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    char err[512];
    std::lock_guard<std::mutex> l(m_->store_mu);
    if (m_->abandoned)
      throw std::runtime_error("the caller gave up");
    if (ddpenv_store_set(s_, key.c_str(), data.data(), data.size(), err, sizeof(err)) < 0)
      throw std::runtime_error(err);
  }

  std::vector<char> get(const std::string& key) override {
    return fetch(key, timeout_ms_);
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(timeout_ms_));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys)
      fetch(k, (int)timeout.count());
  }

 private:
  // The key, waited for in slices: between them the store is free for the
  // caller, and a peer that died (its address will never come) or gave up
  // ends the wait.
  std::vector<char> fetch(const std::string& key, int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      char err[512];
      void* v = nullptr;
      size_t len = 0;
      int aborted = 0;
      std::unique_lock<std::mutex> l(m_->store_mu);
      if (m_->abandoned)
        throw std::runtime_error("the caller gave up");
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      int slice = (int)(left < kWatchMs ? (left > 0 ? left : 0) : kWatchMs);
      if (ddpenv_store_get_unless(s_, key.c_str(), kFailedKey, slice, &v, &len, &aborted, err,
                                  sizeof(err)) == 0) {
        std::vector<char> out((char*)v, (char*)v + len);
        free(v);
        if (aborted)
          throw PeerFailed(std::string(out.begin(), out.end()));
        return out;
      }
      // timed out (the store still answers), or the store failed
      std::string why;
      int dead = dead_peer(s_, &why);
      if (dead < 0)
        throw StoreSaid(store_gone(err));
      if (dead > 0)
        throw StoreSaid(why);
      if (left <= slice) {
        char m[256];
        snprintf(m, sizeof(m), "waiting for '%s' in the rendezvous: timed out after %.1f s",
                 key.c_str(), timeout_ms / 1000.0);
        throw StoreSaid(m);
      }
    }
  }

  struct ddpenv_store* s_;
  int timeout_ms_;
  std::shared_ptr<Mesh> m_;
};

struct Gloo {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  uint32_t tag = 0;
};

void say(char* err, size_t errlen, const char* what, const char* msg) {
  snprintf(err, errlen, "gloo: %s: %s", what, msg);
}

int gloo_allreduce(struct cnn_comm* c, float* buf, size_t n, char* err, size_t errlen) {
  auto* g = static_cast<Gloo*>(c->impl);
  try {
    gloo::AllreduceOptions opts(g->ctx);
    opts.setOutput(buf, n);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
        &gloo::sum<float>));
    opts.setTag(g->tag++);
    gloo::allreduce(opts);
    return 0;
  } catch (const std::exception& e) {
    char what[96];
    snprintf(what, sizeof(what), "rank %d: all-reduce of %zu floats", c->rank, n);
    say(err, errlen, what, e.what());
  }
  return -1;
}

// The collectives ddp-check sweeps beside the all-reduce (comm.h).
template <typename F>
int run_op(struct cnn_comm* c, const char* op, size_t n, char* err, size_t errlen, F&& f) {
  auto* g = static_cast<Gloo*>(c->impl);
  try {
    f(g);
    return 0;
  } catch (const std::exception& e) {
    char what[128];
    snprintf(what, sizeof(what), "rank %d: %s of %zu floats", c->rank, op, n);
    say(err, errlen, what, e.what());
  }
  return -1;
}

}  // namespace

extern "C" int cnn_gloo_allgather(struct cnn_comm* c, const float* in, float* out, size_t n, char* err,
                                  size_t errlen) {
  return run_op(c, "all-gather", n, err, errlen, [&](Gloo* g) {
    gloo::AllgatherOptions opts(g->ctx);
    opts.setInput(const_cast<float*>(in), n);
    opts.setOutput(out, n * (size_t)c->world);
    opts.setTag(g->tag++);
    gloo::allgather(opts);
  });
}

extern "C" int cnn_gloo_alltoall(struct cnn_comm* c, const float* in, float* out, size_t n, char* err,
                                 size_t errlen) {
  return run_op(c, "all-to-all", n, err, errlen, [&](Gloo* g) {
    gloo::AlltoallOptions opts(g->ctx);
    opts.setInput(const_cast<float*>(in), n * (size_t)c->world);
    opts.setOutput(out, n * (size_t)c->world);
    opts.setTag(g->tag++);
    gloo::alltoall(opts);
  });
}

// Reduce-scatter as a ring on gloo's unbound buffers, as NCCL's ring does
// it: W-1 steps, each sending one share to the next rank and adding the
// one received from the previous, so that share r ends on rank r, summed
// in the ring's order.  Not gloo's ReduceScatterHalvingDoubling: its run()
// copies the result over the region its own asynchronous send may still
// be reading (seen as wrong elements on rank 0 at 64 KiB shares, two bound
// ranks), and returns with sends in flight.  Each send here is waited for
// before its share could change, and before the call returns.
extern "C" int cnn_gloo_reduce_scatter(struct cnn_comm* c, float* buf, size_t n, char* err, size_t errlen) {
  return run_op(c, "reduce-scatter", n, err, errlen, [&](Gloo* g) {
    const int w = c->world, r = c->rank, next = (r + 1) % w, prev = (r + w - 1) % w;
    const size_t bytes = n * sizeof(float);
    std::vector<float> in(n);
    auto out = g->ctx->createUnboundBuffer(buf, bytes * (size_t)w);
    auto got = g->ctx->createUnboundBuffer(in.data(), bytes);
    const auto limit = g->ctx->getTimeout();
    for (int s = 0; s < w - 1; s++) {
      const size_t send = (size_t)((r - s - 1 + 2 * w) % w), add = (size_t)((r - s - 2 + 2 * w) % w);
      const uint64_t slot = gloo::Slot::build(0x7c, g->tag++);
      got->recv(prev, slot, 0, bytes);
      out->send(next, slot, send * bytes, bytes);
      if (!got->waitRecv(limit))
        throw std::runtime_error("a share from the previous rank: aborted");
      float* acc = buf + add * n;
      for (size_t i = 0; i < n; i++)
        acc[i] += in[i];
      if (!out->waitSend(limit))
        throw std::runtime_error("a share to the next rank: aborted");
    }
    if (r)
      memmove(buf, buf + (size_t)r * n, bytes);
  });
}

extern "C" int cnn_gloo_exchange(struct cnn_comm* c, int peer, uint32_t tag, const float* send, float* recv,
                                 size_t n, char* err, size_t errlen) {
  return run_op(c, "exchange with a peer", n, err, errlen, [&](Gloo* g) {
    const uint64_t slot = gloo::Slot::build(0x7d, tag);
    auto out = g->ctx->createUnboundBuffer(const_cast<float*>(send), n * sizeof(float));
    auto in = g->ctx->createUnboundBuffer(recv, n * sizeof(float));
    in->recv(peer, slot);
    out->send(peer, slot);
    const auto limit = g->ctx->getTimeout();
    if (!out->waitSend(limit) || !in->waitRecv(limit))
      throw std::runtime_error("timed out");
  });
}

namespace {

// Every pair closed with a reset (gloo's hard close, under each pair's
// lock, as its device thread takes it): the peers' reads fail at once.
void gloo_abandon(struct cnn_comm* c) {
  auto* g = static_cast<Gloo*>(c->impl);
  if (!g || !g->ctx)
    return;
  try {
    g->ctx->closeConnections();
  } catch (const std::exception&) {
    // a pair that cannot close: the process's exit closes it
  }
}

void gloo_destroy(struct cnn_comm* c) {
  delete static_cast<Gloo*>(c->impl);
  c->impl = nullptr;
}

}  // namespace

extern "C" const struct cnn_comm_ops cnn_comm_gloo_ops = {"gloo", gloo_allreduce, gloo_destroy,
                                                           gloo_abandon, nullptr};

namespace {

// The mesh, on its own thread; its end (or failure) said through m.
void connect_mesh(std::shared_ptr<Mesh> m, std::shared_ptr<gloo::transport::Device> dev,
                  struct ddpenv_store* s, int timeout_ms) {
  std::string error;
  bool peer_failed = false, store_said = false, ok = false;
  try {
    auto store = std::make_shared<DdpStore>(s, timeout_ms, m);
    cnn_gloo::connect_full_mesh(*m->ctx, store, "gloo", dev);
    ok = true;
  } catch (const PeerFailed& e) {
    peer_failed = true;
    error = e.what();
  } catch (const StoreSaid& e) {
    store_said = true;
    error = e.what();
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "an unknown exception";
  }
  std::lock_guard<std::mutex> l(m->mu);
  m->done = true;
  m->ok = ok;
  m->peer_failed = peer_failed;
  m->store_said = store_said;
  m->error = error;
  m->cv.notify_all();
}

// Waits for connect_mesh, watching the store every kWatchMs while the
// thread is not using it: "" once connected, else why not, with whether a
// peer's own failure is the reason (*peer_failed) and whether it is gloo's
// own error, which names no one (*from_gloo).
std::string watch_mesh(const std::shared_ptr<Mesh>& m, struct ddpenv_store* s, int timeout_ms,
                       bool* peer_failed, bool* from_gloo) {
  // gloo's own timeout, when it keeps it, says more: a second's grace
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms + 1000);
  for (;;) {
    {
      std::unique_lock<std::mutex> l(m->mu);
      if (m->cv.wait_for(l, std::chrono::milliseconds(kWatchMs), [&] { return m->done; })) {
        *peer_failed = m->peer_failed;
        *from_gloo = !m->ok && !m->peer_failed && !m->store_said;
        return m->ok ? "" : m->error;
      }
    }
    std::string why;
    {
      std::unique_lock<std::mutex> l(m->store_mu, std::try_to_lock);
      if (l.owns_lock() && dead_peer(s, &why) == 0) {
        void* v = nullptr;
        size_t len = 0;
        int64_t failed = 0;
        char e[256];
        // the count first (one round trip); the reason, set before it, then
        if (ddpenv_store_add(s, CNN_COMM_FAILED_COUNT_KEY, 0, &failed, e, sizeof(e)) == 0 &&
            failed > 0 && ddpenv_store_get(s, kFailedKey, 0, &v, &len, e, sizeof(e)) == 0) {
          why.assign(static_cast<char*>(v), len);
          free(v);
          *peer_failed = true;
        }
      }
    }
    if (why.empty() && std::chrono::steady_clock::now() > deadline) {
      char m2[160];
      snprintf(m2, sizeof(m2),
               "not connected after %.1f s (its timeout): a peer's gloo never answered, and none "
               "died or said why",
               timeout_ms / 1000.0);
      why = m2;
    }
    if (!why.empty()) {
      std::lock_guard<std::mutex> l(m->store_mu);
      m->abandoned = true;
      return why;
    }
  }
}

}  // namespace

extern "C" int cnn_comm_gloo_init(struct cnn_comm* c, const char* iface, const char* hostname,
                                  int timeout_ms, char* err, size_t errlen) {
  char what[160];
  snprintf(what, sizeof(what), "rank %d could not connect its full mesh%s%s", c->rank,
           iface && *iface ? " on " : "", iface && *iface ? iface : "");
  if (timeout_ms <= 0)
    timeout_ms = 60000;
  std::string why;
  bool peer_failed = false, from_gloo = false;
  try {
    gloo::transport::tcp::attr attr;
    char local[64];
    if (iface && *iface) {
      attr.iface = iface;
    } else if (hostname && *hostname) {
      attr.hostname = hostname;
    } else if (ddpenv_store_local_addr(c->store, local, sizeof(local)) == 0) {
      attr.hostname = local;
    } else {
      say(err, errlen, "setup", "no GLOO_SOCKET_IFNAME and no local address to bind to");
      return -1;
    }
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto m = std::make_shared<Mesh>();
    m->ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->world);
    m->ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
    std::thread t(connect_mesh, m, dev, c->store, timeout_ms);
    why = watch_mesh(m, c->store, timeout_ms, &peer_failed, &from_gloo);
    if (why.empty()) {
      t.join();
      auto g = std::make_unique<Gloo>();
      g->ctx = m->ctx;
      c->impl = g.release();
      return 0;
    }
    // given up: the thread may still be inside gloo, on its own
    t.detach();
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (peer_failed) {
    snprintf(err, errlen, "gloo: %s: a peer failed first (%s)", what, why.c_str());
    return -1;
  }
  // gloo's own error (a connection refused or reset) names no one: the
  // store does, once it has seen the peer's connection close
  for (int i = 0; from_gloo && i < 10; i++) {
    std::string who;
    int n = dead_peer(c->store, &who);
    if (n != 0) {
      why = who + "; " + why;
      break;
    }
    usleep(100000);
  }
  say(err, errlen, what, why.c_str());
  // the peers waiting for this rank stop now, naming it (a store that
  // failed too can take nothing: they time out as before; one that went
  // silent holds this rank 2 s at most)
  cnn_comm_mark_failed(c, err);
  return -1;
}
