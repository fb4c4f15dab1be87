// gloo's rendezvous API before and after its 2024 change, behind one call.
// Debian 12 and 13 ship a gloo whose PrefixStore and connectFullMesh take
// the store by reference; Debian unstable's (2025) takes a shared_ptr.  Both
// call themselves 0.5.0, so the shape is told from the headers themselves.
#ifndef CNN_GLOO_COMPAT_H
#define CNN_GLOO_COMPAT_H

#include <memory>
#include <string>
#include <type_traits>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/device.h>

namespace cnn_gloo {

template <typename Store>
constexpr bool kSharedStores =
    std::is_constructible<gloo::rendezvous::PrefixStore, const std::string&,
                          std::shared_ptr<Store>>::value;

// ctx's full mesh through store, its keys under prefix/.  (A template on
// both, so that the branch not taken is never compiled.)
template <typename Context, typename Store>
void connect_full_mesh(Context& ctx, const std::shared_ptr<Store>& store,
                       const std::string& prefix,
                       std::shared_ptr<gloo::transport::Device>& dev) {
  if constexpr (kSharedStores<Store>) {
    auto prefixed = std::make_shared<gloo::rendezvous::PrefixStore>(
        prefix, std::static_pointer_cast<gloo::rendezvous::Store>(store));
    ctx.connectFullMesh(prefixed, dev);
  } else {
    gloo::rendezvous::PrefixStore prefixed(prefix, *store);
    ctx.connectFullMesh(prefixed, dev);
  }
}

}  // namespace cnn_gloo

#endif
