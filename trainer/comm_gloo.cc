// The gloo backend of the comm layer: the one C++ file, with a C API.
//
// gloo is the engine PyTorch uses for CPU collectives (Debian's libgloo-dev).
// Its full mesh is bootstrapped through the libddpenv store and bound to
// GLOO_SOCKET_IFNAME, or, when that is unset, to the local address of this
// rank's connection to the store (the address that reaches MASTER_ADDR,
// never 127.0.1.1 from a Debian /etc/hosts).  No exception crosses into C.
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

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

// gloo's Store interface over the libddpenv store.
class DdpStore : public gloo::rendezvous::Store {
 public:
  DdpStore(struct ddpenv_store* s, int timeout_ms) : s_(s), timeout_ms_(timeout_ms) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    char err[512];
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
  std::vector<char> fetch(const std::string& key, int timeout_ms) {
    char err[512];
    void* v = nullptr;
    size_t len = 0;
    int aborted = 0;
    if (ddpenv_store_get_unless(s_, key.c_str(), kFailedKey, timeout_ms, &v, &len, &aborted, err,
                                sizeof(err)) < 0)
      throw std::runtime_error(err);
    std::vector<char> out((char*)v, (char*)v + len);
    free(v);
    if (aborted)
      throw PeerFailed(std::string(out.begin(), out.end()));
    return out;
  }

  struct ddpenv_store* s_;
  int timeout_ms_;
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

void gloo_destroy(struct cnn_comm* c) {
  delete static_cast<Gloo*>(c->impl);
  c->impl = nullptr;
}

}  // namespace

extern "C" const struct cnn_comm_ops cnn_comm_gloo_ops = {"gloo", gloo_allreduce, gloo_destroy};

extern "C" int cnn_comm_gloo_init(struct cnn_comm* c, const char* iface, const char* hostname,
                                  int timeout_ms, char* err, size_t errlen) {
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
    auto g = std::make_unique<Gloo>();
    g->ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->world);
    g->ctx->setTimeout(std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 60000));
    DdpStore store(c->store, timeout_ms > 0 ? timeout_ms : 60000);
    gloo::rendezvous::PrefixStore prefixed("gloo", store);
    g->ctx->connectFullMesh(prefixed, dev);
    c->impl = g.release();
    return 0;
  } catch (const PeerFailed& e) {
    char what[160];
    snprintf(what, sizeof(what), "rank %d could not connect its full mesh%s%s", c->rank,
             iface && *iface ? " on " : "", iface && *iface ? iface : "");
    snprintf(err, errlen, "gloo: %s: a peer failed first (%s)", what, e.what());
  } catch (const std::exception& e) {
    char what[160], e2[256];
    snprintf(what, sizeof(what), "rank %d could not connect its full mesh%s%s", c->rank,
             iface && *iface ? " on " : "", iface && *iface ? iface : "");
    say(err, errlen, what, e.what());
    // the peers waiting for this rank's address stop now, naming it (a
    // store that failed too can take nothing: they time out as before)
    ddpenv_store_set(c->store, kFailedKey, err, strlen(err), e2, sizeof(e2));
  }
  return -1;
}
