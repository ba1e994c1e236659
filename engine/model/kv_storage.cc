#include "engine/model/kv_storage.h"

#include "absl/strings/str_format.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"

namespace stepserve::model {

absl::StatusOr<KvDtype> KvDtypeFromName(std::string_view name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "f16") return KvDtype::kF16;
  if (name == "q8_0") return KvDtype::kQ8_0;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown KV cache type \"%s\" (expected f32, f16 or q8_0)", name));
}

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kQ8_0:
      return "q8_0";
    default:
      return "f32";
  }
}

uint64_t KvStorage::BytesPerPosition(const Hparams& hp, bool swa, int first_layer, int end_layer,
                                     KvDtype dtype) {
  uint64_t bytes = 0;
  for (int il = first_layer; il < end_layer; ++il) {
    const LayerHparams& l = hp.layers[il];
    if (l.is_swa == swa) {
      bytes += static_cast<uint64_t>(l.n_head_kv) * (kernels::KvVectorBytes(dtype, l.head_dim_k) +
                                                     kernels::KvVectorBytes(dtype, l.head_dim_v));
    }
  }
  return bytes;
}

absl::StatusOr<KvStorage> KvStorage::Create(Backend& backend, const Hparams& hp,
                                            const KvStorageOptions& options) {
  KvStorage storage;
  storage.options_ = options;
  if (storage.options_.end_layer < 0) storage.options_.end_layer = hp.n_layer_all;
  const int first = storage.options_.first_layer, end = storage.options_.end_layer;
  if (!backend.SupportsKvDtype(options.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the %s backend does not support a %s KV cache yet (use f32 or f16)",
                        backend.name(), KvDtypeName(options.dtype)));
  }
  if (first < 0 || end > hp.n_layer_all || first >= end || options.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV storage: bad layer range [%d, %d) or block size %d", first, end, options.block_size));
  }
  for (int il = first; il < end; ++il) {
    const LayerHparams& l = hp.layers[il];
    if (l.head_dim_k != l.head_dim_v) {
      return absl::UnimplementedError(
          absl::StrFormat("layer %d: K head dim %d differs from V head dim %d; not supported yet",
                          il, l.head_dim_k, l.head_dim_v));
    }
    const int64_t blocks = l.is_swa ? options.swa_blocks : options.full_blocks;
    const int64_t vector_bytes = kernels::KvVectorBytes(options.dtype, l.head_dim_k);
    if (vector_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer %d: a %s KV cache needs head dims that are multiples of 32, got %d", il,
          KvDtypeName(options.dtype), l.head_dim_k));
    }
    const uint64_t vectors = static_cast<uint64_t>(blocks) * options.block_size * l.n_head_kv;
    KvCacheView view;
    view.dtype = options.dtype;
    view.num_blocks = blocks;
    view.block_size = options.block_size;
    view.kv_heads = l.n_head_kv;
    view.head_dim = l.head_dim_k;
    for (int part = 0; part < 2; ++part) {  // K, then V
      const size_t bytes = static_cast<size_t>(vectors * vector_bytes);
      absl::StatusOr<BackendBuffer> buffer = backend.Allocate(bytes);
      if (!buffer.ok()) {
        const BackendMemoryInfo info = backend.memory_info();
        const uint64_t wanted =
            (BytesPerPosition(hp, false, first, end, options.dtype) * options.full_blocks +
             BytesPerPosition(hp, true, first, end, options.dtype) * options.swa_blocks) *
            options.block_size;
        return absl::ResourceExhaustedError(absl::StrFormat(
            "KV storage: %d bytes wanted for layers [%d, %d) (%d full, %d sliding blocks of %d), "
            "%d already allocated; the %s backend reports %d bytes free of %d (layer %d: %s)",
            wanted, first, end, options.full_blocks, options.swa_blocks, options.block_size,
            storage.bytes_, backend.name(), info.free_bytes, info.total_bytes, il,
            buffer.status().message()));
      }
      RETURN_IF_ERROR(backend.Zero(buffer->data(), bytes));
      storage.buffers_.push_back(*std::move(buffer));
    }
    view.k = storage.buffers_[storage.buffers_.size() - 2].data();
    view.v = storage.buffers_.back().data();
    storage.views_.push_back(view);
    storage.bytes_ += vectors * 2 * vector_bytes;
  }
  return storage;
}

KvCacheView KvStorage::layer(int il) {
  STEPSERVE_CHECK(il >= options_.first_layer && il < options_.end_layer, "layer outside range");
  return views_[il - options_.first_layer];
}

}  // namespace stepserve::model
