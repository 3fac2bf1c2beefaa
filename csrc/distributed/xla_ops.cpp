// Schemas of the tpu backend's own collective ops, lowered in lowering/collectives.cpp. They
// exist only as nodes of the backend's collective programs (distributed/xla_transport.cpp): no
// kernel runs them eagerly, and _c10d_functional has no reduce-to-root or pairwise permute.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  // The group's reduction at group rank `root`; the other ranks keep their input.
  m.def("c10d_reduce(Tensor input, str reduce_op, int root, str group_name) -> Tensor");
  // pairs = [source, target, ...] in group ranks: each target gets its source's input, every
  // other rank keeps its own.
  m.def("c10d_permute(Tensor input, int[] pairs, str group_name) -> Tensor");
  // stacked: one row per group rank, read on `root` only; each rank gets its row.
  m.def("c10d_scatter(Tensor stacked, int root, str group_name) -> Tensor");
}
